"""``trace/loyalty-points-v0``: credit exactly the loyalty points a customer is owed.

## Capability
*Loyalty-points calculation*: apply a written earning policy to several orders (status,
earning window, orders already credited, returned items, the member's rate, rounding down
per order), credit each eligible order its points and tell the customer the total.

## Tools
``get_customer``, ``get_order`` (read); ``credit_loyalty_points`` (write, one order a call).

## Reward (checks)
| check | weight | passes when |
|---|---|---|
| ``points`` | 0.6 | partial: share of eligible orders credited exactly their points |
| ``read_first`` | 0.2 | partial: share of the profile and orders read before the first credit (0 without a right credit) |
| ``told_total`` | 0.2 | every order credited right and the last message states the total |
| ``no_ineligible_credit`` (gate) | 0 | no order outside the policy was credited |

An episode without a credit reached no decision and scores 0.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| orders | 3 | 7 |
| share of ineligible orders | 0.2 | 0.6 |
| partly returned orders | never | 60 % |
| orders placed exactly at the window's edge | never | 50 % |
| customer claims a wrong total | never | 80 % |
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import EpisodeState
from trace_gym.core.spec import CapabilitySpec, SpecConfig, knob
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.envs.helpers.commerce_common import DoneWhenUser, call
from trace_gym.primitives.seeding import StableRNG
from trace_gym.primitives.tools import Tool, object_schema
from trace_gym.world.generate import draw_now, new_customer, new_order
from trace_gym.world.model import World, cents, day_offset, parse_day
from trace_gym.world.schemas import ORDER_ID
from trace_gym.world.tools import records_read

CAPABILITY = "loyalty_points_calculation"
WINDOW_DAYS = 90
RATES = {"regular": 2, "silver": 3, "gold": 4}
"""Points per two dollars, by membership (1, 1.5 and 2 points per dollar)."""


# -- the tool this capability needs (the shared vocabulary has no loyalty ledger) -------------
def credit_loyalty_points(world: World, order_id: str, points: int) -> dict[str, Any]:
    # tools enforce the world's physics, never the policy: crediting twice is the agent's call
    order = world.get("orders", order_id)
    order["points_credited"] = True
    customer = world.get("customers", order["customer_id"])
    customer["loyalty_points"] = customer.get("loyalty_points", 0) + points
    world.log.append({"event": "points", "order_id": order_id, "points": points})
    return {"order_id": order_id, "points": points, "balance": customer["loyalty_points"]}


CREDIT = Tool(
    "credit_loyalty_points",
    "Credit loyalty points to the customer who placed an order, for that order.",
    object_schema(
        {"order_id": ORDER_ID, "points": {"type": "integer", "minimum": 0, "maximum": 10**6}}
    ),
    "write",
    credit_loyalty_points,
)


# -- config and task ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoyaltyConfig(SpecConfig):
    n_orders: int = knob(4, low=3, high=8, doc="orders on the customer's profile")
    ineligible_share: float = knob(0.3, low=0.0, high=0.8, doc="share of orders that earn nothing")
    partial_return_probability: float = knob(
        0.3, low=0.0, high=1.0, doc="an order has a returned item"
    )
    boundary_probability: float = knob(
        0.2, low=0.0, high=1.0, doc="an order sits at the window's edge"
    )
    claim_probability: float = knob(0.4, low=0.0, high=1.0, doc="the customer states a wrong total")

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "n_orders": 3 + round(4 * d),
            "ineligible_share": 0.2 + 0.4 * d,
            "partial_return_probability": 0.6 * d,
            "boundary_probability": 0.5 * d,
            "claim_probability": 0.8 * d,
        }


@dataclass(frozen=True)
class LoyaltyTask:
    customer_id: str
    membership: str
    order_ids: list[str]
    expected: dict[str, int]
    """Eligible order -> the points it earns."""
    claimed_total: int | None
    opening: str
    world: dict[str, Any] = field(repr=False)


# -- the rule (lapses call it with a mistake) ----------------------------------------------------
def points_for(
    order: dict[str, Any], membership: str, now: str, *, count_returned: bool = False
) -> int | None:
    """Points an order earns under the policy, or None when it earns none."""
    age = (parse_day(now) - parse_day(order["placed_on"])).days
    if order["status"] != "delivered" or age > WINDOW_DAYS or order.get("points_credited"):
        return None
    amount = sum(
        cents(i["price"]) for i in order["items"] if count_returned or not i.get("returned")
    )
    return amount * RATES[membership] // 200


# -- generator -----------------------------------------------------------------------------------
def generate(rng: StableRNG, cfg: LoyaltyConfig) -> LoyaltyTask:
    world = World(draw_now(rng))
    customer = new_customer(rng, world)
    n_bad = min(round(cfg.n_orders * cfg.ineligible_share), cfg.n_orders - 2)
    kinds = ["eligible"] * (cfg.n_orders - n_bad) + [
        rng.choice(("cancelled", "pending", "old", "credited")) for _ in range(n_bad)
    ]
    for kind in rng.shuffle(kinds):
        status = {"cancelled": "cancelled", "pending": "pending"}.get(kind, "delivered")
        order = new_order(rng, world, customer, status=status, n_items=rng.integer(1, 3))
        order["points_credited"] = kind == "credited"
        if kind == "old":
            order["placed_on"] = day_offset(world.now, -rng.integer(WINDOW_DAYS + 1, 200))
        elif kind == "eligible" and rng.bernoulli(cfg.boundary_probability):
            order["placed_on"] = day_offset(world.now, -WINDOW_DAYS)
        if status == "delivered":
            order["delivered_on"] = order["placed_on"]
        if kind == "eligible" and len(order["items"]) > 1:
            if rng.bernoulli(cfg.partial_return_probability):
                rng.choice(order["items"])["returned"] = True
    expected = {}
    for oid in customer["order_ids"]:
        points = points_for(world.get("orders", oid), customer["membership"], world.now)
        if points is not None:
            expected[oid] = points
    total = sum(expected.values())
    claimed = (
        total + rng.choice((-1, 1)) * rng.integer(5, 60)
        if rng.bernoulli(cfg.claim_probability)
        else None
    )
    opening = (
        f"Hi, this is {customer['name']} ({customer['customer_id']}). I don't think I got my "
        "loyalty points for my recent orders. Could you credit whatever I'm owed?"
        + (f" By my count it should be {claimed} points." if claimed is not None else "")
    )
    return LoyaltyTask(
        customer_id=customer["customer_id"],
        membership=customer["membership"],
        order_ids=list(customer["order_ids"]),
        expected=expected,
        claimed_total=claimed,
        opening=opening,
        world=world.to_dict(),
    )


# -- verifier ------------------------------------------------------------------------------------
def verify(task: LoyaltyTask, ep: EpisodeState) -> Verification:
    credits = [c for c in ep.calls if c.ok and c.name == CREDIT.name]
    given: dict[str, int] = {}
    for c in credits:
        given[c.arguments["order_id"]] = (
            given.get(c.arguments["order_id"], 0) + c.arguments["points"]
        )
    right = [o for o, p in task.expected.items() if given.get(o) == p]
    wrong_orders = sorted(o for o in given if o not in task.expected)
    first = credits[0].index if credits else len(ep.calls)
    seen = set(records_read(ep.calls[:first]))
    needed = {("customers", task.customer_id)} | {("orders", o) for o in task.order_ids}
    total = sum(task.expected.values())
    told = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", ep.final_text[:4000])]
    # reading and reporting earn credit only beside right credits: no pay for process alone
    read_share = fraction(len(needed & seen), len(needed)) if right else 0.0
    told_right = total in told and given == task.expected
    checks = (
        Check("points", CAPABILITY, fraction(len(right), len(task.expected)), 0.6,
              expected=task.expected, actual=given),
        Check("read_first", CAPABILITY, read_share, 0.2,
              message="profile and every order read before the first credit"),
        Check("told_total", CAPABILITY, float(told_right), 0.2, expected=total, actual=told[:20],
              message="the total credited, stated after crediting exactly the points owed"),
        Check("no_ineligible_credit", CAPABILITY, float(not wrong_orders), 0.0, gate=True,
              expected=[], actual=wrong_orders, message="credited an order that earns nothing"),
    )  # fmt: skip
    return Verification(checks, required_capabilities=(CAPABILITY,), decided=bool(credits))


# -- oracle, user, lapse -------------------------------------------------------------------------
def plan(task: LoyaltyTask, credits: dict[str, int]) -> list[Any]:
    """Read the profile and every order, credit ``credits``, then say the total."""
    reads = [call("get_order", order_id=o) for o in task.order_ids]
    writes = [call(CREDIT.name, order_id=o, points=p) for o, p in credits.items()]
    total = sum(credits.values())
    return [
        call("get_customer", customer_id=task.customer_id),
        {"tool_calls": reads},
        {"tool_calls": writes},
        f"I have credited {total} points in total for your eligible orders.",
    ]


def oracle(task: LoyaltyTask) -> list[Any]:
    return plan(task, task.expected)


def lapse(segment: Any, rng: StableRNG) -> list[Any]:
    """Miscount: count returned items, or use the regular rate, or forget one order."""
    task: LoyaltyTask = segment.task
    world = segment.world
    for mistake in rng.shuffle(["returns", "rate"]):
        tier = "regular" if mistake == "rate" else task.membership
        wrong = {
            o: p
            for o in task.expected
            if (
                p := points_for(
                    world.get("orders", o), tier, world.now, count_returned=mistake == "returns"
                )
            )
            is not None
        }
        if wrong != task.expected:
            return plan(task, wrong)
    forgotten = rng.choice(sorted(task.expected))
    return plan(task, {o: p for o, p in task.expected.items() if o != forgotten})


def user(task: LoyaltyTask) -> DoneWhenUser:
    return DoneWhenUser(
        task.opening, lambda ep: any(c.ok and c.name == CREDIT.name for c in ep.calls)
    )


def instructions(task: LoyaltyTask) -> str:
    return (
        f"The customer is verified: {task.customer_id}.\n\n"
        "Loyalty points policy:\n"
        "1. Only delivered orders earn points.\n"
        f"2. An order placed more than {WINDOW_DAYS} days ago earns no points (an order placed "
        f"exactly {WINDOW_DAYS} days ago still does).\n"
        "3. An order earns points once; an order with points_credited true has been credited.\n"
        "4. Items marked returned do not count toward an order's amount.\n"
        "5. Points per order = the order's amount in dollars x the member's rate (regular 1, "
        "silver 1.5, gold 2 points per dollar), rounded down to a whole number.\n\n"
        "Credit each eligible order its points with credit_loyalty_points (one call per "
        "order), look records up instead of trusting what the customer says, and then tell the "
        "customer the total you credited in a message without a tool call."
    )


def hint(task: LoyaltyTask) -> str:
    return (
        "Read the profile, then every order on it. Apply each rule to each order before "
        "computing anything; compute in cents and round down per order, not on the total."
    )


def features(task: LoyaltyTask) -> dict[str, Any]:
    return {
        "n_orders": len(task.order_ids),
        "n_eligible": len(task.expected),
        "claimed_total": task.claimed_total is not None,
    }


SPEC = CapabilitySpec(
    id="trace/loyalty-points-v0",
    capability=CAPABILITY,
    description="Apply a loyalty earning policy to a customer's orders, credit each eligible "
    "order exactly its points and tell the customer the total.",
    config=LoyaltyConfig,
    generate=generate,
    verify=verify,
    oracle=oracle,
    user=user,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=("get_customer", "get_order", CREDIT),
    max_turns=10,
    tags=(CAPABILITY, "points_calculation", "numerical_reasoning", "rule_application"),
    lapse=lapse,
    information_free_exempt={
        "fixed_question_template": "the oracle asks nothing: every value is in the records, "
        "so asking first and then acting is the oracle's own plan",
    },
)
