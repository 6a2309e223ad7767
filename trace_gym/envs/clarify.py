"""``trace/clarify-v0``: ask for what is missing, never invent it; say when it cannot be done.

## Capability
*Information gathering*: a request that lacks required details is completed only with values
the customer gave when asked; a request that no tool can do, or that needs something the
customer does not have, is declined explicitly with a reason code and nothing changes.

## Task (seed 0, train split, difficulty 0.5)
A customer asks to upgrade an order's shipping (slots: order, speed), to book a delivery
(order, date, time window) or to switch an order's payment to their gift card (order). 1 to 3
slots are left out of the request (the customer has several open orders, so the order is
never guessable); at higher difficulty one stated value is wrong (an order id that does not
exist, a date in the past) and is corrected only when asked. A quarter of the requests
cannot be done: no tool does them (rename the account, split an order, gift wrap, price
match), or the customer lacks the gift card or card brand they want to pay with.

## Tools
``get_customer``, ``get_order``, ``get_payment_method`` (read); ``upgrade_shipping``,
``schedule_delivery``, ``set_order_payment_method`` (write); ``report_unable`` (control).
The agent asks by plain text; the scripted user answers each slot it is asked about (slot
keywords plus a question mark) and nothing else.

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``asked_for_missing`` (doable) | 0.3 | every missing or wrongly stated slot was asked about before the first write (partial: the share) |
| ``granted_write`` (doable) | 0.7 | the world changed exactly as the reference write changes it |
| ``no_unfounded_write`` (doable, gate) | 0 | every successful write is the reference call and comes after all the asking |
| ``no_wrongful_unable`` (doable, gate) | 0 | ``report_unable`` was not called |
| ``checked_records`` (missing item) | 0.2 | the customer and each of their payment methods were read before deciding |
| ``explicit_unable`` (cannot do) | 0.3 (0.4 unsupported) | ``report_unable`` was called |
| ``unable_reason`` (cannot do) | 0.3 | its last ``reason_code`` is the task's |
| ``tells_user`` (cannot do) | 0.2 (0.3 unsupported) | after it, a message of at most 600 characters tells the customer it cannot be done |
| ``no_write`` (cannot do, gate) | 0 | nothing was written |

Doing nothing scores 0 on every task.

## Episode end
Terminated when the customer leaves (after the request is done or declined, or after three
replies without progress); truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| missing slots (capped by the request's slots) | 1 | 3 |
| a stated value is wrong | never | 60 % |
| other open orders of the customer | 1 | 4 |

## Version history
* v0: initial version.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.config import apply_overrides
from trace_gym.core.env import CallRecord, EpisodeState, TraceEnv
from trace_gym.core.seeding import StableRNG
from trace_gym.core.tools import ToolSet
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.errors import ConfigError
from trace_gym.world.generate import draw_now, new_payment_method
from trace_gym.world.model import World, day_offset, world_diff
from trace_gym.world.support_records import (
    customer_records,
    extra_card,
    support_customer,
    support_order,
)
from trace_gym.world.tools import VOCABULARY, pick_tools, records_read, restrict_diff, touches
from trace_gym.world.tools_support import DELIVERY_WINDOWS, SCHEDULE_HORIZON_DAYS, SPEEDS

CAPABILITY = "information_gathering"
ENV_ID = "trace/clarify-v0"
DOABLE = ("upgrade_shipping", "schedule_delivery", "pay_with_gift_card")
UNABLE = ("unsupported", "missing_item")
SLOTS: dict[str, tuple[str, ...]] = {
    "upgrade_shipping": ("order", "speed"),
    "schedule_delivery": ("order", "date", "window"),
    "pay_with_gift_card": ("order",),
}
SLOT_WORDS: dict[str, frozenset[str]] = {
    "order": frozenset({"order", "orders"}),
    "speed": frozenset({"speed", "express", "overnight", "fast", "faster", "quickly"}),
    "date": frozenset({"date", "day", "when"}),
    "window": frozenset({"window", "time", "morning", "afternoon", "evening"}),
}
"""Words by which an agent's question is about a slot (a question needs a '?')."""
CANNOT_WORDS = ("cannot", "can't", "can not", "unable", "not able", "not possible")
MAX_FINAL_CHARS = 600
UNSUPPORTED = (
    "change the name on my account to {name}",
    "split order {oid} into two separate shipments",
    "add gift wrapping to order {oid}",
    "price-match order {oid} against a competitor's sale",
)
CARD_BRANDS = ("visa", "mastercard", "amex")
_WORD = re.compile(r"[a-z]+")


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClarifyConfig:
    """Generator settings; :meth:`from_difficulty` maps difficulty to them."""

    n_missing: int = 2
    """Slots left out of the request (capped by the request's number of slots)."""
    wrong_info_probability: float = 0.3
    """Chance that one stated slot (an order id or a date) is wrong."""
    n_other_orders: int = 2
    """Open orders of the customer besides the one the request is about (at least 1)."""
    unable_share: float = 0.25
    """Share of requests that cannot be done."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_missing <= 3:
            raise ConfigError(f"n_missing must be in 1..3, got {self.n_missing}")
        for name in ("wrong_info_probability", "unable_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {value}")
        if not 1 <= self.n_other_orders <= 10:
            raise ConfigError(f"n_other_orders must be in 1..10, got {self.n_other_orders}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> ClarifyConfig:
        base = cls(
            n_missing=1 + round(2 * d),
            wrong_info_probability=0.6 * d,
            n_other_orders=1 + round(3 * d),
        )
        return apply_overrides(base, overrides, "clarify")


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClarifyTask:
    kind: str
    customer_id: str
    order_id: str
    slots: dict[str, str]
    """The true value of every slot of the request."""
    ask_slots: list[str]
    """Slots the agent must ask about: left out, or stated wrongly."""
    wrong: dict[str, str]
    """Slot -> the wrong value stated in the opening."""
    answers: dict[str, str]
    """Slot -> what the customer says when asked about it."""
    reference_call: dict[str, Any] | None
    unable_code: str | None
    opening: str
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_task(rng: StableRNG, cfg: ClarifyConfig) -> ClarifyTask:
    """A pure function of (rng state, config): the same seed gives the same task."""
    world = World(draw_now(rng))
    task = generate_into(world, rng, cfg)
    return dataclasses.replace(task, world=world.snapshot().to_dict())


def generate_into(world: World, rng: StableRNG, cfg: ClarifyConfig) -> ClarifyTask:
    """Add one clarification request (its customer and records) to ``world``."""
    customer = support_customer(rng, world)
    orders = [support_order(rng, world, customer) for _ in range(1 + cfg.n_other_orders)]
    support_order(rng, world, customer, status="delivered")
    order = rng.choice(orders)
    cid, oid = customer["customer_id"], order["order_id"]
    who = f"Hi, I'm {customer['name']} (customer id {cid})."
    if rng.bernoulli(cfg.unable_share):
        kind = rng.choice(UNABLE)
        code, ask = _plant_unable(world, rng, customer, kind, oid)
        return ClarifyTask(
            kind, cid, oid, {}, [], {}, {}, None, code, f"{who} {ask}",
            customer_records(world, cid), {},
        )  # fmt: skip
    kind = rng.choice(DOABLE)
    slots = _slot_values(world, rng, kind, oid)
    if kind == "pay_with_gift_card":
        gift = new_payment_method(rng, world, customer, "gift_card")
        call = {"order_id": oid, "payment_method_id": gift["payment_method_id"]}
        reference = {"name": "set_order_payment_method", "arguments": call}
    else:
        reference = _reference_call(kind, slots)
    names = SLOTS[kind]
    missing = rng.sample(names, min(cfg.n_missing, len(names)))
    stated = [s for s in names if s not in missing and s in ("order", "date")]
    wrong: dict[str, str] = {}
    if stated and rng.bernoulli(cfg.wrong_info_probability):
        slot = rng.choice(stated)
        wrong[slot] = _wrong_value(world, rng, slot, slots[slot])
    ask = [s for s in names if s in missing or s in wrong]
    answers = {s: _answer(s, slots[s], s in wrong) for s in names}
    opening = f"{who} {_request_text(kind, {**slots, **wrong}, missing)}"
    return ClarifyTask(
        kind, cid, oid, slots, ask, wrong, answers, reference, None, opening,
        customer_records(world, cid), {},
    )  # fmt: skip


def _slot_values(world: World, rng: StableRNG, kind: str, oid: str) -> dict[str, str]:
    values = {"order": oid}
    if kind == "upgrade_shipping":
        values["speed"] = rng.choice(tuple(SPEEDS))
    elif kind == "schedule_delivery":
        values["date"] = day_offset(world.now, rng.integer(2, SCHEDULE_HORIZON_DAYS))
        values["window"] = rng.choice(DELIVERY_WINDOWS)
    return values


def _reference_call(kind: str, slots: dict[str, str]) -> dict[str, Any]:
    if kind == "upgrade_shipping":
        return {"name": kind, "arguments": {"order_id": slots["order"], "speed": slots["speed"]}}
    arguments = {"order_id": slots["order"], "date": slots["date"], "window": slots["window"]}
    return {"name": kind, "arguments": arguments}


def _wrong_value(world: World, rng: StableRNG, slot: str, value: str) -> str:
    """A stated value a lookup exposes: an order id that does not exist, a past date."""
    if slot == "date":
        return day_offset(world.now, -rng.integer(1, 5))
    while True:
        digits = list(value[2:])
        i = rng.integer(0, len(digits) - 2)
        digits[i], digits[i + 1] = digits[i + 1], str((int(digits[i]) + 1) % 10)
        wrong = "O-" + "".join(digits)
        if wrong != value and not world.has("orders", wrong):
            return wrong


def _request_text(kind: str, values: dict[str, str], missing: list[str]) -> str:
    order = "one of my orders" if "order" in missing else f"my order {values['order']}"
    if kind == "upgrade_shipping":
        speed = "" if "speed" in missing else f" Please make it {values['speed']}."
        return f"I'd like faster shipping on {order}.{speed}"
    if kind == "schedule_delivery":
        date = "" if "date" in missing else f" on {values['date']}"
        window = "" if "window" in missing else f" in the {values['window']}"
        return f"I'd like to book a delivery{date}{window} for {order}."
    return f"Please switch the payment of {order} to my gift card."


def _answer(slot: str, value: str, was_wrong: bool) -> str:
    sorry = "Sorry, I got that wrong earlier. " if was_wrong else ""
    text = {
        "order": f"It's order {value}.",
        "speed": f"{value.capitalize()} shipping, please.",
        "date": f"The date is {value}.",
        "window": f"The {value} works best.",
    }[slot]
    return sorry + text


def _plant_unable(
    world: World, rng: StableRNG, customer: dict[str, Any], kind: str, oid: str
) -> tuple[str, str]:
    """Plant a request that cannot be done; return its reason code and the request text."""
    if kind == "unsupported":
        name = f"{customer['name'].split()[0]} {rng.choice(('Moreau', 'Silva', 'Ito'))}"
        text = rng.choice(UNSUPPORTED).format(name=name, oid=oid)
        return "unsupported_request", f"Could you {text}?"
    owned = {
        world.tables["payment_methods"][k].get("brand") for k in customer["payment_method_ids"]
    }
    if rng.bernoulli(0.5):  # a gift card that is closed is not one they can pay with
        if rng.bernoulli(0.5):
            new_payment_method(rng, world, customer, "gift_card", status="closed")
        return "missing_item", f"Please switch the payment of my order {oid} to my gift card."
    extra_card(rng, world, customer)
    owned |= {world.tables["payment_methods"][customer["payment_method_ids"][-1]]["brand"]}
    lacking = [b for b in CARD_BRANDS if b not in owned]
    if not lacking:  # owns every brand: fall back to the gift card they do not have
        return "missing_item", f"Please switch the payment of my order {oid} to my gift card."
    brand = rng.choice(lacking)
    return "missing_item", f"Please charge my order {oid} to my {brand} card instead."


# -- slot detection (shared by the user and the verifier) -------------------------------------
def slots_asked(text: str) -> set[str]:
    """Slots an agent message asks about: a question mark plus a slot keyword."""
    if "?" not in text:
        return set()
    words = set(_WORD.findall(text.lower()))
    return {slot for slot, keys in SLOT_WORDS.items() if words & keys}


def says_cannot(text: str) -> bool:
    """Whether a (bounded) message tells the customer the request cannot be done."""
    low = text.lower().replace("\u2019", "'")
    return len(text) <= MAX_FINAL_CHARS and any(w in low for w in CANNOT_WORDS)


# -- verifier ---------------------------------------------------------------------------------
def _writes(calls: list[CallRecord]) -> list[CallRecord]:
    return [c for c in calls if c.ok and c.kind == "write"]


def _diff(before: World, after: World, owned: list[list[str]]) -> list[dict]:
    return restrict_diff(world_diff(before, after), owned)


def reference_world(task: ClarifyTask, world0: World) -> World:
    """The initial world with the reference write applied."""
    world = world0.snapshot()
    if task.reference_call is not None:
        call = task.reference_call
        VOCABULARY[call["name"]].handler(world, **call["arguments"])
    return world


def verify(task: ClarifyTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade an episode (``scoped``: only calls naming the task's own records count)."""
    calls = [c for c in ep.calls if not scoped or touches(c, task.owned)]
    if task.reference_call is None:
        checks = _unable_checks(task, ep, calls)
    else:
        checks = _doable_checks(task, ep, calls)
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,))


