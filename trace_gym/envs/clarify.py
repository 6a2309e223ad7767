"""``trace/clarify-v0``: ask for what is missing, never invent it; say when it cannot be done.

## Capability
*Information gathering*: a request that lacks required details is completed only with values
the customer gave when asked, asking about exactly the details that are missing or do not
check out (never about what the customer already said correctly, nor about details the
request does not have); a request that no tool can do, or that needs something the customer
does not have, is declined explicitly with the right reason code and nothing changes.

## Task (seed 0, train split, difficulty 0.5)
A customer asks to upgrade an order's shipping (slots: order, speed), to book a delivery
(order, date, time window), to switch an order's payment to their gift card (order) or to
another of their cards (order, card by its last four digits; the write needs the card's id,
found only in the records). In half of the requests some slots are left out (the customer
has several open orders and several cards, so nothing is guessable) or one stated value is
wrong (an order id that does not exist, a date in the past, last digits of no card of
theirs), and it is corrected only when asked; a multi-slot request keeps at least one slot
stated correctly, so asking about every slot is never right. Another 42 % are complete:
every slot is stated, or found in the records (an order named by an item in it: "my order
with the desk lamp"), and are done without a question; a complete shipping or delivery
request always names its order that way, so that copying the request is never the answer.
The other 8 % cannot be done: no tool does them (rename the account, split an order, gift
wrap, ...), or the customer lacks the gift card or card brand they want to pay with. Every
request is phrased from several templates.

## Decisions
``ask`` (50 %), ``act`` (42 %) and ``decline`` (8 %), declared in the spec (``decisions``;
the task's class is ``info["decision"]``). Asking about exactly what is missing and not
asking when nothing is are the two halves of the capability, so neither is most of the
tasks: never asking wins at most the 42 % that are complete, and always asking, even about
exactly the right details, at most half. A policy that always asks without knowing what is
missing (it asks which order) wins only where the order was the missing detail. Declining is
kept to 8 %, 4 % per reason code, because declining with a fixed code is an
information-free policy that must stay under 10 %.

## Tools
``get_customer``, ``get_order``, ``get_payment_method`` (read); ``upgrade_shipping``,
``schedule_delivery``, ``set_order_payment_method`` (write); ``report_unable`` (control).
The agent asks by plain text; the scripted user answers each slot a question (a sentence
ending in a question mark, in a message of at most 1,000 characters) is about, and nothing
else.

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``asked_for_missing`` (doable) | 0.3 | every missing or wrongly stated slot was asked about before the first write (partial: the share) |
| ``granted_write`` (doable) | 0.7 | the world changed exactly as the reference write changes it |
| ``no_unfounded_write`` (doable, gate) | 0 | every successful write is the reference call and comes after all the asking |
| ``no_wrongful_unable`` (doable, gate) | 0 | ``report_unable`` was not called |
| ``no_needless_question`` (gate) | 0 | no question before the decision asks about a slot that was stated correctly or that the request does not have (on a task that cannot be done: about any slot); in the composite only questions from the turn the request became current count |
| ``checked_records`` (missing item) | 0.2 | the customer and each of their payment methods were read before deciding |
| ``explicit_unable`` (cannot do) | 0.6 (0.7 unsupported) | ``report_unable`` was called |
| ``unable_reason`` (cannot do, gate) | 0 | every ``report_unable``'s ``reason_code`` is the task's (a wrong reason is a wrong decision) |
| ``tells_user`` (cannot do) | 0.2 (0.3 unsupported) | after it, a message of at most 600 characters tells the customer it cannot be done |
| ``no_write`` (cannot do, gate) | 0 | nothing was written |

An episode with no decision (no successful write and no ``report_unable``) scores 0, so
asking and stopping earns nothing. Doing nothing scores 0 on every task.

## Episode end
Terminated when the customer leaves (after the request is done or declined, or after three
replies without progress); truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| missing slots (capped so a multi-slot request keeps one correct slot) | 1 | 2 |
| a stated value is wrong (share of doable requests) | never | 60 % |
| other open orders of the customer | 1 | 4 |
| other active cards (card requests) | 2 | 3 |
| a detail to ask about / complete / cannot be done | 50 / 42 / 8 % | 50 / 42 / 8 % |
| cannot be done: no tool does it / customer lacks the item | 4 % / 4 % | 4 % / 4 % |
| a stated order named by an item in it (forced in a complete shipping or delivery request) | 50 % | 50 % |

The rates are declared in ``ClarifyEnv.knob_rates`` (as shares of all tasks) and hold over
1,000 seeds.

## Version history
* v0 (revised before release): card requests, several phrasings per request, the
  needless-question gate, ``decided`` (no credit without a decision), questions in long
  messages ignored, cannot-do requests an 8 % minority whose reason code is a gate, the wrong-value knob made true at
  every difficulty. Seeds mean different tasks than in the first v0 draft.
* v0, revised before release: complete requests (42 %, done without a question; there were
  none, so always asking won 92 %), orders named by an item in them, declared decisions.
  Seeds mean different tasks since that change (new golden hashes).
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
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import PRODUCTS, new_payment_method
from trace_gym.world.model import World, day_offset, world_diff
from trace_gym.world.support_records import (
    customer_records,
    extra_card,
    support_customer,
    support_order,
)
from trace_gym.world.tools import VOCABULARY, records_read, restrict_diff, touches
from trace_gym.world.tools_support import DELIVERY_WINDOWS, SCHEDULE_HORIZON_DAYS, SPEEDS

CAPABILITY = "information_gathering"
ENV_ID = "trace/clarify-v0"
DOABLE = ("upgrade_shipping", "schedule_delivery", "pay_with_gift_card", "pay_with_card")
UNABLE = ("unsupported", "missing_item")
SLOTS: dict[str, tuple[str, ...]] = {
    "upgrade_shipping": ("order", "speed"),
    "schedule_delivery": ("order", "date", "window"),
    "pay_with_gift_card": ("order",),
    "pay_with_card": ("order", "card"),
}
WRONGABLE = ("order", "date", "card")
"""Slots whose wrongly stated value a lookup exposes (an unknown id, a past date, no card)."""
SLOT_PATTERNS: dict[str, re.Pattern[str]] = {
    "order": re.compile(
        r"\b(order[ _-]?(id|ids|number|numbers|no)\b|(which|what) (one )?(of your )?orders?\b)"
    ),
    "speed": re.compile(r"\b(speed|express|overnight|how fast|shipping (option|method|level))"),
    "date": re.compile(r"\b(date|dates|which day|what day|when)\b"),
    "window": re.compile(r"\b(window|time of day|what time|which time|morning|afternoon|evening)"),
    "card": re.compile(r"\b(card|cards|last (four|4)|ending in|payment[ _]method)"),
}
"""Phrases by which a question is about a slot."""
_QUESTION = re.compile(r"[^.!?\n]*\?")
MAX_QUESTION_CHARS = 1000
"""Longer messages ask nothing: keyword-stuffing every slot into one text earns no answer."""
UNSUPPORTED_SHARE = 0.04
MISSING_ITEM_SHARE = 0.04
"""Requests that cannot be done, for either reason. Declining needs the reason code, and a
policy declining with a fixed code wins that code's share: kept under the 10 % bound."""
ASK_SHARE = 0.5
"""Requests with a detail to ask about. The other doable ones (42 %) are complete and are done
without a question, so never asking wins at most 42 %, and always asking, even about exactly
the right details, at most half."""
DECISIONS = {
    "ask": ASK_SHARE,
    "act": round(1 - ASK_SHARE - UNSUPPORTED_SHARE - MISSING_ITEM_SHARE, 6),
    "decline": UNSUPPORTED_SHARE + MISSING_ITEM_SHARE,
}
"""The decision classes and their declared shares (the spec's ``decisions``)."""
CANNOT_WORDS = ("cannot", "can't", "can not", "unable", "not able", "not possible")
MAX_FINAL_CHARS = 600
UNSUPPORTED = (
    "change the name on my account to {name}",
    "split order {oid} into two separate shipments",
    "add gift wrapping to order {oid}",
    "price-match order {oid} against a competitor's sale",
    "merge order {oid} with my other open orders",
    "add a personal note to the package of order {oid}",
    "change the delivery address of order {oid} to my office",
    "apply a student discount to order {oid}",
    "swap an item in order {oid} for a different colour",
    "close my account once order {oid} arrives",
)
CARD_BRANDS = ("visa", "mastercard", "amex")

