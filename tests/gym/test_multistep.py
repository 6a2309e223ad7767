"""trace/multistep-v0: configs, goldens, the final state recomputed, grading cases, difficulty."""

from __future__ import annotations

from typing import Any

import pytest

from trace_gym.envs.multistep import FINAL, MultistepConfig, MultistepEnv, MultistepTask
from trace_gym.errors import ConfigError

# Searches list 12 flights since the information-free revision (see the module's history).
DIFFICULTIES = (0.0, 0.5, 1.0)


@pytest.fixture(scope="module")
def env() -> MultistepEnv:
    return MultistepEnv()


def _play(
    env: MultistepEnv, seed: int, d: float, actions: list, config: dict | None = None
) -> dict:
    """Play ``actions``, then say goodbye; the verification of the finished episode."""
    options: dict[str, Any] = {"difficulty": d, **({"config": config} if config else {})}
    env.reset(seed=seed, options=options)
    for a in [*actions, "Goodbye."]:
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            return info["verification"] | {"end_reason": env.episode.end_reason}
    raise AssertionError("episode did not end")


def _writes(plan: list) -> list[int]:
    """Plan positions of the write calls (the oracle makes one call per turn)."""
    reads = ("get_reservation", "search_flights")
    return [i for i, t in enumerate(plan) if isinstance(t, dict) and t["name"] not in reads]


def _task_with(env: MultistepEnv, kinds: set[str], d: float = 1.0, config: dict | None = None):
    options: dict[str, Any] = {"difficulty": d, **({"config": config} if config else {})}
    for seed in range(200):
        env.reset(seed=seed, options=options)
        if kinds <= {op.kind for op in env.task.ops}:
            return seed, env.task, env.oracle_actions()
    raise AssertionError(f"no task with {kinds}")


# -- config and goldens -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [{"n_operations": 1}, {"n_operations": 7}, {"n_dependent": 0},
     {"n_operations": 3, "n_dependent": 4}, {"shuffle_probability": 1.5},
     {"held_back_probability": -0.1}, {"n_distractors": 7}, {"n_steps": 3}],
)  # fmt: skip
def test_bad_config_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        MultistepConfig.from_difficulty(0.5, overrides)


# -- the final state, recomputed apart from the environment's code ----------------------------
def _expected_changes(task: MultistepTask) -> dict[tuple[str, str], dict[str, Any]]:
    """(table, id) -> the fields each operation must leave, from the task's own data."""
    t = task.world["tables"]
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for op in task.ops:
        a = op.arguments
        if op.kind in ("cancel_order", "cancel_reservation"):
            table = "orders" if op.kind == "cancel_order" else "reservations"
            out[(table, op.target)] = {"status": "cancelled", "cancel_reason": a["reason"]}
        elif op.kind == "change_address":
            out[("orders", op.target)] = {"shipping_address": a["address"]}
        elif op.kind == "switch_payment":
            price = t["reservations"][op.target]["price"]
            pm = a["payment_method_id"]
            out[("reservations", op.target)] = {"payment_method_id": pm,
                                                "payments": [{"payment_method_id": pm, "amount": price}]}  # fmt: skip
            balance = t["payment_methods"][pm]["balance"]
            out[("payment_methods", pm)] = {"balance": round(balance - price, 2)}
        elif op.kind in ("add_bags", "bags_per_passenger"):
            res = t["reservations"][op.target]
            bags = res["passengers"] if op.kind == "bags_per_passenger" else a["bags"]
            out[("reservations", op.target)] = {"baggages": res.get("baggages", 0) + bags}
        elif op.kind == "rebook":
            res = t["reservations"][op.target]
            flight = t["flights"][a["flights"][0]["flight_number"]]
            out[("reservations", op.target)] = {
                "flights": [
                    {k: flight[k] for k in ("flight_number", "origin", "destination", "departs_at")}
                ],  # fmt: skip
                "cabin": res["cabin"],
                "price": res["passengers"] * flight["cabins"][res["cabin"]]["price"],
            }
    return out


def _new_booking(task: MultistepTask) -> dict[str, Any] | None:
    book = [op for op in task.ops if op.kind == "book"]
    if not book:
        return None
    a = book[0].arguments
    flight = task.world["tables"]["flights"][a["flight_number"]]
    bags = sum(op.arguments["bags"] for op in task.ops if op.kind == "bags_new")
    return {"customer_id": task.customer_id, "cabin": a["cabin"], "passengers": a["passengers"],
            "travel_insurance": False, "baggages": bags, "status": "confirmed",
            "price": a["passengers"] * flight["cabins"][a["cabin"]]["price"],
            "flight_numbers": [a["flight_number"]]}  # fmt: skip


