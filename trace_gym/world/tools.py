"""The shared tool vocabulary of the customer-service world.

Every customer-service environment exposes a fixed subset of these tools, with the same
names, argument names and result shapes (``ENV_TOOLS`` in each environment module). Tools
enforce only the physics of the world (an order that is already cancelled cannot be cancelled
again); they never enforce the written policy. Checking the policy is the agent's job, and the
verifier's to grade.

Handlers are ``handler(world, **arguments)`` and return JSON-able results. Read tools are
listed in :data:`READ_TARGETS` so verifiers can tell which records an agent looked at.
"""

from __future__ import annotations

from typing import Any

from trace_gym.primitives.tools import Tool, ToolRefusal, object_schema
from trace_gym.world.model import World, json_copy, money
from trace_gym.world.schemas import (  # noqa: F401  (re-exported)
    CANCEL_REASONS,
    CUSTOMER_ID,
    ORDER_ID,
    PAYMENT_METHOD_ID,
    RESERVATION_ID,
    RULE_CODES,
)

READ_TARGETS: dict[str, tuple[str, str]] = {
    "get_customer": ("customers", "customer_id"),
    "get_order": ("orders", "order_id"),
    "get_reservation": ("reservations", "reservation_id"),
    "get_payment_method": ("payment_methods", "payment_method_id"),
}
"""Read tool -> (table, argument naming the record it returns)."""


# -- handlers -------------------------------------------------------------------------------
def _read(table: str, field: str) -> Any:
    def handler(world: World, **args: Any) -> dict[str, Any]:
        return json_copy(world.get(table, args[field]))

    return handler


def _refund_destination(world: World, record: dict[str, Any], refund_to: str | None) -> str:
    """The payment method a refund goes to: ``refund_to`` when given (it must be one of the
    record owner's payment methods), else the record's original payment method."""
    if refund_to is None:
        return record["payment_method_id"]
    method = world.get("payment_methods", refund_to)
    if method["customer_id"] != record["customer_id"]:
        raise ToolRefusal(f"payment method {refund_to} belongs to another customer")
    return refund_to


def cancel_order(
    world: World, order_id: str, reason: str, refund_to: str | None = None
) -> dict[str, Any]:
    order = world.get("orders", order_id)
    if order["status"] in ("cancelled", "returned", "return_requested"):
        raise ToolRefusal(f"order {order_id} is already {order['status']}")
    destination = _refund_destination(world, order, refund_to)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    world.log.append(
        {
            "event": "refund",
            "order_id": order_id,
            "amount": order["total"],
            "payment_method_id": destination,
        }
    )
    return {"order_id": order_id, "status": "cancelled", "refund_amount": order["total"]}


def return_order(
    world: World, order_id: str, item_ids: list[str], refund_to: str | None = None
) -> dict[str, Any]:
    order = world.get("orders", order_id)
    known = {item["item_id"]: item for item in order["items"]}
    unknown = [i for i in item_ids if i not in known]
    if unknown:
        raise ToolRefusal(f"order {order_id} has no item(s) {', '.join(unknown)}")
    if len(set(item_ids)) != len(item_ids):
        raise ToolRefusal("item_ids must not repeat an item")
    if order["status"] in ("cancelled", "returned", "return_requested"):
        raise ToolRefusal(f"order {order_id} is already {order['status']}")
    destination = _refund_destination(world, order, refund_to)
    amount = money(sum(known[i]["price"] for i in item_ids))
    for i in item_ids:
        known[i]["returned"] = True
    order["status"] = "return_requested"
    world.log.append(
        {
            "event": "refund",
            "order_id": order_id,
            "amount": amount,
            "payment_method_id": destination,
        }
    )
    return {"order_id": order_id, "status": "return_requested", "refund_amount": amount}


def cancel_reservation(
    world: World, reservation_id: str, reason: str, refund_to: str | None = None
) -> dict[str, Any]:
    res = world.get("reservations", reservation_id)
    if res["status"] == "cancelled":
        raise ToolRefusal(f"reservation {reservation_id} is already cancelled")
    destination = _refund_destination(world, res, refund_to)
    res["status"] = "cancelled"
    res["cancel_reason"] = reason
    world.log.append(
        {
            "event": "refund",
            "reservation_id": reservation_id,
            "amount": res["price"],
            "payment_method_id": destination,
        }
    )
    return {"reservation_id": reservation_id, "status": "cancelled", "refund_amount": res["price"]}


def refuse(world: World, reason_code: str, explanation: str) -> dict[str, Any]:
    return {"recorded": True, "reason_code": reason_code}


def transfer_to_human(world: World, reason_code: str, summary: str) -> dict[str, Any]:
    return {"transferred": True, "reason_code": reason_code}


# -- declarations ---------------------------------------------------------------------------
REFUND_TO = {
    "type": "string",
    "description": "Payment method id to refund to, e.g. PM-01234 (default: the original "
    "payment method).",
}


def _reason_code_schema() -> dict[str, Any]:
    return {"type": "string", "enum": RULE_CODES, "description": "Code of the policy rule."}


