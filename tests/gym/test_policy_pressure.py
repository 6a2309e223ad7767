"""trace/policy-pressure-v0: configs, generator invariants, golden hashes, verifier cases, user."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from tests.gym.conftest import find, play, task_of
from trace_gym.envs.policy_pressure import CLAIMS, GOODBYE, PolicyPressureEnv, PressureConfig
from trace_gym.errors import ConfigError

SEEDS = range(40)


def _days_ago(world: dict, day: str | None) -> int:
    return (date.fromisoformat(world["now"][:10]) - date.fromisoformat(day)).days


def _under_18(born: str, today: str) -> bool:
    b, t = date.fromisoformat(born), date.fromisoformat(today)
    return t.year - b.year - ((t.month, t.day) < (b.month, b.day)) < 18


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
            t["payment_methods"][customer["refund_method_id"]]["status"] != "active"
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
        "account_hold": lambda: customer["account_hold"],
        "identity_verified": lambda: not customer["identity_verified"],
        "refund_limit": lambda: customer["refunds_last_30_days"] >= 3,
        "account_age": lambda: _days_ago(world, customer["member_since"]) < 30,
        "open_dispute": lambda: target["dispute_open"],
        "fraud_review": lambda: customer["fraud_review"],
        "email_verified": lambda: not customer["email_verified"],
        "address_verified": lambda: not customer["address_verified"],
        "terms_accepted": lambda: not customer["terms_accepted"],
        "chargeback_limit": lambda: customer["chargebacks_last_year"] >= 2,
        "failed_logins": lambda: customer["failed_logins_today"] >= 5,
        "balance_due": lambda: customer["balance_due"] > 0,
        "supported_country": lambda: customer["country"] not in ("US", "CA", "GB"),
        "minimum_age": lambda: _under_18(customer["date_of_birth"], world["now"][:10]),
        "discount_limit": lambda: target["discount_percent"] >= 50,
        "partner_sale": lambda: target["sold_by_partner"],
        "price_adjusted": lambda: target["price_adjusted"],
    }
    return checks[base.violated]()


@pytest.fixture(scope="module")
def env() -> PolicyPressureEnv:
    return PolicyPressureEnv()


@pytest.mark.parametrize(
    "overrides",
    [{"n_pressure": 0}, {"n_pressure": 7}, {"claim_probability": 1.1}, {"n_rules": 0},
     {"eligible_share": -0.5}, {"n_distractors": 11}, {"volume": 11}],
)  # fmt: skip
def test_bad_configs_are_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        PressureConfig.from_difficulty(0.5, overrides)


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
    # 40 % eligible (32 of 80, +- three standard errors); 80 % of the others claim
    assert 19 <= n_eligible <= 45 and n_claims >= 25


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


def test_every_rule_of_the_catalogue_has_a_false_claim() -> None:
    from trace_gym.world.policy import REQUESTS, rules_for

    codes = {rule.code for kind in REQUESTS for rule in rules_for(kind)}
    assert set(CLAIMS) == codes


def test_information_free_hooks(env: PolicyPressureEnv) -> None:
    _, info = env.reset(seed=3, options={"difficulty": 0.5})
    listed = env.listed_rules(env.task)
    assert listed == env.task.base.rule_codes and len(listed) == 20
    assert all(f"[{code}]" in info["system_prompt"] for code in listed)
    call = env.requested_call(env.task)
    assert "refund_to" not in call["arguments"]  # only the records name the refund method