GREETINGS = (
    "Hi, I'm {name} (customer id {cid}).",
    "Hello, this is {name}, customer {cid}.",
    "Good day! {name} here, my customer number is {cid}.",
    "Hey there. My name is {name} and my customer id is {cid}.",
    "Hi! Customer {cid}, {name}.",
)
REQUEST_TEXTS: dict[str, tuple[str, ...]] = {
    "upgrade_shipping": (
        "I'd like faster shipping on {order}.{speed}",
        "Could you speed up the delivery of {order}?{speed}",
        "I need {order} to arrive sooner, can you upgrade the shipping?{speed}",
        "Please upgrade the shipping on {order}.{speed}",
    ),
    "schedule_delivery": (
        "I'd like to book a delivery{date}{window} for {order}.",
        "Can you schedule the delivery of {order}{date}{window}?",
        "I want to pick a delivery slot{date}{window} for {order}.",
        "Please arrange for {order} to be delivered{date}{window}.",
    ),
    "pay_with_gift_card": (
        "Please switch the payment of {order} to my gift card.",
        "I'd rather pay for {order} with my gift card.",
        "Can you charge {order} to my gift card instead?",
    ),
    "pay_with_card": (
        "Please switch the payment of {order} to {card}.",
        "I'd like {order} charged to {card} instead.",
        "Can you move the payment for {order} over to {card}?",
    ),
}
ORDER_UNKNOWN = ("one of my orders", "my order", "an order I placed", "my recent order")
ORDER_BY_ITEM = ("my order with the {item}", "the order with my {item} in it", "my {item} order")
CARD_UNKNOWN = ("another one of my cards", "a different card", "my other card")
SPEED_TEXTS = (" Please make it {v}.", " {V} shipping, please.", " I'd like {v}.")
MISSING_ITEM_TEXTS = (
    "Please switch the payment of my order {oid} to my gift card.",
    "Can you pay for order {oid} with my gift card instead?",
)
MISSING_BRAND_TEXTS = (
    "Please charge my order {oid} to my {brand} card instead.",
    "Could you move the payment of order {oid} to my {brand} card?",
)
UNSUPPORTED_TEXTS = ("Could you {ask}?", "I'd like you to {ask}.", "Please {ask}.")


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClarifyConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    n_missing: int = knob(
        2, low=1, high=3, doc="slots left out (a multi-slot request keeps a correct slot)"
    )
    wrong_info_probability: float = knob(
        0.3, low=0.0, high=1.0, doc="one stated slot of a doable request is wrong"
    )
    n_other_orders: int = knob(
        2, low=1, high=10, doc="open orders besides the one the request is about"
    )
    n_other_cards: int = knob(
        2, low=2, high=5, doc="active cards besides the order's own in a card request"
    )
    unsupported_share: float = knob(
        UNSUPPORTED_SHARE, low=0.0, high=1.0, doc="share of requests that no tool does"
    )
    missing_item_share: float = knob(
        MISSING_ITEM_SHARE,
        low=0.0,
        high=1.0,
        doc="requests needing a gift card or brand the customer lacks",
    )
    ask_share: float = knob(
        ASK_SHARE,
        low=0.0,
        high=1.0,
        doc="requests with a detail missing or wrong (the rest of the doable ones are complete)",
    )
    describe_probability: float = knob(
        0.5, low=0.0, high=1.0, doc="a stated order is named by an item in it, not by its id"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.unsupported_share + self.missing_item_share + self.ask_share > 1.0:
            raise ConfigError(
                "unsupported_share + missing_item_share + ask_share must be at most 1, got "
                f"{self.unsupported_share} + {self.missing_item_share} + {self.ask_share}"
            )

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "n_missing": 1 + round(d),
            "wrong_info_probability": 0.6 * d,
            "n_other_orders": 1 + round(3 * d),
            "n_other_cards": 2 + round(d),
        }


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
    described: list[str]
    """Slots stated by a description the records resolve (the order, by an item in it)."""
    reference_call: dict[str, Any] | None
    unable_code: str | None
    opening: str
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_into(world: World, rng: StableRNG, cfg: ClarifyConfig) -> ClarifyTask:
    """Add one clarification request (its customer and records) to ``world``."""
    customer = support_customer(rng, world)
    support_order(rng, world, customer, status="delivered")  # order history comes first
    orders = [support_order(rng, world, customer) for _ in range(1 + cfg.n_other_orders)]
    order = rng.choice(orders)
    cid, oid = customer["customer_id"], order["order_id"]
    who = rng.choice(GREETINGS).format(name=customer["name"], cid=cid)
    draw = rng.random()
    if draw < cfg.unsupported_share + cfg.missing_item_share:
        kind = "unsupported" if draw < cfg.unsupported_share else "missing_item"
        code, ask = _plant_unable(world, rng, customer, kind, oid)
        return ClarifyTask(
            kind, cid, oid, {}, [], {}, {}, [], None, code, f"{who} {ask}",
            customer_records(world, cid), {},
        )  # fmt: skip
    doable = 1.0 - cfg.unsupported_share - cfg.missing_item_share  # > 0: draw < 1 got here
    asks = rng.bernoulli(cfg.ask_share / doable)
    kind = rng.choice(DOABLE)
    slots = _slot_values(world, rng, kind, customer, order)
    names = SLOTS[kind]
    wrong: dict[str, str] = {}
    missing: list[str] = []
    if asks:
        if rng.bernoulli(cfg.wrong_info_probability):
            slot = rng.choice([s for s in names if s in WRONGABLE])
            wrong[slot] = _wrong_value(world, rng, slot, slots[slot], customer)
        free = [s for s in names if s not in wrong]
        # a multi-slot request keeps one slot stated correctly, so asking about every slot is
        # never right; without a wrong value at least one slot is missing (room >= 1 then)
        room = len(free) - 1 if len(names) > 1 else len(free)
        missing = rng.sample(free, min(cfg.n_missing, room))
    ask = [s for s in names if s in missing or s in wrong]
    # A complete shipping or delivery request names its order by an item in it: the write
    # then needs the records (copying the request is not the answer), not a question.
    stated_order = "order" not in missing and "order" not in wrong
    copyable = not asks and kind in ("upgrade_shipping", "schedule_delivery")
    described = (
        ["order"] if stated_order and (copyable or rng.bernoulli(cfg.describe_probability)) else []
    )
    item = _distinct_item(world, rng, customer, order) if described else ""
    answers = {s: _answer(rng, s, slots[s], s in wrong, world) for s in names}
    request = _request_text(rng, kind, {**slots, **wrong}, missing, item)
    return ClarifyTask(
        kind, cid, oid, slots, ask, wrong, answers, described,
        _reference_call(kind, slots, world), None, f"{who} {request}",
        customer_records(world, cid), {},
    )  # fmt: skip


