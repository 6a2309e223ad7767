"""``trace/payment-calc-v0``: exact amounts across several records and rules.

## Capability
*Payment calculation*: aggregate amounts from several records under written rules and write
them exactly, to the cent: split a booking over a travel certificate, gift cards and a card in
the policy's order, or compute a refund of several items with a rounded restocking fee and
route it to the instruments that paid; then tell the customer the total.

## Task (seed 0, train split, difficulty 0.5)
*Booking*: a flight (number, cabin, passengers, insurance or not) is given; the customer holds
0-2 certificates and 0-3 gift cards (some inactive at higher difficulty). Policy: one
certificate per booking (the largest balance), then active gift cards smallest balance first,
the rest on the card on file. *Refund*: 2-5 items of a delivered order that was paid partly by
gift card; opened items lose a 15 % restocking fee (rounded to the cent per item); the refund
goes to the card up to what it paid, the rest to the gift card.

## Tools
``get_customer``, ``get_payment_method``, ``get_flight``, ``get_order`` (read);
``book_reservation``, ``issue_refund`` (write).

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``records_read`` | 0.1 | partial: the records that decide the amounts were read before the write |
| ``write_target`` | 0.1 | the write is for the right flight/cabin/passengers/insurance, or the right items |
| ``split_components`` | 0.5 | partial: share of payment-method amounts exactly right (extra instruments count against) |
| ``total_told`` | 0.3 | the first dollar amount in the final message is the total |
| ``single_write`` (gate) | 0 | at most one booking or refund was written |

Doing nothing scores 0, and so does reading without writing (no decision).

## Episode end
The customer leaves once the write is done and the agent talks to them (that message is the
final one), or after three replies without it; truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| gift cards (booking) | 0-1 | 3 |
| certificates (booking) | 0-1 | 2 (the one-per-booking cap bites) |
| inactive instruments | never | 60 % |
| items refunded | 2 | 5 |
| opened items | 20 % | 70 % |

## Version history
* v0: initial version.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import EpisodeState
from trace_gym.core.plans import Segment, accepted, replace_call, turn_calls
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.core.user import ScriptedUser
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.envs.helpers import payment_rules as pr
from trace_gym.envs.helpers.commerce_common import DoneWhenUser, amounts_in, call, split_of
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.model import World

CAPABILITY = "payment_calculation"
ENV_ID = "trace/payment-calc-v0"
KINDS = ("book", "refund")
WEIGHTS = {"records_read": 0.1, "write_target": 0.1, "split_components": 0.5, "total_told": 0.3}
READS = {
    "get_customer": ("customers", "customer_id"),
    "get_payment_method": ("payment_methods", "payment_method_id"),
    "get_flight": ("flights", "flight_number"),
    "get_order": ("orders", "order_id"),
}
"""Read tool -> (table, argument naming the record)."""


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PaymentCalcConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    max_gift_cards: int = knob(2, low=0, high=3, doc="gift cards of a booking customer")
    max_certificates: int = knob(1, low=0, high=2, doc="travel certificates of a booker")
    inactive_probability: float = knob(
        0.3, low=0.0, high=1.0, doc="one extra gift card or certificate is inactive"
    )
    n_refund_items: int = knob(3, low=2, high=5, doc="items refunded")
    opened_share: float = knob(
        0.45, low=0.0, high=1.0, doc="a refunded item was opened (restocking fee)"
    )
    kinds: tuple[str, ...] = knob(KINDS, choices=KINDS, doc="booking and/or refund tasks")

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "max_gift_cards": 1 + round(2 * d),
            "max_certificates": 1 + round(d),
            "inactive_probability": 0.6 * d,
            "n_refund_items": 2 + round(3 * d),
            "opened_share": 0.2 + 0.5 * d,
        }


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PaymentCalcTask:
    kind: str
    customer_id: str
    target: dict[str, Any]
    """What the write is for: flight/cabin/passengers/insurance, or order and item ids."""
    split: dict[str, float]
    """The reference amounts per payment method (dollars; zero amounts left out)."""
    total: float
    deciding: list[list[str]]
    """[table, id] of the records the amounts depend on."""
    opening: str
    n_records: int
    n_rules: int
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_into(world: World, rng: StableRNG, cfg: PaymentCalcConfig) -> PaymentCalcTask:
    """Add one customer with a booking to pay or items to refund to ``world``."""
    kind = rng.choice(cfg.kinds)
    made = pr.make_booking(rng, world, cfg) if kind == "book" else pr.make_refund(rng, world, cfg)
    split = pr.reference_split(world, kind, made.target, made.customer["customer_id"])
    total = sum(split.values())
    return PaymentCalcTask(
        kind=kind,
        customer_id=made.customer["customer_id"],
        target=made.target,
        split={k: v / 100 for k, v in split.items()},
        total=total / 100,
        deciding=made.deciding,
        opening=made.opening,
        n_records=len(made.deciding),
        n_rules=made.n_rules,
        owned=made.owned,
        world={},
    )


# -- verifier ---------------------------------------------------------------------------------
WRITE_TOOL = {"book": "book_reservation", "refund": "issue_refund"}


def _target_of(kind: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if kind == "book":
        keys = ("customer_id", "flight_number", "cabin", "passengers", "insurance")
        return {k: arguments.get(k) for k in keys}
    return {
        "order_id": arguments.get("order_id"),
        "item_ids": sorted(arguments.get("item_ids", [])),
    }


def verify(task: PaymentCalcTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade the written split, the target of the write, the reads, and the told total.

    ``scoped`` keeps only writes about this task's customer or order.
    """
    tool = WRITE_TOOL[task.kind]
    writes = [c for c in ep.calls if c.ok and c.changed_world and c.name == tool]
    if scoped:
        ids = {k for _, k in task.owned}
        writes = [c for c in writes if ids & {str(v) for v in c.arguments.values()}]
    write = writes[-1] if writes else None
    before = [c for c in ep.calls if c.index < write.index] if write else []  # scoped: a subset
    seen = {
        (READS[c.name][0], c.arguments[READS[c.name][1]])
        for c in before
        if c.ok and c.name in READS
    }
    found = [r for r in task.deciding if tuple(r) in seen]
    expected = {k: round(v * 100) for k, v in task.split.items()}
    field_name = "payment_methods" if task.kind == "book" else "refunds"
    actual = {k: v for k, v in split_of(write.arguments[field_name] if write else []).items() if v}
    right = [k for k in expected if actual.get(k) == expected[k]]
    told = amounts_in(ep.final_text)[:1] if write else []
    checks = [
        Check("records_read", CAPABILITY, fraction(len(found), len(task.deciding)) if write
              else 0.0, WEIGHTS["records_read"], expected=task.deciding, actual=found),
        Check("write_target", CAPABILITY, float(write is not None and _target_of(
              task.kind, write.arguments) == _target_of(task.kind, task.target)),
              WEIGHTS["write_target"], expected=_target_of(task.kind, task.target),
              actual=_target_of(task.kind, write.arguments) if write else None),
        Check("split_components", CAPABILITY,
              fraction(len(right), len(set(expected) | set(actual))) if write else 0.0,
              WEIGHTS["split_components"], expected=expected, actual=actual,
              message="cents per payment method"),
        Check("total_told", CAPABILITY, float(told == [round(task.total * 100)]),
              WEIGHTS["total_told"], expected=round(task.total * 100), actual=told,
              message="the first dollar amount of the final message, in cents"),
        Check("single_write", CAPABILITY, float(len(writes) <= 1), 0.0, gate=True, expected=1,
              actual=len(writes)),
    ]  # fmt: skip
    # the decision is the write: reading the records and stalling earns nothing
    decided = write is not None
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,), decided=decided)


