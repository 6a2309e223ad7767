"""The customer-service policy: the requests it covers and the rules each request kind has.

How each rule is decided and planted is in :mod:`trace_gym.world.rules` (its names are
re-exported here, where the environments import them).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from trace_gym.world.model import World
from trace_gym.world.rules import (  # noqa: F401  (Record, prepare_request_records: re-exported)
    Record,
    Rule,
    account_rules,
    departure_notice_rule,
    final_sale_rule,
    group_membership_rule,
    insurance_rule,
    prepare_request_records,
    status_rule,
    value_membership_rule,
    window_rule,
)


@dataclass(frozen=True)
class Request:
    """A kind of state-changing request and the write that grants it."""

    kind: str
    table: str
    write_tool: str
    noun: str


REQUESTS = {
    "cancel_order": Request("cancel_order", "orders", "cancel_order", "order"),
    "return_order": Request("return_order", "orders", "return_order", "order"),
    "cancel_reservation": Request(
        "cancel_reservation", "reservations", "cancel_reservation", "reservation"
    ),
}


# -- the catalogue --------------------------------------------------------------------------
def rules_for(kind: str) -> list[Rule]:
    """The rule pool of one request kind, in planting order; the status rule first (it is
    always in force, and other rules' inputs depend on the status it plants)."""
    return list(_pool(kind))


@cache
def _pool(kind: str) -> tuple[Rule, ...]:
    return tuple(_build_pool(kind))


def _build_pool(kind: str) -> list[Rule]:
    if kind == "cancel_order":
        return [
            status_rule(
                "order_status",
                "orders",
                ("pending", "processing"),
                ("shipped", "delivered"),
                "The order's status is pending or processing.",
            ),
            window_rule(
                "cancel_window",
                "placed_on",
                14,
                "The order was placed at most 14 days ago.",
            ),
            value_membership_rule("orders", 500.0, "cancelled"),
            *account_rules("orders"),
        ]
    if kind == "return_order":
        return [
            status_rule(
                "return_status",
                "orders",
                ("delivered",),
                ("pending", "processing", "shipped"),
                "The order has been delivered.",
            ),
            window_rule(
                "return_window",
                "delivered_on",
                30,
                "It was delivered at most 30 days ago.",
            ),
            final_sale_rule(),
            value_membership_rule("orders", 300.0, "returned"),
            *account_rules("orders"),
        ]
    if kind == "cancel_reservation":
        return [
            status_rule(
                "reservation_status",
                "reservations",
                ("confirmed",),
                ("checked_in",),
                "The reservation's status is confirmed.",
            ),
            departure_notice_rule(),
            insurance_rule(),
            group_membership_rule(),
            *account_rules("reservations"),
        ]
    raise KeyError(f"unknown request kind {kind!r}; known: {sorted(REQUESTS)}")


@cache
def n_request_kinds_with(code: str) -> int:
    """How many request kinds' pools have the rule ``code`` (1 to 3)."""
    return sum(any(r.code == code for r in _pool(kind)) for kind in REQUESTS)


def rule_by_code(kind: str, code: str) -> Rule:
    for rule in rules_for(kind):
        if rule.code == code:
            return rule
    raise KeyError(f"no rule {code!r} for request {kind!r}")


def violated_rules(world: World, kind: str, target: str, codes: list[str]) -> list[str]:
    """Codes of the rules in force that the target violates (in policy order)."""
    return [c for c in codes if not rule_by_code(kind, c).holds(world, target)]


def deciding_records(world: World, kind: str, target: str, codes: list[str]) -> list[Record]:
    """Records an agent must read to decide every rule in force (deduplicated, in order)."""
    out: list[Record] = []
    for code in codes:
        for record in rule_by_code(kind, code).records(world, target):
            if record not in out:
                out.append(record)
    return out
