"""``trace/recover-communicate-v0``: diagnose a failed call, fix its cause, retry, report.

## Capability
*Error recovery and communication*: when the natural call fails with a typed error, find
the cause (from the error or the records), make the prerequisite call that removes it, retry,
and tell the customer the result with its exact values, changing nothing else and asking the
customer only for what they have not said.

## Task (seed 0, train split, difficulty 0.5)
A customer asks either to upgrade an order to express or overnight shipping and to hear the
fee and the new delivery date, or to book a delivery date and time window and to hear it
confirmed. The call is blocked by planted faults, checked in this order by the tool: the
account is locked until identity is verified (fix: ``verify_identity`` with the date of birth
the customer gives, in the opening or when asked); the order is on hold (fix:
``release_order_hold``, which itself needs a verified identity at higher difficulty); for an
upgrade, the order's payment method cannot pay the fee: its card expired, its card was
closed, or it is a gift card whose balance is below the fee (fix:
``set_order_payment_method`` to the other card the customer named, by brand and last four
digits, by last four digits only, or as "my other card" when the records show one). Orders
from the legacy system report every cause as the generic ``cause=request_failed``, so only
the records tell what is wrong. The customer has older orders, and every request is phrased
from several templates.

## Tools
``get_customer``, ``get_order``, ``get_payment_method`` (read); ``verify_identity``,
``release_order_hold``, ``set_order_payment_method``, ``upgrade_shipping``,
``schedule_delivery`` (write).

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``diagnosed`` | 0.2 | before each fix, the error named its cause or the records showing it were read (partial: the share of faults) |
| ``fixed`` | 0.2 | every fault is gone from the final world (partial: the share) |
| ``request_succeeded`` | 0.3 | the world changed exactly as fixes plus the request change it |
| ``reports_result`` | 0.3 | the first message after the request succeeded (the customer leaves on it) names its values (upgrade: the fee and the delivery date; booking: the date and the window), no other amount than the fee or the order total and no other date than that or today, in at most 600 characters |
| ``no_unnecessary_changes`` (gate) | 0 | every change agrees with the reference end state (no other card, speed or record touched) |
| ``identity_from_customer`` (gate) | 0 | ``verify_identity`` ran only once the customer had given the date of birth (in the opening or asked for it), never with one copied from the records |
| ``no_needless_question`` (gate) | 0 | no question asks the customer for a detail they already gave (the order, the speed, the date or window, the date of birth, the card); in the composite only questions from the turn the request became current count |

An episode in which the request never went through scores 0 (every task can be recovered),
so reading and stalling, or fixing some faults and giving up, earns nothing. Doing nothing scores 0 on every task.

## Episode end
Terminated when the customer leaves (after the message that follows the successful request,
or after four replies without progress); truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| faults (a booking has at most 2) | 1 | 2 or 3 |
| the hold needs identity verification first (longer chain) | never | 80 % |
| generic error text (legacy orders) | never | 60 % |
| other cards (closed or expired) | 0 | 2 |
| the customer names a backup card that must not be used (no card fault) | never | 80 % |
| the customer gives no date of birth in the opening | never | 50 % |
| the request is a delivery booking | 35 % | 35 % |

The rates are declared in ``RecoverCommunicateEnv.knob_rates`` and hold over 1,000 seeds.

## Version history
* v0 (revised before release): delivery bookings, closed cards and short gift-card
  balances, the date of birth sometimes asked for, the backup card named in three ways,
  older orders, several phrasings per request; ``decided`` (no credit without a change) and
  the identity and needless-question gates. Seeds mean different tasks than in the first v0
  draft.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import CallRecord, EpisodeState
from trace_gym.core.plans import Segment
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_payment_method
from trace_gym.world.model import World, cents, day_offset, money, world_diff
from trace_gym.world.support_records import (
    customer_records,
    extra_card,
    support_customer,
    support_order,
)
from trace_gym.world.tools import VOCABULARY, records_read, restrict_diff, touches
from trace_gym.world.tools_support import (
    DELIVERY_WINDOWS,
    SCHEDULE_HORIZON_DAYS,
    SPEEDS,
    upgrade_fee,
)

CAPABILITY = "error_recovery_communication"
ENV_ID = "trace/recover-communicate-v0"
KINDS = ("upgrade", "booking")
FAULTS = ("account_locked", "order_on_hold", "payment")
"""Planted fault slots, in the order the request's tool checks them."""
PAYMENT_FAULTS = ("card_expired", "card_closed", "low_balance")
NESTED = "identity_unverified"
"""The hold's own prerequisite: releasing it needs a verified identity."""
CAUSES = {
    "account_locked": "account_locked",
    "order_on_hold": "order_on_hold",
    NESTED: NESTED,
    "card_expired": "card_expired",
    "card_closed": "payment_method_inactive",
    "low_balance": "insufficient_balance",
}
"""Fault -> the cause code a (non-legacy) refusal names."""
HOLDS = ("address_check", "fraud_review", "payment_review")
MAX_FINAL_CHARS = 600
MAX_QUESTION_CHARS = 1000
_AMOUNT = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+)\.(\d{2})(?!\d)")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_QUESTION = re.compile(r"[^.!?\n]*\?")
DETAIL_PATTERNS: dict[str, re.Pattern[str]] = {
    "order": re.compile(
        r"\b(order[ _-]?(id|ids|number|numbers|no)\b|(which|what) (one )?(of your )?orders?\b)"
    ),
    "speed": re.compile(r"\b(speed|express|overnight|how fast|shipping (option|method|level))"),
    "date": re.compile(r"\b(delivery date|(which|what) (delivery )?(date|day)(?! of birth))\b"),
    "window": re.compile(r"\b(window|time of day|what time|which time|morning|afternoon|evening)"),
    "date_of_birth": re.compile(r"\b(birth|dob|identity|verif)"),
    "card": re.compile(r"\b(card|cards|last (four|4)|payment[ _]method)"),
}
"""Phrases by which a question asks the customer for a detail."""

