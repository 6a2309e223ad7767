"""Eligibility rules: how each rule of the customer-service policy is decided and planted.

A rule is a predicate over the world for one request (cancel an order, return an order,
cancel a reservation), with a reason code, a sentence for the written policy, the records an
agent must read to decide it, and a way to *plant* its inputs so the rule holds or fails
(optionally right at the boundary: the deadline day itself, one day past it). Which rules a
request kind has is :mod:`trace_gym.world.policy`'s catalogue.

The generator plants inputs; the verifier re-evaluates the rules on the initial world. The two
never share a label, so a generator bug shows up as a task whose oracle fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.model import World, day_offset, money, parse_day, parse_time, time_offset

Record = tuple[str, str]  # (table, id)


@dataclass(frozen=True)
class Rule:
    """One eligibility rule. ``holds``/``records``/``plant`` take (world, target id)."""

    code: str
    text: str
    holds: Callable[[World, str], bool]
    records: Callable[[World, str], list[Record]]
    plant: Callable[[World, str, StableRNG, bool, bool], None]
    """``plant(world, target, rng, satisfied, near_miss)`` sets the rule's inputs."""
    has_near_miss: bool = False


# -- shared helpers -------------------------------------------------------------------------
def _target(world: World, table: str, key: str) -> dict[str, Any]:
    return world.tables[table][key]


def _customer_of(world: World, table: str, key: str) -> dict[str, Any]:
    return world.tables["customers"][_target(world, table, key)["customer_id"]]


def _days_since(world: World, day: str) -> int:
    return (parse_day(world.now) - parse_day(day)).days


# -- status rules ---------------------------------------------------------------------------
def status_rule(
    code: str, table: str, allowed: tuple[str, ...], bad: tuple[str, ...], text: str
) -> Rule:
    def holds(world: World, key: str) -> bool:
        return _target(world, table, key)["status"] in allowed

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        record = _target(world, table, key)
        record["status"] = rng.choice(allowed if ok else bad)
        if table == "orders":
            delivered = record["status"] in ("delivered", "returned")
            record["delivered_on"] = record["placed_on"] if delivered else None

    return Rule(code, text, holds, lambda w, k: [(table, k)], plant)


# -- day-window rules (cancel within N days of placing, return within N days of delivery) ----
def window_rule(code: str, date_field: str, days: int, text: str) -> Rule:
    def holds(world: World, key: str) -> bool:
        day = _target(world, "orders", key)[date_field]
        return day is None or _days_since(world, day) <= days

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        record = _target(world, "orders", key)
        if near:
            age = days if ok else days + 1
        else:
            age = rng.integer(0, days - 1) if ok else rng.integer(days + 2, days + 40)
        if date_field == "delivered_on":
            if record["delivered_on"] is None:
                return  # not delivered: the window does not apply (the status rule decides)
            record["delivered_on"] = day_offset(world.now, -age)
            record["placed_on"] = day_offset(world.now, -age - rng.integer(1, 6))
        else:
            record["placed_on"] = day_offset(world.now, -age)
            if record["delivered_on"] is not None:
                record["delivered_on"] = day_offset(world.now, -max(age - 2, 0))

    return Rule(code, text, holds, lambda w, k: [("orders", k)], plant, has_near_miss=True)


def final_sale_rule() -> Rule:
    def holds(world: World, key: str) -> bool:
        return not any(item["final_sale"] for item in _target(world, "orders", key)["items"])

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        items = _target(world, "orders", key)["items"]
        for item in items:
            item["final_sale"] = False
        if not ok:  # near miss: the final-sale item is not the first one listed
            items[-1 if near else 0]["final_sale"] = True

    text = "No item is marked final_sale."
    return Rule("final_sale", text, holds, lambda w, k: [("orders", k)], plant, True)


