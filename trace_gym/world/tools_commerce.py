"""Shopping and travel tools of the shared vocabulary (search, book, bags, payments).

They join :data:`trace_gym.world.tools.VOCABULARY` when that module loads. Names and
arguments follow tau2-bench's retail and airline domains. Like every tool of the world, the
handlers enforce physics only: a flight must exist and have seats, a gift card cannot pay
more than its balance, payment amounts must add up to the price. The written policy (which
option to pick, which instrument to pay with, in what order) is the agent's job.

Records these tools add get ids drawn from a stream seeded by the world's state, so the same
calls on the same world always create the same ids (replay and the oracles rely on it).
"""

from __future__ import annotations

import copy
from typing import Any

from trace_gym.primitives.seeding import StableRNG, derive_seed
from trace_gym.primitives.tools import Tool, ToolRefusal, object_schema
from trace_gym.world.generate import unique_id
from trace_gym.world.model import World, cents, day_offset, money
from trace_gym.world.schemas import (
    ADDRESS,
    AIRPORT,
    CABIN,
    CUSTOMER_ID,
    FLIGHT_NUMBER,
    FLIGHT_SEGMENTS,
    ISO_DATE,
    ITEM_IDS,
    ORDER_ID,
    PASSENGERS,
    PAYMENT_METHOD_ID,
    PAYMENT_SPLIT,
    PRODUCT_CATEGORY,
    PRODUCT_ID,
    RESERVATION_ID,
)

INSURANCE_FEE = 30.0
"""Travel insurance, per passenger (dollars)."""
BAG_FEE = 35.0
"""Price of one checked bag added to a reservation (dollars)."""
BALANCE_KINDS = ("gift_card", "certificate")
"""Payment methods that carry a balance (the others are charged without limit)."""
MAX_PASSENGERS = 9
MAX_BAGS = 9


# -- helpers ---------------------------------------------------------------------------------
def _new_id(
    world: World, table: str, customer: dict[str, Any], prefix: str, alphabet: str, n: int
) -> str:
    """A fresh id that depends only on the time and on the customer's own records of that
    table: deterministic across replays, and not shifted by what other customers do in a
    shared world (the composite benchmark), so an oracle can know a new booking's id."""
    owned = customer["reservation_ids" if table == "reservations" else "order_ids"]
    seed = derive_seed("tool-id", table, world.now, customer["customer_id"], len(owned))
    return unique_id(StableRNG(seed), world, table, prefix, alphabet, n)


def _instrument(world: World, customer_id: str, pmid: str) -> dict[str, Any]:
    pm = world.get("payment_methods", pmid)
    if pm["customer_id"] != customer_id:
        raise ToolRefusal(f"payment method {pmid} does not belong to customer {customer_id}")
    if pm["status"] != "active":
        raise ToolRefusal(f"payment method {pmid} is {pm['status']}")
    return pm


def charge(
    world: World, customer_id: str, split: list[dict[str, Any]], total: float
) -> list[dict[str, Any]]:
    """Check a payment split against ``total`` and the balances, then take the money.

    Returns the split as stored (amounts rounded to cents). Nothing changes on a refusal.
    """
    pmids = [p["payment_method_id"] for p in split]
    if len(set(pmids)) != len(pmids):
        raise ToolRefusal("a payment method may appear only once in the split")
    stored = [
        {"payment_method_id": p, "amount": money(s["amount"])}
        for p, s in zip(pmids, split, strict=True)
    ]
    paid = sum(cents(s["amount"]) for s in split)
    if paid != cents(total):
        raise ToolRefusal(
            f"the payment amounts add up to {paid / 100:.2f}, which is not the amount due"
        )
    pms = [_instrument(world, customer_id, p) for p in pmids]
    for pm, s in zip(pms, stored, strict=True):
        if pm["kind"] in BALANCE_KINDS and cents(s["amount"]) > cents(pm["balance"]):
            raise ToolRefusal(f"{pm['payment_method_id']} has a balance of {pm['balance']:.2f}")
    for pm, s in zip(pms, stored, strict=True):
        if pm["kind"] in BALANCE_KINDS:
            pm["balance"] = money(pm["balance"] - s["amount"])
    return stored


def _credit(world: World, pmid: str, amount: float, **about: str) -> None:
    pm = world.tables["payment_methods"].get(pmid)
    if pm is not None and pm["kind"] in BALANCE_KINDS:
        pm["balance"] = money(pm["balance"] + amount)
    world.log.append(
        {"event": "refund", **about, "amount": money(amount), "payment_method_id": pmid}
    )


