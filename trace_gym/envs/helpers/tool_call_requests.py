"""The six single-call requests of ``tool-call-v0``: records, reference call, wording.

Each builder adds the record the request is about (and the payment methods it may name) to
the world and returns the reference call and the customer's sentence. The wording is where
the precision lies: reasons as phrases, numbers as words, state names, relative dates, a
payment method named by kind among look-alike ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trace_gym.envs.helpers.commerce_common import (
    cabin_prices,
    new_balance_method,
    new_flight,
    similar_id,
)
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import FIRST_NAMES, LAST_NAMES, new_order, new_reservation
from trace_gym.world.model import World, day_offset, money, parse_day
from trace_gym.world.tools import touches

touches_any = touches
REASONS = {
    "no_longer_needed": "I don't need it anymore.",
    "ordered_by_mistake": "I ordered it by mistake.",
    "change_of_plans": "My plans have changed.",
}
NUMBER_WORDS = ("zero", "one", "two", "three")
CITIES = (
    ("Springfield", "Illinois", "IL", "627"), ("Austin", "Texas", "TX", "787"),
    ("Portland", "Oregon", "OR", "972"), ("Denver", "Colorado", "CO", "802"),
    ("Columbus", "Ohio", "OH", "432"), ("Madison", "Wisconsin", "WI", "537"),
    ("Raleigh", "North Carolina", "NC", "276"), ("Tucson", "Arizona", "AZ", "857"),
)  # fmt: skip
STREETS = ("Elm Street", "Oak Avenue", "Maple Drive", "Cedar Lane", "Pine Road", "Lake Boulevard")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
BALANCE_KINDS = ("gift_card", "certificate")
KIND_WORDS = {"gift_card": "my gift card", "certificate": "my travel certificate"}
BALANCE_MARGIN = 50.0
"""Dollars a gift card or certificate holds beyond what the request needs (physics: enough)."""


@dataclass(frozen=True)
class Made:
    tool: str
    arguments: dict[str, Any]
    sentence: str
    record: tuple[str, str]
    n_similar: int = 0
    relative_date: bool = False


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested arguments by path (``passengers[1].date_of_birth``)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


# -- payment instruments ---------------------------------------------------------------------
def _instrument(
    rng: StableRNG,
    world: World,
    customer: dict[str, Any],
    cfg: Any,
    need: float,
    kinds: tuple[str, ...] = ("gift_card", "certificate", "credit_card"),
) -> tuple[str, str, int]:
    """The instrument the customer means (its id, how they say it) and its look-alikes."""
    kind = rng.choice(kinds)
    card = world.tables["payment_methods"][customer["payment_method_ids"][0]]
    if kind == "credit_card":
        phrase = f"my {card['brand']} card ending in {card['last4']}"
        meant = card["payment_method_id"]
    else:
        balance = money(need + BALANCE_MARGIN + 5 * rng.integer(0, 20))
        meant = new_balance_method(rng, world, customer, kind, balance)["payment_method_id"]
        phrase = KIND_WORDS[kind]
    others = [k for k in ("gift_card", "certificate", "credit_card") if k != kind]
    for i in range(cfg.n_similar_ids):
        pmid = similar_id(rng, world, meant)
        other = others[i % len(others)]
        record: dict[str, Any] = {"payment_method_id": pmid, "customer_id":
                                  customer["customer_id"], "kind": other, "status": "active"}  # fmt: skip
        if other == "credit_card":
            record["brand"] = rng.choice([b for b in ("visa", "mastercard", "amex")
                                          if b != card["brand"]])  # fmt: skip
            record["last4"] = rng.token("0123456789", 4)
        else:
            record["balance"] = money(need + BALANCE_MARGIN)
        world.add("payment_methods", record)
        customer["payment_method_ids"].append(pmid)
    return meant, phrase, cfg.n_similar_ids


# -- builders --------------------------------------------------------------------------------
def _cancel_order(rng: StableRNG, world: World, customer: dict[str, Any], cfg: Any) -> Made:
    order = new_order(rng, world, customer, status="pending")
    reason = rng.choice(tuple(REASONS))
    args = {"order_id": order["order_id"], "reason": reason}
    text = f"Please cancel my order {order['order_id']}. {REASONS[reason]}"
    return Made("cancel_order", args, text, ("orders", order["order_id"]))


def _payment(rng: StableRNG, world: World, customer: dict[str, Any], cfg: Any) -> Made:
    res = new_reservation(rng, world, customer)
    # a balance instrument: the reservation is already paid with the card on file
    meant, phrase, n = _instrument(rng, world, customer, cfg, res["price"], BALANCE_KINDS)
    args = {"reservation_id": res["reservation_id"], "payment_method_id": meant}
    text = f"I'd like to pay for my reservation {res['reservation_id']} with {phrase} instead."
    return Made(
        "update_reservation_payment", args, text, ("reservations", res["reservation_id"]), n
    )


def _bags(rng: StableRNG, world: World, customer: dict[str, Any], cfg: Any) -> Made:
    res = new_reservation(rng, world, customer)
    bags = rng.integer(1, 3)
    meant, phrase, n = _instrument(rng, world, customer, cfg, 35.0 * bags)
    args = {"reservation_id": res["reservation_id"], "bags": bags, "payment_method_id": meant}
    noun = "bag" if bags == 1 else "bags"
    text = (
        f"Please add {NUMBER_WORDS[bags]} checked {noun} to my reservation "
        f"{res['reservation_id']} and charge {phrase}."
    )
    return Made("add_baggage", args, text, ("reservations", res["reservation_id"]), n)


def _address(rng: StableRNG, world: World, customer: dict[str, Any], cfg: Any) -> Made:
    order = new_order(rng, world, customer, status="pending")
    city, state, code, zip3 = rng.choice(CITIES)
    street = f"{rng.integer(1, 999)} {rng.choice(STREETS)}"
    apt = f"Apt {rng.integer(1, 30)}{rng.choice('ABCD')}" if rng.bernoulli(0.5) else ""
    zip_code = zip3 + rng.token("0123456789", 2)
    address = {"address1": street, "address2": apt, "city": city, "state": code,
               "zip": zip_code, "country": "USA"}  # fmt: skip
    where = ", ".join(p for p in (street, apt, city) if p) + f", {state} {zip_code}"
    text = f"Please ship my order {order['order_id']} to {where} instead."
    args = {"order_id": order["order_id"], "address": address}
    return Made("modify_order_address", args, text, ("orders", order["order_id"]))


def _passengers(rng: StableRNG, world: World, customer: dict[str, Any], cfg: Any) -> Made:
    res = new_reservation(rng, world, customer)
    res["passengers"] = rng.integer(1, cfg.max_passengers)
    people, said = [], []
    for _ in range(res["passengers"]):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        born = day_offset("1950-01-01T00:00", rng.integer(0, 60 * 365))
        people.append({"first_name": first, "last_name": last, "date_of_birth": born})
        said.append(f"{first} {last}, born {_spoken_date(rng, born)}")
    args = {"reservation_id": res["reservation_id"], "passengers": people}
    text = (
        f"Please put the passenger details on my reservation {res['reservation_id']}: "
        + "; ".join(said)
        + "."
    )
    return Made(
        "update_reservation_passengers", args, text, ("reservations", res["reservation_id"])
    )


def _spoken_date(rng: StableRNG, iso: str) -> str:
    day = parse_day(iso)
    month = MONTHS[day.month - 1]
    if rng.bernoulli(0.5):
        return f"{month} {day.day}, {day.year}"
    return f"{day.day} {month} {day.year}"


def _relative(rng: StableRNG, now: str) -> tuple[int, str]:
    """Days ahead and how the customer says it."""
    pick = rng.integer(0, 3)
    if pick == 0:
        return 2, "the day after tomorrow"
    if pick == 1:
        return 7, "a week from today"
    if pick == 2:
        n = rng.integer(3, 20)
        return n, f"in {n} days"
    weekday = rng.integer(0, 6)
    ahead = (weekday - parse_day(now).weekday() - 1) % 7 + 1
    return ahead, f"on the first {WEEKDAYS[weekday]} after today"


def _flights(rng: StableRNG, world: World, customer: dict[str, Any], cfg: Any) -> Made:
    res = new_reservation(rng, world, customer)
    res["cabin"] = rng.choice(("economy", "business"))
    relative = rng.bernoulli(cfg.relative_date_probability)
    if relative:
        ahead, when = _relative(rng, world.now)
    else:
        ahead = rng.integer(2, 30)
        when = "on " + _spoken_date(rng, day_offset(world.now, ahead))
    date = day_offset(world.now, ahead)
    upgrade = res["cabin"] == "economy" and rng.bernoulli(0.4)
    cabin = "business" if upgrade else res["cabin"]
    old = res["flights"][0]
    prices = cabin_prices(rng, float(rng.integer(90, 500)))
    departs = 5 * rng.integer(72, 240)
    flight = new_flight(rng, world, (old["origin"], old["destination"]), date, departs,
                        5 * rng.integer(18, 60), 0, prices)  # fmt: skip
    difference = max(res["passengers"] * prices[cabin] - res["price"], 0.0)
    meant, phrase, n = _instrument(rng, world, customer, cfg, difference)
    args = {"reservation_id": res["reservation_id"], "cabin": cabin,
            "flights": [{"flight_number": flight["flight_number"], "date": date}],
            "payment_method_id": meant}  # fmt: skip
    how = "in business class" if upgrade else "in the same cabin"
    text = (
        f"Please move my reservation {res['reservation_id']} to flight "
        f"{flight['flight_number']} {when}, {how}, and put any fare difference on {phrase}."
    )
    rec = ("reservations", res["reservation_id"])
    return Made("update_reservation_flights", args, text, rec, n, relative)


Builder = Callable[[StableRNG, World, dict[str, Any], Any], Made]
REQUESTS: dict[str, Builder] = {
    "cancel_order": _cancel_order,
    "update_payment": _payment,
    "add_bags": _bags,
    "change_address": _address,
    "set_passengers": _passengers,
    "change_flight": _flights,
}
FLAT = ("cancel_order", "update_payment", "add_bags")
NESTED = ("change_address", "set_passengers", "change_flight")


# -- context ---------------------------------------------------------------------------------
def context(world: World, customer: dict[str, Any], record: tuple[str, str]) -> str:
    """The verified profile and the record in question, as the system prompt shows them."""
    lines = [f"Customer {customer['customer_id']}: {customer['name']} ({customer['membership']})."]
    lines.append("Payment methods:")
    for pmid in sorted(customer["payment_method_ids"]):
        pm = world.tables["payment_methods"][pmid]
        if pm["kind"] == "credit_card":
            lines.append(f"- {pmid}: credit card, {pm['brand']} ending in {pm['last4']}")
        else:
            kind = pm["kind"].replace("_", " ")
            lines.append(f"- {pmid}: {kind}, balance ${pm['balance']:.2f}")
    table, key = record
    r = world.tables[table][key]
    if table == "orders":
        items = ", ".join(f"{i['name']} (${i['price']:.2f})" for i in r["items"])
        lines.append(f"Order {key} ({r['status']}): {items}; paid with {r['payment_method_id']}.")
    else:
        f = r["flights"][0]
        lines.append(
            f"Reservation {key} ({r['status']}): {r['cabin'].replace('_', ' ')}, "
            f"{r['passengers']} passenger(s), flight {f['flight_number']} {f['origin']} to "
            f"{f['destination']} departing {f['departs_at']}, price ${r['price']:.2f}, paid "
            f"with {r['payment_method_id']}."
        )
    return "\n".join(lines)


def owned(world: World, customer: dict[str, Any]) -> list[list[str]]:
    out = [["customers", customer["customer_id"]]]
    out += [["orders", k] for k in customer["order_ids"]]
    out += [["reservations", k] for k in customer["reservation_ids"]]
    out += [["payment_methods", k] for k in customer["payment_method_ids"]]
    return out
