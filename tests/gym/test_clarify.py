"""trace/clarify-v0: configs, generator invariants, golden hashes, verifier cases, user."""

from __future__ import annotations

import re

import pytest

import trace_gym
from trace_gym.agents.baselines import PlanAgent
from trace_gym.envs.clarify import ClarifyConfig, ClarifyEnv, slots_asked
from trace_gym.errors import ConfigError
from trace_gym.world.model import World

GOLDEN = {
    0.0: [
        "aa53f1daeed096dc395847c1ab3f90cc1de8e5ab276ae2a9a3a7c138a3ade34b",
        "09690ad05b81a01bd2fda6500e80b07bbe8657a9f78dc0f95e02838f6dacc290",
        "9d789db51dd2806bf4fda9752a56e6d2985d25c496c19453d1ac5b374b9f33c2",
    ],
    0.5: [
        "9376de25a4ff417d3c68691ad87afd7c2e9fb73f6762625001af0ff82c6e0802",
        "5f302ec632cc1b50a096fe8cad60ec5afbc0b4699b015290eb60b42d6d032807",
        "8ac6d0881d7acb17bcf74e142046f3bfe6d451f775e26cc330bac6cb9e9499ca",
    ],
    1.0: [
        "7b3c0592ff88c6ace2f55449f3fe7b566ba967e6aa5851c017944d75dd981a43",
        "7e52c2ce90c1e7dea67fe086f13ed66b922aea98e0e01acd1cf1878165fad1f6",
        "aad9f53233ce3caadefedb8612d4ee5242c2f83dd1b35d80099ebe02ec3f8ad8",
    ],
}
SEEDS = range(40)


@pytest.fixture(scope="module")
def env() -> ClarifyEnv:
    return ClarifyEnv()


def play(env: ClarifyEnv, plan: list, seed: int, d: float = 0.5) -> dict:
    return trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options={"difficulty": d})


def task_of(env: ClarifyEnv, seed: int, d: float = 0.5):
    env.reset(seed=seed, options={"difficulty": d})
    return env.task


def find(env: ClarifyEnv, want, d: float = 0.5) -> int:
    for seed in range(500):
        if want(task_of(env, seed, d)):
            return seed
    raise AssertionError("no such task in 500 seeds")


@pytest.mark.parametrize(
    "overrides",
    [{"n_missing": 0}, {"n_missing": 4}, {"wrong_info_probability": 1.5}, {"unable_share": -0.1},
     {"n_other_orders": 0}, {"no_such_field": 1}],
)  # fmt: skip
def test_bad_configs_are_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        ClarifyConfig.from_difficulty(0.5, overrides)


def test_golden_task_hashes(env: ClarifyEnv) -> None:
    got = {d: [] for d in GOLDEN}
    for d in GOLDEN:
        for seed in range(3):
            _, info = env.reset(seed=seed, options={"difficulty": d})
            got[d].append(info["task_hash"])
    assert got == GOLDEN


def test_missing_values_are_only_obtainable_from_the_user(env: ClarifyEnv) -> None:
    for seed in SEEDS:
        task = task_of(env, seed, 1.0)
        world = World.from_dict(task.world)
        if task.reference_call is None:
            continue
        for slot in task.ask_slots:  # never in the opening, always in the answer
            assert task.slots[slot].lower() not in task.opening.lower()
            assert task.slots[slot].lower() in task.answers[slot].lower()
        for slot, wrong in task.wrong.items():  # a lookup exposes a wrong stated value
            assert wrong in task.opening
            if slot == "order":
                assert not world.has("orders", wrong)
            else:
                assert wrong < world.now[:10]
        open_orders = [
            k for t, k in task.owned
            if t == "orders" and world.tables["orders"][k]["status"] == "pending"
        ]  # fmt: skip
        if "order" in task.ask_slots:  # the order cannot be inferred from the records
            assert len(open_orders) >= 2


def test_missing_item_customers_really_lack_the_item(env: ClarifyEnv) -> None:
    n = 0
    for seed in range(120):
        task = task_of(env, seed, 0.5)
        if task.unable_code != "missing_item":
            continue
        n += 1
        pms = [task.world["tables"]["payment_methods"][k] for t, k in task.owned
               if t == "payment_methods"]  # fmt: skip
        active = [p for p in pms if p["status"] == "active"]
        if "gift card" in task.opening:
            assert not [p for p in active if p["kind"] == "gift_card"]
        else:
            brand = re.search(r"my (\w+) card", task.opening).group(1)
            assert brand not in {p.get("brand") for p in active}
    assert n >= 5


def test_invented_arguments_are_gated(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.reference_call is not None)
    ref = task_of(env, seed).reference_call
    record = play(env, [ref, "Done."], seed)  # the right values, but never asked for
    assert not record["is_success"]
    assert record["verification"]["score"] == 0.0
    assert not record["verification"]["checks"][2]["passed"]  # no_unfounded_write


def test_wrong_value_after_asking_is_gated(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.kind == "upgrade_shipping" and "speed" in t.ask_slots)
    task = task_of(env, seed)
    plan = env.oracle_actions()
    args = dict(task.reference_call["arguments"])
    args["speed"] = "overnight" if args["speed"] == "express" else "express"
    plan[1] = {"name": "upgrade_shipping", "arguments": args}
    record = play(env, plan, seed)
    assert record["verification"]["score"] == 0.0


def test_asking_without_acting_earns_only_the_asking_share(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.reference_call is not None)
    record = play(env, env.oracle_actions()[:1], seed)
    assert not record["is_success"]
    assert record["verification"]["score"] == pytest.approx(0.3)


def test_cannot_do_needs_the_right_code_and_no_write(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.unable_code == "unsupported_request")
    task = task_of(env, seed)
    wrong = {"name": "report_unable", "arguments": {"customer_id": task.customer_id,
             "reason_code": "missing_item", "explanation": "x"}}  # fmt: skip
    record = play(env, [wrong, "Sorry, I cannot do that."], seed)
    assert not record["is_success"] and 0 < record["verification"]["score"] < 1
    write = {"name": "upgrade_shipping", "arguments": {"order_id": task.order_id,
             "speed": "express"}}  # fmt: skip
    record = play(env, [write, *env.oracle_actions()], seed)
    assert record["verification"]["score"] == 0.0


def test_user_answers_only_the_slots_asked_about(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.kind == "schedule_delivery" and len(t.ask_slots) == 3, 1.0)
    task = task_of(env, seed, 1.0)
    _, _, _, _, info = env.step("Which time window works for you?")
    reply = info["messages"][-1]["content"]
    assert task.slots["window"] in reply and task.slots["order"] not in reply
    _, _, _, _, info = env.step("Let me check the order date.")  # no question: no answer
    assert task.slots["order"] not in info["messages"][-1]["content"]
    assert slots_asked("Which order and which date?") == {"order", "date"}


def test_mean_reward_of_an_imperfect_agent_does_not_rise_with_difficulty(env: ClarifyEnv) -> None:
    """An agent that asks only about slots absent from the request (it trusts stated values)
    and about at most two of them."""
    means = []
    for d in (0.0, 0.5, 1.0):
        total = 0.0
        for seed in SEEDS:
            task = task_of(env, seed, d)
            plan = env.oracle_actions()
            if task.reference_call is not None:
                asked = [s for s in task.ask_slots if s not in task.wrong][:2]
                plan[0] = f"Could you tell me {' and '.join(asked)}?"
            total += play(env, plan, seed, d)["verification"]["score"]
        means.append(total / len(SEEDS))
    assert means[0] >= means[1] >= means[2] and means[0] > means[2]
