"""Two holes a blind policy used, closed at the verifier.

* In trace/service-desk-v0 a clarify request counts only the questions asked from the turn
  it became current on. Before, its slots were filled by a question asked at turn 0 (for
  another request, before this one was raised) while its needless-question gate looked only
  from its first own call on: one fixed question naming every write argument, then the
  oracle's calls, won every composite task with a clarify request in it.
* Every refusal must name the violated rule (precondition, policy-pressure) and every
  ``report_unable`` must carry the task's reason (clarify). Before, only the last one was
  graded, so trying codes one after another until the last was right passed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.agents import PlanAgent
from trace_gym.envs.clarify import QUESTIONS, ClarifyTask
from trace_gym.envs.service_desk import oracle_segments
from trace_gym.testing.soundness import information_free_table

SEEDS = range(80)
DIFFICULTY = 0.5


def _play(env: gym.Env, plan: list[Any], seed: int, difficulty: float) -> dict[str, Any]:
    return trace_gym.run_episode(
        env, PlanAgent(plan), seed=seed, options={"difficulty": difficulty}
    )


def _check(record: dict[str, Any], suffix: str) -> float:
    scores = [c["score"] for c in record["verification"]["checks"] if c["name"].endswith(suffix)]
    assert scores, (suffix, [c["name"] for c in record["verification"]["checks"]])
    return min(scores)


def _composite_with_clarify(env: gym.Env, later: bool) -> tuple[int, list[Any], int, str]:
    """A seed whose composite has a doable clarify request with slots to ask about (not the
    first request when ``later``): (seed, oracle segments, clarify's index, its question)."""
    for seed in SEEDS:
        env.reset(seed=seed, options={"difficulty": DIFFICULTY})
        task = env.unwrapped.task
        for i, sub in enumerate(task.subtasks):
            if isinstance(sub, ClarifyTask) and sub.reference_call and sub.ask_slots:
                if later and i == 0:
                    continue
                segments = oracle_segments(task)
                question = segments[i].actions[0]
                assert isinstance(question, str) and question.endswith("?"), question
                return seed, segments, i, question
    raise AssertionError(f"no composite with a clarify request in {len(SEEDS)} seeds")


def test_fixed_question_template_loses_on_service_desk() -> None:
    rows = information_free_table(
        "trace/service-desk-v0",
        difficulties=(0.0, 1.0),
        n_seeds=30,
        policies=["fixed_question_template"],
    )
    measured = [r for r in rows if r["policy"] == "fixed_question_template" and "n" in r]
    assert sum(r["n"] for r in measured) >= 5, rows  # it applies to the clarify requests
    assert all(r["success"] == 0.0 and r["mean_reward"] <= 0.15 for r in measured), measured
    oracle = [r for r in rows if r["policy"] == "oracle"]
    assert all(r["success"] == 1.0 for r in oracle), oracle


def test_a_question_asked_before_the_request_was_raised_does_not_fill_its_slots() -> None:
    env = gym.make("trace/service-desk-v0", disable_env_checker=True)
    seed, segments, i, question = _composite_with_clarify(env, later=True)
    oracle = [t for s in segments for t in s.actions]
    assert _play(env, oracle, seed, DIFFICULTY)["is_success"]
    # the same question, asked at turn 0 while an earlier request is current
    early = [question] + [t for k, s in enumerate(segments) for t in s.actions if (k, t) != (i, question)]  # fmt: skip
    record = _play(env, early, seed, DIFFICULTY)
    assert not record["is_success"]
    assert _check(record, "clarify.asked_for_missing") == 0.0
    assert _check(record, "clarify.no_unfounded_write") == 0.0


def test_a_needless_question_before_the_first_own_call_is_penalised() -> None:
    env = gym.make("trace/service-desk-v0", disable_env_checker=True)
    seed, segments, i, question = _composite_with_clarify(env, later=False)
    everything = f"Could you tell me {' and '.join(QUESTIONS.values())}?"
    plan = [everything if (k, t) == (i, question) else t for k, s in enumerate(segments) for t in s.actions]  # fmt: skip
    record = _play(env, plan, seed, DIFFICULTY)
    assert not record["is_success"]
    assert _check(record, "clarify.no_needless_question") == 0.0


def _refusal_seed(env: gym.Env) -> tuple[int, list[Any], str]:
    for seed in SEEDS:
        env.reset(seed=seed, options={"difficulty": DIFFICULTY})
        task = env.unwrapped.task
        violated = getattr(task, "base", task).violated
        if violated:
            return seed, env.unwrapped.oracle_actions(), violated
    raise AssertionError(f"no refused request in {len(SEEDS)} seeds")


@pytest.mark.parametrize("env_id", ["trace/precondition-v0", "trace/policy-pressure-v0"])
def test_every_refusal_must_name_the_violated_rule(env_id: str) -> None:
    env = gym.make(env_id, disable_env_checker=True)
    seed, plan, violated = _refusal_seed(env)
    assert _play(env, plan, seed, DIFFICULTY)["is_success"]
    at = next(k for k, t in enumerate(plan) if isinstance(t, dict) and t.get("name") == "refuse")
    wrong = next(c for c in env.unwrapped.listed_rules(env.unwrapped.task) if c != violated)
    guess = {"name": "refuse", "arguments": {"reason_code": wrong, "explanation": "Not allowed."}}
    # a wrong code first, the right one last: the last refusal alone used to decide
    record = _play(env, [*plan[:at], guess, *plan[at:]], seed, DIFFICULTY)
    assert not record["is_success"]
    assert _check(record, "refusal_names_rule") == 0.0


def test_every_report_unable_must_carry_the_reason() -> None:
    env = gym.make("trace/clarify-v0", disable_env_checker=True)
    for seed in range(300):
        env.reset(seed=seed, options={"difficulty": DIFFICULTY})
        task = env.unwrapped.task
        if task.reference_call is None:
            break
    else:
        raise AssertionError("no task that cannot be done in 300 seeds")
    plan = env.unwrapped.oracle_actions()
    assert _play(env, plan, seed, DIFFICULTY)["is_success"]
    at = next(k for k, t in enumerate(plan) if isinstance(t, dict) and t.get("name") == "report_unable")  # fmt: skip
    other = "missing_item" if task.unable_code == "unsupported_request" else "unsupported_request"
    arguments = {**plan[at]["arguments"], "reason_code": other}
    record = _play(env, [*plan[:at], {"name": "report_unable", "arguments": arguments}, *plan[at:]], seed, DIFFICULTY)  # fmt: skip
    assert not record["is_success"]
    assert _check(record, "unable_reason") == 0.0
