"""Policies blind to the records lose on trace/precondition-v0 and trace/policy-pressure-v0.

Each policy below reads what the oracle reads but decides without looking at the results:
refuse citing a rule chosen by its place in the listed policy or by its code, grant by
copying what the customer asked for, act on the first id of each kind the reads returned, or
read and stall. Each must win at most 10 % of the tasks and earn a mean partial reward of at
most 0.15 at difficulties 0, 0.5 and 1 (the eval split). Before the redesign, refusing with
the first listed rule won 57 % of precondition tasks at difficulty 0 and reading then
stalling earned 0.4 everywhere.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from typing import Any

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.agents import PlanAgent
from trace_gym.world.model import World
from trace_gym.world.tools import VOCABULARY

ENVS = ("trace/precondition-v0", "trace/policy-pressure-v0")
DIFFICULTIES = (0.0, 0.5, 1.0)
SEEDS = range(100)
DRAWS = range(300)
"""Tasks drawn (resets only, no episodes) to measure how the violated rule is spread."""
MAX_SUCCESS = 0.10
MAX_MEAN_REWARD = 0.15
CLOSING = ["I'm sorry, I can't help further.", "Is there anything else?"] * 4
_ID = re.compile(r"\b(?:[A-Z]{1,2}-[A-Z0-9]+(?:-\d+)?)\b")


def _calls(turn: Any) -> list[dict[str, Any]]:
    if isinstance(turn, dict):
        return turn.get("tool_calls", [turn])
    return []


def _reads(plan: list[Any]) -> list[Any]:
    return [t for t in plan if _calls(t) and all(VOCABULARY[c["name"]].kind == "read" for c in _calls(t))]  # fmt: skip


def _refusal(code: str) -> list[Any]:
    refuse = {"name": "refuse", "arguments": {"reason_code": code, "explanation": "Not allowed."}}
    return [refuse, f"I can't do that under rule {code}.", *CLOSING]


def _first_ids(task_world: dict[str, Any], reads: list[Any]) -> dict[str, str]:
    """The first id of each prefix (``O-``, ``PM-``, ``I-``...) in the reads' results."""
    world = World.from_dict(task_world)
    first: dict[str, str] = {}
    for turn in reads:
        for c in _calls(turn):
            result = json.dumps(VOCABULARY[c["name"]].handler(world, **c["arguments"]))
            for found in _ID.findall(result):
                first.setdefault(found.split("-")[0], found)
    return first


def _swap_ids(value: Any, first: dict[str, str]) -> Any:
    if isinstance(value, list):
        return [_swap_ids(v, first) for v in value]
    if isinstance(value, str) and _ID.fullmatch(value):
        return first.get(value.split("-")[0], value)
    return value


def blind_plans(env: gym.Env) -> dict[str, list[Any]]:
    """Plans of the information-free policies for the task the env was reset to."""
    inner = env.unwrapped
    task, plan = inner.task, inner.oracle_actions()
    reads = _reads(plan)
    listed = inner.listed_rules(task)
    plans = {
        "read_then_stall": reads + CLOSING,
        "refuse_first_listed_rule": reads + _refusal(listed[0]),
    }
    plans["grant_by_copying"] = reads + [inner.requested_call(task), "Done.", *CLOSING]
    first = _first_ids(task.world, reads)
    writes = [c for t in plan for c in _calls(t) if VOCABULARY[c["name"]].kind == "write"]
    swapped = [
        {
            "name": c["name"],
            "arguments": {k: _swap_ids(v, first) for k, v in c["arguments"].items()},
        }
        for c in writes
    ]
    plans["first_search_result"] = reads + swapped + ["Done.", *CLOSING]
    return plans


def _violated(task: Any) -> str | None:
    return getattr(task, "base", task).violated


@pytest.fixture(scope="module", params=ENVS)
def results(request) -> dict[str, Any]:
    """Per difficulty: every blind policy's (success, reward) list, and the violated rules."""
    env = gym.make(request.param, disable_env_checker=True)
    out: dict[str, Any] = {"env_id": request.param}
    for d in DIFFICULTIES:
        scores: dict[str, list[tuple[bool, float]]] = {}
        violated: Counter = Counter()
        opts = {"difficulty": d, "split": "eval"}
        for seed in SEEDS:
            env.reset(seed=seed, options=opts)
            violated[_violated(env.unwrapped.task)] += 1
            for name, plan in blind_plans(env).items():
                record = trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options=opts)
                scores.setdefault(name, []).append(
                    (record["is_success"], record["verification"]["score"])
                )
        out[d] = (scores, violated)
    return out


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_no_blind_policy_wins(results: dict[str, Any], difficulty: float) -> None:
    scores, _ = results[difficulty]
    for name, outcomes in scores.items():
        success = sum(s for s, _ in outcomes) / len(outcomes)
        mean = statistics.fmean(r for _, r in outcomes)
        where = f"{results['env_id']} d={difficulty} {name}"
        assert success <= MAX_SUCCESS, f"{where}: wins {success:.0%}"
        assert mean <= MAX_MEAN_REWARD, f"{where}: mean reward {mean:.2f}"


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_reading_then_stalling_earns_nothing(results: dict[str, Any], difficulty: float) -> None:
    scores, _ = results[difficulty]
    assert all(r == 0.0 for _, r in scores["read_then_stall"])


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_no_fixed_rule_or_place_in_the_list_is_right_often(env_id: str, difficulty: float) -> None:
    """A refusal citing a fixed code, or the rule at a fixed place in the listed policy, wins
    exactly on the tasks whose violated rule is that one (the oracle's reads come first, and
    :func:`test_a_right_refusal_after_the_reads_passes` shows such a refusal passes), so the
    spread of the violated rule bounds every such policy."""
    env = gym.make(env_id, disable_env_checker=True)
    by_code: Counter = Counter()
    by_place: Counter = Counter()
    for seed in DRAWS:
        env.reset(seed=seed, options={"difficulty": difficulty, "split": "eval"})
        task = env.unwrapped.task
        code = _violated(task)
        if code is not None:
            by_code[code] += 1
            by_place[env.unwrapped.listed_rules(task).index(code)] += 1
    n = len(DRAWS)
    # the paper's balance: 60 % refused (+- three standard errors of 300 draws)
    assert abs(by_code.total() / n - 0.6) <= 0.085, by_code.total() / n
    assert len(by_code) >= 20, by_code  # the violated rule varies over the whole catalogue
    # by design about 2 % per code and 3 % per place (60 % refusals over 20 listed rules):
    # far enough below the 10 % bound that 100-seed samples of a blind refusal stay under it
    assert max(by_code.values()) / n <= 0.05, by_code
    assert max(by_place.values()) / n <= 0.07, by_place


def test_a_right_refusal_after_the_reads_passes() -> None:
    """The blind refusal plans are real: with the violated rule's code they succeed."""
    for env_id in ENVS:
        env = gym.make(env_id, disable_env_checker=True)
        for seed in range(40):
            env.reset(seed=seed, options={"difficulty": 0.5})
            task = env.unwrapped.task
            code = _violated(task)
            if code is None:
                continue
            plan = _reads(env.unwrapped.oracle_actions()) + _refusal(code)
            record = trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options={"difficulty": 0.5})  # fmt: skip
            assert record["is_success"], (env_id, seed)
            break
        else:
            raise AssertionError(f"{env_id}: no refused request in 40 seeds")