# -- oracle -----------------------------------------------------------------------------------
def oracle(task: PaymentCalcTask, world: World) -> list[Any]:
    """Read the deciding records, write the reference split, tell the total first."""
    reads = [call(name, **{arg: key}) for table, key in task.deciding
             for name, (t, arg) in READS.items() if t == table]  # fmt: skip
    field_name = "payment_methods" if task.kind == "book" else "refunds"
    split = [{"payment_method_id": k, "amount": v} for k, v in task.split.items()]
    write = call(WRITE_TOOL[task.kind], **task.target, **{field_name: split})
    parts = ", ".join(f"${v:.2f} to {k}" for k, v in task.split.items())
    return [{"tool_calls": reads}, write, f"The total is ${task.total:.2f} ({parts})."]


# -- scripted user ----------------------------------------------------------------------------
def _tool_ran(tool: str, ep: EpisodeState) -> bool:
    return any(c.ok and c.changed_world and c.name == tool for c in ep.calls)


def make_user(task: PaymentCalcTask) -> ScriptedUser:
    """The customer: confirms, and leaves once the booking or refund is written."""
    # A partial of a module function, not a closure: a live environment must pickle.
    return DoneWhenUser(task.opening, functools.partial(_tool_ran, WRITE_TOOL[task.kind]))


