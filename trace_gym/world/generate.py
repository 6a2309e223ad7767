"""Seeded builders for world records: customers, payment methods, orders, reservations.

Every builder takes a :class:`~trace_gym.primitives.seeding.StableRNG` and the world it adds to,
draws ids that are unique in that world, and returns the record (a plain dict) so the caller
can adjust fields to plant a rule input. Builders never read the global RNG.
"""

from __future__ import annotations

from typing import Any

from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.model import World, day_offset, money, time_offset

FIRST_NAMES = (
    "Ana", "Ben", "Chloe", "Daniel", "Elif", "Farah", "Gus", "Hana", "Ivan", "Julia", "Kofi",
    "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor",
    "Wen", "Yara", "Zoe",
)  # fmt: skip
LAST_NAMES = (
    "Alvarez", "Brown", "Chen", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito",
    "Jensen", "Kowalski", "Lopez", "Moreau", "Nakamura", "Okafor", "Patel", "Rossi", "Silva",
    "Tanaka", "Usman", "Novak", "Weber", "Yilmaz", "Zhang",
)  # fmt: skip
PRODUCTS = (
    ("desk lamp", 24.0, 89.0), ("wireless mouse", 15.0, 79.0), ("backpack", 35.0, 180.0),
    ("running shoes", 55.0, 240.0), ("coffee grinder", 29.0, 310.0), ("office chair", 120.0, 690.0),
    ("headphones", 39.0, 420.0), ("rain jacket", 45.0, 260.0), ("water bottle", 9.0, 45.0),
    ("blender", 35.0, 380.0), ("yoga mat", 18.0, 95.0), ("monitor", 140.0, 720.0),
    ("tea kettle", 22.0, 130.0), ("suitcase", 80.0, 460.0), ("smart watch", 99.0, 650.0),
)  # fmt: skip
AIRPORTS = ("JFK", "LAX", "ORD", "SFO", "SEA", "BOS", "MIA", "DEN", "ATL", "DFW", "PHX", "LAS")
MEMBERSHIPS = ("regular", "silver", "gold")
CABINS = ("basic_economy", "economy", "business")
BASE_NOW = "2026-03-02T09:00"
_DIGITS = "0123456789"
_ALNUM = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def draw_now(rng: StableRNG) -> str:
    """A "current time" in 2026 on a whole hour, so deadlines are easy to read."""
    return time_offset(BASE_NOW, 24 * rng.integer(0, 240) + rng.integer(0, 9))


def unique_id(rng: StableRNG, world: World, table: str, prefix: str, alphabet: str, n: int) -> str:
    while True:
        key = prefix + rng.token(alphabet, n)
        if not world.has(table, key):
            return key


def new_customer(rng: StableRNG, world: World, membership: str | None = None) -> dict[str, Any]:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    cid = unique_id(rng, world, "customers", "C-", _DIGITS, 5)
    record = {
        "customer_id": cid,
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{rng.integer(1, 99)}@example.com",
        "membership": membership or rng.choice(MEMBERSHIPS),
        "member_since": day_offset(world.now, -rng.integer(30, 2000)),
        "payment_method_ids": [],
        "order_ids": [],
        "reservation_ids": [],
    }
    world.add("customers", record)
    new_payment_method(rng, world, record, "credit_card")
    return record


def new_payment_method(
    rng: StableRNG, world: World, customer: dict[str, Any], kind: str, status: str = "active"
) -> dict[str, Any]:
    pmid = unique_id(rng, world, "payment_methods", "PM-", _DIGITS, 5)
    record: dict[str, Any] = {
        "payment_method_id": pmid,
        "customer_id": customer["customer_id"],
        "kind": kind,
        "status": status,
    }
    if kind == "credit_card":
        record["brand"] = rng.choice(("visa", "mastercard", "amex"))
        record["last4"] = rng.token(_DIGITS, 4)
    else:  # gift cards and travel certificates carry a balance
        record["balance"] = money(rng.integer(2, 40) * 5.0)
    world.add("payment_methods", record)
    customer["payment_method_ids"].append(pmid)
    return record


def new_order(
    rng: StableRNG,
    world: World,
    customer: dict[str, Any],
    *,
    status: str = "pending",
    n_items: int | None = None,
) -> dict[str, Any]:
    oid = unique_id(rng, world, "orders", "O-", _DIGITS, 5)
    items = []
    for i in range(n_items or rng.integer(1, 3)):
        name, low, high = rng.choice(PRODUCTS)
        items.append(
            {
                "item_id": f"{oid.replace('O-', 'I-')}-{i + 1}",
                "name": name,
                "price": money(rng.integer(int(low), int(high)) + rng.integer(0, 99) / 100),
                "final_sale": False,
            }
        )
    placed = day_offset(world.now, -rng.integer(1, 10))
    record = {
        "order_id": oid,
        "customer_id": customer["customer_id"],
        "status": status,
        "placed_on": placed,
        "delivered_on": placed if status in ("delivered", "returned") else None,
        "items": items,
        "total": money(sum(item["price"] for item in items)),
        "payment_method_id": customer["payment_method_ids"][0],
        "shipping_address": f"{rng.integer(1, 999)} {rng.choice(LAST_NAMES)} Street",
    }
    world.add("orders", record)
    customer["order_ids"].append(oid)
    return record


def new_reservation(
    rng: StableRNG, world: World, customer: dict[str, Any], *, status: str = "confirmed"
) -> dict[str, Any]:
    rid = unique_id(rng, world, "reservations", "R-", _ALNUM, 6)
    origin, destination = rng.sample(AIRPORTS, 2)
    departs = time_offset(world.now, 24 * rng.integer(3, 40) + rng.integer(0, 12))
    record = {
        "reservation_id": rid,
        "customer_id": customer["customer_id"],
        "status": status,
        "cabin": rng.choice(CABINS),
        "passengers": rng.integer(1, 3),
        "booked_on": time_offset(world.now, -24 * rng.integer(2, 60)),
        "travel_insurance": rng.bernoulli(0.5),
        "flights": [
            {
                "flight_number": f"TR{rng.integer(100, 999)}",
                "origin": origin,
                "destination": destination,
                "departs_at": departs,
            }
        ],
        "price": money(rng.integer(90, 900) * 1.0),
        "payment_method_id": customer["payment_method_ids"][0],
    }
    world.add("reservations", record)
    customer["reservation_ids"].append(rid)
    return record
