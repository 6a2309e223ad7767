"""``trace/tool-call-v0``: the right tool with exactly the right arguments.

## Capability
*Tool-call precision*: turn a plain-language request into one call with the right tool and
exact arguments: enum members ("I ordered it by mistake" is ``ordered_by_mistake``), nested
objects (an address, a passenger list), dates relative to the current time ("a week from
today"), state names as codes, numbers written as words, and the one payment method the
customer means among near-identical ids (gift card PM-48213 beside card PM-48231).

## Task (seed 0, train split, difficulty 0.5)
The customer is already verified; the system prompt lists their payment methods and the one
record the request is about. Six requests: cancel an order with a reason, move a reservation's
payment, add bags, change a shipping address, set passenger details, move to another flight.
Everything but the call itself is easy: ids are given and a single record is relevant.

## Tools
``get_customer``, ``get_order``, ``get_reservation``, ``get_payment_method``, ``get_flight``
(read); ``cancel_order``, ``cancel_reservation``, ``update_reservation_payment``,
``add_baggage``, ``modify_order_address``, ``update_reservation_passengers``,
``update_reservation_flights``, ``book_reservation`` (write).

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``right_tool`` | 0.2 | the expected tool ran successfully |
| ``arguments`` | 0.6 | partial: share of argument fields (leaves of nested objects) equal to the reference in the last successful call of that tool |
| ``final_state`` | 0.2 | the record changed exactly as the reference call changes it |
| ``no_wrong_tool`` (gate) | 0 | no other write tool was called (refused calls count) |
| ``right_payment_instrument`` (gate) | 0 | every successful write names the intended payment method |

Strings compare stripped and case-insensitively; everything else exactly. Doing nothing
scores 0, and so does an episode without a write (no decision). The task *is* copying the
request into one call, so the information-free policy ``grant_by_copying`` is exempt from the
soundness bound (``information_free_exempt``); the others must fail.

## Episode end
The customer leaves once the request's tool has run and the agent talks to them, or after
three replies without it; truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| requests | cancel, payment, bags | all six, the nested ones 80 % |
| passengers to set | 1 | up to 3 |
| relative dates ("a week from today") | never | 90 % of dates (24 % of requests) |
| payment methods with near-identical ids | 0 | 3 |

## Version history
* v0: initial version.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import CallRecord, EpisodeState
from trace_gym.core.plans import Segment, accepted, replace_call
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.core.user import ScriptedUser
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.envs.helpers import tool_call_requests as rq
from trace_gym.envs.helpers.commerce_common import DoneWhenUser, call
from trace_gym.errors import ErrorCode
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_customer
from trace_gym.world.model import World, day_offset, world_diff
from trace_gym.world.tools import VOCABULARY, restrict_diff

CAPABILITY = "tool_call_precision"
ENV_ID = "trace/tool-call-v0"
TOOL_WEIGHT, ARGUMENTS_WEIGHT, STATE_WEIGHT = 0.2, 0.6, 0.2


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCallConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    requests: tuple[str, ...] = knob(
        tuple(rq.REQUESTS), choices=tuple(rq.REQUESTS), doc="request kinds to draw from"
    )
    nested_weight: float = knob(
        1.0, low=0.0, doc="weight of the nested requests (address, passengers, flights)"
    )
    max_passengers: int = knob(2, low=1, high=3, doc="passengers whose details are set")
    relative_date_probability: float = knob(
        0.45, low=0.0, high=1.0, doc="a date is said relative to today"
    )
    n_similar_ids: int = knob(
        2, low=0, high=3, doc="payment methods whose ids differ by two swapped digits"
    )

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "requests": tuple(rq.REQUESTS) if d >= 0.25 else rq.FLAT,
            "nested_weight": 4 * d,
            "max_passengers": 1 + round(2 * d),
            "relative_date_probability": 0.9 * d,
            "n_similar_ids": round(3 * d),
        }


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCallTask:
    request: str
    customer_id: str
    tool: str
    reference_arguments: dict[str, Any]
    payment_method_id: str | None
    """The instrument the customer means (None when the request names none)."""
    context: str
    """What the agent already knows (verified profile, the record in question)."""
    opening: str
    n_leaves: int
    n_similar_ids: int
    relative_date: bool
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_into(world: World, rng: StableRNG, cfg: ToolCallConfig) -> ToolCallTask:
    """Add one customer with a single-call request to ``world``."""
    weights = [cfg.nested_weight if k in rq.NESTED else 1.0 for k in cfg.requests]
    if sum(weights) <= 0:
        weights = [1.0] * len(weights)
    kind = rng.weighted_choice(cfg.requests, weights)
    customer = new_customer(rng, world)
    made = rq.REQUESTS[kind](rng, world, customer, cfg)
    leaves = rq.flatten(made.arguments)
    return ToolCallTask(
        request=kind,
        customer_id=customer["customer_id"],
        tool=made.tool,
        reference_arguments=made.arguments,
        payment_method_id=made.arguments.get("payment_method_id"),
        context=rq.context(world, customer, made.record),
        opening=f"Hi, it's {customer['name']} again. {made.sentence}",
        n_leaves=len(leaves),
        n_similar_ids=made.n_similar,
        relative_date=made.relative_date,
        owned=rq.owned(world, customer),
        world={},
    )


# -- verifier ---------------------------------------------------------------------------------
def _canonical(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _ran(c: CallRecord) -> bool:
    """The call reached the world: it succeeded, or the world refused it (schema was fine)."""
    return c.ok or (c.error or {}).get("code") == ErrorCode.PRECONDITION.value


def reference_world(task: ToolCallTask, world0: World) -> World:
    """The initial world with the reference call applied."""
    world = world0.snapshot()
    VOCABULARY[task.tool].handler(world, **task.reference_arguments)
    return world


def verify(task: ToolCallTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade the call: tool, each argument field, the resulting state, and the instrument."""
    owned = task.owned
    writes = [c for c in ep.calls if c.ok and c.changed_world]
    if scoped:
        writes = [c for c in writes if rq.touches_any(c, owned)]
    mine = [c for c in writes if c.name == task.tool]
    # a wrong write tool is a miss even when the world refused it: the call was made
    tried = [c for c in ep.calls if c.kind == "write" and c.name != task.tool and _ran(c)]
    if scoped:
        tried = [c for c in tried if rq.touches_any(c, owned)]
    wrong = [c.name for c in tried]
    expected_leaves = rq.flatten(_canonical(task.reference_arguments))
    actual_leaves = rq.flatten(_canonical(mine[-1].arguments)) if mine else {}
    right = [p for p, v in expected_leaves.items() if actual_leaves.get(p, object()) == v]
    extra = [p for p in actual_leaves if p not in expected_leaves]
    before = ep.initial_world
    expected = _canonical(restrict_diff(world_diff(before, reference_world(task, before)), owned))
    actual = _canonical(restrict_diff(world_diff(before, ep.world), owned))
    instruments = [c.arguments.get("payment_method_id") for c in writes]
    bad_pay = [p for p in instruments if p is not None and p != task.payment_method_id]
    checks = [
        Check("right_tool", CAPABILITY, float(bool(mine)), TOOL_WEIGHT, expected=task.tool,
              actual=[c.name for c in writes]),
        Check("arguments", CAPABILITY,
              fraction(len(right), len(expected_leaves) + len(extra)) if mine else 0.0,
              ARGUMENTS_WEIGHT, expected=expected_leaves, actual=actual_leaves,
              message="argument fields equal to the reference (strings case-insensitive)"),
        Check("final_state", CAPABILITY, float(bool(mine) and actual == expected), STATE_WEIGHT,
              expected=expected, actual=actual),
        Check("no_wrong_tool", CAPABILITY, float(not wrong), 0.0, gate=True, expected=[],
              actual=wrong, message="another write tool was called"),
        Check("right_payment_instrument", CAPABILITY, float(not bad_pay), 0.0, gate=True,
              expected=task.payment_method_id, actual=bad_pay,
              message="a write named a payment method the customer did not mean"),
    ]  # fmt: skip
    # a decision is any write that reached the world; without one nothing can be credited
    decided = bool(writes or tried)
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,), decided=decided)