def test_oracle_final_state_recomputed(env: MultistepEnv) -> None:
    kinds = set()
    for d in DIFFICULTIES:
        for seed in range(25):
            env.reset(seed=seed, options={"difficulty": d})
            task = env.task
            plan = env.oracle_actions()
            result = _play(env, seed, d, plan[:-1] + [FINAL])
            assert result["score"] == 1.0 and result["end_reason"] == "user_end"
            before, after = task.world["tables"], env.episode.world.tables
            want = _expected_changes(task)
            for (table, key), fields in want.items():
                assert {f: after[table][key].get(f) for f in fields} == fields, (seed, d, table)
            changed = {
                (tb, k) for tb in after for k in after[tb] if after[tb][k] != before[tb].get(k)
            }
            new = {(tb, k) for tb, k in changed if k not in before[tb]}
            booking = _new_booking(task)
            assert len(new) == (booking is not None)
            if booking:  # the booking also lists itself on the customer and takes seats
                ((_, rid),) = new
                flight, cabin = booking["flight_numbers"][0], booking["cabin"]
                seats = before["flights"][flight]["cabins"][cabin]["seats_available"]
                assert after["flights"][flight]["cabins"][cabin]["seats_available"] == (
                    seats - booking["passengers"]
                )
                ids = before["customers"][task.customer_id]["reservation_ids"]
                assert after["customers"][task.customer_id]["reservation_ids"] == [*ids, rid]
                want[("flights", flight)] = want[("customers", task.customer_id)] = {}
            assert changed - new == set(want), (seed, d)  # nothing else changed
            if booking:
                r = after["reservations"][rid]
                got = {k: r.get(k) for k in booking if k != "flight_numbers"}
                got["flight_numbers"] = [f["flight_number"] for f in r["flights"]]
                assert got == booking
            kinds |= {op.kind for op in task.ops}
    assert len(kinds) == 9  # every kind of operation occurred


# -- grading cases ----------------------------------------------------------------------------
def test_stopping_after_the_first_operation_fails(env: MultistepEnv) -> None:
    for d in DIFFICULTIES:
        for seed in range(15):
            env.reset(seed=seed, options={"difficulty": d})
            plan = env.oracle_actions()
            first = _writes(plan)[0]
            result = _play(env, seed, d, plan[: first + 1] + ["All done, anything else?"])
            n = len(env.task.ops)
            assert not result["passed"] and result["end_reason"] == "user_end"
            assert 0 <= result["score"] <= 1 / n + 0.2 + 1e-9  # one operation and its reads at most
            # a dependent operation left undone: the independent work alone earns nothing
            assert result["score"] == 0.0 or "dependent_operations_done" not in [
                c["name"] for c in result["checks"] if not c["passed"]
            ]


def test_a_message_mid_work_gets_a_nudge_not_an_ending(env: MultistepEnv) -> None:
    seed, task, plan = _task_with(env, {"book"}, d=0.0)
    env.reset(seed=seed, options={"difficulty": 0.0})
    obs, *_, info = env.step("Let me look into these. One moment?")
    assert env.episode.end_reason is None and "go ahead" in obs
    assert _play(env, seed, 0.0, ["Working on it.", *plan])["score"] == 1.0


def test_skipping_the_dependent_step_fails(env: MultistepEnv) -> None:
    # nothing held back: a report with the bags undone would send the customer away early
    seed, task, plan = _task_with(env, {"book", "bags_new"}, config={"held_back_probability": 0.0})
    bags = next(i for i in _writes(plan) if plan[i]["name"] == "add_baggage"
                and plan[i]["arguments"]["reservation_id"] not in task.world["tables"]["reservations"])  # fmt: skip
    config = {"held_back_probability": 0.0}
    result = _play(env, seed, 1.0, plan[:bags] + plan[bags + 1 :], config)
    failed = [c["name"] for c in result["checks"] if not c["passed"]]
    assert not result["passed"] and failed[0].endswith("_bags_new")
    assert failed[1:] == ["dependent_operations_done"] and result["score"] == 0.0
    # skipping the search the booking needs: the booking still lands, its order check fails
    book = next(i for i in _writes(plan) if plan[i]["name"] == "book_reservation")
    assert plan[book - 1]["name"] == "search_flights"
    result = _play(env, seed, 1.0, plan[: book - 1] + plan[book:], config)
    failed = [c["name"] for c in result["checks"] if not c["passed"]]
    assert len(failed) == 1 and failed[0].endswith("_book.after_search_flights")
    assert 0.8 < result["score"] < 1.0


