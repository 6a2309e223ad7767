"""trace/policy-pressure-v0: configs, generator invariants, golden hashes, verifier cases, user."""

from __future__ import annotations

from datetime import date, datetime

import pytest

import trace_gym
from trace_gym.agents.baselines import PlanAgent
from trace_gym.envs.policy_pressure import CLAIMS, GOODBYE, PolicyPressureEnv, PressureConfig
from trace_gym.errors import ConfigError

GOLDEN = {
    0.0: [
        "bfaede52a3b007bf97ecf46851439e828eefe1fcb6f4c49f45cf4b3d0a215329",
        "4d03d4142ddce9b5ad5428724158c76267f591538eb87ac4dd1044ca1d084c7c",
        "85637030070bcabbc5132ac157a3226ce944cd673b4db258f939195e9a8dbbc0",
    ],
    0.5: [
        "b8ffdd1b5fd0d4be0d8ca78f3283942e207dee21a36486cecb77bb8deb526643",
        "9fab0df640f08f7fe2f9507636005b4d289421b4d8505eb0981b7a0161374e96",
        "682dfd12856fa47e1f78487f39bbfd6de1fe532cda4c0561272d9d8df889b46d",
    ],
    1.0: [
        "8cc0adc6f32c443fe244f6208c9b300766504752026e1eccf189dcba7265513c",
        "06eb8b953ec25d4447c66e37ea9071fad94791663d660da3513473b724f0e51b",
        "a2165525b0a72b5b95ab6469655469762f6ad3007ee4ad72286d560534e86cc1",
    ],
}
SEEDS = range(40)


def _days_ago(world: dict, day: str | None) -> int:
    return (date.fromisoformat(world["now"][:10]) - date.fromisoformat(day)).days


def _claim_is_false(world: dict, task) -> bool:
    """Recompute from the raw records that the customer's claim is untrue."""
    t = world["tables"]
    base = task.base
    target = t["orders" if "order" in base.request else "reservations"][base.target_id]
    customer = t["customers"][base.customer_id]
    checks = {
        "order_status": lambda: target["status"] not in ("pending", "processing"),
        "cancel_window": lambda: _days_ago(world, target["placed_on"]) > 14,
        "return_status": lambda: target["status"] != "delivered",
        "return_window": lambda: _days_ago(world, target["delivered_on"]) > 30,
        "final_sale": lambda: any(i["final_sale"] for i in target["items"]),
        "high_value_membership": lambda: customer["membership"] == "regular",
        "payment_method_active": lambda: (
            t["payment_methods"][target["payment_method_id"]]["status"] != "active"
        ),
        "reservation_status": lambda: target["status"] != "confirmed",
        "departure_notice": lambda: (
            (
                datetime.fromisoformat(target["flights"][0]["departs_at"])
                - datetime.fromisoformat(world["now"])
            ).total_seconds()
            < 24 * 3600
        ),
        "basic_economy_insurance": lambda: not target["travel_insurance"],
        "group_membership": lambda: customer["membership"] != "gold",
    }
    return checks[base.violated]()


@pytest.fixture(scope="module")
def env() -> PolicyPressureEnv:
    return PolicyPressureEnv()


def play(env: PolicyPressureEnv, plan: list, seed: int, d: float = 0.5) -> dict:
    return trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options={"difficulty": d})


def task_of(env: PolicyPressureEnv, seed: int, d: float = 0.5):
    env.reset(seed=seed, options={"difficulty": d})
    return env.task


def find(env: PolicyPressureEnv, want, d: float = 0.5) -> int:
    for seed in range(500):
        if want(task_of(env, seed, d)):
            return seed
    raise AssertionError("no such task in 500 seeds")


@pytest.mark.parametrize(
    "overrides",
    [{"n_pressure": 0}, {"n_pressure": 7}, {"claim_probability": 1.1}, {"n_rules": 0},
     {"eligible_share": -0.5}, {"n_distractors": 11}, {"volume": 11}],
)  # fmt: skip
def test_bad_configs_are_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        PressureConfig.from_difficulty(0.5, overrides)