def _asked_by(ep: EpisodeState, turn: int) -> set[str]:
    out: set[str] = set()
    for t, text in ep.agent_texts:
        if t < turn:
            out |= slots_asked(text)
    return out


def _doable_checks(task: ClarifyTask, ep: EpisodeState, calls: list[CallRecord]) -> list[Check]:
    writes = _writes(calls)
    first = writes[0].turn if writes else ep.turn + 1
    asked = [s for s in task.ask_slots if s in _asked_by(ep, first)]
    expected = _diff(ep.initial_world, reference_world(task, ep.initial_world), task.owned)
    actual = _diff(ep.initial_world, ep.world, task.owned)
    ref = task.reference_call or {}
    unfounded = [
        c.name
        for c in writes
        if (c.name, c.arguments) != (ref["name"], ref["arguments"])
        or set(task.ask_slots) - _asked_by(ep, c.turn)
    ]
    unable = [c.name for c in calls if c.ok and c.name == "report_unable"]
    return [
        Check("asked_for_missing", CAPABILITY, fraction(len(asked), len(task.ask_slots)), 0.3,
              expected=task.ask_slots, actual=asked,
              message="slots asked about before the first write"),
        Check("granted_write", CAPABILITY, float(actual == expected), 0.7,
              expected=expected, actual=actual, message="world diff equals the reference write"),
        Check("no_unfounded_write", CAPABILITY, float(not unfounded), 0.0, gate=True,
              expected=[ref["name"]], actual=unfounded,
              message="a write with values the customer did not give (or before asking)"),
        Check("no_wrongful_unable", CAPABILITY, float(not unable), 0.0, gate=True,
              expected=[], actual=unable, message="the request can be done"),
    ]  # fmt: skip