GREETINGS = (
    "Hi, I'm {name} (customer id {cid}).",
    "Hello, this is {name}, customer {cid}.",
    "Hi there! {name} here, customer number {cid}.",
    "Good afternoon. My name is {name}, customer id {cid}.",
)
UPGRADE_TEXTS = (
    "Please upgrade my order {oid} to {speed} shipping, and tell me the fee and the new "
    "delivery date.",
    "I'd like {speed} shipping on order {oid}. What will it cost, and when will it arrive?",
    "Can you switch order {oid} to {speed} delivery? Let me know the fee and the new date.",
    "I need order {oid} sooner: {speed} shipping, please. Tell me the charge and the "
    "delivery date.",
)
BOOKING_TEXTS = (
    "Please book the delivery of order {oid} for {date} in the {window}, and confirm the slot.",
    "Can you schedule order {oid} to arrive on {date}, {window} window? Please confirm it.",
    "I'd like order {oid} delivered on {date} in the {window}. Let me know once it's booked.",
    "Could you set a delivery slot for order {oid}: {date}, {window}? Confirm when done.",
)
DOB_TEXTS = (
    " For verification, my date of birth is {dob}.",
    " My date of birth is {dob}, in case you need it.",
    " (Date of birth: {dob}.)",
)
BACKUP_TEXTS = {
    "full": (
        " If there's a problem with my card, use my other card, the {brand} ending in {last4}.",
        " Should the payment fail, charge my {brand} card ending {last4} instead.",
    ),
    "last4": (
        " If my card doesn't work, use the one ending in {last4}.",
        " In case of a payment problem, my card ending {last4} is fine.",
    ),
    "other": (
        " If there's an issue with the payment, use my other card.",
        " If my card is a problem, charge my other card instead.",
    ),
}


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecoverConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    n_faults: int = knob(
        2,
        low=1,
        high=len(FAULTS),
        doc="most faults blocking the request (each task has this many or one fewer, at "
        "least one; a delivery booking has at most 2)",
    )
    nested_probability: float = knob(
        0.4, low=0.0, high=1.0, doc="a hold (without a lock) also needs identity verification"
    )
    vague_error_probability: float = knob(
        0.3, low=0.0, high=1.0, doc="the order is a legacy one whose errors name no cause"
    )
    n_other_cards: int = knob(
        1, low=0, high=5, doc="closed or expired cards besides the order's and the backup"
    )
    decoy_backup_probability: float = knob(
        0.4, low=0.0, high=1.0, doc="without a card fault, the customer names a backup card"
    )
    no_dob_probability: float = knob(
        0.25, low=0.0, high=1.0, doc="the opening gives no date of birth"
    )
    booking_share: float = knob(
        0.35, low=0.0, high=1.0, doc="requests that book a delivery slot instead of upgrading"
    )

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "n_faults": 1 + round(2 * d),
            "nested_probability": 0.8 * d,
            "vague_error_probability": 0.6 * d,
            "n_other_cards": round(2 * d),
            "decoy_backup_probability": 0.8 * d,
            "no_dob_probability": 0.5 * d,
        }


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecoverTask:
    kind: str
    customer_id: str
    order_id: str
    request_call: dict[str, Any]
    """What the customer asks for: ``upgrade_shipping`` or ``schedule_delivery``."""
    faults: list[str]
    """Planted faults in the order the request meets them (``identity_unverified`` nested)."""
    fix_calls: list[dict[str, Any]]
    """The reference fixes, in order; then :attr:`request_call`."""
    date_of_birth: str
    dob_in_opening: bool
    faulty_card: str
    """The order's payment method when it cannot pay ('' otherwise)."""
    backup_card: str
    """The card the customer named ('' when they named none)."""
    vague_errors: bool
    fee: float | None
    """The upgrade's fee (None for a booking)."""
    report_date: str
    """The new estimated delivery date, or the booked date."""
    window: str | None
    stated: list[str]
    """Details the customer gave in the opening (asking for them again is needless)."""
    opening: str
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_into(world: World, rng: StableRNG, cfg: RecoverConfig) -> RecoverTask:
    """Add one blocked request (its customer and records) to ``world``."""
    customer = support_customer(rng, world)
    for _ in range(1 + rng.below(2)):  # older orders come first in the customer's record
        support_order(rng, world, customer, status=rng.choice(("delivered", "cancelled")))
    order = support_order(rng, world, customer, status=rng.choice(("pending", "processing")))
    cid, oid = customer["customer_id"], order["order_id"]
    kind = "booking" if rng.bernoulli(cfg.booking_share) else "upgrade"
    if kind == "upgrade":
        request = _call("upgrade_shipping", order_id=oid, speed=rng.choice(tuple(SPEEDS)))
        slots = FAULTS
    else:
        date = day_offset(world.now, rng.integer(2, SCHEDULE_HORIZON_DAYS))
        window = rng.choice(DELIVERY_WINDOWS)
        request = _call("schedule_delivery", order_id=oid, date=date, window=window)
        slots = FAULTS[:2]
    # n_faults - 1 or n_faults: always all three would leave no hold without a lock, and the
    # nested-prerequisite knob could never fire at the top difficulty
    n_faults = rng.integer(max(1, cfg.n_faults - 1), cfg.n_faults)
    chosen = set(rng.sample(slots, min(n_faults, len(slots))))
    payment = rng.choice(PAYMENT_FAULTS) if "payment" in chosen else None
    faults = [payment if f == "payment" else f for f in FAULTS if f in chosen]
    vague = rng.bernoulli(cfg.vague_error_probability)
    order["legacy_system"] = vague
    for _ in range(cfg.n_other_cards):
        extra_card(rng, world, customer, status=rng.choice(("closed", "expired")))
    backup, backup_style = "", ""
    if payment or rng.bernoulli(cfg.decoy_backup_probability):
        backup = extra_card(rng, world, customer)["payment_method_id"]
        # beside a gift card the order's own card is active too: "my other card" is unclear
        styles = ("full", "last4") if payment == "low_balance" else ("full", "last4", "other")
        backup_style = rng.choice(styles)
    fixes = _plant(world, rng, customer, order, faults, cfg.nested_probability, backup, request)
    faulty = order["payment_method_id"] if payment else ""
    if NESTED in _fault_names(world, cid, oid, request):
        faults.insert(faults.index("order_on_hold") + 1, NESTED)
    ref = _after(world, fixes + [request])
    result_order = ref.tables["orders"][oid]
    dob_in_opening = not rng.bernoulli(cfg.no_dob_probability)
    stated = ["order", *(["speed"] if kind == "upgrade" else ["date", "window"])]
    stated += (["date_of_birth"] if dob_in_opening else []) + (["card"] if backup else [])
    return RecoverTask(
        kind=kind,
        customer_id=cid,
        order_id=oid,
        request_call=request,
        faults=faults,
        fix_calls=fixes,
        date_of_birth=customer["date_of_birth"],
        dob_in_opening=dob_in_opening,
        faulty_card=faulty,
        backup_card=backup,
        vague_errors=vague,
        fee=ref.log[-1]["amount"] if kind == "upgrade" else None,
        report_date=result_order["estimated_delivery"]
        if kind == "upgrade"
        else result_order["delivery_slot"]["date"],
        window=None if kind == "upgrade" else request["arguments"]["window"],
        stated=stated,
        opening=_opening(rng, world, customer, request, dob_in_opening, backup, backup_style),
        owned=customer_records(world, cid),
        world={},
    )


