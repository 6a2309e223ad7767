"""The payment policy of ``payment-calc-v0``: records to generate, and the reference split.

:func:`reference_split` computes the amounts from the world alone (the generator's choices
never enter it), in integer cents, so the verifier grades what the records say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trace_gym.envs.helpers.commerce_common import (
    CABIN_FACTORS,
    new_balance_method,
    new_flight,
    unused_route_date,
)
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_customer, new_order
from trace_gym.world.model import World, cents, money
from trace_gym.world.tools_commerce import INSURANCE_FEE

RESTOCKING_PERCENT = 15
"""Restocking fee of an opened item, in percent of its price."""
POLICY_TEXT = (
    "1. Bookings cost the cabin fare per passenger, plus "
    f"${INSURANCE_FEE:.2f} per passenger with travel insurance. Pay in this order: (a) at "
    "most one travel certificate per booking, the active one with the largest balance, for "
    "as much as its balance covers; (b) then active gift cards, smallest balance first, each "
    "for as much as its balance covers; (c) the rest on the customer's credit card. Leave "
    "out instruments that pay nothing; never use an inactive one.\n"
    "2. Refunds: each returned item refunds its price, less a "
    f"{RESTOCKING_PERCENT}% restocking fee if it was opened (the fee rounded to the cent, "
    "half up, item by item). The refund goes to the credit card, up to what the card paid "
    "for the order; the rest goes to the gift card that paid the rest of the order."
)


@dataclass(frozen=True)
class Made:
    customer: dict[str, Any]
    target: dict[str, Any]
    deciding: list[list[str]]
    opening: str
    n_rules: int
    owned: list[list[str]]


def _owned(world: World, customer: dict[str, Any]) -> list[list[str]]:
    out = [["customers", customer["customer_id"]]]
    out += [["orders", k] for k in customer["order_ids"]]
    out += [["payment_methods", k] for k in customer["payment_method_ids"]]
    return out


def _distinct_amounts(rng: StableRNG, n: int, low: int, high: int, step: int) -> list[float]:
    """``n`` different amounts in [low, high] cents, multiples of ``step`` cents."""
    picks: list[int] = []
    while len(picks) < n:  # rejection: the range is large, n is at most 3
        p = rng.integer(low // step, high // step)
        if p not in picks:
            picks.append(p)
    return [p * step / 100 for p in picks]


# -- booking ---------------------------------------------------------------------------------
def make_booking(rng: StableRNG, world: World, cfg: Any) -> Made:
    customer = new_customer(rng, world)
    route, date = unused_route_date(rng, world, 5, 60)
    economy = rng.integer(12000, 60000) / 100
    prices = {c: money(economy * (lo + (hi - lo) * rng.random())) for c, (lo, hi) in
              CABIN_FACTORS.items()}  # fmt: skip
    prices["economy"] = money(economy)
    flight = new_flight(rng, world, route, date, 5 * rng.integer(72, 240),
                        5 * rng.integer(18, 60), 0, prices)  # fmt: skip
    n_certs = rng.integer(max(cfg.max_certificates - 1, 0), cfg.max_certificates)
    n_gifts = rng.integer(max(cfg.max_gift_cards - 1, 0), cfg.max_gift_cards)
    for balance in _distinct_amounts(rng, n_certs, 5000, 40000, 500):
        new_balance_method(rng, world, customer, "certificate", balance)
    for balance in _distinct_amounts(rng, n_gifts, 1000, 20000, 1):
        new_balance_method(rng, world, customer, "gift_card", balance)
    inactive = rng.bernoulli(cfg.inactive_probability)
    if inactive:  # a tempting balance that must be skipped
        kind = rng.choice(("gift_card", "certificate"))
        pm = new_balance_method(rng, world, customer, kind, rng.integer(200, 800) * 1.0)
        pm["status"] = "inactive"
    cabin = rng.choice(("basic_economy", "economy", "business"))
    passengers = rng.integer(1, 3)
    insurance = rng.bernoulli(0.5)
    target = {"customer_id": customer["customer_id"], "flight_number": flight["flight_number"],
              "cabin": cabin, "passengers": passengers, "insurance": insurance}  # fmt: skip
    deciding = [["customers", customer["customer_id"]], ["flights", flight["flight_number"]]]
    deciding += [["payment_methods", k] for k in customer["payment_method_ids"]]
    people = f"{passengers} passenger{'s' if passengers > 1 else ''}"
    extra = "with travel insurance" if insurance else "without insurance"
    opening = (
        f"Hi, I'm {customer['name']} (customer id {customer['customer_id']}). Please book "
        f"flight {flight['flight_number']} in {cabin.replace('_', ' ')} for {people}, {extra}. "
        "Use my certificates and gift cards the way your policy says and put the rest on my "
        "card. How much is it in total?"
    )
    n_rules = 1 + int(insurance) + int(n_certs > 0) + int(n_certs > 1) + int(n_gifts > 1)
    return Made(
        customer, target, deciding, opening, n_rules + int(inactive), _owned(world, customer)
    )


BOOKING_MISTAKES = (
    "largest_certificate",
    "one_certificate",
    "smallest_gift_first",
    "skip_inactive",
)
"""Steps of the booking walk an agent miscounting may get wrong (the deficit agents' lapse)."""


def booking_split(world: World, target: dict[str, Any], mistake: str = "") -> dict[str, int]:
    """Cents per payment method for a booking, by the policy's order; with ``mistake`` (one
    of :data:`BOOKING_MISTAKES`) one step of the walk done wrong, the total still right."""
    flight = world.tables["flights"][target["flight_number"]]
    fare = cents(flight["cabins"][target["cabin"]]["price"])
    fare += cents(INSURANCE_FEE) if target["insurance"] else 0
    due = target["passengers"] * fare
    customer = world.tables["customers"][target["customer_id"]]
    pms = [world.tables["payment_methods"][k] for k in customer["payment_method_ids"]]
    active = [p for p in pms if p["status"] == "active"]
    usable = pms if mistake == "skip_inactive" else active
    certs = sorted((p for p in usable if p["kind"] == "certificate"),
                   key=lambda p: (-cents(p["balance"]), p["payment_method_id"]))  # fmt: skip
    certs = certs[::-1] if mistake == "largest_certificate" else certs
    gifts = sorted((p for p in usable if p["kind"] == "gift_card"),
                   key=lambda p: (cents(p["balance"]), p["payment_method_id"]))  # fmt: skip
    gifts = gifts[::-1] if mistake == "smallest_gift_first" else gifts
    out: dict[str, int] = {}
    for pm in (certs if mistake == "one_certificate" else certs[:1]) + gifts:
        take = min(due, cents(pm["balance"]))
        if take:
            out[pm["payment_method_id"]] = take
            due -= take
    card = next(p for p in active if p["kind"] == "credit_card")
    if due:
        out[card["payment_method_id"]] = due
    return out


# -- refund ----------------------------------------------------------------------------------
def make_refund(rng: StableRNG, world: World, cfg: Any) -> Made:
    customer = new_customer(rng, world)
    card = customer["payment_method_ids"][0]
    gift = new_balance_method(rng, world, customer, "gift_card", rng.integer(0, 5000) / 100)
    n_items = cfg.n_refund_items + rng.integer(0, 1)
    order = new_order(rng, world, customer, status="delivered", n_items=n_items)
    for item in order["items"]:
        item["opened"] = rng.bernoulli(cfg.opened_share)
    gift_paid = cents(order["total"]) * rng.integer(40, 80) // 100
    order["payments"] = [
        {"payment_method_id": card, "amount": money((cents(order["total"]) - gift_paid) / 100)},
        {"payment_method_id": gift["payment_method_id"], "amount": money(gift_paid / 100)},
    ]
    returned = rng.sample(order["items"], cfg.n_refund_items)
    names = ", ".join(f"the {i['name']} ({i['item_id']})" for i in returned)
    opening = (
        f"Hi, I'm {customer['name']} (customer id {customer['customer_id']}). I'm returning "
        f"{names} from order {order['order_id']}. Please refund them the way your policy "
        "says. What is the total refund?"
    )
    target = {"order_id": order["order_id"], "item_ids": [i["item_id"] for i in returned]}
    split = refund_split(world, target)
    n_rules = 1 + int(any(i["opened"] for i in returned)) + int(len(split) > 1)
    return Made(
        customer, target, [["orders", order["order_id"]]], opening, n_rules, _owned(world, customer)
    )


def refund_split(world: World, target: dict[str, Any], fee_forgotten: str = "") -> dict[str, int]:
    """Cents per payment method for a refund: fees per item, card first; ``fee_forgotten``
    names an opened item whose restocking fee a miscounting agent leaves out."""
    order = world.tables["orders"][target["order_id"]]
    items = {i["item_id"]: i for i in order["items"]}
    due = 0
    for item_id in target["item_ids"]:
        price = cents(items[item_id]["price"])
        charged = items[item_id].get("opened") and item_id != fee_forgotten
        fee = (price * RESTOCKING_PERCENT + 50) // 100 if charged else 0
        due += price - fee
    out: dict[str, int] = {}
    card_pm, gift_pm = order["payments"][0], order["payments"][1]
    to_card = min(due, cents(card_pm["amount"]))
    if to_card:
        out[card_pm["payment_method_id"]] = to_card
    if due - to_card:
        out[gift_pm["payment_method_id"]] = due - to_card
    return out


def reference_split(world: World, kind: str, target: dict[str, Any], customer_id: str) -> dict:
    """The policy's amounts (cents per payment method) for a task's write."""
    return booking_split(world, target) if kind == "book" else refund_split(world, target)