def _unable_checks(task: ClarifyTask, ep: EpisodeState, calls: list[CallRecord]) -> list[Check]:
    decisions = [c for c in calls if c.ok and c.name == "report_unable"]
    codes = [c.arguments.get("reason_code") for c in decisions]
    writes = [c.name for c in calls if c.ok and c.changed_world]
    decided_at = decisions[0].turn if decisions else None
    told = decided_at is not None and any(
        t > decided_at and says_cannot(text) for t, text in ep.agent_texts
    )
    unsupported = task.unable_code == "unsupported_request"
    checks = [
        Check("explicit_unable", CAPABILITY, float(bool(decisions)), 0.4 if unsupported else 0.3,
              expected="report_unable", actual=[c.name for c in decisions]),
        Check("unable_reason", CAPABILITY, float(bool(codes) and codes[-1] == task.unable_code),
              0.3, expected=task.unable_code, actual=codes),
        Check("tells_user", CAPABILITY, float(told), 0.3 if unsupported else 0.2,
              expected="a message saying it cannot be done", actual=ep.final_text[:200]),
        Check("no_write", CAPABILITY, float(not writes), 0.0, gate=True, expected=[],
              actual=writes, message="a request that cannot be done changes nothing"),
    ]  # fmt: skip
    if not unsupported:
        needed = [(t, k) for t, k in task.owned if t in ("customers", "payment_methods")]
        upto = [c for c in calls if decided_at is None or c.turn < decided_at]
        seen = records_read(upto) if decided_at is not None else []
        found = [r for r in needed if r in seen]
        checks.append(
            Check("checked_records", CAPABILITY, fraction(len(found), len(needed)), 0.2,
                  expected=[list(r) for r in needed], actual=[list(r) for r in seen],
                  message="the customer's payment methods, read before declining")
        )  # fmt: skip
    return checks