def test_a_made_up_or_old_reservation_id_fails(env: MultistepEnv) -> None:
    config = {"n_distractors": 6, "held_back_probability": 0.0}
    seed, task, plan = _task_with(env, {"book", "bags_new"}, config=config)
    existing = task.world["tables"]["reservations"]
    bags = next(i for i in _writes(plan) if plan[i]["name"] == "add_baggage"
                and plan[i]["arguments"]["reservation_id"] not in existing)  # fmt: skip
    made_up = {**plan[bags], "arguments": {**plan[bags]["arguments"], "reservation_id": "R-ZZZZ22"}}
    result = _play(env, seed, 1.0, [*plan[:bags], made_up, *plan[bags + 1 :]], config)
    failed = [c["name"] for c in result["checks"] if not c["passed"]]
    assert failed[0].endswith("_bags_new") and failed[1:] == ["dependent_operations_done"]
    assert result["gated"] and result["score"] == 0.0
    # an older reservation of the customer's instead of the new one: a write outside the request
    others = [k for t, k in task.owned if t == "reservations"
              and k not in {op.target for op in task.ops}]  # fmt: skip
    old = {**plan[bags], "arguments": {**plan[bags]["arguments"], "reservation_id": others[0]}}
    result = _play(env, seed, 1.0, [*plan[:bags], old, *plan[bags + 1 :]], config)
    assert result["gated"] and result["score"] == 0.0


def test_a_write_outside_the_request_is_gated(env: MultistepEnv) -> None:
    for seed in range(10):
        env.reset(seed=seed, options={"difficulty": 1.0})
        task, plan = env.task, env.oracle_actions()
        targets = {op.target for op in task.ops}
        stray_id = next(
            k for t, k in task.owned if t in ("orders", "reservations") and k not in targets
        )
        table = "orders" if stray_id.startswith("O-") else "reservations"
        name = "cancel_order" if table == "orders" else "cancel_reservation"
        key = "order_id" if table == "orders" else "reservation_id"
        stray = {"name": name, "arguments": {key: stray_id, "reason": "other"}}
        result = _play(env, seed, 1.0, [stray, *plan])
        gate = next(c for c in result["checks"] if c["name"] == "no_unrequested_write")
        assert not gate["passed"] and result["score"] == 0.0
        assert all(c["passed"] for c in result["checks"] if not c["gate"])  # everything else done


# -- difficulty -------------------------------------------------------------------------------
def test_difficulty_features_rise(env: MultistepEnv) -> None:
    keys = ("n_operations", "n_dependencies", "n_info_from_result", "interleaved", "n_distractors")
    means = []
    for d in DIFFICULTIES:
        feats = [env.reset(seed=s, options={"difficulty": d})[1]["difficulty_features"]
                 for s in range(60)]  # fmt: skip
        means.append([sum(f[k] for f in feats) / len(feats) for k in keys])
    for j, key in enumerate(keys):
        column = [m[j] for m in means]
        assert column == sorted(column) and column[0] < column[-1], (key, column)
    assert means[0][0] == 2 and means[-1][0] == 6


def _segments(task: MultistepTask, plan: list) -> list[list]:
    """The oracle plan cut into each operation's calls (its reads, then its write)."""
    calls = [t for t in plan if not isinstance(t, str)]
    out = []
    for op in task.ops:
        out.append(calls[: len(op.reads) + 1])
        calls = calls[len(op.reads) + 1 :]
    return out


def _lapse(task: MultistepTask, plan: list, kind: str) -> list:
    """``first_only``: stop after the first operation. ``no_dependent``: do, from the request
    alone, only the operations that need no earlier result."""
    parts = _segments(task, plan)
    if kind == "first_only":
        return [*parts[0], FINAL]
    kept = [s for op, s in zip(task.ops, parts, strict=True) if not op.reads and op.after is None]
    return [*(t for s in kept for t in s), FINAL]


def test_imperfect_agents_do_not_gain_with_difficulty(env: MultistepEnv) -> None:
    for lapse in ("first_only", "no_dependent"):
        means = []
        for d in (0.0, 0.5, 1.0):
            scores = []
            for seed in range(30):
                env.reset(seed=seed, options={"difficulty": d})
                actions = _lapse(env.task, env.oracle_actions(), lapse)
                scores.append(_play(env, seed, d, actions)["score"])
            means.append(sum(scores) / len(scores))
        means = [round(m, 9) for m in means]  # equal sums may differ in the last bit
        assert means[0] >= means[1] >= means[2], (lapse, means)
        if lapse == "no_dependent":  # the independent operations alone earn nothing
            assert means == [0.0, 0.0, 0.0], means
