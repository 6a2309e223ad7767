"""Seeded builders for the account and shipping fields that the support tools read.

``trace_gym.world.generate`` builds the base records; these add the fields of
:mod:`trace_gym.world.tools_support` (identity data, account lock, holds, shipping speed) in
their "all clear" state, and small helpers the support environments share (extra cards,
the records a customer owns).
"""

from __future__ import annotations

from typing import Any

from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_customer, new_order, new_payment_method
from trace_gym.world.model import World, day_offset


def support_customer(rng: StableRNG, world: World) -> dict[str, Any]:
    """A customer with identity data on file, an active unlocked account, verified."""
    customer = new_customer(rng, world)
    year = 1950 + rng.integer(0, 55)
    customer.update(
        date_of_birth=f"{year:04d}-{rng.integer(1, 12):02d}-{rng.integer(1, 28):02d}",
        account_status="active",
        lock_reason=None,
        identity_verified=True,
    )
    return customer


def support_order(
    rng: StableRNG, world: World, customer: dict[str, Any], status: str = "pending"
) -> dict[str, Any]:
    """An order with standard shipping, no hold and no delivery slot booked."""
    order = new_order(rng, world, customer, status=status)
    order.update(
        shipping_speed="standard",
        estimated_delivery=day_offset(world.now, rng.integer(5, 9)),
        hold=None,
        delivery_slot=None,
        legacy_system=False,
    )
    return order


def extra_card(
    rng: StableRNG, world: World, customer: dict[str, Any], status: str = "active"
) -> dict[str, Any]:
    """Another credit card of ``customer`` whose last four digits differ from the others'."""
    taken = {
        world.tables["payment_methods"][k].get("last4") for k in customer["payment_method_ids"]
    }
    card = new_payment_method(rng, world, customer, "credit_card", status)
    while card["last4"] in taken:
        card["last4"] = rng.token("0123456789", 4)
    return card


def customer_records(world: World, customer_id: str) -> list[list[str]]:
    """``[table, id]`` of the customer and everything that belongs to them."""
    customer = world.tables["customers"][customer_id]
    out = [["customers", customer_id]]
    out += [["orders", k] for k in customer["order_ids"]]
    out += [["reservations", k] for k in customer["reservation_ids"]]
    out += [["payment_methods", k] for k in customer["payment_method_ids"]]
    return out