# -- reads -----------------------------------------------------------------------------------
def search_flights(world: World, origin: str, destination: str, date: str) -> dict[str, Any]:
    found = [
        f
        for f in world.tables["flights"].values()
        if f["origin"] == origin and f["destination"] == destination and f["date"] == date
    ]
    found.sort(key=lambda f: (f["departs_at"], f["flight_number"]))
    return {"flights": copy.deepcopy(found)}


def get_flight(world: World, flight_number: str) -> dict[str, Any]:
    return copy.deepcopy(world.get("flights", flight_number))


def search_products(world: World, category: str) -> dict[str, Any]:
    wanted = category.strip().lower()
    found = [p for p in world.tables["products"].values() if p["category"] == wanted]
    found.sort(key=lambda p: p["product_id"])
    return {"products": copy.deepcopy(found)}


def get_product(world: World, product_id: str) -> dict[str, Any]:
    return copy.deepcopy(world.get("products", product_id))


# -- reservations ----------------------------------------------------------------------------
def book_reservation(
    world: World,
    customer_id: str,
    flight_number: str,
    cabin: str,
    passengers: int,
    insurance: bool,
    payment_methods: list[dict[str, Any]],
) -> dict[str, Any]:
    customer = world.get("customers", customer_id)
    flight = world.get("flights", flight_number)
    seats = flight["cabins"].get(cabin)
    if seats is None:
        raise ToolRefusal(f"flight {flight_number} has no {cabin} cabin")
    if seats["seats_available"] < passengers:
        raise ToolRefusal(f"flight {flight_number} has {seats['seats_available']} {cabin} seats")
    fare = seats["price"] + (INSURANCE_FEE if insurance else 0.0)
    total = money(passengers * fare)
    stored = charge(world, customer_id, payment_methods, total)
    rid = _new_id(world, "reservations", customer, "R-", "ABCDEFGHJKLMNPQRSTUVWXYZ23456789", 6)
    seats["seats_available"] -= passengers
    record = {
        "reservation_id": rid,
        "customer_id": customer_id,
        "status": "confirmed",
        "cabin": cabin,
        "passengers": passengers,
        "booked_on": world.now,
        "travel_insurance": insurance,
        "flights": [
            {k: flight[k] for k in ("flight_number", "origin", "destination", "departs_at")}
        ],
        "price": total,
        "payment_method_id": stored[0]["payment_method_id"],
        "payments": stored,
        "baggages": 0,
    }
    world.add("reservations", record)
    customer["reservation_ids"].append(rid)
    return copy.deepcopy(record)


def _confirmed(world: World, reservation_id: str) -> dict[str, Any]:
    res = world.get("reservations", reservation_id)
    if res["status"] != "confirmed":
        raise ToolRefusal(f"reservation {reservation_id} is {res['status']}")
    return res


def add_baggage(
    world: World, reservation_id: str, bags: int, payment_method_id: str
) -> dict[str, Any]:
    res = _confirmed(world, reservation_id)
    fee = money(bags * BAG_FEE)
    split = [{"payment_method_id": payment_method_id, "amount": fee}]
    charge(world, res["customer_id"], split, fee)
    res["baggages"] = res.get("baggages", 0) + bags
    return {"reservation_id": reservation_id, "baggages": res["baggages"], "charged": fee}


def update_reservation_payment(
    world: World, reservation_id: str, payment_method_id: str
) -> dict[str, Any]:
    res = _confirmed(world, reservation_id)
    if payment_method_id == res["payment_method_id"] and len(res.get("payments", [])) <= 1:
        raise ToolRefusal(f"reservation {reservation_id} is already paid with {payment_method_id}")
    new = [{"payment_method_id": payment_method_id, "amount": res["price"]}]
    charge(world, res["customer_id"], new, res["price"])
    old = res.get("payments") or [
        {"payment_method_id": res["payment_method_id"], "amount": res["price"]}
    ]
    for p in old:  # the old instruments get their money back
        _credit(world, p["payment_method_id"], p["amount"], reservation_id=reservation_id)
    res["payment_method_id"] = payment_method_id
    res["payments"] = [{"payment_method_id": payment_method_id, "amount": res["price"]}]
    return copy.deepcopy(res)


def update_reservation_passengers(
    world: World, reservation_id: str, passengers: list[dict[str, Any]]
) -> dict[str, Any]:
    res = _confirmed(world, reservation_id)
    if len(passengers) != res["passengers"]:
        raise ToolRefusal(f"reservation {reservation_id} has {res['passengers']} passenger(s)")
    res["passenger_details"] = copy.deepcopy(passengers)
    return copy.deepcopy(res)