def _plant(
    world: World,
    rng: StableRNG,
    customer: dict[str, Any],
    order: dict[str, Any],
    faults: list[str],
    nested_probability: float,
    backup: str,
    request: dict[str, Any],
) -> list[dict[str, Any]]:
    """Set the faults' inputs; return the reference fix calls in the order they must run."""
    cid, oid = customer["customer_id"], order["order_id"]
    fixes: list[dict[str, Any]] = []
    verify = _call("verify_identity", customer_id=cid, date_of_birth=customer["date_of_birth"])
    if "account_locked" in faults:
        customer.update(account_status="locked", lock_reason="identity_unverified")
        customer["identity_verified"] = False
        fixes.append(verify)
    if "order_on_hold" in faults:
        order["hold"] = rng.choice(HOLDS)
        if "account_locked" not in faults and rng.bernoulli(nested_probability):
            customer["identity_verified"] = False
            fixes.append(verify)
        fixes.append(_call("release_order_hold", order_id=oid))
    pm = world.tables["payment_methods"][order["payment_method_id"]]
    if "card_expired" in faults or "card_closed" in faults:
        pm["status"] = "expired" if "card_expired" in faults else "closed"
    if "low_balance" in faults:  # the order is paid by a gift card that cannot cover the fee
        gift = new_payment_method(rng, world, customer, "gift_card")
        fee = upgrade_fee(order["total"], request["arguments"]["speed"])
        gift["balance"] = money(max(0.0, fee - rng.integer(1, 8) - rng.integer(0, 99) / 100))
        order["payment_method_id"] = gift["payment_method_id"]
    if set(faults) & set(PAYMENT_FAULTS):
        fixes.append(_call("set_order_payment_method", order_id=oid, payment_method_id=backup))
    return fixes


