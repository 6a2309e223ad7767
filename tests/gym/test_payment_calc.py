"""trace/payment-calc-v0: configs, the split recomputed with Decimal, goldens, grading."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

from trace_gym.envs.payment_calc import PaymentCalcConfig, PaymentCalcEnv, PaymentCalcTask
from trace_gym.errors import ConfigError

CENT = Decimal("0.01")


@pytest.fixture(scope="module")
def env() -> PaymentCalcEnv:
    return PaymentCalcEnv()


def _d(x: float) -> Decimal:
    return Decimal(str(x))


def _split(task: PaymentCalcTask, *, one_certificate: bool = True, fees: bool = True) -> dict:
    """The policy's split in Decimal dollars, written apart from the environment's code."""
    t = task.world["tables"]
    if task.kind == "refund":
        order = t["orders"][task.target["order_id"]]
        due = Decimal(0)
        for item in order["items"]:
            if item["item_id"] in task.target["item_ids"]:
                fee = (_d(item["price"]) * Decimal("0.15")).quantize(CENT, ROUND_HALF_UP)
                due += _d(item["price"]) - (fee if item["opened"] and fees else 0)
        card, gift = order["payments"]
        out = {card["payment_method_id"]: min(due, _d(card["amount"]))}
        out[gift["payment_method_id"]] = due - out[card["payment_method_id"]]
        return {k: v for k, v in out.items() if v}
    flight = t["flights"][task.target["flight_number"]]
    fare = _d(flight["cabins"][task.target["cabin"]]["price"])
    due = task.target["passengers"] * (fare + (Decimal(30) if task.target["insurance"] else 0))
    mine = [p for p in t["payment_methods"].values()
            if p["customer_id"] == task.customer_id and p["status"] == "active"]  # fmt: skip
    certs = sorted((p for p in mine if p["kind"] == "certificate"), key=lambda p: -p["balance"])
    gifts = sorted((p for p in mine if p["kind"] == "gift_card"), key=lambda p: p["balance"])
    out = {}
    for p in (certs[:1] if one_certificate else certs) + gifts:
        take = min(due, _d(p["balance"]))
        if take:
            out[p["payment_method_id"]], due = take, due - take
    if due:
        out[next(p for p in mine if p["kind"] == "credit_card")["payment_method_id"]] = due
    return out


def _play(env: PaymentCalcEnv, seed: int, d: float, actions: list) -> dict:
    env.reset(seed=seed, options={"difficulty": d})
    for a in [*actions, "Thanks.", "Thanks.", "Thanks."]:
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            return info["verification"]
    raise AssertionError("episode did not end")


def _write(task: PaymentCalcTask, split: dict) -> dict:
    name = "book_reservation" if task.kind == "book" else "issue_refund"
    key = "payment_methods" if task.kind == "book" else "refunds"
    parts = [{"payment_method_id": k, "amount": float(v)} for k, v in split.items()]
    return {"name": name, "arguments": {**task.target, key: parts}}


def _reads(task: PaymentCalcTask) -> dict:
    tool = {"customers": ("get_customer", "customer_id"), "flights": ("get_flight", "flight_number"),
            "orders": ("get_order", "order_id"),
            "payment_methods": ("get_payment_method", "payment_method_id")}  # fmt: skip
    return {"tool_calls": [{"name": tool[t][0], "arguments": {tool[t][1]: k}}
                           for t, k in task.deciding]}  # fmt: skip


# -- tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [{"max_gift_cards": 4}, {"max_certificates": -1}, {"n_refund_items": 1},
     {"n_refund_items": 6}, {"opened_share": 2.0}, {"kinds": ("swap",)}, {"fee": 0.1}],
)  # fmt: skip
def test_bad_config_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        PaymentCalcConfig.from_difficulty(0.5, overrides)


def test_split_recomputed_with_decimal(env: PaymentCalcEnv) -> None:
    kinds, multi = set(), 0
    for d in (0.0, 0.5, 1.0):
        for seed in range(40):
            env.reset(seed=seed, options={"difficulty": d})
            task = env.task
            kinds.add(task.kind)
            want = _split(task)
            assert {k: _d(v) for k, v in task.split.items()} == want
            assert _d(task.total) == sum(want.values())
            multi += len(want) > 1
    assert kinds == {"book", "refund"} and multi > 40


def test_difficulty_features_monotone(env: PaymentCalcEnv) -> None:
    means = []
    for d in (0.0, 0.5, 1.0):
        feats = [env.reset(seed=s, options={"difficulty": d})[1]["difficulty_features"]
                 for s in range(60)]  # fmt: skip
        means.append([sum(f[k] for f in feats) / 60 for k in ("n_rules", "n_split_components")])
    for key in range(2):
        column = [m[key] for m in means]
        assert column == sorted(column) and column[0] < column[-1], column


def test_imperfect_agent_does_not_gain_with_difficulty(env: PaymentCalcEnv) -> None:
    """Uses every certificate and forgets restocking fees; otherwise exact."""
    means = []
    for d in (0.0, 0.5, 1.0):
        scores = []
        for seed in range(30):
            env.reset(seed=seed, options={"difficulty": d})
            task = env.task
            split = _split(task, one_certificate=False, fees=False)
            total = f"The total is ${sum(split.values()):.2f}."
            scores.append(_play(env, seed, d, [_reads(task), _write(task, split), total])["score"])
        means.append(sum(scores) / len(scores))
    assert means[0] >= means[1] >= means[2] and means[0] > means[2], means


def test_grading_cases(env: PaymentCalcEnv) -> None:
    for seed in range(12):
        env.reset(seed=seed, options={"difficulty": 1.0})
        task = env.task
        split, told = _split(task), f"The total is ${task.total:.2f}."
        good = [_reads(task), _write(task, split), told]
        assert _play(env, seed, 1.0, good)["score"] == 1.0
        # off by a cent on one component (moved to another): that component fails
        if len(split) > 1:
            keys = list(split)
            moved = dict(split)
            moved[keys[0]] -= CENT
            moved[keys[-1]] += CENT
            got = _play(env, seed, 1.0, [_reads(task), _write(task, moved), told])
            assert got["checks"][2]["score"] <= 1 - 2 / len(split) and not got["passed"]
        # a total off by a cent is not the total
        wrong = f"The total is ${_d(task.total) + CENT}."
        got = _play(env, seed, 1.0, [_reads(task), _write(task, split), wrong])
        assert got["checks"][3]["score"] == 0.0 and 0.5 < got["score"] < 1.0
        # the total must come first: another amount before it fails
        late = f"Your card pays ${list(split.values())[-1]}; the total is ${task.total:.2f}."
        if list(split.values())[-1] != _d(task.total):
            assert (
                _play(env, seed, 1.0, [_reads(task), _write(task, split), late])["checks"][3][
                    "score"
                ]
                == 0.0
            )
        # no reads first: lower but not zero
        got = _play(env, seed, 1.0, [_write(task, split), told])
        assert 0.8 <= got["score"] < 1.0