# -- membership rules (decided by a second record: the customer) -----------------------------
def value_membership_rule(table: str, threshold: float, verb: str) -> Rule:
    what = "total" if table == "orders" else "price"
    text = f"A {what} above ${threshold:.2f} needs a silver or gold member."
    amount_field = "total" if table == "orders" else "price"

    def holds(world: World, key: str) -> bool:
        record = _target(world, table, key)
        return record[amount_field] <= threshold or _customer_of(world, table, key)[
            "membership"
        ] in ("silver", "gold")

    def records(world: World, key: str) -> list[Record]:
        return [(table, key), ("customers", _target(world, table, key)["customer_id"])]

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        record = _target(world, table, key)
        customer = _customer_of(world, table, key)
        if ok and (near or rng.bernoulli(0.5)):  # small enough, any tier
            amount = threshold if near else money(threshold * rng.integer(30, 95) / 100)
        else:
            amount = money(threshold + (0.01 if near else rng.integer(5, 400)))
            customer["membership"] = rng.choice(("silver", "gold")) if ok else "regular"
        _set_amount(record, amount_field, amount)

    return Rule("high_value_membership", text, holds, records, plant, has_near_miss=True)


def _set_amount(record: dict[str, Any], amount_field: str, amount: float) -> None:
    if amount_field == "total":  # keep item prices adding up to the total, and keep the items
        items = record["items"]
        rest = money(sum(item["price"] for item in items[1:]))
        if amount - rest < 1.0:  # shrink the other items to a tenth of the amount in all
            for item in items[1:]:
                item["price"] = money(amount * 0.1 / (len(items) - 1))
            rest = money(sum(item["price"] for item in items[1:]))
        items[0]["price"] = money(amount - rest)
    record[amount_field] = money(amount)


def group_membership_rule() -> Rule:
    text = "More than 4 passengers need a gold member."

    def holds(world: World, key: str) -> bool:
        res = _target(world, "reservations", key)
        return res["passengers"] <= 4 or _customer_of(world, "reservations", key)["membership"] == (
            "gold"
        )

    def records(world: World, key: str) -> list[Record]:
        return [
            ("reservations", key),
            ("customers", _target(world, "reservations", key)["customer_id"]),
        ]

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        res = _target(world, "reservations", key)
        customer = _customer_of(world, "reservations", key)
        if ok and (near or rng.bernoulli(0.5)):
            res["passengers"] = 4 if near else rng.integer(1, 3)
        else:
            res["passengers"] = 5 if near else rng.integer(5, 8)
            customer["membership"] = "gold" if ok else rng.choice(("regular", "silver"))

    return Rule("group_membership", text, holds, records, plant, has_near_miss=True)


# -- refund method rule (decided by the customer's profile and a third record) -------------
def refund_method_id(world: World, table: str, key: str) -> str:
    """The payment method a refund of this request goes to: the one the customer's profile
    names for refunds (``refund_method_id``), else the request's original payment method."""
    customer = _customer_of(world, table, key)
    return customer.get("refund_method_id") or _target(world, table, key)["payment_method_id"]


def payment_active_rule(table: str) -> Rule:
    text = "The refund method the profile names (refund_method_id) is active."

    def holds(world: World, key: str) -> bool:
        pm = refund_method_id(world, table, key)
        return world.tables["payment_methods"][pm]["status"] == "active"

    def records(world: World, key: str) -> list[Record]:
        customer = _target(world, table, key)["customer_id"]
        pm = refund_method_id(world, table, key)
        return [(table, key), ("customers", customer), ("payment_methods", pm)]

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        pm = world.tables["payment_methods"][refund_method_id(world, table, key)]
        pm["status"] = "active" if ok else rng.choice(("expired", "closed"))

    return Rule("payment_method_active", text, holds, records, plant)


# -- account rules (any request; decided by the customer's profile or the record itself) ------
def _customer_records(table: str) -> Callable[[World, str], list[Record]]:
    def records(world: World, key: str) -> list[Record]:
        return [(table, key), ("customers", _target(world, table, key)["customer_id"])]

    return records


def account_hold_rule(table: str) -> Rule:
    text = "The account is not on hold (account_hold)."

    def holds(world: World, key: str) -> bool:
        return not _customer_of(world, table, key).get("account_hold", False)

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        _customer_of(world, table, key)["account_hold"] = not ok

    return Rule("account_hold", text, holds, _customer_records(table), plant)


REFUND_LIMIT = 3
ACCOUNT_AGE_DAYS = 30