def _fault_names(world: World, cid: str, oid: str, request: dict[str, Any]) -> list[str]:
    """The faults present in ``world`` (recomputed from the records, not from the plan)."""
    customer, order = world.tables["customers"][cid], world.tables["orders"][oid]
    out = []
    if customer.get("account_status") == "locked":
        out.append("account_locked")
    if order.get("hold"):
        out.append("order_on_hold")
        if not customer.get("identity_verified", True) and "account_locked" not in out:
            out.append(NESTED)
    if request["name"] == "upgrade_shipping":
        pm = world.tables["payment_methods"][order["payment_method_id"]]
        if pm["status"] != "active":
            out.append("card_expired" if pm["status"] == "expired" else "card_closed")
        elif "balance" in pm and pm["balance"] < upgrade_fee(
            order["total"], request["arguments"]["speed"]
        ):
            out.append("low_balance")
    return out


def _after(world: World, calls: list[dict[str, Any]]) -> World:
    """A copy of ``world`` after ``calls`` (each must succeed)."""
    return _apply(world.snapshot(), calls)


def _owned_part(world: World, owned: list[list[str]], log: list[dict[str, Any]]) -> World:
    """The ``owned`` records of ``world`` (shared, not copied) with ``log``: diffing two such
    parts costs what the request's records cost, however large the composite world is."""
    tables: dict[str, dict[str, Any]] = {}
    for table, key in owned:
        tables.setdefault(table, {})[key] = world.tables[table][key]
    return World(world.now, tables, log)