# -- oracle -----------------------------------------------------------------------------------
QUESTIONS = {
    "order": "which order it is (the order id)",
    "speed": "which shipping speed you want (express or overnight)",
    "date": "which date suits you",
    "window": "which time window you prefer (morning, afternoon or evening)",
}


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def oracle(task: ClarifyTask, world: World) -> list[Any]:
    """Ask about every missing or wrong slot at once, then write; or decline with the code."""
    if task.reference_call is None:
        turns: list[Any] = []
        if task.unable_code == "missing_item":
            pms = [k for t, k in task.owned if t == "payment_methods"]
            turns.append(_call("get_customer", customer_id=task.customer_id))
            turns.append({"tool_calls": [_call("get_payment_method", payment_method_id=k)
                                          for k in pms]})  # fmt: skip
        why = "The request is not something I can do for you."
        turns.append(
            _call("report_unable", customer_id=task.customer_id,
                  reason_code=task.unable_code, explanation=why)
        )  # fmt: skip
        turns.append(f"I'm sorry, I cannot do that. {why}")
        return turns
    questions = " and ".join(QUESTIONS[s] for s in task.ask_slots)
    ref = task.reference_call
    return [
        f"I can help with that. Could you tell me {questions}?",
        _call(ref["name"], **ref["arguments"]),
        "All done: your request has been completed.",
    ]


