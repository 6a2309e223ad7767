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
    "account_hold",
    "identity_verified",
    "refund_limit",
    "account_age",
    "open_dispute",
    "fraud_review",
    "email_verified",
    "chargeback_limit",
    "balance_due",
    "supported_country",
    "discount_limit",
    "address_verified",
    "terms_accepted",
    "failed_logins",
    "minimum_age",
    "partner_sale",
    "price_adjusted",
    "other",
]
"""Reason codes for refusals: one per policy rule of the world, plus ``other``."""

# -- shopping and travel (tools_commerce) ------------------------------------------------------
CABIN_NAMES = ["basic_economy", "economy", "business"]
FLIGHT_NUMBER = {"type": "string", "description": "Flight number, e.g. TR1234."}
AIRPORT = {"type": "string", "description": "IATA airport code, e.g. JFK."}
ISO_DATE = {
    "type": "string",
    "description": "Date as YYYY-MM-DD.",
    "pattern": r"^\d{4}-\d{2}-\d{2}$",
}
CABIN = {"type": "string", "enum": CABIN_NAMES, "description": "Cabin class."}
PRODUCT_ID = {"type": "string", "description": "Product id, e.g. P-12345."}
PRODUCT_CATEGORY = {"type": "string", "description": "Product category, e.g. running shoes."}
ITEM_IDS = {
    "type": "array",
    "items": {"type": "string"},
    "minItems": 1,
    "description": "Item ids (a product variant in the catalogue, an item in an order).",
}
AMOUNT = {"type": "number", "minimum": 0, "description": "Amount in dollars, e.g. 123.45."}
PAYMENT_SPLIT = {
    "type": "array",
    "minItems": 1,
    "description": "How the amount is split over payment methods (certificates, gift cards, "
    "credit cards); the amounts must add up to the total.",
    "items": {
        "type": "object",
        "properties": {
            "payment_method_id": {"type": "string", "description": "e.g. PM-01234."},
            "amount": AMOUNT,
        },
        "required": ["payment_method_id", "amount"],
        "additionalProperties": False,
    },
}
PASSENGERS = {
    "type": "array",
    "minItems": 1,
    "description": "Every passenger of the reservation.",
    "items": {
        "type": "object",
        "properties": {
            "first_name": {"type": "string"},
            "last_name": {"type": "string"},
            "date_of_birth": ISO_DATE,
        },
        "required": ["first_name", "last_name", "date_of_birth"],
        "additionalProperties": False,
    },
}
ADDRESS = {
    "type": "object",
    "description": "A postal address.",
    "properties": {
        "address1": {"type": "string", "description": "Street and number."},
        "address2": {"type": "string", "description": "Apartment, suite; empty if none."},
        "city": {"type": "string"},
        "state": {"type": "string", "description": "Two-letter state code, e.g. CA."},
        "zip": {"type": "string", "description": "Five-digit ZIP code."},
        "country": {"type": "string", "enum": ["USA"]},
    },
    "required": ["address1", "address2", "city", "state", "zip", "country"],
    "additionalProperties": False,
}
FLIGHT_SEGMENTS = {
    "type": "array",
    "minItems": 1,
    "description": "The new flights of the reservation, each with its date.",
    "items": {
        "type": "object",
        "properties": {"flight_number": FLIGHT_NUMBER, "date": ISO_DATE},
        "required": ["flight_number", "date"],
        "additionalProperties": False,
    },
}
