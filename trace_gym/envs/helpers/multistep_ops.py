"""The operations of ``trace/multistep-v0``: how each is drawn, worded, written and graded.

An :class:`Operation` is one change the customer asks for. Independent operations act on a
record the customer names (cancel an order, change its address, cancel a reservation, move a
reservation's payment to a gift card, add bags). Dependent operations need information from
an earlier result: a booking needs the flight number that a search returns, bags on the new
booking need the reservation id that the booking returns, a rebooking needs the route and cabin
of the reservation and the flight number of a search, and "one bag per passenger" needs the
reservation's passenger count.

Each kind has a builder (adds the records it acts on to the world and words the request), the
write tool it is done with, and an outcome predicate on the final world that the verifier and
the scripted user share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trace_gym.core.env import CallRecord
from trace_gym.envs.helpers.commerce_common import (
    CABIN_FACTORS,
    call,
    hhmm,
    new_balance_method,
    new_records,
    split_of,
    unused_route_date,
)
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import LAST_NAMES, new_order, new_reservation
from trace_gym.world.model import World, cents

INDEPENDENT = ("cancel_order", "change_address", "cancel_reservation", "switch_payment", "add_bags")
"""Operations on a record the customer names; they need no earlier result."""
WRITE_TOOL = {
    "cancel_order": "cancel_order",
    "change_address": "modify_order_address",
    "cancel_reservation": "cancel_reservation",
    "switch_payment": "update_reservation_payment",
    "add_bags": "add_baggage",
    "book": "book_reservation",
    "bags_new": "add_baggage",
    "rebook": "update_reservation_flights",
    "bags_per_passenger": "add_baggage",
}
REASONS = {
    "no_longer_needed": "I no longer need it",
    "ordered_by_mistake": "I ordered it by mistake",
    "change_of_plans": "my plans changed",
}
CITIES = (
    ("Denver", "CO", "80202"), ("Austin", "TX", "78701"), ("Portland", "OR", "97205"),
    ("Madison", "WI", "53703"), ("Raleigh", "NC", "27601"), ("Tucson", "AZ", "85701"),
)  # fmt: skip
MAX_BAGS_ASKED = 3
FLIGHTS_PER_SEARCH = 12
"""Flights a booking's or rebooking's search lists; the customer names one by its time. As
many as this so that a policy that does not read the times (take the first listed, or any
fixed one) picks the right flight at most 1 time in 12, under the 10 % bound."""
BOOK_DAYS = (5, 40)
"""Days ahead of a new booking's flight."""
REBOOK_DAYS = (41, 70)
"""Days ahead of a rebooking's new date: after every generated reservation's old flight."""
FIRST_DEPARTURE, LAST_DEPARTURE = 6 * 60, 17 * 60
"""Departure times of generated flights (minutes after midnight); with at most six hours in
the air every flight lands the same day."""


@dataclass(frozen=True)
class Operation:
    """One change the customer asks for."""

    kind: str
    target: str | None
    """The order or reservation it changes; None for the booking and the bags on it."""
    arguments: dict[str, Any]
    """The write's arguments (the bags on the new booking lack the reservation id, which only
    the booking's result tells)."""
    reads: list[dict[str, Any]]
    """Read calls whose results this write needs, in order (empty when none)."""
    after: int | None
    """Index of the operation whose result this one needs (the bags on the new booking)."""
    phrase: str
    """How the customer words it."""

    @property
    def tool(self) -> str:
        return WRITE_TOOL[self.kind]

    @property
    def flight(self) -> str | None:
        """The flight number a booking or rebooking must end up on."""
        if self.kind == "book":
            return self.arguments["flight_number"]
        if self.kind == "rebook":
            return self.arguments["flights"][0]["flight_number"]
        return None


@dataclass
class Context:
    """What builders share while one task is drawn."""

    rng: StableRNG
    world: World
    customer: dict[str, Any]
    card: str
    booking: Operation | None = None


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# -- builders ---------------------------------------------------------------------------------
def _cancel_order(ctx: Context) -> Operation:
    order = new_order(ctx.rng, ctx.world, ctx.customer, status="pending")
    reason = ctx.rng.choice(tuple(REASONS))
    oid = order["order_id"]
    return Operation("cancel_order", oid, {"order_id": oid, "reason": reason}, [], None,
                     f"cancel my order {oid}, because {REASONS[reason]}")  # fmt: skip