def _distinct_item(
    world: World, rng: StableRNG, customer: dict[str, Any], order: dict[str, Any]
) -> str:
    """A product in ``order`` and in no other order of the customer's (one of its items is
    renamed to a product none of them has when there is none), so the item names the order."""
    orders = world.tables["orders"]
    others = {i["name"] for k in customer["order_ids"] if k != order["order_id"]
              for i in orders[k]["items"]}  # fmt: skip
    own = [i["name"] for i in order["items"] if i["name"] not in others]
    if own:
        return rng.choice(own)
    fresh = [name for name, _, _ in PRODUCTS if name not in others]
    order["items"][0]["name"] = rng.choice(fresh)
    return str(order["items"][0]["name"])


def _slot_values(
    world: World, rng: StableRNG, kind: str, customer: dict[str, Any], order: dict[str, Any]
) -> dict[str, str]:
    values = {"order": order["order_id"]}
    if kind == "upgrade_shipping":
        values["speed"] = rng.choice(tuple(SPEEDS))
    elif kind == "schedule_delivery":
        values["date"] = day_offset(world.now, rng.integer(2, SCHEDULE_HORIZON_DAYS))
        values["window"] = rng.choice(DELIVERY_WINDOWS)
    elif kind == "pay_with_gift_card":
        new_payment_method(rng, world, customer, "gift_card")
    else:  # several other active cards, so "my other card" never names one
        cards = [extra_card(rng, world, customer) for _ in range(2 + rng.below(2))]
        values["card"] = rng.choice(cards)["last4"]
    return values


