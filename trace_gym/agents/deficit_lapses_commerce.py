"""Lapses for the shopping and travel capabilities (``tool_call``, ``payment_calc``,
``multistep``): the deficit agent fumbles an argument, miscounts an amount, or stops early.

A fumbled call is only played when the world would accept it: a refused call would leave the
customer waiting (their scripted user leaves once the work is done), and in the composite
benchmark the next request's turns would then reach the wrong customer. Each candidate is
therefore tried on a copy of the segment's world first; a lapse with no candidate the world
accepts falls back to a mistake in what the agent tells the customer, or plays the oracle.
"""

from __future__ import annotations

import copy
from typing import Any

from trace_gym.agents.deficit import Segment, call_kind, register_lapse, turn_calls
from trace_gym.core.seeding import StableRNG
from trace_gym.core.tools import ToolRefusal
from trace_gym.world.model import day_offset

RECORD_ARGUMENTS = ("customer_id", "order_id", "reservation_id", "flight_number")
"""Arguments naming the record a call is about: fumbling one would touch another record,
which is a different mistake (and the composite would blame the request that owns it)."""


def accepted(seg: Segment, call: dict[str, Any]) -> bool:
    """Whether ``call`` passes its schema and changes a copy of the segment's world."""
    tool = seg.tools.get(call["name"])
    if tool is None or tool.validate(call["arguments"]) is not None:
        return False
    world = seg.world.snapshot()
    before = world.snapshot()
    try:
        tool.handler(world, **copy.deepcopy(call["arguments"]))
    except ToolRefusal:
        return False
    return world != before