def update_reservation_flights(
    world: World,
    reservation_id: str,
    cabin: str,
    flights: list[dict[str, Any]],
    payment_method_id: str,
) -> dict[str, Any]:
    res = _confirmed(world, reservation_id)
    records = []
    for segment in flights:
        flight = world.get("flights", segment["flight_number"])
        if flight["date"] != segment["date"]:
            raise ToolRefusal(f"flight {flight['flight_number']} does not fly on {segment['date']}")
        if cabin not in flight["cabins"]:
            raise ToolRefusal(f"flight {flight['flight_number']} has no {cabin} cabin")
        records.append(flight)
    price = money(res["passengers"] * sum(f["cabins"][cabin]["price"] for f in records))
    difference = money(price - res["price"])
    if difference > 0:
        split = [{"payment_method_id": payment_method_id, "amount": difference}]
        charge(world, res["customer_id"], split, difference)
    else:
        _instrument(world, res["customer_id"], payment_method_id)
        if difference < 0:
            _credit(world, payment_method_id, -difference, reservation_id=reservation_id)
    keys = ("flight_number", "origin", "destination", "departs_at")
    res["flights"] = [{k: f[k] for k in keys} for f in records]
    res["cabin"] = cabin
    res["price"] = price
    return {**copy.deepcopy(res), "fare_difference": difference}


