"""trace/clarify-v0: configs, generator invariants, golden hashes, verifier cases, user."""

from __future__ import annotations

import re

import pytest

from tests.gym.conftest import find, play, task_of
from trace_gym.envs.clarify import (
    ENV_ID,
    SLOTS,
    ClarifyConfig,
    ClarifyEnv,
    slots_asked,
)
from trace_gym.errors import ConfigError
from trace_gym.testing import soundness
from trace_gym.world.model import World

SEEDS = range(40)


@pytest.fixture(scope="module")
def env() -> ClarifyEnv:
    return ClarifyEnv()


@pytest.mark.parametrize(
    "overrides",
    [{"n_missing": 0}, {"n_missing": 4}, {"wrong_info_probability": 1.5}, {"unsupported_share": -0.1},
     {"unsupported_share": 0.6, "missing_item_share": 0.6}, {"n_other_orders": 0},
     {"n_other_cards": 1}, {"no_such_field": 1}],
)  # fmt: skip
def test_bad_configs_are_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        ClarifyConfig.from_difficulty(0.5, overrides)


def test_missing_values_are_only_obtainable_from_the_user(env: ClarifyEnv) -> None:
    for seed in SEEDS:
        task = task_of(env, seed, 1.0)
        world = World.from_dict(task.world)
        if task.reference_call is None:
            continue
        for slot in task.ask_slots:  # never in the opening, always in the answer
            assert not re.search(rf"\b{re.escape(task.slots[slot])}\b", task.opening, re.I)
            assert task.slots[slot].lower() in task.answers[slot].lower()
        for slot, wrong in task.wrong.items():  # a lookup exposes a wrong stated value
            assert wrong in task.opening
            if slot == "order":
                assert not world.has("orders", wrong)
            elif slot == "date":
                assert wrong < world.now[:10]
            else:
                cards = [k for t, k in task.owned if t == "payment_methods"]
                assert wrong not in {world.tables["payment_methods"][k].get("last4") for k in cards}
        open_orders = [
            k for t, k in task.owned
            if t == "orders" and world.tables["orders"][k]["status"] == "pending"
        ]  # fmt: skip
        if "order" in task.ask_slots:  # the order cannot be inferred from the records
            assert len(open_orders) >= 2
        if len(SLOTS[task.kind]) > 1:  # one slot is always stated correctly
            assert len(task.ask_slots) < len(SLOTS[task.kind])


def test_card_requests_need_the_card_id_from_the_records(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.kind == "pay_with_card" and "card" in t.ask_slots)
    task = task_of(env, seed)
    pmid = task.reference_call["arguments"]["payment_method_id"]
    assert pmid not in task.opening and pmid not in " ".join(task.answers.values())
    active = [
        k for t, k in task.owned
        if t == "payment_methods" and task.world["tables"]["payment_methods"][k]["status"] == "active"
    ]  # fmt: skip
    assert len(active) >= 3  # "my other card" names none of them
    assert play(env, env.oracle_actions(), seed)["is_success"]


def test_missing_item_customers_really_lack_the_item(env: ClarifyEnv) -> None:
    n = 0
    for seed in range(400):
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
    assert not check(record, "no_unfounded_write")["passed"]


def test_wrong_value_after_asking_is_gated(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.kind == "upgrade_shipping" and "speed" in t.ask_slots)
    task = task_of(env, seed)
    plan = env.oracle_actions()
    args = dict(task.reference_call["arguments"])
    args["speed"] = "overnight" if args["speed"] == "express" else "express"
    plan[1] = {"name": "upgrade_shipping", "arguments": args}
    record = play(env, plan, seed)
    assert record["verification"]["score"] == 0.0


def test_asking_without_acting_earns_nothing(env: ClarifyEnv) -> None:
    """Process credit counts only once a decision is made."""
    seed = find(env, lambda t: t.reference_call is not None)
    plan = env.oracle_actions()
    question = next(t for t in plan if isinstance(t, str) and "?" in t)
    record = play(env, [question], seed)
    assert not record["is_success"]
    assert record["verification"]["score"] == 0.0 and not record["verification"]["decided"]
    assert check(record, "asked_for_missing")["passed"]  # the asking itself was right


def test_asking_about_a_correctly_stated_slot_is_gated(env: ClarifyEnv) -> None:
    seed = find(
        env,
        lambda t: t.kind == "schedule_delivery" and t.ask_slots and "order" not in t.ask_slots,
    )
    plan = env.oracle_actions()
    plan[0] = plan[0].replace("?", " and which order it is (the order id)?")
    record = play(env, plan, seed)
    assert record["verification"]["score"] == 0.0
    assert check(record, "no_needless_question")["actual"] == ["order"]


def test_a_fixed_question_template_never_wins(env: ClarifyEnv) -> None:
    """One question naming every write argument, then acting on the answers: a slot stated
    correctly (or absent from the request) is always among those asked."""
    template = "Could you tell me the order_id, speed, date, window and payment_method_id?"
    for d in (0.0, 1.0):
        for seed in range(30):
            task = task_of(env, seed, d)
            plan = [t for t in env.oracle_actions() if not (isinstance(t, str) and "?" in t)]
            record = play(env, [template, *plan], seed, d)
            assert record["verification"]["score"] == 0.0, (seed, d, task.kind)