# -- oracle -----------------------------------------------------------------------------------
def oracle(task: ToolCallTask, world: World) -> list[Any]:
    """The reference call, then a confirmation."""
    return [call(task.tool, **task.reference_arguments), "All set: your request is done."]


# -- scripted user ----------------------------------------------------------------------------
def _tool_ran(tool: str, ep: EpisodeState) -> bool:
    return any(c.ok and c.changed_world and c.name == tool for c in ep.calls)


def make_user(task: ToolCallTask) -> ScriptedUser:
    """The customer: confirms, and leaves once the request's tool has run."""
    # A partial of a module function, not a closure: a live environment must pickle.
    return DoneWhenUser(task.opening, functools.partial(_tool_ran, task.tool))


# -- the spec ---------------------------------------------------------------------------------
def instructions(task: ToolCallTask) -> str:
    return (
        f"The customer is verified. What you know:\n{task.context}\n\n"
        "Carry out the customer's request with one precise tool call: the right tool, and "
        "every argument exactly as the customer means it (dates as YYYY-MM-DD, states as "
        "two-letter codes, empty strings for fields the customer has none of). When you "
        "are done, tell the customer in a message without a tool call."
    )


def hint(task: ToolCallTask) -> str:
    return (
        "Pick the tool whose description matches the request, not a similar one. Fill "
        "every argument from the request and the verified profile: map phrasing to the "
        "enum member, resolve relative dates against the current time, write numbers as "
        "numbers, and copy ids character by character; ids of different payment methods "
        "can look alike, so match the kind the customer names."
    )


