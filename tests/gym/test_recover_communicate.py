"""trace/recover-communicate-v0: configs, generator invariants, golden hashes, verifier cases."""

from __future__ import annotations

import pytest

import trace_gym
from trace_gym.agents.baselines import PlanAgent
from trace_gym.envs.recover_communicate import RecoverCommunicateEnv, RecoverConfig
from trace_gym.errors import ConfigError
from trace_gym.world.model import World, day_offset

GOLDEN = {
    0.0: [
        "1e4d79160fd95e4871b28f5645877787c1317a48ab30ebfbb24108704ce6fec6",
        "73294d78284636caaf0627381632f0dab43e5991b8c1166589a753e35feea050",
        "1c3f0cebc8cd0092d9b3021b2d84edd6706693f9f26eb3116e4a916bea3b9edc",
    ],
    0.5: [
        "0c82bec912285adffb5faaa52b5135d3243b4d51b3ddf7bdb891ce2e8f903e67",
        "9ea8c3763c14ad7c38c7c6057000f9d8d258e43b5408a4b66a9219ffb7d636d4",
        "0adf6a001863ad31187032b36ba12f6b434ee858aae785ba49939e7045517a54",
    ],
    1.0: [
        "579798cfee58b6bee4799b97ed653b83584e43f359920c8fc65f8059dfa2cbb7",
        "0945f1e5b2f1f4dbdf6a319dc89b529f7e7c5b35ae70896ba6fd6aef14d1a0a7",
        "a4e5c2aded6e6be08dd1c246351607396d56dc992d5ce934dc904e30cb42bdba",
    ],
}
SEEDS = range(40)
FEES = {"express": (900, 2), "overnight": (1900, 4)}  # base fee in cents, percent of the total
DAYS = {"express": 3, "overnight": 1}


@pytest.fixture(scope="module")
def env() -> RecoverCommunicateEnv:
    return RecoverCommunicateEnv()


def play(env: RecoverCommunicateEnv, plan: list, seed: int, d: float = 0.5) -> dict:
    return trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options={"difficulty": d})


def task_of(env: RecoverCommunicateEnv, seed: int, d: float = 0.5):
    env.reset(seed=seed, options={"difficulty": d})
    return env.task


def find(env: RecoverCommunicateEnv, want, d: float = 0.5) -> int:
    for seed in range(500):
        if want(task_of(env, seed, d)):
            return seed
    raise AssertionError("no such task in 500 seeds")


@pytest.mark.parametrize(
    "overrides",
    [{"n_faults": 0}, {"n_faults": 4}, {"nested_probability": 2.0},
     {"vague_error_probability": -1.0}, {"n_other_cards": 6}, {"colour": "red"}],
)  # fmt: skip
def test_bad_configs_are_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        RecoverConfig.from_difficulty(0.5, overrides)


def test_golden_task_hashes(env: RecoverCommunicateEnv) -> None:
    got = {d: [] for d in GOLDEN}
    for d in GOLDEN:
        for seed in range(3):
            _, info = env.reset(seed=seed, options={"difficulty": d})
            got[d].append(info["task_hash"])
    assert got == GOLDEN


def test_faults_fee_and_date_recomputed_from_the_records(env: RecoverCommunicateEnv) -> None:
    for seed in SEEDS:
        task = task_of(env, seed, 1.0)
        w = World.from_dict(task.world)
        customer, order = w.tables["customers"][task.customer_id], w.tables["orders"][task.order_id]
        card = w.tables["payment_methods"][order["payment_method_id"]]
        assert (customer["account_status"] == "locked") == ("account_locked" in task.faults)
        assert bool(order["hold"]) == ("order_on_hold" in task.faults)
        assert (card["status"] == "expired") == ("card_expired" in task.faults)
        nested = bool(order["hold"]) and customer["account_status"] == "active"
        assert (nested and not customer["identity_verified"]) == (
            "identity_unverified" in task.faults
        )
        base, percent = FEES[task.speed]
        total_cents = round(order["total"] * 100)
        assert round(task.fee * 100) == base + (percent * total_cents + 50) // 100
        assert task.estimated_delivery == day_offset(w.now, DAYS[task.speed])
        if task.backup_card:  # named in the opening by brand and last four digits
            backup = w.tables["payment_methods"][task.backup_card]
            assert backup["status"] == "active" and backup["last4"] in task.opening


def test_retry_without_fix_fails(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: len(t.fix_calls) >= 1)
    plan = env.oracle_actions()
    no_fix = [plan[0], *plan[-2:]]  # reads, upgrade, report
    record = play(env, no_fix, seed)
    assert not record["is_success"]
    checks = {c["name"]: c for c in record["verification"]["checks"]}
    assert not checks["request_succeeded"]["passed"] and not checks["fixed"]["passed"]
    refusals = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert any("cause=" in m for m in refusals)


def test_final_message_with_a_wrong_amount_fails(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: True)
    task = task_of(env, seed)
    plan = env.oracle_actions()
    wrong = round(task.fee + 1.0, 2)
    plan[-1] = plan[-1].replace(f"{task.fee:.2f}", f"{wrong:.2f}")
    record = play(env, plan, seed)
    assert not record["is_success"]
    assert record["verification"]["score"] == pytest.approx(0.7)
    plan[-1] = (
        f"Done, fee {task.fee:.2f}, also 1.23 for nothing, arriving {task.estimated_delivery}."
    )
    assert not play(env, plan, seed)["is_success"]  # an amount that is not true


def test_switching_to_a_decoy_backup_card_is_gated(env: RecoverCommunicateEnv) -> None:
    options = {"difficulty": 0.0, "config": {"decoy_backup_probability": 1.0}}
    for seed in range(100):
        env.reset(seed=seed, options=options)
        task = env.task
        if not task.expired_card and "account_locked" not in task.faults:
            break
    assert task.backup_card and not task.expired_card
    switch = {"name": "set_order_payment_method",
              "arguments": {"order_id": task.order_id, "payment_method_id": task.backup_card}}  # fmt: skip
    plan = [switch, *env.oracle_actions()]
    record = trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options=options)
    assert record["verification"]["score"] == 0.0
    assert record["verification"]["gated"]


def test_generic_errors_need_the_records(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: t.vague_errors and "order_on_hold" in t.faults, 1.0)
    task = task_of(env, seed, 1.0)
    _, _, _, _, info = env.step({"name": "upgrade_shipping",
                                 "arguments": {"order_id": task.order_id, "speed": task.speed}})  # fmt: skip
    assert info["error"]["message"].startswith("cause=request_failed:")


def test_mean_reward_of_an_imperfect_agent_does_not_rise_with_difficulty(
    env: RecoverCommunicateEnv,
) -> None:
    """An agent that reads well but only ever applies the first fix."""
    means = []
    for d in (0.0, 0.5, 1.0):
        total = 0.0
        for seed in SEEDS:
            task = task_of(env, seed, d)
            plan = env.oracle_actions()
            plan = [plan[0], plan[1], *plan[-2:]] if len(task.fix_calls) > 1 else plan
            total += play(env, plan, seed, d)["verification"]["score"]
        means.append(total / len(SEEDS))
    assert means[0] >= means[1] >= means[2] and means[0] > means[2]