def _apply(world: World, calls: list[dict[str, Any]]) -> World:
    """``world`` after ``calls`` (each must succeed), changed in place."""
    for call in calls:
        VOCABULARY[call["name"]].handler(world, **call["arguments"])
    return world


def _opening(
    rng: StableRNG,
    world: World,
    customer: dict[str, Any],
    request: dict[str, Any],
    dob_in_opening: bool,
    backup: str,
    backup_style: str,
) -> str:
    args = request["arguments"]
    who = rng.choice(GREETINGS).format(name=customer["name"], cid=customer["customer_id"])
    if request["name"] == "upgrade_shipping":
        ask = rng.choice(UPGRADE_TEXTS).format(oid=args["order_id"], speed=args["speed"])
    else:
        ask = rng.choice(BOOKING_TEXTS).format(
            oid=args["order_id"], date=args["date"], window=args["window"]
        )
    extras = []
    if dob_in_opening:
        extras.append(rng.choice(DOB_TEXTS).format(dob=customer["date_of_birth"]))
    if backup:
        card = world.tables["payment_methods"][backup]
        extras.append(rng.choice(BACKUP_TEXTS[backup_style]).format(**card))
    return f"{who} {ask}" + "".join(rng.shuffle(extras))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


# -- verifier ---------------------------------------------------------------------------------
def cause_records(task: RecoverTask, fault: str) -> list[tuple[str, str]]:
    """Records that show a fault's cause (needed unless an error named the cause)."""
    if fault == "order_on_hold":
        return [("orders", task.order_id)]
    if fault in PAYMENT_FAULTS:
        return [("orders", task.order_id), ("payment_methods", task.faulty_card)]
    return [("customers", task.customer_id)]


def fix_records(task: RecoverTask, fault: str) -> list[tuple[str, str]]:
    """Records that the fix needs in any case: the customer's cards, to find the backup; the
    customer, to know whether releasing a hold needs identity verification first."""
    if fault in PAYMENT_FAULTS:
        return [("customers", task.customer_id), ("payment_methods", task.backup_card)]
    if fault == "order_on_hold":
        return [("customers", task.customer_id)]
    return []


def _fix_tool(fault: str) -> str:
    if fault == "order_on_hold":
        return "release_order_hold"
    if fault in PAYMENT_FAULTS:
        return "set_order_payment_method"
    return "verify_identity"


def _fix_turn(fault: str, calls: list[CallRecord]) -> int | None:
    """Turn of the first successful call that removes ``fault``."""
    want = _fix_tool(fault)
    turns = [c.turn for c in calls if c.ok and c.name == want and c.changed_world]
    return turns[0] if turns else None


def _diagnosed(task: RecoverTask, fault: str, calls: list[CallRecord]) -> bool:
    """The cause was named by an error or read, and the fix's records read, before the fix."""
    turn = _fix_turn(fault, calls)
    before = [c for c in calls if turn is None or c.turn < turn]
    seen = records_read(before)
    named = any(
        c.error is not None
        and str(c.error.get("message", "")).startswith(f"cause={CAUSES[fault]}:")
        for c in before
    )
    cause_known = named or all(r in seen for r in cause_records(task, fault))
    return cause_known and all(r in seen for r in fix_records(task, fault))


def _agrees(actual: list[dict], expected: list[dict]) -> list[str]:
    """Paths of ``actual`` changes that the reference end state does not make."""
    ref = {d["path"]: d["after"] for d in expected}
    bad = []
    for d in actual:
        if d["path"] == "log":
            extra = [e for e in d["after"] if e not in (ref.get("log") or [])]
            bad += ["log"] if extra else []
        elif d["path"] not in ref or ref[d["path"]] != d["after"]:
            bad.append(d["path"])
    return bad


def report_values(text: str) -> tuple[list[int], list[str]]:
    """Amounts (in cents) and ISO dates a message states."""
    amounts = [
        int(m.group(1).replace(",", "")) * 100 + int(m.group(2)) for m in _AMOUNT.finditer(text)
    ]
    return amounts, _DATE.findall(text)