def _change_address(ctx: Context) -> Operation:
    rng = ctx.rng
    order = new_order(rng, ctx.world, ctx.customer, status="pending")
    city, state, zip_code = rng.choice(CITIES)
    address = {
        "address1": f"{rng.integer(2, 998)} {rng.choice(LAST_NAMES)} Avenue",
        "address2": f"Apt {rng.integer(1, 40)}" if rng.bernoulli(0.5) else "",
        "city": city,
        "state": state,
        "zip": zip_code,
        "country": "USA",
    }
    text = ", ".join(v for v in (address["address1"], address["address2"], city) if v)
    oid = order["order_id"]
    return Operation("change_address", oid, {"order_id": oid, "address": address}, [], None,
                     f"ship my order {oid} to {text}, {state} {zip_code}, USA instead")  # fmt: skip


def _cancel_reservation(ctx: Context) -> Operation:
    res = new_reservation(ctx.rng, ctx.world, ctx.customer)
    reason = ctx.rng.choice(("no_longer_needed", "change_of_plans"))
    rid = res["reservation_id"]
    return Operation("cancel_reservation", rid, {"reservation_id": rid, "reason": reason}, [],
                     None, f"cancel my flight reservation {rid}, because {REASONS[reason]}")  # fmt: skip


def _switch_payment(ctx: Context) -> Operation:
    res = new_reservation(ctx.rng, ctx.world, ctx.customer)
    spare = 5.0 * ctx.rng.integer(0, 20)
    gift = new_balance_method(ctx.rng, ctx.world, ctx.customer, "gift_card", res["price"] + spare)
    rid, gid = res["reservation_id"], gift["payment_method_id"]
    return Operation("switch_payment", rid, {"reservation_id": rid, "payment_method_id": gid},
                     [], None, f"pay for my reservation {rid} with my gift card {gid} instead "
                     "of the card it is on now")  # fmt: skip


def _add_bags(ctx: Context) -> Operation:
    res = new_reservation(ctx.rng, ctx.world, ctx.customer)
    bags, rid = ctx.rng.integer(1, MAX_BAGS_ASKED), res["reservation_id"]
    arguments = {"reservation_id": rid, "bags": bags, "payment_method_id": ctx.card}
    return Operation("add_bags", rid, arguments, [], None,
                     f"add {_plural(bags, 'checked bag')} to my reservation {rid}, charged to "
                     f"my card {ctx.card}")  # fmt: skip


def _bags_per_passenger(ctx: Context) -> Operation:
    res = new_reservation(ctx.rng, ctx.world, ctx.customer)
    rid = res["reservation_id"]
    arguments = {"reservation_id": rid, "bags": res["passengers"], "payment_method_id": ctx.card}
    return Operation("bags_per_passenger", rid, arguments,
                     [call("get_reservation", reservation_id=rid)], None,
                     f"add one checked bag for each passenger on my reservation {rid}, charged "
                     f"to my card {ctx.card}")  # fmt: skip