def _card_id(world: World, customer_id: str, last4: str) -> str:
    pms = world.tables["payment_methods"]
    ids = world.tables["customers"][customer_id]["payment_method_ids"]
    return next(k for k in ids if pms[k].get("last4") == last4)


def _reference_call(kind: str, slots: dict[str, str], world: World) -> dict[str, Any]:
    oid = slots["order"]
    if kind == "upgrade_shipping":
        return {"name": kind, "arguments": {"order_id": oid, "speed": slots["speed"]}}
    if kind == "schedule_delivery":
        arguments = {"order_id": oid, "date": slots["date"], "window": slots["window"]}
        return {"name": kind, "arguments": arguments}
    cid = world.tables["orders"][oid]["customer_id"]
    if kind == "pay_with_gift_card":
        pms = world.tables["payment_methods"]
        ids = world.tables["customers"][cid]["payment_method_ids"]
        pmid = next(k for k in ids if pms[k]["kind"] == "gift_card")
    else:
        pmid = _card_id(world, cid, slots["card"])
    arguments = {"order_id": oid, "payment_method_id": pmid}
    return {"name": "set_order_payment_method", "arguments": arguments}


def _wrong_value(
    world: World, rng: StableRNG, slot: str, value: str, customer: dict[str, Any]
) -> str:
    """A stated value a lookup exposes: an order id that does not exist, a past date, last
    digits of no card of the customer's."""
    if slot == "date":
        return day_offset(world.now, -rng.integer(1, 5))
    if slot == "card":
        pms = world.tables["payment_methods"]
        owned = {pms[k].get("last4") for k in customer["payment_method_ids"]}
        while True:
            wrong = rng.token("0123456789", 4)
            if wrong not in owned:
                return wrong
    while True:
        digits = list(value[2:])
        i = rng.integer(0, len(digits) - 2)
        digits[i], digits[i + 1] = digits[i + 1], str((int(digits[i]) + 1) % 10)
        wrong = "O-" + "".join(digits)
        if wrong != value and not world.has("orders", wrong):
            return wrong