def details_asked(text: str) -> set[str]:
    """Details an agent message asks the customer for (in a sentence ending with '?'; a
    message longer than :data:`MAX_QUESTION_CHARS` asks nothing)."""
    if "?" not in text or len(text) > MAX_QUESTION_CHARS:
        return set()
    questions = " ".join(_QUESTION.findall(text.lower().replace("_", " ")))
    return {d for d, pattern in DETAIL_PATTERNS.items() if pattern.search(questions)}


def _report_check(task: RecoverTask, ep: EpisodeState, calls: list[CallRecord]) -> Check:
    """The report is the first message after the successful request: the customer leaves on
    it, and inside the composite later messages belong to other requests."""
    name = task.request_call["name"]
    done = [c.turn for c in calls if c.ok and c.name == name]
    after = [t for t in ep.agent_texts if done and t[0] > done[0]]
    last = after[0] if after else (0, "")
    amounts, dates = report_values(last[1])
    total = ep.initial_world.tables["orders"][task.order_id]["total"]
    fee = [] if task.fee is None else [cents(task.fee)]
    ok = (
        bool(after)
        and len(last[1]) <= MAX_FINAL_CHARS
        and set(fee) <= set(amounts) <= {*fee, cents(total)}
        and task.report_date in dates
        and set(dates) <= {task.report_date, ep.initial_world.now[:10]}
        and (task.window is None or task.window in last[1].lower())
    )
    return Check(
        "reports_result", CAPABILITY, float(ok), 0.3,
        expected={"fee": task.fee, "date": task.report_date, "window": task.window},
        actual={"amounts_cents": amounts, "dates": dates, "chars": len(last[1])},
        message="the first message after the request succeeded reports its values",
    )  # fmt: skip


def _dob_turn(task: RecoverTask, ep: EpisodeState) -> int:
    """The turn after which the customer has given the date of birth (0: in the opening)."""
    if task.dob_in_opening:
        return 0
    asked = [t for t, text in ep.agent_texts if "date_of_birth" in details_asked(text)]
    return asked[0] if asked else ep.turn + 1


def verify(task: RecoverTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade an episode (``scoped``: only calls naming the task's own records count)."""
    calls = [c for c in ep.calls if not scoped or touches(c, task.owned)]
    world0 = ep.initial_world
    before = _owned_part(world0, task.owned, world0.log)
    calls_ref = task.fix_calls + [task.request_call]
    base = _owned_part(world0, task.owned, [])
    expected = restrict_diff(world_diff(base, _apply(base.snapshot(), calls_ref)), task.owned)
    after = _owned_part(ep.world, task.owned, ep.world.log)
    actual = restrict_diff(world_diff(before, after), task.owned)
    diagnosed = [f for f in task.faults if _diagnosed(task, f, calls)]
    remaining = _fault_names(ep.world, task.customer_id, task.order_id, task.request_call)
    fixed = [f for f in task.faults if f not in remaining]
    bad = _agrees(actual, expected)
    given = _dob_turn(task, ep)
    early = [c.turn for c in calls if c.ok and c.name == "verify_identity" and c.turn <= given]
    # inside the composite the episode view holds only the agent's messages from the turn
    # this request became current: questions for other requests are not in it
    asked = {d for _, text in ep.agent_texts for d in details_asked(text)}
    needless = sorted(asked & set(task.stated))
    # every task can be recovered: the decision is the request going through, and partial
    # fixes without it earn nothing (else fixing what an id lookup reaches would pay)
    decided = any(c.ok and c.name == task.request_call["name"] for c in calls)
    checks = [
        Check("diagnosed", CAPABILITY, fraction(len(diagnosed), len(task.faults)), 0.2,
              expected=task.faults, actual=diagnosed,
              message="before each fix, the cause was named by an error or read in the records"),
        Check("fixed", CAPABILITY, fraction(len(fixed), len(task.faults)), 0.2,
              expected=task.faults, actual=fixed, message="faults gone from the final world"),
        Check("request_succeeded", CAPABILITY, float(actual == expected), 0.3,
              expected=expected, actual=actual,
              message="world diff equals the fixes plus the request"),
        _report_check(task, ep, calls),
        Check("no_unnecessary_changes", CAPABILITY, float(not bad), 0.0, gate=True,
              expected=[d["path"] for d in expected], actual=bad,
              message="changes the reference end state does not make"),
        Check("identity_from_customer", CAPABILITY, float(not early), 0.0, gate=True,
              expected=f"after turn {given}", actual=early,
              message="identity verified before the customer gave the date of birth"),
        Check("no_needless_question", CAPABILITY, float(not needless), 0.0, gate=True,
              expected=[], actual=needless,
              message="questions about details the customer already gave"),
    ]  # fmt: skip
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,), decided=decided)