def _flights_on(ctx: Context, route: tuple[str, str], date: str, n: int) -> list[dict[str, Any]]:
    """``n`` flights on one route and date, with distinct departure times."""
    rng = ctx.rng
    times: set[int] = set()
    while len(times) < n:  # distinct slots drawn one by one: cheaper than shuffling them all
        times.add(FIRST_DEPARTURE + 5 * rng.integer(0, (LAST_DEPARTURE - FIRST_DEPARTURE) // 5))
    economy = float(rng.integer(120, 600))
    return [_nonstop(ctx, route, date, t, economy) for t in sorted(times)]


def _nonstop(
    ctx: Context, route: tuple[str, str], date: str, departs: int, economy: float
) -> dict[str, Any]:
    """A nonstop flight shaped like ``new_flight``'s, from one random draw instead of about
    twenty: twelve per search make generation cost count, and neither stops nor the spread
    of cabin fares play a part in this environment's requests. The draw's 64 bits give the
    number, the duration and the fare (any bias is below 2**-40)."""
    while True:
        x = ctx.rng.next_u64()
        number = f"TR{x % 10_000:04d}"
        if not ctx.world.has("flights", number):
            break
    arrives = departs + 5 * (12 + (x >> 16) % 61)
    fare = economy + 10 * ((x >> 32) % 11 - 5)
    record = {
        "flight_number": number,
        "origin": route[0],
        "destination": route[1],
        "date": date,
        "departs_at": f"{date}T{hhmm(departs)}",
        "arrives_at": f"{date}T{hhmm(arrives)}",
        "stops": [],
        "cabins": {
            cabin: {"price": float(round(fare * (low + high) / 2)), "seats_available": 9}
            for cabin, (low, high) in CABIN_FACTORS.items()
        },
    }
    return ctx.world.add("flights", record)


def _book(ctx: Context) -> Operation:
    rng = ctx.rng
    route, date = unused_route_date(rng, ctx.world, *BOOK_DAYS)
    flight = rng.choice(_flights_on(ctx, route, date, FLIGHTS_PER_SEARCH))
    cabin, passengers = rng.choice(("basic_economy", "economy", "business")), rng.integer(1, 3)
    amount = cents(flight["cabins"][cabin]["price"]) * passengers / 100
    arguments = {
        "customer_id": ctx.customer["customer_id"],
        "flight_number": flight["flight_number"],
        "cabin": cabin,
        "passengers": passengers,
        "insurance": False,
        "payment_methods": [{"payment_method_id": ctx.card, "amount": amount}],
    }
    search = call("search_flights", origin=route[0], destination=route[1], date=date)
    op = Operation("book", None, arguments, [search], None,
                   f"book {_plural(passengers, 'passenger')} in {cabin.replace('_', ' ')} on the "
                   f"flight from {route[0]} to {route[1]} on {date} that leaves at "
                   f"{flight['departs_at'][11:]}, without insurance, paid with my card "
                   f"{ctx.card}")  # fmt: skip
    ctx.booking = op
    return op


def _bags_new(ctx: Context) -> Operation:
    bags = ctx.rng.integer(1, MAX_BAGS_ASKED)
    return Operation("bags_new", None, {"bags": bags, "payment_method_id": ctx.card}, [], None,
                     f"add {_plural(bags, 'checked bag')} to the new flight booking, charged "
                     f"to my card {ctx.card}")  # fmt: skip


def _rebook(ctx: Context) -> Operation:
    rng = ctx.rng
    res = new_reservation(rng, ctx.world, ctx.customer)
    route, date = unused_route_date(rng, ctx.world, *REBOOK_DAYS)
    res["flights"][0]["origin"], res["flights"][0]["destination"] = route
    flight = rng.choice(_flights_on(ctx, route, date, FLIGHTS_PER_SEARCH))
    rid = res["reservation_id"]
    arguments = {
        "reservation_id": rid,
        "cabin": res["cabin"],
        "flights": [{"flight_number": flight["flight_number"], "date": date}],
        "payment_method_id": ctx.card,
    }
    search = call("search_flights", origin=route[0], destination=route[1], date=date)
    return Operation("rebook", rid, arguments, [call("get_reservation", reservation_id=rid), search],
                     None, f"move my reservation {rid} to {date}, on the flight that leaves at "
                     f"{flight['departs_at'][11:]} (same route and cabin), with any fare "
                     f"difference on my card {ctx.card}")  # fmt: skip


BUILDERS: dict[str, Callable[[Context], Operation]] = {
    "cancel_order": _cancel_order,
    "change_address": _change_address,
    "cancel_reservation": _cancel_reservation,
    "switch_payment": _switch_payment,
    "add_bags": _add_bags,
    "book": _book,
    "bags_new": _bags_new,
    "rebook": _rebook,
    "bags_per_passenger": _bags_per_passenger,
}


# -- matching calls and records ---------------------------------------------------------------
def is_write_of(op: Operation, c: CallRecord, customer_id: str, new_ids: set[str]) -> bool:
    """Whether a successful call is this operation's write (on the right record)."""
    if not (c.ok and c.changed_world and c.name == op.tool):
        return False
    if op.kind == "book":  # on another flight it is not the booking asked for: a stray write
        return (c.arguments.get("customer_id"), c.arguments.get("flight_number")) == (
            customer_id,
            op.flight,
        )
    if op.kind == "rebook":
        flights = c.arguments.get("flights") or [{}]
        return (
            c.arguments.get("reservation_id") == op.target
            and flights[0].get("flight_number") == op.flight
        )
    if op.kind == "bags_new":
        return c.arguments.get("reservation_id") in new_ids
    key = "order_id" if op.kind in ("cancel_order", "change_address") else "reservation_id"
    return c.arguments.get(key) == op.target


def new_reservation_ids(world0: World, world: World) -> set[str]:
    """Ids of the reservations the episode created (anyone's)."""
    return set(world.tables["reservations"]) - set(world0.tables["reservations"])


def provides(read: dict[str, Any], op: Operation, c: CallRecord) -> bool:
    """Whether a successful call gave the information ``read`` stands for."""
    if not c.ok or c.name != read["name"]:
        return False
    if read["name"] == "search_flights":
        listed = c.result.get("flights", []) if isinstance(c.result, dict) else []
        return op.flight in [f.get("flight_number") for f in listed]
    return c.arguments == read["arguments"]


def booked(op: Operation, world0: World, world: World, customer_id: str) -> dict[str, Any] | None:
    """The new reservation of the customer that carries out booking ``op`` (None if none)."""
    a = op.arguments
    for r in new_records(world0, world, "reservations", customer_id):
        if (
            [f["flight_number"] for f in r["flights"]] == [a["flight_number"]]
            and (r["cabin"], r["passengers"]) == (a["cabin"], a["passengers"])
            and not r["travel_insurance"]
            and split_of(r.get("payments")) == split_of(a["payment_methods"])
        ):
            return r
    return None


# -- outcomes ---------------------------------------------------------------------------------
def _bags_outcome(
    res: dict[str, Any] | None, before: int, op: Operation, calls: list[CallRecord]
) -> tuple[bool, Any]:
    if res is None:
        return False, None
    rid = res["reservation_id"]
    cards = [c.arguments.get("payment_method_id") for c in calls
             if c.ok and c.name == "add_baggage" and c.arguments.get("reservation_id") == rid]  # fmt: skip
    want = op.arguments["payment_method_id"]
    got = res.get("baggages", 0) - before
    ok = got == op.arguments["bags"] and bool(cards) and set(cards) == {want}
    return ok, {"reservation_id": rid, "bags_added": got, "paid_with": cards}


def outcome(
    ops: list[Operation],
    i: int,
    world0: World,
    world: World,
    customer_id: str,
    calls: list[CallRecord],
) -> tuple[bool, Any]:
    """(done, what the final world shows) for operation ``i``."""
    op = ops[i]
    a = op.arguments
    if op.kind == "book":
        record = booked(op, world0, world, customer_id)
        return record is not None, record and record["reservation_id"]
    if op.kind == "bags_new":
        assert op.after is not None  # the generator always links it to the booking
        return _bags_outcome(booked(ops[op.after], world0, world, customer_id), 0, op, calls)
    table = "orders" if op.kind in ("cancel_order", "change_address") else "reservations"
    r = world.tables[table].get(op.target)
    if r is None:
        return False, None
    if op.kind in ("cancel_order", "cancel_reservation"):
        got = {"status": r["status"], "reason": r.get("cancel_reason")}
        return got == {"status": "cancelled", "reason": a["reason"]}, got
    if op.kind == "change_address":
        return r["shipping_address"] == a["address"], r["shipping_address"]
    if op.kind == "switch_payment":
        got = split_of(r.get("payments"))
        return got == {a["payment_method_id"]: cents(r["price"])}, r.get("payments")
    if op.kind == "rebook":
        got = {"flights": [f["flight_number"] for f in r["flights"]], "cabin": r["cabin"]}
        want = {"flights": [s["flight_number"] for s in a["flights"]], "cabin": a["cabin"]}
        return got == want and r["status"] == "confirmed", got
    before = world0.tables["reservations"][op.target].get("baggages", 0)
    return _bags_outcome(r, before, op, calls)


def expected(op: Operation) -> Any:
    """What the verifier expects of an operation (for the check's ``expected`` field)."""
    if op.kind == "bags_new":
        return {"reservation": "the new booking", **op.arguments}
    return op.arguments
