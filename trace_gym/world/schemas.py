"""Argument schemas and enums shared by every tool family of the world.

This module imports no tool module, so every tool family can import it.
"""

CUSTOMER_ID = {"type": "string", "description": "Customer id, e.g. C-01234."}
ORDER_ID = {"type": "string", "description": "Order id, e.g. O-12345."}
RESERVATION_ID = {"type": "string", "description": "Reservation id, e.g. R-4F2K1Q."}
PAYMENT_METHOD_ID = {"type": "string", "description": "Payment method id, e.g. PM-01234."}
CANCEL_REASONS = ["no_longer_needed", "ordered_by_mistake", "change_of_plans", "other"]

RULE_CODES = [
    "order_status",
    "cancel_window",
    "return_status",
    "return_window",
    "final_sale",
    "high_value_membership",
    "payment_method_active",
    "reservation_status",
    "departure_notice",
    "basic_economy_insurance",
    "group_membership",
    "other",
]
"""Reason codes for refusals: one per policy rule of the world, plus ``other``."""
