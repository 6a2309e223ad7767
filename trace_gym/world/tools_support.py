"""Account and support tools of the shared vocabulary (verification, holds, shipping changes).

They join :data:`trace_gym.world.tools.VOCABULARY` when that module loads. Like every tool of
the world they enforce physics only. A refusal names its cause in a parseable prefix,
``cause=<code>: <sentence>`` (e.g. ``cause=account_locked: account C-01234 is locked until
identity verified``), so an agent can diagnose it and a verifier can read it back. Orders
migrated from the legacy system (``legacy_system: true``) report every cause but the order
status as the generic ``cause=request_failed``; the records tell what is wrong.

Fields these tools read beyond the base records (absent fields take the "all clear" value, so
records built by other environments work unchanged): customers ``date_of_birth``,
``account_status`` (``active``/``locked``), ``lock_reason``, ``identity_verified``; orders
``hold``, ``shipping_speed``, ``estimated_delivery``, ``delivery_slot``, ``legacy_system``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from trace_gym.primitives.tools import Tool, ToolRefusal, object_schema
from trace_gym.world.model import World, day_offset, money, parse_day
from trace_gym.world.schemas import CUSTOMER_ID, ORDER_ID, PAYMENT_METHOD_ID

OPEN_STATUSES = ("pending", "processing")
"""Order statuses that still allow shipping changes."""
SPEEDS: dict[str, tuple[float, float, int]] = {
    "express": (9.0, 0.02, 3),
    "overnight": (19.0, 0.04, 1),
}
"""Shipping speed -> (base fee, share of the order total added to the fee, days to deliver)."""
DELIVERY_WINDOWS = ["morning", "afternoon", "evening"]
SCHEDULE_HORIZON_DAYS = 14
"""Deliveries can be scheduled from tomorrow up to this many days ahead."""
UNABLE_CODES = ["unsupported_request", "missing_item"]
"""Why a request cannot be done: no tool does it, or the customer lacks what it needs."""
GENERIC_CAUSE = "request_failed"


def upgrade_fee(total: float, speed: str) -> float:
    """The fee ``upgrade_shipping`` charges for ``speed`` on an order of ``total``."""
    base, share, _ = SPEEDS[speed]
    return money(base + share * total)


def _refuse(order: dict[str, Any] | None, cause: str, sentence: str) -> ToolRefusal:
    if order is not None and order.get("legacy_system"):
        oid = order["order_id"]
        sentence = f"the request for order {oid} could not be completed (legacy order system)"
        cause = GENERIC_CAUSE
    return ToolRefusal(f"cause={cause}: {sentence}")


def _open_order(world: World, order_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The order and its customer, if the order can still be changed by its customer."""
    order = world.get("orders", order_id)
    if order["status"] not in OPEN_STATUSES:
        raise ToolRefusal(
            f"cause=order_status: order {order_id} is {order['status']}; only pending or "
            "processing orders can be changed"
        )
    customer = world.get("customers", order["customer_id"])
    if customer.get("account_status", "active") == "locked":
        cid = customer["customer_id"]
        raise _refuse(order, "account_locked", f"account {cid} is locked until identity verified")
    return order, customer


def _charge(world: World, order: dict[str, Any], amount: float) -> dict[str, Any]:
    """Charge ``amount`` to the order's payment method (physics: it must be able to pay)."""
    pm = world.get("payment_methods", order["payment_method_id"])
    if pm["status"] != "active":
        cause = "card_expired" if pm["status"] == "expired" else "payment_method_inactive"
        what = f"{pm.get('brand', pm['kind'])} ending {pm.get('last4', '----')}"
        raise _refuse(order, cause, f"payment method {pm['payment_method_id']} ({what}) is "
                      f"{pm['status']}")  # fmt: skip
    if "balance" in pm:
        if pm["balance"] < amount:
            raise _refuse(order, "insufficient_balance", f"{pm['payment_method_id']} has "
                          f"{pm['balance']:.2f} left, {amount:.2f} needed")  # fmt: skip
        pm["balance"] = money(pm["balance"] - amount)
    event = {"event": "charge", "order_id": order["order_id"], "amount": amount}
    world.log.append(event | {"payment_method_id": pm["payment_method_id"]})
    return pm


# -- handlers -------------------------------------------------------------------------------
def upgrade_shipping(world: World, order_id: str, speed: str) -> dict[str, Any]:
    order, _ = _open_order(world, order_id)
    if order.get("hold"):
        raise _refuse(order, "order_on_hold", f"order {order_id} is on hold ({order['hold']})")
    if order.get("shipping_speed") == speed:
        raise ToolRefusal(f"cause=already_done: order {order_id} already ships {speed}")
    fee = upgrade_fee(order["total"], speed)
    pm = _charge(world, order, fee)
    order["shipping_speed"] = speed
    order["estimated_delivery"] = day_offset(world.now, SPEEDS[speed][2])
    return {
        "order_id": order_id,
        "shipping_speed": speed,
        "fee": fee,
        "charged_to": pm["payment_method_id"],
        "estimated_delivery": order["estimated_delivery"],
    }