def requested_call(task: ToolCallTask) -> dict[str, Any]:
    """The call the customer asks for, as they state it (the capability itself)."""
    return {"name": task.tool, "arguments": dict(task.reference_arguments)}


def features(task: ToolCallTask) -> dict[str, Any]:
    return {
        "request": task.request,
        "tool": task.tool,
        "n_argument_leaves": task.n_leaves,
        "nested": task.request in rq.NESTED,
        "relative_date": task.relative_date,
        "n_similar_ids": task.n_similar_ids,
    }


RECORD_ARGUMENTS = ("customer_id", "order_id", "reservation_id", "flight_number")
"""Arguments naming the record a call is about: fumbling one would touch another record,
which is a different mistake (and the composite would blame the request that owns it)."""


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


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
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


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Turn a plain-language request into one call with the right tool and exact "
    "arguments (enums, nested objects, relative dates, the one payment method meant among "
    "look-alike ids).",
    config=ToolCallConfig,
    verify=verify,
    world_oracle=oracle,
    user=make_user,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "get_order",
        "get_reservation",
        "get_payment_method",
        "get_flight",
        "cancel_order",
        "cancel_reservation",
        "update_reservation_payment",
        "add_baggage",
        "modify_order_address",
        "update_reservation_passengers",
        "update_reservation_flights",
        "book_reservation",
    ),
    max_turns=8,
    tags=(
        CAPABILITY,
        "argument_precision",
        "function_calling",
        "tool_selection",
        "parameter_formatting",
    ),
    requested_call=requested_call,
    information_free_exempt={
        "grant_by_copying": "the task is copying the request into one exact call",
    },
    knob_rates=(
        KnobRate("relative_date", 0.0, 0.0, 0.0),
        KnobRate("relative_date", 1.0, 0.24, 0.05),  # 90 % of dates; a quarter of requests
        KnobRate("nested", 0.0, 0.0, 0.0),
        KnobRate("nested", 1.0, 0.8, 0.05),
    ),
    template_floor=200,
    generate_into=generate_into,
    lapse=lapse,
    env_name="ToolCallEnv",
)
ToolCallEnv = SPEC.env_class
"""Tool-call precision; see the module docstring for the full description."""