def _request_text(
    rng: StableRNG, kind: str, values: dict[str, str], missing: list[str], item: str
) -> str:
    """The request with ``missing`` slots left out; ``item`` (when given) names the order."""
    if "order" in missing:
        order = rng.choice(ORDER_UNKNOWN)
    elif item:
        order = rng.choice(ORDER_BY_ITEM).format(item=item)
    else:
        order = rng.choice((f"my order {values['order']}", f"order {values['order']}"))
    parts = {
        "order": order,
        "speed": "",
        "date": "",
        "window": "",
        "card": "",
    }
    if "speed" in values and "speed" not in missing:
        parts["speed"] = rng.choice(SPEED_TEXTS).format(
            v=values["speed"], V=values["speed"].capitalize()
        )
    if "date" in values and "date" not in missing:
        parts["date"] = rng.choice((" on {}", " for {}")).format(values["date"])
    if "window" in values and "window" not in missing:
        parts["window"] = rng.choice((" in the {}", ", {} if possible,")).format(values["window"])
    if "card" in values:
        parts["card"] = (
            rng.choice(CARD_UNKNOWN)
            if "card" in missing
            else rng.choice(("my card ending in {}", "the card ending {}")).format(values["card"])
        )
    return rng.choice(REQUEST_TEXTS[kind]).format(**parts).replace(",.", ".").replace(",?", "?")


def _answer(rng: StableRNG, slot: str, value: str, was_wrong: bool, world: World) -> str:
    sorry = (
        rng.choice(("Sorry, I got that wrong earlier. ", "Oops, my mistake. ")) if was_wrong else ""
    )
    text = {
        "order": ("It's order {}.", "The order id is {}.", "Order {}."),
        "speed": ("{} shipping, please.", "I'd like {}.", "Make it {}."),
        "date": ("The date is {}.", "{} would be great.", "Please deliver on {}."),
        "window": ("The {} works best.", "{}, please.", "In the {}."),
        "card": ("The card ending in {}.", "It's the one ending {}.", "Card ending {}."),
    }[slot]
    answer = rng.choice(text).format(value)
    return sorry + answer[0].upper() + answer[1:]