VOCABULARY: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            "get_customer",
            "Look up a customer profile: membership tier and the ids of their orders, "
            "reservations and payment methods.",
            object_schema({"customer_id": CUSTOMER_ID}),
            "read",
            _read("customers", "customer_id"),
        ),
        Tool(
            "get_order",
            "Look up an order: status, dates, items with prices, total and payment method.",
            object_schema({"order_id": ORDER_ID}),
            "read",
            _read("orders", "order_id"),
        ),
        Tool(
            "get_reservation",
            "Look up a flight reservation: status, cabin, passengers, flights, insurance, "
            "price and payment method.",
            object_schema({"reservation_id": RESERVATION_ID}),
            "read",
            _read("reservations", "reservation_id"),
        ),
        Tool(
            "get_payment_method",
            "Look up a payment method: kind, status and balance.",
            object_schema({"payment_method_id": PAYMENT_METHOD_ID}),
            "read",
            _read("payment_methods", "payment_method_id"),
        ),
        Tool(
            "cancel_order",
            "Cancel an order and refund its total (by default to the original payment method).",
            object_schema(
                {
                    "order_id": ORDER_ID,
                    "reason": {"type": "string", "enum": CANCEL_REASONS},
                    "refund_to": REFUND_TO,
                },
                required=("order_id", "reason"),
            ),
            "write",
            cancel_order,
        ),
        Tool(
            "return_order",
            "Return items of a delivered order and refund them (by default to the original "
            "payment method).",
            object_schema(
                {
                    "order_id": ORDER_ID,
                    "item_ids": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "description": "Ids of the items to return, e.g. I-12345-1.",
                    },
                    "refund_to": REFUND_TO,
                },
                required=("order_id", "item_ids"),
            ),
            "write",
            return_order,
        ),
        Tool(
            "cancel_reservation",
            "Cancel a flight reservation and refund its price (by default to the original "
            "payment method).",
            object_schema(
                {
                    "reservation_id": RESERVATION_ID,
                    "reason": {"type": "string", "enum": CANCEL_REASONS},
                    "refund_to": REFUND_TO,
                },
                required=("reservation_id", "reason"),
            ),
            "write",
            cancel_reservation,
        ),
        Tool(
            "refuse",
            "Decline the customer's request because a policy rule forbids it; name the rule.",
            object_schema(
                {
                    "reason_code": _reason_code_schema(),
                    "explanation": {"type": "string", "maxLength": 2000},
                }
            ),
            "control",
            refuse,
        ),
        Tool(
            "transfer_to_human",
            "Hand the conversation to a human agent, naming the policy rule that applies. "
            "Ends the conversation.",
            object_schema(
                {
                    "reason_code": _reason_code_schema(),
                    "summary": {"type": "string", "maxLength": 2000},
                }
            ),
            "control",
            transfer_to_human,
            terminal=True,
        ),
    ]
}


# Tool families of the other environments live beside this module, one file each, and
# join the one vocabulary here (imported late: they use the schemas defined above).
from trace_gym.world import tools_commerce, tools_support  # noqa: E402

for _family in (tools_commerce.TOOLS, tools_support.TOOLS):
    _clash = set(_family) & set(VOCABULARY)
    if _clash:
        raise RuntimeError(f"tool names defined twice in the vocabulary: {sorted(_clash)}")
    VOCABULARY.update(_family)


def pick_tools(*names: str) -> list[Tool]:
    """The named tools from :data:`VOCABULARY`, in the given order."""
    missing = [n for n in names if n not in VOCABULARY]
    if missing:
        raise KeyError(f"not in the shared tool vocabulary: {missing}")
    return [VOCABULARY[n] for n in names]


def records_read(calls: list[Any]) -> list[tuple[str, str]]:
    """Records returned by successful read calls, in call order, without repeats.

    ``calls`` are :class:`~trace_gym.core.env.CallRecord` objects.
    """
    out: list[tuple[str, str]] = []
    for call in calls:
        target = READ_TARGETS.get(call.name)
        if call.ok and target is not None:
            record = (target[0], call.arguments[target[1]])
            if record not in out:
                out.append(record)
    return out


ID_ARGUMENTS = {
    "customer_id": "customers",
    "order_id": "orders",
    "reservation_id": "reservations",
    "payment_method_id": "payment_methods",
}
"""Argument name -> the table whose record it names (used to scope checks to records)."""


def touches(call: Any, owned: list[list[str]]) -> bool:
    """Whether a call names any of the ``owned`` [table, id] records in its arguments."""
    if not isinstance(call.arguments, dict):
        return False
    owned_set = {(t, k) for t, k in owned}
    for name, table in ID_ARGUMENTS.items():
        key = call.arguments.get(name)
        # A call the schema rejected is still recorded, with whatever JSON the agent sent.
        if isinstance(key, str) and (table, key) in owned_set:
            return True
    return False


def restrict_diff(diff: list[dict[str, Any]], owned: list[list[str]]) -> list[dict[str, Any]]:
    """The part of a :func:`~trace_gym.world.model.world_diff` about the ``owned`` records
    (log events count when they name an owned record)."""
    prefixes = tuple(f"{t}.{k}" for t, k in owned)
    ids = {k for _, k in owned}
    out = []
    for d in diff:
        if d["path"] == "log":
            events = [e for e in d["after"] if ids & {str(v) for v in e.values()}]
            if events:
                out.append({"path": "log", "before": None, "after": events})
        elif d["path"].startswith(prefixes):
            out.append(d)
    return out
