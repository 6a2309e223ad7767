"""trace/recover-communicate-v0: configs, generator invariants, golden hashes, verifier cases."""

from __future__ import annotations

import re

import pytest

import trace_gym
from tests.gym.conftest import find, play, task_of
from trace_gym.agents.baselines import PlanAgent
from trace_gym.envs.recover_communicate import (
    ENV_ID,
    RecoverCommunicateEnv,
    RecoverConfig,
)
from trace_gym.errors import ConfigError
from trace_gym.testing import soundness
from trace_gym.world.model import World, day_offset

SEEDS = range(40)
FEES = {"express": (900, 2), "overnight": (1900, 4)}  # base fee in cents, percent of the total
DAYS = {"express": 3, "overnight": 1}


@pytest.fixture(scope="module")
def env() -> RecoverCommunicateEnv:
    return RecoverCommunicateEnv()


@pytest.mark.parametrize(
    "overrides",
    [{"n_faults": 0}, {"n_faults": 4}, {"nested_probability": 2.0},
     {"vague_error_probability": -1.0}, {"n_other_cards": 6}, {"no_dob_probability": 2.0},
     {"booking_share": -0.5}, {"colour": "red"}],
)  # fmt: skip
def test_bad_configs_are_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        RecoverConfig.from_difficulty(0.5, overrides)


def test_faults_fee_and_date_recomputed_from_the_records(env: RecoverCommunicateEnv) -> None:
    for seed in SEEDS:
        task = task_of(env, seed, 1.0)
        w = World.from_dict(task.world)
        customer, order = w.tables["customers"][task.customer_id], w.tables["orders"][task.order_id]
        card = w.tables["payment_methods"][order["payment_method_id"]]
        assert (customer["account_status"] == "locked") == ("account_locked" in task.faults)
        assert bool(order["hold"]) == ("order_on_hold" in task.faults)
        assert (card["status"] == "expired") == ("card_expired" in task.faults)
        assert (card["status"] == "closed") == ("card_closed" in task.faults)
        nested = bool(order["hold"]) and customer["account_status"] == "active"
        assert (nested and not customer["identity_verified"]) == (
            "identity_unverified" in task.faults
        )
        assert customer["order_ids"][0] != task.order_id  # older orders come first
        if task.kind == "booking":
            assert task.fee is None and task.report_date == task.request_call["arguments"]["date"]
            assert not set(task.faults) & {"card_expired", "card_closed", "low_balance"}
            continue
        speed = task.request_call["arguments"]["speed"]
        base, percent = FEES[speed]
        total_cents = round(order["total"] * 100)
        fee_cents = base + (percent * total_cents + 50) // 100
        assert round(task.fee * 100) == fee_cents
        if "low_balance" in task.faults:
            assert card["kind"] == "gift_card" and round(card["balance"] * 100) < fee_cents
        assert task.report_date == day_offset(w.now, DAYS[speed])
        if task.backup_card:  # named in the opening by last four digits, or the only other
            backup = w.tables["payment_methods"][task.backup_card]
            active = [k for k in customer["payment_method_ids"]
                      if w.tables["payment_methods"][k]["status"] == "active"
                      and k not in (task.backup_card, order["payment_method_id"])]  # fmt: skip
            assert backup["status"] == "active"
            assert backup["last4"] in task.opening or not active


def test_retry_without_fix_fails(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: len(t.fix_calls) >= 1)
    plan = env.oracle_actions()
    no_fix = [plan[0], *plan[-2:]]  # reads, request, report
    record = play(env, no_fix, seed)
    assert not record["is_success"]
    checks = {c["name"]: c for c in record["verification"]["checks"]}
    assert not checks["request_succeeded"]["passed"] and not checks["fixed"]["passed"]
    refusals = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert any("cause=" in m for m in refusals)


def test_reading_only_or_fixing_without_the_request_earns_nothing(
    env: RecoverCommunicateEnv,
) -> None:
    """Process credit counts only once the request went through (it used to pay 0.20)."""
    seed = find(env, lambda t: len(t.fix_calls) >= 2 and t.dob_in_opening)
    plan = env.oracle_actions()
    stall = "Let me look into that. Is there anything else?"
    for partial in ([plan[0], stall], [plan[0], plan[1], stall]):
        record = play(env, partial, seed)
        assert record["verification"]["score"] == 0.0 and not record["verification"]["decided"]
    assert check(play(env, [plan[0], plan[1], stall], seed), "diagnosed")["score"] > 0