# -- the spec ---------------------------------------------------------------------------------
def instructions(task: PaymentCalcTask) -> str:
    return (
        f"Payment policy:\n{pr.POLICY_TEXT}\n\n"
        "Look amounts up with the tools; write every amount to the cent. When you are done, "
        "tell the customer the total charged or refunded in a message without a tool call, "
        "stating that total first, as a dollar amount like $123.45."
    )


def hint(task: PaymentCalcTask) -> str:
    return (
        "Read every record the amounts depend on (the fare or the order, and each payment "
        "method's kind, status and balance). Compute the total first, then walk the policy "
        "in order, capping each instrument at its balance or at what it paid, and skipping "
        "inactive ones. Round each fee to the cent before adding; check that the parts add "
        "up to the total before writing, and state the total first in your message."
    )


def features(task: PaymentCalcTask) -> dict[str, Any]:
    return {
        "kind": task.kind,
        "n_records": task.n_records,
        "n_rules": task.n_rules,
        "n_split_components": len(task.split),
    }


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Get one step of the amounts wrong: forget one opened item's restocking fee (refunds),
    or one step of the booking policy's walk (which certificate, how many, the gift cards'
    order, skipping inactive ones); write that split and tell its total. Harmless when the
    step did not matter (no opened item; one certificate; one gift card; none inactive)."""
    task = seg.task
    field_name = "payment_methods" if task.kind == "book" else "refunds"
    tool = WRITE_TOOL[task.kind]
    write = next(c for t in seg.actions for c in turn_calls(t) if c["name"] == tool)
    if task.kind == "book":
        split = pr.booking_split(seg.world, task.target, rng.choice(pr.BOOKING_MISTAKES))
    else:
        order = seg.world.tables["orders"][task.target["order_id"]]
        opened = [i["item_id"] for i in order["items"]
                  if i["opened"] and i["item_id"] in task.target["item_ids"]]  # fmt: skip
        split = pr.refund_split(seg.world, task.target, rng.choice(opened) if opened else "")
    parts = [{"payment_method_id": k, "amount": v / 100} for k, v in split.items()]
    wrong = {"name": tool, "arguments": {**write["arguments"], field_name: parts}}
    if wrong == write or not accepted(seg, wrong):
        return seg.actions
    told = f"The total is ${sum(split.values()) / 100:.2f}."
    return [*replace_call(seg.actions, write, wrong)[:-1], told]


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Compute exact amounts across several records and rules (certificate, gift "
    "cards, card; refunds with rounded restocking fees), write the payment split to the cent "
    "and tell the customer the total.",
    config=PaymentCalcConfig,
    verify=verify,
    world_oracle=oracle,
    user=make_user,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "get_payment_method",
        "get_flight",
        "get_order",
        "book_reservation",
        "issue_refund",
    ),
    max_turns=10,
    tags=(
        CAPABILITY,
        "numerical_reasoning",
        "arithmetic_aggregation",
        "payment_split",
        "refund_calculation",
    ),
    knob_rates=(
        KnobRate("kind", 0.0, 0.5, 0.05, equals="book"),
        KnobRate("kind", 1.0, 0.5, 0.05, equals="book"),
    ),
    template_floor=100,
    generate_into=generate_into,
    lapse=lapse,
    env_name="PaymentCalcEnv",
)
PaymentCalcEnv = SPEC.env_class
"""Payment calculation; see the module docstring for the full description."""