def identity_rule(table: str) -> Rule:
    text = "The profile shows identity_verified."

    def holds(world: World, key: str) -> bool:
        return bool(_customer_of(world, table, key).get("identity_verified", True))

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        _customer_of(world, table, key)["identity_verified"] = ok

    return Rule("identity_verified", text, holds, _customer_records(table), plant)


def count_limit_rule(
    table: str, code: str, field: str, limit: int, text: str, calm_most: int, most: int
) -> Rule:
    """A rule that holds while the customer's count ``field`` stays under ``limit``; planted
    right at it (``limit - 1`` / ``limit``) as a near miss, else in ``0..calm_most`` when it
    holds and ``limit + 1..most`` when it fails."""

    def holds(world: World, key: str) -> bool:
        return _customer_of(world, table, key).get(field, 0) < limit

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        if near:
            count = limit - 1 if ok else limit
        elif ok:
            count = rng.integer(0, calm_most) if calm_most else 0
        else:
            count = rng.integer(limit + 1, most)
        _customer_of(world, table, key)[field] = count

    return Rule(code, text, holds, _customer_records(table), plant, has_near_miss=True)


def refund_limit_rule(table: str) -> Rule:
    text = f"Fewer than {REFUND_LIMIT} refunds in the last 30 days (refunds_last_30_days)."
    return count_limit_rule(
        table, "refund_limit", "refunds_last_30_days", REFUND_LIMIT, text, REFUND_LIMIT - 2, 7
    )


def account_age_rule(table: str) -> Rule:
    text = f"The account was opened at least {ACCOUNT_AGE_DAYS} days ago (member_since)."

    def holds(world: World, key: str) -> bool:
        since = _customer_of(world, table, key)["member_since"]
        return _days_since(world, since) >= ACCOUNT_AGE_DAYS

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        if near:
            age = ACCOUNT_AGE_DAYS if ok else ACCOUNT_AGE_DAYS - 1
        else:
            age = rng.integer(ACCOUNT_AGE_DAYS + 1, 2000) if ok else rng.integer(0, 27)
        _customer_of(world, table, key)["member_since"] = day_offset(world.now, -age)

    return Rule("account_age", text, holds, _customer_records(table), plant, has_near_miss=True)


def open_dispute_rule(table: str) -> Rule:
    text = f"No payment dispute is open on the {_noun(table)} (dispute_open)."

    def holds(world: World, key: str) -> bool:
        return not _target(world, table, key).get("dispute_open", False)

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        _target(world, table, key)["dispute_open"] = not ok

    return Rule("open_dispute", text, holds, lambda w, k: [(table, k)], plant)


CHARGEBACK_LIMIT = 2
BALANCE_FIELD = "balance_due"
SUPPORTED_COUNTRIES = ("US", "CA", "GB")
OTHER_COUNTRIES = ("DE", "FR", "MX", "AU", "BR")
DISCOUNT_LIMIT = 50


def profile_flag_rule(table: str, code: str, flag: str, harmless: bool, text: str) -> Rule:
    """A rule that holds while the customer's profile shows ``flag`` at its harmless value."""

    def holds(world: World, key: str) -> bool:
        return bool(_customer_of(world, table, key).get(flag, harmless)) == harmless

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        _customer_of(world, table, key)[flag] = harmless if ok else not harmless

    return Rule(code, text, holds, _customer_records(table), plant)


def chargeback_rule(table: str) -> Rule:
    text = (
        f"Fewer than {CHARGEBACK_LIMIT} chargebacks in the last 12 months (chargebacks_last_year)."
    )
    return count_limit_rule(
        table, "chargeback_limit", "chargebacks_last_year", CHARGEBACK_LIMIT, text, 0, 5
    )


def balance_due_rule(table: str) -> Rule:
    text = f"No unpaid balance ({BALANCE_FIELD} is 0.00)."

    def holds(world: World, key: str) -> bool:
        return _customer_of(world, table, key).get(BALANCE_FIELD, 0.0) <= 0.0

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        owed = 0.01 if near else money(rng.integer(5, 300) + rng.integer(0, 99) / 100)
        _customer_of(world, table, key)[BALANCE_FIELD] = 0.0 if ok else owed

    return Rule("balance_due", text, holds, _customer_records(table), plant, has_near_miss=True)


