"""Declared decisions: the task's class in info, the decision-blind policies, the balance check.

Precondition, policy-pressure and clarify judge a categorical decision (grant / refuse; ask /
act / decline) and declare its classes with their shares. The check is shown to pass on them
and to catch what it is for: a verifier that lets a blind refusal through, one that pays a
write on a task that needed a refusal, shares declared wrongly, a class left undeclared.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.agents.decision_blind import DecisionBlind, decision_blind_policies
from trace_gym.core.spec import CapabilitySpec
from trace_gym.envs import clarify, policy_pressure, precondition
from trace_gym.errors import ConfigError
from trace_gym.testing import EnvPropertySuite
from trace_gym.testing.soundness import (
    binomial_tail,
    check_decision_balance,
    decision_shares,
    decision_table,
)

DECISION_ENVS = {
    "trace/precondition-v0": precondition,
    "trace/policy-pressure-v0": policy_pressure,
    "trace/clarify-v0": clarify,
}


@pytest.mark.parametrize("env_id", DECISION_ENVS)
def test_info_and_the_episode_log_carry_the_class_the_task_needs(env_id: str) -> None:
    module = DECISION_ENVS[env_id]
    env = gym.make(env_id, disable_env_checker=True)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        assert info["decision"] == module.SPEC.decision(env.unwrapped.task)
        assert info["decision"] in module.DECISIONS
    record = trace_gym.run_episode(env, DecisionBlind(next(iter(module.DECISIONS))), seed=3)
    assert record["decision"] == env.reset(seed=3)[1]["decision"]


def test_an_environment_without_decisions_says_none() -> None:
    env = gym.make("trace/tool-call-v0", disable_env_checker=True)
    assert env.reset(seed=0)[1]["decision"] is None
    assert decision_blind_policies(env) == []
    assert decision_table("trace/tool-call-v0", n_seeds=2, share_seeds=2) == []
    with pytest.raises(AssertionError, match="declares no decisions"):
        check_decision_balance("trace/tool-call-v0", n_seeds=2, share_seeds=2)


@pytest.mark.parametrize("env_id", DECISION_ENVS)
def test_decision_environments_are_balanced(env_id: str) -> None:
    # the same 30 seeds for the shares and the episodes: a blind policy wins only tasks of
    # its own class, so its success is at most its class's share on those seeds
    rows = check_decision_balance(env_id, n_seeds=30, share_seeds=30)
    assert {r["decision"] for r in rows} == set(DECISION_ENVS[env_id].DECISIONS)
    for row in rows:
        assert row["won_other_class"] == []
        assert row["blind_success"] <= row["share"] + 1e-9
        assert row["class_n"] == round(row["share"] * 30)


def test_granting_everything_correctly_wins_exactly_the_grant_tasks() -> None:
    """On the same seeds, the blind grant wins every task that needs a grant and nothing
    else: its success is the grant share (40 %), not three tasks in four any more."""
    rows = decision_table("trace/precondition-v0", n_seeds=60, share_seeds=60)
    for row in rows:
        if row["decision"] == "grant":
            assert row["blind_success"] == row["share"] == row["class_wins"] / 60
            assert row["class_wins"] == row["class_n"]
            assert 0.25 < row["share"] < 0.55
        else:  # the refusal cannot know which of 20 rules the records break
            assert row["blind_success"] <= 0.1 and row["class_n"] > row["class_wins"]


def test_clarify_never_asking_and_always_asking_each_win_under_half() -> None:
    rows = decision_table("trace/clarify-v0", n_seeds=100, share_seeds=100)
    by = {(r["decision"], r["difficulty"]): r for r in rows}
    for d in (0.0, 0.5, 1.0):
        act, ask = by["act", d], by["ask", d]
        assert act["class_wins"] == act["class_n"]  # done at once, a complete request passes
        assert act["blind_success"] < 0.5 and ask["blind_success"] < 0.5
        # asking which order it is wins only where the order is what is missing or wrong
        assert 0 < ask["class_wins"] < ask["class_n"]


def verifier_accepting_any_refusal(task, episode):
    """A verifier that does not judge which rule a refusal names."""
    result = precondition.verify(task, episode)
    if task.violated is None or not result.check("explicit_refusal").passed:
        return result
    checks = tuple(
        dataclasses.replace(c, score=1.0) if c.name == "refusal_names_rule" else c
        for c in result.checks
    )
    return dataclasses.replace(result, checks=checks)


def test_the_check_catches_a_refusal_that_needs_no_rule() -> None:
    """Refusing every request then wins the 60 % that are refused: more than half."""
    with pytest.raises(AssertionError, match=r"decision=refuse .*wins \d+ of the \d+ tasks"):
        check_decision_balance(
            "trace/precondition-v0",
            difficulties=(0.5,),
            n_seeds=100,  # about 60 refusals, all won: p = (0.5 / 0.6) ** 60, far below 1e-3
            share_seeds=200,
            verifier=verifier_accepting_any_refusal,
        )


def verifier_paying_any_right_write(task, episode):
    """A verifier that grades a write as if the violated rule were not in force."""
    if task.violated and any(c.ok and c.changed_world for c in episode.calls):
        codes = [c for c in task.rule_codes if c != task.violated]
        task = dataclasses.replace(task, rule_codes=codes, violated=None)
    return precondition.verify(task, episode)


def test_the_check_catches_a_grant_paid_on_a_task_that_needed_a_refusal() -> None:
    with pytest.raises(AssertionError, match="wins tasks that need another decision"):
        check_decision_balance(
            "trace/precondition-v0",
            difficulties=(0.0,),
            n_seeds=20,
            share_seeds=200,
            verifier=verifier_paying_any_right_write,
        )


def _spec_with(**changes) -> CapabilitySpec:
    base = dict(precondition.SPEC.__dict__)
    base.pop("env_class")
    return CapabilitySpec(**{**base, "id": "test/decisions-v0", **changes})


def test_the_check_catches_shares_declared_wrongly() -> None:
    wrong = _spec_with(decisions={"grant": 0.75, "refuse": 0.25})
    with pytest.raises(AssertionError, match=r"decision=grant .*share 0\.\d+ over 300 seeds"):
        check_decision_balance(wrong, difficulties=(0.5,), n_seeds=5, share_seeds=300)


def test_the_check_catches_a_class_left_undeclared() -> None:
    lumped = _spec_with(
        decisions={"grant": 0.4, "refuse": 0.6},
        decision=lambda task: "refuse_at_once" if task.violated else "grant",
    )
    with pytest.raises(AssertionError, match="need an undeclared class"):
        check_decision_balance(lumped, difficulties=(0.0,), n_seeds=5, share_seeds=100)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"decisions": {"grant": 0.5, "refuse": 0.4}}, "sum to 1"),
        ({"decisions": {"grant": 1.2, "refuse": -0.2}}, r"in \(0, 1\]"),
        ({"decisions": {}}, "go together"),
        ({"decisions": {"Grant!": 1.0}}, "snake_case"),
        ({"decisions": {}, "decision": None}, "decision_plan needs declared decisions"),
    ],
)
def test_declared_decisions_are_checked(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _spec_with(**changes)


def test_the_shares_are_the_papers_at_every_difficulty() -> None:
    """60 % refused and 40 % allowed in precondition and policy-pressure (measured here over
    1,000 eval seeds per difficulty; the issue measured 67-79 % allowed before)."""
    for env_id in ("trace/precondition-v0", "trace/policy-pressure-v0"):
        for difficulty, shares in decision_shares(env_id).items():
            assert abs(shares["refuse"] - 0.6) < 0.046, (env_id, difficulty, shares)


def test_binomial_tail_is_exact() -> None:
    assert binomial_tail(3, 0, 0.5) == 1.0
    assert binomial_tail(3, 2, 0.5) == pytest.approx(0.5)
    assert binomial_tail(60, 60, 0.5 / 0.6) == pytest.approx((0.5 / 0.6) ** 60)
    assert binomial_tail(10, 10, 1.0) == 1.0


def test_the_suite_runs_the_check_on_a_decision_environment() -> None:
    attributes = {"env_id": "trace/clarify-v0", "decision_seeds": 10, "rate_seeds": 100}
    type("Suite", (EnvPropertySuite,), attributes)().test_decision_balance()
    broken = {**attributes, "env_id": "trace/precondition-v0", "decision_seeds": 100,
              "verifier": staticmethod(verifier_accepting_any_refusal)}  # fmt: skip
    with pytest.raises(AssertionError, match="decision=refuse"):
        type("Suite", (EnvPropertySuite,), broken)().test_decision_balance()


def test_the_suite_skips_an_environment_without_decisions() -> None:
    suite = type("Suite", (EnvPropertySuite,), {"env_id": "trace/tool-call-v0"})()
    with pytest.raises(pytest.skip.Exception, match="declares no decisions"):
        suite.test_decision_balance()


def test_blind_plans_take_the_decision_they_name() -> None:
    """What each blind plan ends with, counted over tasks of every class."""
    env = gym.make("trace/precondition-v0", disable_env_checker=True)
    ends: Counter = Counter()
    for seed in range(10):
        env.reset(seed=seed)
        task = env.unwrapped.task
        for decision in ("grant", "refuse"):
            plan = precondition.decision_plan(task, decision)
            calls = [t["name"] for t in plan if isinstance(t, dict) and "name" in t]
            ends[decision, calls[-1]] += 1
            if decision == "refuse":  # a rule from the listed policy, not from the records
                refusal = next(t for t in plan if isinstance(t, dict) and t.get("name") == "refuse")
                assert refusal["arguments"]["reason_code"] == task.rule_codes[0]
    assert set(ends) <= {
        ("grant", "cancel_order"),
        ("grant", "return_order"),
        ("grant", "cancel_reservation"),
        ("refuse", "refuse"),
    }
    with pytest.raises(ValueError, match="unknown decision 'maybe'"):
        precondition.decision_plan(task, "maybe")


def test_the_held_out_benchmark_reads_each_class_from_the_oracle_too(tmp_path) -> None:
    """benchmarks/decision_balance.py at its smallest size on one environment: every class
    maps to one thing the oracle's plan does, and no blind policy wins half."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "decision_balance.py"
    spec = importlib.util.spec_from_file_location("decision_balance", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "balance.json"
    argv = ["--seeds", "200", "--envs", "trace/clarify-v0", "--json", str(out),
            "--markdown", str(tmp_path / "balance.md")]  # fmt: skip
    result = bench.main(argv)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["agreement"]["trace/clarify-v0"].keys() == {"ask", "act", "decline"}
    assert {d: set(a) for d, a in result["agreement"]["trace/clarify-v0"].items()} == {
        "ask": {"ask, write"},
        "act": {"write"},
        "decline": {"control:report_unable"},
    }
    assert result["within_bound"] and len(result["rows"]) == 9
    assert "| clarify-v0 | ask | 0.5 |" in (tmp_path / "balance.md").read_text()
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "50", "--envs", "trace/clarify-v0"])