def test_final_message_with_a_wrong_amount_fails(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: t.kind == "upgrade")
    task = task_of(env, seed)
    plan = env.oracle_actions()
    wrong = round(task.fee + 1.0, 2)
    plan[-1] = plan[-1].replace(f"{task.fee:.2f}", f"{wrong:.2f}")
    record = play(env, plan, seed)
    assert not record["is_success"]
    assert record["verification"]["score"] == pytest.approx(0.7)
    plan[-1] = f"Done, fee {task.fee:.2f}, also 1.23 for nothing, arriving {task.report_date}."
    assert not play(env, plan, seed)["is_success"]  # an amount that is not true


def test_a_booking_report_names_the_date_and_the_window(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: t.kind == "booking")
    task = task_of(env, seed)
    plan = env.oracle_actions()
    assert play(env, plan, seed)["is_success"]
    plan[-1] = f"Your delivery is booked for {task.report_date}."
    record = play(env, plan, seed)
    assert not check(record, "reports_result")["passed"]


def test_switching_to_a_decoy_backup_card_is_gated(env: RecoverCommunicateEnv) -> None:
    options = {"difficulty": 0.0, "config": {"decoy_backup_probability": 1.0}}
    for seed in range(100):
        env.reset(seed=seed, options=options)
        task = env.task
        if not task.faulty_card and "account_locked" not in task.faults:
            break
    assert task.backup_card and not task.faulty_card
    switch = {"name": "set_order_payment_method",
              "arguments": {"order_id": task.order_id, "payment_method_id": task.backup_card}}  # fmt: skip
    plan = [switch, *env.oracle_actions()]
    record = trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options=options)
    assert record["verification"]["score"] == 0.0
    assert record["verification"]["gated"]


def test_generic_errors_need_the_records(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: t.vague_errors and "order_on_hold" in t.faults, 1.0)
    task = task_of(env, seed, 1.0)
    _, _, _, _, info = env.step(task.request_call)
    assert info["error"]["message"].startswith("cause=request_failed:")


def test_asking_for_a_detail_already_given_is_gated(env: RecoverCommunicateEnv) -> None:
    seed = find(env, lambda t: True)
    plan = ["Could you tell me the order_id, speed, date, window and payment_method_id?",
            *env.oracle_actions()]  # fmt: skip
    record = play(env, plan, seed)
    assert record["verification"]["score"] == 0.0
    assert "order" in check(record, "no_needless_question")["actual"]


def test_identity_is_verified_only_with_what_the_customer_says(
    env: RecoverCommunicateEnv,
) -> None:
    seed = find(env, lambda t: not t.dob_in_opening and any(
        c["name"] == "verify_identity" for c in t.fix_calls), 1.0)  # fmt: skip
    task = task_of(env, seed, 1.0)
    assert task.date_of_birth not in task.opening
    plan = env.oracle_actions()
    assert play(env, plan, seed, 1.0)["is_success"]
    copied = [t for t in plan if not (isinstance(t, str) and "birth" in t)]  # from the records
    record = play(env, copied, seed, 1.0)
    assert record["verification"]["score"] == 0.0
    assert not check(record, "identity_from_customer")["passed"]


def test_ids_taken_from_the_first_record_read_lose(env: RecoverCommunicateEnv) -> None:
    """Reading, then making the oracle's writes with each id replaced by the first id of its
    kind in the results (the customer's oldest order, their first card) never wins."""
    ids = re.compile(r"\b([A-Z]{1,2})-\d+\b")
    for d in (0.0, 1.0):
        for seed in range(30):
            task = task_of(env, seed, d)
            plan = env.oracle_actions()
            read = plan[0]
            env.step(read)
            first: dict[str, str] = {}
            for m in env.episode.messages:
                for hit in ids.finditer(m["content"] if m["role"] == "tool" else ""):
                    first.setdefault(hit.group(1), hit.group(0))
            swap = [
                {"name": c["name"], "arguments": {
                    k: first.get(v.split("-")[0], v) if isinstance(v, str) and ids.fullmatch(v)
                    else v for k, v in c["arguments"].items()}}
                for c in [*task.fix_calls, task.request_call]
            ]  # fmt: skip
            record = play(env, [read, *swap, plan[-1]], seed, d)
            assert not record["is_success"] and record["verification"]["score"] == 0.0


def test_knob_rates_hold_over_1000_seeds() -> None:
    """The documented rates are what the generator draws."""
    rows = soundness.check_knob_rates(ENV_ID)
    assert len(rows) == len(RecoverCommunicateEnv.knob_rates) >= 5


def test_masked_templates_reach_the_declared_floor() -> None:
    """Seeds are disjoint across splits; wording and structure must vary too, or a model
    memorises the train split's templates."""
    counts = soundness.check_template_diversity(ENV_ID)
    assert min(counts.values()) >= RecoverCommunicateEnv.template_floor


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


def check(record: dict, name: str) -> dict:
    return next(c for c in record["verification"]["checks"] if c["name"] == name)