# -- orders ----------------------------------------------------------------------------------
def _variant(world: World, item_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for product in world.tables["products"].values():
        for variant in product["variants"]:
            if variant["item_id"] == item_id:
                return product, variant
    raise ToolRefusal(f"no item {item_id!r} in the catalogue")


def place_order(
    world: World, customer_id: str, item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    customer = world.get("customers", customer_id)
    items = []
    for item_id in item_ids:
        product, variant = _variant(world, item_id)
        if not variant["available"]:
            raise ToolRefusal(f"item {item_id} is out of stock")
        items.append(
            {
                "item_id": item_id,
                "product_id": product["product_id"],
                "name": product["name"],
                "options": dict(variant["options"]),
                "price": variant["price"],
                "final_sale": False,
            }
        )
    total = money(sum(i["price"] for i in items))
    split = [{"payment_method_id": payment_method_id, "amount": total}]
    stored = charge(world, customer_id, split, total)
    oid = _new_id(world, "orders", customer, "O-", "0123456789", 5)
    record = {
        "order_id": oid,
        "customer_id": customer_id,
        "status": "pending",
        "placed_on": day_offset(world.now, 0),
        "delivered_on": None,
        "items": items,
        "total": total,
        "payment_method_id": payment_method_id,
        "payments": stored,
        "shipping_address": "address on file",
    }
    world.add("orders", record)
    customer["order_ids"].append(oid)
    return copy.deepcopy(record)


def modify_order_address(world: World, order_id: str, address: dict[str, str]) -> dict[str, Any]:
    order = world.get("orders", order_id)
    if order["status"] != "pending":
        raise ToolRefusal(f"order {order_id} is {order['status']}; only pending orders ship later")
    order["shipping_address"] = dict(address)
    return copy.deepcopy(order)


def issue_refund(
    world: World, order_id: str, item_ids: list[str], refunds: list[dict[str, Any]]
) -> dict[str, Any]:
    order = world.get("orders", order_id)
    known = {i["item_id"]: i for i in order["items"]}
    unknown = [i for i in item_ids if i not in known]
    if unknown:
        raise ToolRefusal(f"order {order_id} has no item(s) {', '.join(unknown)}")
    if len(set(item_ids)) != len(item_ids) or any(known[i].get("returned") for i in item_ids):
        raise ToolRefusal("each item can be refunded once")
    paid = {p["payment_method_id"]: p["amount"] for p in order.get("payments", [])}
    paid = paid or {order["payment_method_id"]: order["total"]}
    pmids = [r["payment_method_id"] for r in refunds]
    if len(set(pmids)) != len(pmids):
        raise ToolRefusal("a payment method may appear only once in the refund")
    for r in refunds:
        if r["payment_method_id"] not in paid:
            raise ToolRefusal(f"order {order_id} was not paid with {r['payment_method_id']}")
        if cents(r["amount"]) > cents(paid[r["payment_method_id"]]):
            raise ToolRefusal(f"more than {r['payment_method_id']} paid for order {order_id}")
    if sum(cents(r["amount"]) for r in refunds) > sum(cents(known[i]["price"]) for i in item_ids):
        raise ToolRefusal("the refund exceeds the price of the items")
    for i in item_ids:
        known[i]["returned"] = True
    order["status"] = "return_requested"
    for r in refunds:
        _credit(world, r["payment_method_id"], r["amount"], order_id=order_id)
    total = money(sum(r["amount"] for r in refunds))
    return {"order_id": order_id, "status": order["status"], "refunded": total}


# -- declarations ----------------------------------------------------------------------------
_INT = {"type": "integer", "minimum": 1}

TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            "search_flights",
            "Search the flights between two airports on a date: times, stops with layovers, "
            "and per-cabin prices (per passenger) and seats.",
            object_schema({"origin": AIRPORT, "destination": AIRPORT, "date": ISO_DATE}),
            "read",
            search_flights,
        ),
        Tool(
            "get_flight",
            "Look up one flight by number: route, date, times, stops, cabins with prices.",
            object_schema({"flight_number": FLIGHT_NUMBER}),
            "read",
            get_flight,
        ),
        Tool(
            "search_products",
            "List the products of a category with their variants (item ids, options such as "
            "color and size, price, availability), brand and rating.",
            object_schema({"category": PRODUCT_CATEGORY}),
            "read",
            search_products,
        ),
        Tool(
            "get_product",
            "Look up one product and its variants.",
            object_schema({"product_id": PRODUCT_ID}),
            "read",
            get_product,
        ),
        Tool(
            "book_reservation",
            "Book a flight for a customer. The price is the cabin's fare per passenger (plus "
            f"{INSURANCE_FEE:.0f} per passenger with insurance); the payment split must add up "
            "to it. Returns the new reservation.",
            object_schema(
                {
                    "customer_id": CUSTOMER_ID,
                    "flight_number": FLIGHT_NUMBER,
                    "cabin": CABIN,
                    "passengers": {**_INT, "maximum": MAX_PASSENGERS},
                    "insurance": {"type": "boolean", "description": "Add travel insurance."},
                    "payment_methods": PAYMENT_SPLIT,
                }
            ),
            "write",
            book_reservation,
        ),
        Tool(
            "add_baggage",
            f"Add checked bags to a reservation ({BAG_FEE:.0f} each), paid with one payment "
            "method.",
            object_schema(
                {
                    "reservation_id": RESERVATION_ID,
                    "bags": {**_INT, "maximum": MAX_BAGS, "description": "Bags to add."},
                    "payment_method_id": PAYMENT_METHOD_ID,
                }
            ),
            "write",
            add_baggage,
        ),
        Tool(
            "update_reservation_payment",
            "Pay a reservation with another payment method; the old one is refunded.",
            object_schema(
                {"reservation_id": RESERVATION_ID, "payment_method_id": PAYMENT_METHOD_ID}
            ),
            "write",
            update_reservation_payment,
        ),
        Tool(
            "update_reservation_passengers",
            "Set the name and date of birth of every passenger of a reservation.",
            object_schema({"reservation_id": RESERVATION_ID, "passengers": PASSENGERS}),
            "write",
            update_reservation_passengers,
        ),
        Tool(
            "update_reservation_flights",
            "Change the flights (and cabin) of a reservation; a fare difference is charged to, "
            "or refunded to, the given payment method.",
            object_schema(
                {
                    "reservation_id": RESERVATION_ID,
                    "cabin": CABIN,
                    "flights": FLIGHT_SEGMENTS,
                    "payment_method_id": PAYMENT_METHOD_ID,
                }
            ),
            "write",
            update_reservation_flights,
        ),
        Tool(
            "place_order",
            "Order catalogue items (variant item ids) for a customer, paid with one method.",
            object_schema(
                {
                    "customer_id": CUSTOMER_ID,
                    "item_ids": ITEM_IDS,
                    "payment_method_id": PAYMENT_METHOD_ID,
                }
            ),
            "write",
            place_order,
        ),
        Tool(
            "modify_order_address",
            "Change the shipping address of a pending order.",
            object_schema({"order_id": ORDER_ID, "address": ADDRESS}),
            "write",
            modify_order_address,
        ),
        Tool(
            "issue_refund",
            "Refund items of an order to payment methods that paid for it, with the amount "
            "for each method.",
            object_schema({"order_id": ORDER_ID, "item_ids": ITEM_IDS, "refunds": PAYMENT_SPLIT}),
            "write",
            issue_refund,
        ),
    ]
}