def country_rule(table: str) -> Rule:
    names = ", ".join(SUPPORTED_COUNTRIES[:-1]) + f" or {SUPPORTED_COUNTRIES[-1]}"
    text = f"The account is registered in {names} (country)."

    def holds(world: World, key: str) -> bool:
        return _customer_of(world, table, key).get("country", "US") in SUPPORTED_COUNTRIES

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        countries = SUPPORTED_COUNTRIES if ok else OTHER_COUNTRIES
        _customer_of(world, table, key)["country"] = rng.choice(countries)

    return Rule("supported_country", text, holds, _customer_records(table), plant)


def discount_rule(table: str) -> Rule:
    text = (
        f"The {_noun(table)} was bought at a discount under {DISCOUNT_LIMIT} % (discount_percent)."
    )

    def holds(world: World, key: str) -> bool:
        return _target(world, table, key).get("discount_percent", 0) < DISCOUNT_LIMIT

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        if near:
            percent = DISCOUNT_LIMIT - 1 if ok else DISCOUNT_LIMIT
        else:
            percent = rng.integer(0, DISCOUNT_LIMIT - 20) if ok else rng.integer(55, 90)
        _target(world, table, key)["discount_percent"] = percent

    return Rule("discount_limit", text, holds, lambda w, k: [(table, k)], plant, has_near_miss=True)


FAILED_LOGIN_LIMIT = 5
MINIMUM_AGE_YEARS = 18


def record_flag_rule(table: str, code: str, flag: str, text: str) -> Rule:
    """A rule that holds while the request's own record does not show ``flag``."""

    def holds(world: World, key: str) -> bool:
        return not _target(world, table, key).get(flag, False)

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        _target(world, table, key)[flag] = not ok

    return Rule(code, text, holds, lambda w, k: [(table, k)], plant)


def failed_logins_rule(table: str) -> Rule:
    text = f"Fewer than {FAILED_LOGIN_LIMIT} failed sign-ins today (failed_logins_today)."
    return count_limit_rule(
        table, "failed_logins", "failed_logins_today", FAILED_LOGIN_LIMIT, text, 2, 12
    )


def _adult_since(world: World) -> date:
    """The latest date of birth of someone who is :data:`MINIMUM_AGE_YEARS` today."""
    today = parse_day(world.now)
    day = 28 if (today.month, today.day) == (2, 29) else today.day  # no 29 Feb that year
    return today.replace(year=today.year - MINIMUM_AGE_YEARS, day=day)


def minimum_age_rule(table: str) -> Rule:
    text = f"The account holder is {MINIMUM_AGE_YEARS} or older today (date_of_birth)."

    def holds(world: World, key: str) -> bool:
        born = _customer_of(world, table, key).get("date_of_birth")
        return born is None or date.fromisoformat(born) <= _adult_since(world)

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        limit = _adult_since(world)
        if near:  # the 18th birthday is today (allowed) or tomorrow (not yet)
            born = limit if ok else limit + timedelta(days=1)
        elif ok:
            born = limit - timedelta(days=rng.integer(30, 20000))
        else:
            born = limit + timedelta(days=rng.integer(30, 1800))
        _customer_of(world, table, key)["date_of_birth"] = born.isoformat()

    return Rule("minimum_age", text, holds, _customer_records(table), plant, has_near_miss=True)


def account_rules(table: str) -> list[Rule]:
    """Rules every request kind has: the customer's account and the request's own record
    (dispute, discount, partner sale, price adjustment). They are many so that the rules in
    force are many: a refusal must name the violated one, and a blind refusal citing the rule
    at a fixed place in the listed policy is right on one refused task in as many as are
    listed."""
    return [
        payment_active_rule(table),
        account_hold_rule(table),
        identity_rule(table),
        refund_limit_rule(table),
        account_age_rule(table),
        open_dispute_rule(table),
        profile_flag_rule(
            table,
            "fraud_review",
            "fraud_review",
            False,
            "The account is not under fraud review (fraud_review).",
        ),
        profile_flag_rule(
            table,
            "email_verified",
            "email_verified",
            True,
            "The profile shows email_verified.",
        ),
        chargeback_rule(table),
        balance_due_rule(table),
        country_rule(table),
        discount_rule(table),
        profile_flag_rule(
            table,
            "address_verified",
            "address_verified",
            True,
            "The profile shows address_verified.",
        ),
        profile_flag_rule(
            table,
            "terms_accepted",
            "terms_accepted",
            True,
            "The profile shows terms_accepted (the current terms of service).",
        ),
        failed_logins_rule(table),
        minimum_age_rule(table),
        record_flag_rule(
            table,
            "partner_sale",
            "sold_by_partner",
            f"The {_noun(table)} was not bought through a partner (sold_by_partner).",
        ),
        record_flag_rule(
            table,
            "price_adjusted",
            "price_adjusted",
            f"The {_noun(table)} got no earlier price adjustment (price_adjusted).",
        ),
    ]