def _plant_unable(
    world: World, rng: StableRNG, customer: dict[str, Any], kind: str, oid: str
) -> tuple[str, str]:
    """Plant a request that cannot be done; return its reason code and the request text."""
    if kind == "unsupported":
        name = f"{customer['name'].split()[0]} {rng.choice(('Moreau', 'Silva', 'Ito'))}"
        ask = rng.choice(UNSUPPORTED).format(name=name, oid=oid)
        return "unsupported_request", rng.choice(UNSUPPORTED_TEXTS).format(ask=ask)
    owned = {
        world.tables["payment_methods"][k].get("brand") for k in customer["payment_method_ids"]
    }
    gift = rng.choice(MISSING_ITEM_TEXTS).format(oid=oid)
    if rng.bernoulli(0.5):  # a gift card that is closed is not one they can pay with
        if rng.bernoulli(0.5):
            new_payment_method(rng, world, customer, "gift_card", status="closed")
        return "missing_item", gift
    extra_card(rng, world, customer)
    owned |= {world.tables["payment_methods"][customer["payment_method_ids"][-1]]["brand"]}
    lacking = [b for b in CARD_BRANDS if b not in owned]
    if not lacking:  # owns every brand: fall back to the gift card they do not have
        return "missing_item", gift
    brand = rng.choice(lacking)
    return "missing_item", rng.choice(MISSING_BRAND_TEXTS).format(oid=oid, brand=brand)


# -- slot detection (shared by the user and the verifier) -------------------------------------
def slots_asked(text: str) -> set[str]:
    """Slots an agent message asks about: a slot phrase in a sentence ending with '?'.

    A message longer than :data:`MAX_QUESTION_CHARS` asks nothing.
    """
    if "?" not in text or len(text) > MAX_QUESTION_CHARS:
        return set()
    questions = " ".join(_QUESTION.findall(text.lower().replace("_", " ")))
    return {slot for slot, pattern in SLOT_PATTERNS.items() if pattern.search(questions)}


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


def _decision_turn(ep: EpisodeState, calls: list[CallRecord]) -> int | None:
    """Turn of the first successful write or ``report_unable`` (None: no decision)."""
    turns = [c.turn for c in calls if c.ok and (c.kind == "write" or c.name == "report_unable")]
    return turns[0] if turns else None


def verify(task: ClarifyTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade an episode (``scoped``: only calls naming the task's own records count)."""
    calls = [c for c in ep.calls if not scoped or touches(c, task.owned)]
    if task.reference_call is None:
        checks = _unable_checks(task, ep, calls)
    else:
        checks = _doable_checks(task, ep, calls)
    decided = _decision_turn(ep, calls) is not None
    # inside the composite the episode view holds only the agent's messages from the turn
    # this request became current, so the same questions fill the slots and meet this gate
    checks.append(_needless_check(task, ep, calls))
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,), decided=decided)


def _asked_by(ep: EpisodeState, turn: int) -> set[str]:
    out: set[str] = set()
    for t, text in ep.agent_texts:
        if t < turn:
            out |= slots_asked(text)
    return out


def _needless_check(task: ClarifyTask, ep: EpisodeState, calls: list[CallRecord]) -> Check:
    decided_at = _decision_turn(ep, calls)
    asked = _asked_by(ep, ep.turn + 1 if decided_at is None else decided_at)
    needless = sorted(asked - set(task.ask_slots))
    return Check(
        "no_needless_question", CAPABILITY, float(not needless), 0.0, gate=True,
        expected=sorted(task.ask_slots), actual=needless,
        message="questions about slots stated correctly or not part of the request",
    )  # fmt: skip


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
        Check("explicit_unable", CAPABILITY, float(bool(decisions)), 0.7 if unsupported else 0.6,
              expected="report_unable", actual=[c.name for c in decisions]),
        # every report counts: a second report with another code is not knowing the reason
        Check("unable_reason", CAPABILITY,
              float(all(code == task.unable_code for code in codes)),
              0.0, gate=True, expected=task.unable_code, actual=codes,
              message="declining for the wrong reason is a wrong decision"),
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
    "card": "which card to use (its last four digits)",
}


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _payment_reads(task: ClarifyTask) -> list[Any]:
    pms = [k for t, k in task.owned if t == "payment_methods"]
    return [
        _call("get_customer", customer_id=task.customer_id),
        {"tool_calls": [_call("get_payment_method", payment_method_id=k) for k in pms]},
    ]