def test_a_keyword_stuffed_message_gets_no_answer_and_no_credit(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.reference_call is not None)
    stuffed = ("Which order, speed, date, time window, card? " * 3000)[:100_000]
    assert slots_asked(stuffed) == set()
    record = play(env, [stuffed, *env.oracle_actions()[-2:]], seed)
    replies = [m["content"] for m in record["messages"] if m["role"] == "user"]
    assert replies[1] == "Can you help me with my request?"
    assert record["verification"]["score"] == 0.0


def test_cannot_do_needs_the_right_code_and_no_write(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.unable_code == "unsupported_request")
    task = task_of(env, seed)
    wrong = {"name": "report_unable", "arguments": {"customer_id": task.customer_id,
             "reason_code": "missing_item", "explanation": "x"}}  # fmt: skip
    record = play(env, [wrong, "Sorry, I cannot do that."], seed)
    assert not record["is_success"] and record["verification"]["score"] == 0.0
    assert not check(record, "unable_reason")["passed"]
    write = {"name": "upgrade_shipping", "arguments": {"order_id": task.order_id,
             "speed": "express"}}  # fmt: skip
    record = play(env, [write, *env.oracle_actions()], seed)
    assert record["verification"]["score"] == 0.0


def test_user_answers_only_the_slots_asked_about(env: ClarifyEnv) -> None:
    seed = find(env, lambda t: t.kind == "schedule_delivery" and {"order", "window"} <= set(
        t.ask_slots), 1.0)  # fmt: skip
    task = task_of(env, seed, 1.0)
    _, _, _, _, info = env.step("Which time window works for you?")
    reply = info["messages"][-1]["content"]
    assert task.slots["window"] in reply and task.slots["order"] not in reply
    _, _, _, _, info = env.step("Let me check the order date.")  # no question: no answer
    assert task.slots["order"] not in info["messages"][-1]["content"]
    assert slots_asked("Which order and which date?") == {"order", "date"}
    assert slots_asked("Which date would suit your order?") == {"date"}


def test_knob_rates_hold_over_1000_seeds() -> None:
    """The documented rates are what the generator draws."""
    rows = soundness.check_knob_rates(ENV_ID)
    assert len(rows) == len(ClarifyEnv.knob_rates) >= 5


def test_masked_templates_reach_the_declared_floor() -> None:
    """Seeds are disjoint across splits; wording and structure must vary too, or a model
    memorises the train split's templates."""
    counts = soundness.check_template_diversity(ENV_ID)
    assert min(counts.values()) >= ClarifyEnv.template_floor


def test_information_free_policies_lose(env: ClarifyEnv) -> None:
    """Declining with a fixed reason (with or without reads) or copying the request wins at
    most 10 % and earns at most 0.15 on average, at every difficulty."""
    for d in (0.0, 0.5, 1.0):
        totals: dict[str, list[float]] = {}
        for seed in range(60):
            task = task_of(env, seed, d)
            reads = [t for t in env.oracle_actions() if isinstance(t, dict)
                     and all(c["name"].startswith("get_") for c in t.get("tool_calls", [t]))]  # fmt: skip
            plans = {"copy": [*reads, env.requested_call(task) or "Done.", "Done."]}
            for code in ("unsupported_request", "missing_item"):
                refuse = {"name": "report_unable", "arguments": {
                    "customer_id": task.customer_id, "reason_code": code, "explanation": "x"}}  # fmt: skip
                plans[code] = [*reads, refuse, f"I can't do that under rule {code}."]
                plans[f"{code}_no_reads"] = [refuse, f"I can't do that under rule {code}."]
            for name, plan in plans.items():
                record = play(env, plan, seed, d)
                got = totals.setdefault(name, [0.0, 0.0])
                got[0] += record["is_success"] / 60
                got[1] += record["verification"]["score"] / 60
        for name, (wins, mean) in totals.items():
            assert wins <= 0.10 and mean <= 0.15, (d, name, wins, mean)


def test_mean_reward_of_an_imperfect_agent_does_not_rise_with_difficulty(env: ClarifyEnv) -> None:
    """An agent that asks only about slots absent from the request (it trusts stated
    values)."""
    means = []
    for d in (0.0, 0.5, 1.0):
        total = 0.0
        for seed in SEEDS:
            task = task_of(env, seed, d)
            plan = env.oracle_actions()
            if task.ask_slots:
                asked = [s for s in task.ask_slots if s not in task.wrong]
                i = next(i for i, t in enumerate(plan) if isinstance(t, str) and "?" in t)
                plan[i] = (
                    f"Could you tell me which {' and which '.join(asked)}?" if asked else "Ok."
                )
            total += play(env, plan, seed, d)["verification"]["score"]
        means.append(total / len(SEEDS))
    assert means[0] >= means[1] >= means[2] and means[0] > means[2]


def check(record: dict, name: str) -> dict:
    return next(c for c in record["verification"]["checks"] if c["name"] == name)