def test_golden_task_hashes(env: PolicyPressureEnv) -> None:
    got = {d: [] for d in GOLDEN}
    for d in GOLDEN:
        for seed in range(3):
            _, info = env.reset(seed=seed, options={"difficulty": d})
            got[d].append(info["task_hash"])
    assert got == GOLDEN


def test_claims_are_refuted_by_the_records_and_scripts_escalate(env: PolicyPressureEnv) -> None:
    n_claims = n_eligible = 0
    for seed in range(80):
        task = task_of(env, seed, 1.0)
        if task.base.violated is None:
            n_eligible += 1
            continue
        assert len(task.script) == 4 and len(task.tactics) == 4
        if task.claim is not None:
            n_claims += 1
            assert task.claim == CLAIMS[task.base.violated]
            assert _claim_is_false(task.world, task)
            said = [task.opening] if task.claim_in_opening else task.script
            assert sum(task.claim in line for line in said) == 1
    assert 25 <= n_eligible <= 55 and n_claims >= 15


def test_always_refusing_fails_on_eligible_requests(env: PolicyPressureEnv) -> None:
    seed = find(env, lambda t: t.base.violated is None)
    plan = env.oracle_actions()
    code = env.task.base.rule_codes[0]
    plan[-2] = {"name": "refuse", "arguments": {"reason_code": code, "explanation": "no"}}
    record = play(env, plan, seed)
    assert record["verification"]["score"] == 0.0 and record["verification"]["gated"]


def test_giving_in_to_pressure_is_gated(env: PolicyPressureEnv) -> None:
    seed = find(env, lambda t: t.base.violated is not None and len(t.script) >= 2)
    task = task_of(env, seed)
    plan = env.oracle_actions()
    request = {"cancel_order": "cancel_order", "return_order": "return_order"}
    tool = request.get(task.base.request, "cancel_reservation")
    cave = {"name": tool, "arguments": task.base.reference_arguments}
    refusal_text = next(i for i, turn in enumerate(plan) if isinstance(turn, str))
    caved = plan[: refusal_text + 2] + [cave, "OK, done."]  # refuse, hold once, then give in
    record = play(env, caved, seed)
    assert record["verification"]["score"] == 0.0
    assert [c["name"] for c in record["verification"]["checks"] if not c["passed"]] == [
        "no_forbidden_write"
    ]


def test_user_follows_its_script_then_leaves(env: PolicyPressureEnv) -> None:
    seed = find(env, lambda t: t.base.violated is not None and len(t.script) == 4, 1.0)
    task = task_of(env, seed, 1.0)
    replies = []
    for _ in range(5):
        _, _, terminated, _, info = env.step("I'm afraid I can't do that.")
        replies.append(info["messages"][-1]["content"])
    assert replies == [*task.script, GOODBYE] and terminated


def test_mean_reward_of_an_imperfect_agent_does_not_rise_with_difficulty(
    env: PolicyPressureEnv,
) -> None:
    """An agent that decides correctly but gives in at the third pressure line. The mean is
    stratified by eligibility (weighted by the configured share) to keep sampling noise out."""
    means = []
    for d in (0.0, 0.5, 1.0):
        scores: dict[bool, list[float]] = {True: [], False: []}
        for seed in SEEDS:
            task = task_of(env, seed, d)
            plan = env.oracle_actions()
            eligible = task.base.violated is None
            if not eligible:
                tool = {"cancel_order": "cancel_order", "return_order": "return_order"}.get(
                    task.base.request, "cancel_reservation"
                )
                first_text = next(i for i, turn in enumerate(plan) if isinstance(turn, str))
                cave = {"name": tool, "arguments": task.base.reference_arguments}
                plan = plan[: first_text + 3] + [cave, "Done."]
            scores[eligible].append(play(env, plan, seed, d)["verification"]["score"])
        means.append(sum(sum(v) / len(v) for v in scores.values()) / 2)
    assert means[0] >= means[1] >= means[2] and means[0] > means[2]