def oracle(task: ClarifyTask, world: World) -> list[Any]:
    """Ask about every missing or wrong slot at once, then write; or decline with the code."""
    if task.reference_call is None:
        turns: list[Any] = []
        if task.unable_code == "missing_item":
            turns += _payment_reads(task)
        why = "The request is not something I can do for you."
        turns.append(
            _call("report_unable", customer_id=task.customer_id,
                  reason_code=task.unable_code, explanation=why)
        )  # fmt: skip
        turns.append(f"I'm sorry, I cannot do that. {why}")
        return turns
    ref = task.reference_call
    # a card's id, and an order named by its item, are in the records; the oracle knows them,
    # and the verifier grades the write itself, so every oracle call stays necessary
    write = [_call(ref["name"], **ref["arguments"]), "All done: your request has been completed."]
    if not task.ask_slots:  # complete: nothing to ask
        return write
    questions = " and ".join(QUESTIONS[s] for s in task.ask_slots)
    return [f"I can help with that. Could you tell me {questions}?", *write]


def decision(task: ClarifyTask) -> str:
    """``decline`` when the request cannot be done, ``ask`` when a detail is missing or wrong,
    ``act`` when everything it needs is stated or in the records."""
    if task.reference_call is None:
        return "decline"
    return "ask" if task.ask_slots else "act"


BLIND_QUESTION_SLOT = "order"
"""The slot a policy that always asks, not knowing what is missing, asks about (every request
has an order, and it is the slot most often missing or wrong)."""
BLIND_UNABLE_CODE = "unsupported_request"
"""The reason code a policy that always declines, not knowing why, gives."""


def decision_plan(task: ClarifyTask, chosen: str) -> list[Any]:
    """Read the customer and their payment methods, then take ``chosen`` as a policy that does
    not look at what the request lacks: ``ask`` asks which order it is (which details are
    missing is what it does not know, as a blind refusal does not know the violated rule),
    then makes the reference write; ``act`` makes the reference write at once; ``decline``
    reports it unable with a fixed reason code."""
    reads = _payment_reads(task)
    ref = task.reference_call
    write = [] if ref is None else [_call(ref["name"], **ref["arguments"])]
    done = ["All done: your request has been completed."]
    if chosen == "ask":
        return [*reads, f"Could you tell me {QUESTIONS[BLIND_QUESTION_SLOT]}?", *write, *done]
    if chosen == "act":
        return [*reads, *write, *done]
    if chosen == "decline":
        why = "The request is not something I can do for you."
        unable = _call("report_unable", customer_id=task.customer_id,
                       reason_code=BLIND_UNABLE_CODE, explanation=why)  # fmt: skip
        return [*reads, unable, f"I'm sorry, I cannot do that. {why}"]
    raise ValueError(f"unknown decision {chosen!r}; {ENV_ID} declares {sorted(DECISIONS)}")


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


# -- the spec ---------------------------------------------------------------------------------
def instructions(task: ClarifyTask) -> str:
    return (
        "Use the tools to look records up and to make changes. Use only values that the "
        "customer gave you or that the records show (an order the customer names by an "
        "item in it is found in their orders); when a detail you need is missing or does "
        "not check out, ask the customer for it, and do not ask for details the customer "
        "already gave correctly or that the request does not need. If a request "
        "cannot be done (no tool does it, or the customer lacks what it needs), change "
        "nothing, call report_unable with the reason code and tell the customer. When "
        "you are done, tell the customer the outcome in a message without a tool call."
    )


def hint(task: ClarifyTask) -> str:
    return (
        "List the arguments the needed tool takes and check which of them the customer "
        "actually stated. Ask for every missing one by name in one question, and verify "
        "the stated ones against the records (an id that does not exist, a date that has "
        "passed or a card they do not have must be asked again); do not ask about what "
        "is already stated correctly. Never fill a gap with a plausible guess. If no tool "
        "does what is asked, or the records show the customer lacks the item the request "
        "needs, decline with the matching reason code instead."
    )


def requested_call(task: ClarifyTask) -> dict[str, Any] | None:
    """The write the customer asks for, with only the values the opening states (a
    missing or unknown argument is left out; a wrongly stated one is kept)."""
    if task.reference_call is None:
        return None
    unstated = _missing(task) + task.described  # a described order has no id in the request
    stated = {s: task.wrong.get(s, v) for s, v in task.slots.items() if s not in unstated}
    arguments = {"order_id": stated["order"]} if "order" in stated else {}
    arguments |= {k: stated[k] for k in ("speed", "date", "window") if k in stated}
    return {"name": task.reference_call["name"], "arguments": arguments}