def replace_call(actions: list[Any], old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
    """``actions`` with the call ``old`` (compared by value) replaced by ``new``."""
    out = []
    for turn in actions:
        calls = turn_calls(turn)
        if old not in calls:
            out.append(turn)
            continue
        swapped = [new if c == old else c for c in calls]
        out.append(swapped[0] if len(swapped) == 1 else {"tool_calls": swapped})
    return out


# -- tool_call_precision ----------------------------------------------------------------------
def _leaves(value: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path, leaf) of every scalar in nested arguments."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, (*path, i))]
    return [(path, value)]


def _with(value: Any, path: tuple, new: Any) -> Any:
    """A deep copy of ``value`` with the leaf at ``path`` set to ``new``."""
    out = copy.deepcopy(value)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return out


def _slips(seg: Segment, name: str, value: Any) -> list[Any]:
    """Plausible wrong values for an argument field, from its name and its value."""
    from trace_gym.envs import tool_call_requests as rq

    if name == "payment_method_id":  # a look-alike id (or the other instrument) of the customer
        ids = [k for t, k in seg.task.owned if t == "payment_methods"]
        return [k for k in ids if k != value]
    if name == "reason":
        return [r for r in rq.REASONS if r != value]
    if name == "cabin":
        return [c for c in ("basic_economy", "economy", "business") if c != value]
    if name == "state":  # the spoken state name instead of its code
        return [s for _, s, code, _ in rq.CITIES if code == value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1]
    if isinstance(value, str) and len(value) == 10 and value[4] == "-" and value[7] == "-":
        return [day_offset(f"{value}T00:00", k) for k in (1, -1)]  # an off-by-one date
    if name == "first_name":
        return [f"{value[0]}."]
    if name == "zip" and len(value) >= 2:
        return [value[:-2] + value[-1] + value[-2]]
    return []


@register_lapse("tool_call_precision")
def fumble_one_argument(seg: Segment, rng: StableRNG) -> list[Any]:
    """Get one argument field of the request's write wrong (a look-alike payment id, another
    enum member, an off-by-one date or count, a state name for its code), where the world
    accepts the call anyway; the rest of the call is exact."""
    task = seg.task
    write = {"name": task.tool, "arguments": task.reference_arguments}
    slips = [
        {"name": task.tool, "arguments": _with(task.reference_arguments, path, wrong)}
        for path, value in _leaves(task.reference_arguments)
        if path[-1] not in RECORD_ARGUMENTS
        for wrong in _slips(seg, str(path[-1]), value)
    ]
    slips = [s for s in slips if accepted(seg, s)]
    if not slips:
        return seg.actions
    return replace_call(seg.actions, write, rng.choice(slips))


# -- payment_calculation ----------------------------------------------------------------------
BOOKING_RULES = ("largest_certificate", "one_certificate", "smallest_gift_first", "skip_inactive")
"""Steps of the booking policy's walk that a miscounting agent may get wrong."""


def _booking_split(world: Any, target: dict[str, Any], forgotten: str) -> dict[str, int]:
    """Cents per payment method by the policy's walk with one step done wrong (the total is
    right: the booking tool refuses a split that does not add up to it)."""
    from trace_gym.envs.payment_rules import INSURANCE_FEE
    from trace_gym.world.model import cents

    flight = world.tables["flights"][target["flight_number"]]
    fare = cents(flight["cabins"][target["cabin"]]["price"])
    due = target["passengers"] * (fare + (cents(INSURANCE_FEE) if target["insurance"] else 0))
    customer = world.tables["customers"][target["customer_id"]]
    pms = [world.tables["payment_methods"][k] for k in customer["payment_method_ids"]]
    usable = [p for p in pms if p["status"] == "active" or forgotten == "skip_inactive"]
    certs = sorted((p for p in usable if p["kind"] == "certificate"),
                   key=lambda p: (cents(p["balance"]), p["payment_method_id"]))  # fmt: skip
    certs = certs if forgotten == "largest_certificate" else certs[::-1]
    gifts = sorted((p for p in usable if p["kind"] == "gift_card"),
                   key=lambda p: (cents(p["balance"]), p["payment_method_id"]))  # fmt: skip
    gifts = gifts[::-1] if forgotten == "smallest_gift_first" else gifts
    out: dict[str, int] = {}
    for pm in (certs if forgotten == "one_certificate" else certs[:1]) + gifts:
        take = min(due, cents(pm["balance"]))
        if take:
            out[pm["payment_method_id"]] = take
            due -= take
    card = next(p for p in pms if p["kind"] == "credit_card")
    if due:
        out[card["payment_method_id"]] = due
    return out


def _refund_split(world: Any, target: dict[str, Any], fee_forgotten: str) -> dict[str, int]:
    """Cents per payment method of a refund that forgets one opened item's restocking fee."""
    from trace_gym.envs import payment_rules as pr

    order = world.tables["orders"][target["order_id"]]
    forgiving = copy.deepcopy(order)
    for item in forgiving["items"]:
        item["opened"] = item["opened"] and item["item_id"] != fee_forgotten
    view = world.snapshot()
    view.tables["orders"][target["order_id"]] = forgiving
    return pr.refund_split(view, target)


@register_lapse("payment_calculation")
def miscount_one_amount(seg: Segment, rng: StableRNG) -> list[Any]:
    """Get one step of the amounts wrong: forget one opened item's restocking fee (refunds),
    or one step of the booking policy's walk (which certificate, how many, the gift cards'
    order, skipping inactive ones); write that split and tell its total. Harmless when the
    step did not matter (no opened item; one certificate; one gift card; none inactive)."""
    from trace_gym.envs import payment_calc as pc

    task = seg.task
    field = "payment_methods" if task.kind == "book" else "refunds"
    tool = pc.WRITE_TOOL[task.kind]
    write = next(c for t in seg.actions for c in turn_calls(t) if c["name"] == tool)
    if task.kind == "book":
        split = _booking_split(seg.world, task.target, rng.choice(BOOKING_RULES))
    else:
        order = seg.world.tables["orders"][task.target["order_id"]]
        opened = [i["item_id"] for i in order["items"]
                  if i["opened"] and i["item_id"] in task.target["item_ids"]]  # fmt: skip
        split = _refund_split(seg.world, task.target, rng.choice(opened) if opened else "")
    parts = [{"payment_method_id": k, "amount": v / 100} for k, v in split.items()]
    wrong = {"name": tool, "arguments": {**write["arguments"], field: parts}}
    if wrong == write or not accepted(seg, wrong):
        return seg.actions
    told = f"The total is ${sum(split.values()) / 100:.2f}."
    return [*replace_call(seg.actions, write, wrong)[:-1], told]


# -- multistep_completion ---------------------------------------------------------------------
@register_lapse("multistep_completion")
def stop_after_first(seg: Segment, rng: StableRNG) -> list[Any]:
    """Do the first sub-task (its reads and its write), then tell the customer everything is
    done: the customer, hearing the agent is finished, leaves with the rest undone."""
    from trace_gym.envs.multistep import FINAL

    turns: list[Any] = []
    for turn in seg.actions:
        if isinstance(turn, str):
            continue  # a report that would bring up a held-back request
        turns.append(turn)
        if any(call_kind(seg.tools, c["name"]) == "write" for c in turn_calls(turn)):
            break
    return [*turns, FINAL]