def _noun(table: str) -> str:
    return "order" if table == "orders" else "reservation"


def prepare_request_records(world: World, table: str, key: str, rng: StableRNG) -> None:
    """Give the request's records every field the rules read, all in their harmless state,
    and give the customer a second and maybe a third payment method, one of which (never the
    request's original one) the profile names for refunds, so the refund destination is found
    only in the customer's profile."""
    from trace_gym.world.generate import new_payment_method

    target = _target(world, table, key)
    customer = world.tables["customers"][target["customer_id"]]
    target.setdefault("dispute_open", False)
    target.setdefault("discount_percent", 0)
    target.setdefault("sold_by_partner", False)
    target.setdefault("price_adjusted", False)
    if "refund_method_id" not in customer:
        for _ in range(rng.integer(1, 2)):
            new_payment_method(rng, world, customer, rng.choice(("credit_card", "gift_card")))
        # never the original payment method: that one is in the request's own record, so a
        # blind "first payment method seen" or "default destination" grant would pass
        original = target["payment_method_id"]
        others = [p for p in customer["payment_method_ids"] if p != original]
        customer["refund_method_id"] = rng.choice(others)
        customer["account_hold"] = False
        customer["identity_verified"] = True
        customer["refunds_last_30_days"] = rng.integer(0, REFUND_LIMIT - 1)
        customer["fraud_review"] = False
        customer["email_verified"] = True
        customer["chargebacks_last_year"] = 0
        customer[BALANCE_FIELD] = 0.0
        customer["country"] = rng.choice(SUPPORTED_COUNTRIES)
        customer["address_verified"] = True
        customer["terms_accepted"] = True
        customer["failed_logins_today"] = 0
        born = _adult_since(world) - timedelta(days=rng.integer(30, 20000))
        customer["date_of_birth"] = born.isoformat()


# -- reservation rules ----------------------------------------------------------------------
def departure_notice_rule() -> Rule:
    text = "The first flight departs at least 24 hours from now."

    def hours_left(world: World, key: str) -> float:
        departs = _target(world, "reservations", key)["flights"][0]["departs_at"]
        return (parse_time(departs) - parse_time(world.now)).total_seconds() / 3600

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        if near:
            hours = 24 if ok else 23
        else:
            hours = rng.integer(30, 900) if ok else rng.integer(2, 20)
        res = _target(world, "reservations", key)
        res["flights"][0]["departs_at"] = time_offset(world.now, hours)
        res["booked_on"] = time_offset(world.now, -24 * rng.integer(2, 60))

    def holds(world: World, key: str) -> bool:
        return hours_left(world, key) >= 24

    rule = Rule("departure_notice", text, holds, lambda w, k: [("reservations", k)], plant, True)
    return rule


def insurance_rule() -> Rule:
    text = "A basic economy reservation needs travel insurance."

    def holds(world: World, key: str) -> bool:
        res = _target(world, "reservations", key)
        return res["cabin"] != "basic_economy" or res["travel_insurance"]

    def plant(world: World, key: str, rng: StableRNG, ok: bool, near: bool) -> None:
        res = _target(world, "reservations", key)
        if ok:
            res["cabin"] = rng.choice(("basic_economy", "economy", "business"))
            res["travel_insurance"] = res["cabin"] == "basic_economy" or rng.bernoulli(0.5)
        else:
            res["cabin"], res["travel_insurance"] = "basic_economy", False

    return Rule("basic_economy_insurance", text, holds, lambda w, k: [("reservations", k)], plant)