def schedule_delivery(world: World, order_id: str, date: str, window: str) -> dict[str, Any]:
    order, _ = _open_order(world, order_id)
    if order.get("hold"):
        raise _refuse(order, "order_on_hold", f"order {order_id} is on hold ({order['hold']})")
    try:
        day = parse_day(date)
    except ValueError:
        raise ToolRefusal(f"cause=invalid_date: {date!r} is not a date (YYYY-MM-DD)") from None
    today = parse_day(world.now)
    if day <= today:
        raise ToolRefusal(f"cause=date_in_past: {date} is not after today ({today})")
    if day > today + timedelta(days=SCHEDULE_HORIZON_DAYS):
        last = today + timedelta(days=SCHEDULE_HORIZON_DAYS)
        raise ToolRefusal(f"cause=date_out_of_range: deliveries can be scheduled up to {last}")
    order["delivery_slot"] = {"date": day.isoformat(), "window": window}
    return {"order_id": order_id, "delivery_date": day.isoformat(), "window": window}


def set_order_payment_method(world: World, order_id: str, payment_method_id: str) -> dict[str, Any]:
    order, customer = _open_order(world, order_id)
    pm = world.get("payment_methods", payment_method_id)
    if pm["customer_id"] != customer["customer_id"]:
        raise ToolRefusal(
            f"cause=not_owner: {payment_method_id} does not belong to {customer['customer_id']}"
        )
    if pm["status"] != "active":
        raise ToolRefusal(f"cause=payment_method_inactive: {payment_method_id} is {pm['status']}")
    order["payment_method_id"] = payment_method_id
    return {"order_id": order_id, "payment_method_id": payment_method_id}


def verify_identity(world: World, customer_id: str, date_of_birth: str) -> dict[str, Any]:
    customer = world.get("customers", customer_id)
    on_file = customer.get("date_of_birth")
    if on_file is None:
        raise ToolRefusal(f"cause=no_identity_data: no identity data on file for {customer_id}")
    if on_file != date_of_birth:
        raise ToolRefusal(
            f"cause=identity_mismatch: the date of birth does not match {customer_id}'s records"
        )
    customer["identity_verified"] = True
    if customer.get("lock_reason") == "identity_unverified":
        customer["account_status"] = "active"
        customer["lock_reason"] = None
    return {
        "customer_id": customer_id,
        "identity_verified": True,
        "account_status": customer.get("account_status", "active"),
    }


def release_order_hold(world: World, order_id: str) -> dict[str, Any]:
    order = world.get("orders", order_id)
    if not order.get("hold"):
        raise ToolRefusal(f"cause=no_hold: order {order_id} is not on hold")
    customer = world.get("customers", order["customer_id"])
    if not customer.get("identity_verified", True):
        raise _refuse(
            order,
            "identity_unverified",
            f"releasing the hold on order {order_id} requires verifying the identity of "
            f"{customer['customer_id']} first",
        )
    order["hold"] = None
    return {"order_id": order_id, "hold": None}


def report_unable(
    world: World, customer_id: str, reason_code: str, explanation: str
) -> dict[str, Any]:
    world.get("customers", customer_id)
    return {"recorded": True, "reason_code": reason_code}


# -- declarations ---------------------------------------------------------------------------
_DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "YYYY-MM-DD."}

TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            "verify_identity",
            "Verify a customer's identity with their date of birth; lifts a lock that waits "
            "for identity verification.",
            object_schema({"customer_id": CUSTOMER_ID, "date_of_birth": _DATE}),
            "write",
            verify_identity,
        ),
        Tool(
            "release_order_hold",
            "Release the hold on an order (needs a verified identity).",
            object_schema({"order_id": ORDER_ID}),
            "write",
            release_order_hold,
        ),
        Tool(
            "set_order_payment_method",
            "Change the payment method that an order's charges and refunds use.",
            object_schema({"order_id": ORDER_ID, "payment_method_id": PAYMENT_METHOD_ID}),
            "write",
            set_order_payment_method,
        ),
        Tool(
            "upgrade_shipping",
            "Upgrade a pending or processing order to faster shipping; the fee is charged to "
            "the order's payment method. Returns the fee and the new estimated delivery date.",
            object_schema(
                {"order_id": ORDER_ID, "speed": {"type": "string", "enum": list(SPEEDS)}}
            ),
            "write",
            upgrade_shipping,
        ),
        Tool(
            "schedule_delivery",
            "Book a delivery date and time window for a pending or processing order that is "
            "not on hold.",
            object_schema(
                {
                    "order_id": ORDER_ID,
                    "date": _DATE,
                    "window": {"type": "string", "enum": DELIVERY_WINDOWS},
                }
            ),
            "write",
            schedule_delivery,
        ),
        Tool(
            "report_unable",
            "Tell the system that a customer's request cannot be done, with the reason code.",
            object_schema(
                {
                    "customer_id": CUSTOMER_ID,
                    "reason_code": {"type": "string", "enum": UNABLE_CODES},
                    "explanation": {"type": "string", "maxLength": 2000},
                }
            ),
            "control",
            report_unable,
        ),
    ]
}