# -- oracle -----------------------------------------------------------------------------------
_READ = {"customers": ("get_customer", "customer_id"), "orders": ("get_order", "order_id"),
         "payment_methods": ("get_payment_method", "payment_method_id")}  # fmt: skip


def oracle(task: RecoverTask, world: World) -> list[Any]:
    """Read the customer and what shows each cause, ask for the date of birth if it is
    needed and not given, apply the fixes in order, make the request, report the values."""
    needed: list[tuple[str, str]] = [("customers", task.customer_id)]  # every fault needs it
    for fault in task.faults:
        records = cause_records(task, fault) + fix_records(task, fault)
        needed += [r for r in records if r not in needed]
    reads = [_call(_READ[t][0], **{_READ[t][1]: k}) for t, k in needed]
    fixes = [c for i, c in enumerate(task.fix_calls) if c not in task.fix_calls[:i]]
    ask = []
    if not task.dob_in_opening and any(c["name"] == "verify_identity" for c in fixes):
        ask = ["To proceed I need to verify your identity: what is your date of birth?"]
    if task.fee is None:
        report = (
            f"Your delivery of order {task.order_id} is booked for {task.report_date} in "
            f"the {task.window}."
        )
    else:
        speed = task.request_call["arguments"]["speed"]
        report = (
            f"Your order {task.order_id} now ships {speed}. The fee of {task.fee:.2f} has "
            f"been charged, and the new estimated delivery date is {task.report_date}."
        )
    return [
        {"tool_calls": reads} if len(reads) > 1 else reads[0],
        *ask,
        *fixes,
        task.request_call,
        report,
    ]


# -- scripted user ----------------------------------------------------------------------------
class RecoverUser(ScriptedUser):
    """Gives its details when asked, leaves after hearing the result of the request."""

    patience = 4
    nudges = ("Please go ahead with my request.",)

    def __init__(self, task: RecoverTask, world: World) -> None:
        super().__init__(task.opening)
        self.task = task
        self.card = ""
        if task.backup_card:
            card = world.tables["payment_methods"][task.backup_card]
            self.card = f"My other card is the {card['brand']} ending in {card['last4']}."

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        """The reply when ``agent_text`` is about this request, else None (composite use)."""
        name = self.task.request_call["name"]
        if any(c.ok and c.name == name and touches(c, self.task.owned) for c in episode.calls):
            return UserReply("Great, thank you!", done=True)
        asked = details_asked(agent_text)
        parts = []
        if "date_of_birth" in asked:
            parts.append(f"My date of birth is {self.task.date_of_birth}.")
        if "card" in asked:
            parts.append(self.card or "Please use the card on the order.")
        if asked - {"date_of_birth", "card"}:
            parts.append("It's all in my first message.")
        return UserReply(" ".join(parts)) if parts else None


# -- the spec ---------------------------------------------------------------------------------
def user(task: RecoverTask) -> RecoverUser:
    return RecoverUser(task, World.view(task.world))


def instructions(task: RecoverTask) -> str:
    return (
        "Use the tools to look records up and to make changes. A tool that refuses says "
        "why as 'cause=<code>: <reason>'. Change only what the customer's request needs. "
        "Verify a customer's identity only with the date of birth they tell you, and do "
        "not ask them for details they already gave. When you are done, tell the "
        "customer the outcome in a message without a tool call; write amounts with two "
        "decimals (12.34) and dates as YYYY-MM-DD."
    )


def hint(task: RecoverTask) -> str:
    return (
        "When a call fails, read the cause in the error; if it is generic, look at the "
        "account, the order and its payment method to find what blocks it. Remove each "
        "blocker with the tool made for it, using only details the customer gave (ask for "
        "one only if they have not given it), then retry; a fix can have its own "
        "prerequisite. Do not change anything that is not blocking. Finish with a short "
        "message that states the exact values the successful call returned."
    )