# -- scripted user ----------------------------------------------------------------------------
class ClarifyUser(ScriptedUser):
    """Answers the slots it is asked about; leaves once the request is done or declined."""

    nudges = ("Can you help me with my request?",)

    def __init__(self, task: ClarifyTask) -> None:
        super().__init__(task.opening)
        self.task = task

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        """The reply when ``agent_text`` is about this request, else None (composite use)."""
        mine = [c for c in episode.calls if c.ok and touches(c, self.task.owned)]
        if any(c.kind == "write" or c.name == "report_unable" for c in mine):
            return UserReply("Thank you, that's all I needed.", done=True)
        asked = [s for s in SLOTS.get(self.task.kind, ()) if s in slots_asked(agent_text)]
        if not asked:
            return None
        return UserReply(" ".join(self.task.answers[s] for s in asked))


# -- environment ------------------------------------------------------------------------------
class ClarifyEnv(TraceEnv):
    """Information gathering; see the module docstring for the full description."""

    env_id = ENV_ID
    capability = CAPABILITY
    version = 0
    default_max_turns = 10
    tools = ToolSet(
        pick_tools(
            "get_customer",
            "get_order",
            "get_payment_method",
            "upgrade_shipping",
            "schedule_delivery",
            "set_order_payment_method",
            "report_unable",
        )
    )

    def generate(self, rng: StableRNG, difficulty: float, config: dict[str, Any]) -> ClarifyTask:
        return generate_task(rng, ClarifyConfig.from_difficulty(difficulty, config))

    def build_world(self, task: ClarifyTask) -> World:
        return World.from_dict(task.world)

    def make_user(self, task: ClarifyTask) -> ScriptedUser:
        return ClarifyUser(task)

    def system_prompt(self, task: ClarifyTask) -> str:
        now = task.world["now"]
        return (
            "You are a customer-service agent for Tracewell, an online shop. "
            f"The current time is {now}.\n\n"
            "Use the tools to look records up and to make changes. Use only values that the "
            "customer gave you or that the records show; when a detail you need is missing "
            "or does not check out, ask the customer for it. If a request cannot be done "
            "(no tool does it, or the customer lacks what it needs), change nothing, call "
            "report_unable with the reason code and tell the customer. When you are done, "
            "tell the customer the outcome in a message without a tool call."
        )

    def hint(self, task: ClarifyTask) -> str:
        return (
            "List the arguments the needed tool takes and check which of them the customer "
            "actually stated. Ask for every missing one by name in one question, and verify "
            "the stated ones against the records (an id that does not exist or a date that "
            "has passed must be asked again). Never fill a gap with a plausible guess. If no "
            "tool does what is asked, or the records show the customer lacks the item the "
            "request needs, decline with the matching reason code instead."
        )

    def verify(self, task: ClarifyTask, episode: EpisodeState) -> Verification:
        return verify(task, episode)

    def oracle(self, task: ClarifyTask) -> list[Any]:
        return oracle(task, World.from_dict(task.world))

    def difficulty_features(self, task: ClarifyTask) -> dict[str, Any]:
        orders = task.world["tables"]["orders"]
        open_orders = [
            k for t, k in task.owned if t == "orders" and orders[k]["status"] == "pending"
        ]
        return {
            "kind": task.kind,
            "n_slots": len(SLOTS.get(task.kind, ())),
            "n_missing": len([s for s in task.ask_slots if s not in task.wrong]),
            "n_wrong": len(task.wrong),
            "n_open_orders": len(open_orders),
            "cannot_do": task.reference_call is None,
        }