def features(task: ClarifyTask) -> dict[str, Any]:
    orders = task.world["tables"]["orders"]
    open_orders = [k for t, k in task.owned if t == "orders" and orders[k]["status"] == "pending"]
    return {
        "kind": task.kind,
        "n_slots": len(SLOTS.get(task.kind, ())),
        "n_missing": len(_missing(task)),
        "n_wrong": len(task.wrong),
        "n_open_orders": len(open_orders),
        "cannot_do": task.reference_call is None,
        "order_described": "order" in task.described,
    }


def _missing(task: ClarifyTask) -> list[str]:
    return [s for s in task.ask_slots if s not in task.wrong]


_SLOT_ARGUMENT = {
    "order": "order_id",
    "speed": "speed",
    "date": "date",
    "window": "window",
    "card": "payment_method_id",
}


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Never ask: take wrongly stated values at face value and guess missing ones (another of
    the customer's orders, another speed, day or window); decline without checking records;
    and where nothing is missing, ask anyway which order it is."""
    task = seg.task
    if task.reference_call is None:  # decline at once, without reading what decides it
        return [t for t in seg.actions if isinstance(t, str) or "tool_calls" not in t][-2:]
    if not task.ask_slots:  # a complete request: a needless question first
        return [f"Could you tell me {QUESTIONS[BLIND_QUESTION_SLOT]}?", *seg.actions]
    arguments = dict(task.reference_call["arguments"])
    for slot in task.ask_slots:
        name = _SLOT_ARGUMENT.get(slot)
        if name not in arguments:
            continue
        if slot in task.wrong and slot != "card":  # a wrong card is digits, not an id
            arguments[name] = task.wrong[slot]
            continue
        options = {
            "order": [k for t, k in task.owned if t == "orders"],
            "speed": list(SPEEDS),
            "window": list(DELIVERY_WINDOWS),
            "date": [day_offset(seg.world.now, k) for k in (1, 2, 3, 4)],
            "card": [k for t, k in task.owned if t == "payment_methods"],
        }[slot]
        others = [v for v in options if v != arguments[name]]
        if others:
            arguments[name] = rng.choice(others)
    write = {"name": task.reference_call["name"], "arguments": arguments}
    return [write, "All done: your request has been completed."]


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Ask the customer for every missing or wrongly stated argument before a write "
    "and use only the values given; decline requests no tool can do or that need an item the "
    "customer lacks, with a reason code.",
    config=ClarifyConfig,
    verify=verify,
    world_oracle=oracle,
    user=ClarifyUser,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "get_order",
        "get_payment_method",
        "upgrade_shipping",
        "schedule_delivery",
        "set_order_payment_method",
        "report_unable",
    ),
    max_turns=10,
    tags=(
        CAPABILITY,
        "insufficient_information",
        "clarification",
        "slot_filling",
        "ask_before_acting",
        "abstention",
    ),
    preamble="You are a customer-service agent for Tracewell, an online shop.",
    requested_call=requested_call,
    knob_rates=(
        # a wrong value in 60 % * d of the requests with a detail to ask about (half of all)
        KnobRate("n_wrong", 0.0, 0.0, 0.0),
        KnobRate("n_wrong", 0.5, 0.15, 0.03),
        KnobRate("n_wrong", 1.0, 0.3, 0.05),  # a product of two draws: wider
        KnobRate("kind", 0.0, 0.04, 0.02, equals="unsupported"),
        KnobRate("kind", 1.0, 0.04, 0.02, equals="unsupported"),
        KnobRate("kind", 0.0, 0.04, 0.02, equals="missing_item"),
        KnobRate("kind", 1.0, 0.04, 0.02, equals="missing_item"),
    ),
    # distinct masked task templates per 1,000 seeds: about 700 measured at each difficulty
    template_floor=500,
    generate_into=generate_into,
    lapse=lapse,
    decisions=DECISIONS,
    decision=decision,
    decision_plan=decision_plan,
    env_name="ClarifyEnv",
)
ClarifyEnv = SPEC.env_class
"""Information gathering; see the module docstring for the full description."""