def requested_call(task: RecoverTask) -> dict[str, Any] | None:
    """The call the customer asks for, exactly as stated (it fails until fixed)."""
    return dict(task.request_call)


def features(task: RecoverTask) -> dict[str, Any]:
    cards = [k for t, k in task.owned if t == "payment_methods"]
    return {
        "kind": task.kind,
        "n_faults": len(task.faults),
        "chain_length": len(task.fix_calls),
        "nested_prerequisite": NESTED in task.faults,
        "vague_errors": task.vague_errors,
        "n_cards": len(cards),
        "decoy_backup": bool(task.backup_card) and not task.faulty_card,
        "dob_not_given": not task.dob_in_opening,
    }


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Do not recover from the typed error, in one of three ways (drawn per task):

    * ``retry``: make the request, ignore the error, retry it unchanged, apologise until the
      customer gives up;
    * ``first_fix``: read, make only the first fix, retry, and give up at the next error
      (harmless when one fix was all the task needed);
    * ``no_result``: recover fully but tell the customer none of the result's values.
    """
    task, plan = seg.task, seg.actions
    upgrade = dict(task.request_call)
    fixes = [c for i, c in enumerate(task.fix_calls) if c not in task.fix_calls[:i]]
    sorry = f"I'm sorry, I couldn't change order {task.order_id}: the system refused it."
    # the customer leaves after this many messages without a successful upgrade
    give_up = [sorry] * RecoverUser.patience
    way = rng.choice(("retry", "first_fix", "no_result"))
    if way == "retry":
        return [upgrade, upgrade, *give_up]
    if way == "first_fix":
        if len(fixes) <= 1:
            return plan
        return [*plan[: plan.index(fixes[0]) + 1], upgrade, *give_up]
    return [*plan[:-1], f"Your request for order {task.order_id} has been taken care of."]


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Diagnose why a call fails (typed error or the records), make the "
    "prerequisite calls that remove each cause, retry, and report the exact fee and date to "
    "the customer without changing anything else.",
    config=RecoverConfig,
    verify=verify,
    world_oracle=oracle,
    user=user,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "get_order",
        "get_payment_method",
        "verify_identity",
        "release_order_hold",
        "set_order_payment_method",
        "upgrade_shipping",
        "schedule_delivery",
    ),
    max_turns=14,
    tags=(
        CAPABILITY,
        "error_recovery",
        "tool_execute_communicate",
        "diagnose_fix_retry",
        "result_reporting",
    ),
    preamble="You are a customer-service agent for Tracewell, an online shop.",
    requested_call=requested_call,
    # Documented rates as shares of all tasks (the docstring's table gives each knob's chance
    # where it can apply).
    knob_rates=(
        KnobRate("vague_errors", 0.0, 0.0, 0.0),
        KnobRate("vague_errors", 0.5, 0.3),
        KnobRate("vague_errors", 1.0, 0.6),
        KnobRate("dob_not_given", 0.0, 0.0, 0.0),
        KnobRate("dob_not_given", 1.0, 0.5),
        KnobRate("kind", 0.0, 0.35, equals="booking"),
        KnobRate("kind", 1.0, 0.35, equals="booking"),
        # at d = 1 an upgrade (65 %) has 2 or 3 faults, a booking 2: no payment fault in
        # 0.65 * 1/6 + 0.35 = 45.8 % of tasks, a decoy in 80 % of those
        KnobRate("decoy_backup", 0.0, 0.0, 0.0),
        KnobRate("decoy_backup", 1.0, 0.367),
        # a hold without a lock in 0.65 * 1/2 * 1/3 of tasks, nested in 80 % of those
        KnobRate("nested_prerequisite", 0.0, 0.0, 0.0),
        KnobRate("nested_prerequisite", 1.0, 0.087, 0.03),
    ),
    # distinct masked task templates per 1,000 seeds: 570-840 measured by difficulty
    template_floor=400,
    generate_into=generate_into,
    lapse=lapse,
    env_name="RecoverCommunicateEnv",
)
RecoverCommunicateEnv = SPEC.env_class
"""Error recovery and communication; see the module docstring for the full description."""
