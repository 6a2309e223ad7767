"""Builders and helpers shared by the shopping and travel environments.

``structured_data``, ``tool_call``, ``payment_calc`` and ``multistep`` add flights, products
and balance-carrying payment methods (gift cards, travel certificates) to the same world as
``precondition``, and grade with the same few helpers: the records an episode created, dollar
amounts told to the customer, and a scripted user who leaves once the work is done.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trace_gym.core.env import EpisodeState
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import AIRPORTS, unique_id
from trace_gym.world.model import World, cents, money
from trace_gym.world.schemas import CABIN_NAMES

CABIN_FACTORS = {"basic_economy": (0.55, 0.8), "economy": (1.0, 1.0), "business": (2.2, 3.2)}
"""Fare of each cabin relative to economy (a range the generator draws from)."""
APPAREL = ("rain jacket", "hoodie", "t-shirt", "running shorts", "fleece vest", "yoga pants")
BRANDS = ("Northpeak", "Aerolite", "Kinetic", "Urbano", "Solstice", "Trailhead", "Moda")
COLORS = ("black", "white", "blue", "red", "green", "gray", "navy")
SIZES = ("XS", "S", "M", "L", "XL")
MAX_AMOUNTS_READ = 20
"""Dollar amounts read from a message at most (the parse stays bounded)."""
MAX_MESSAGE_CHARS = 4000
"""Characters of a final message that amount parsing looks at."""
_AMOUNT = re.compile(r"\$\s?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """An action calling one tool."""
    return {"name": name, "arguments": arguments}


def hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def minutes_of(iso: str) -> int:
    """Minutes after midnight of an ISO datetime."""
    return int(iso[11:13]) * 60 + int(iso[14:16])


# -- builders --------------------------------------------------------------------------------
def new_flight(
    rng: StableRNG,
    world: World,
    route: tuple[str, str],
    date: str,
    departs: int,
    duration: int,
    n_stops: int,
    prices: dict[str, float],
    seats: int = 9,
) -> dict[str, Any]:
    """A dated flight with per-cabin prices; ``departs``/``duration`` in minutes."""
    number = unique_id(rng, world, "flights", "TR", "0123456789", 4)
    hubs = [a for a in AIRPORTS if a not in route]
    stops = [
        {"airport": hub, "layover_minutes": 5 * rng.integer(9, 30)}
        for hub in rng.sample(hubs, n_stops)
    ]
    arrives = departs + duration
    record = {
        "flight_number": number,
        "origin": route[0],
        "destination": route[1],
        "date": date,
        "departs_at": f"{date}T{hhmm(departs)}",
        "arrives_at": f"{date}T{hhmm(arrives)}",
        "stops": stops,
        "cabins": {
            c: {"price": money(prices[c]), "seats_available": seats}
            for c in CABIN_NAMES
            if c in prices
        },
    }
    return world.add("flights", record)


def cabin_prices(rng: StableRNG, economy: float) -> dict[str, float]:
    """Fares of all cabins around an economy fare (whole dollars)."""
    out = {}
    for cabin in CABIN_NAMES:
        low, high = CABIN_FACTORS[cabin]
        factor = low + (high - low) * rng.random()
        out[cabin] = float(round(economy * factor))
    return out


def new_balance_method(
    rng: StableRNG, world: World, customer: dict[str, Any], kind: str, balance: float
) -> dict[str, Any]:
    """A gift card or travel certificate with a given balance."""
    pmid = unique_id(rng, world, "payment_methods", "PM-", "0123456789", 5)
    record = {
        "payment_method_id": pmid,
        "customer_id": customer["customer_id"],
        "kind": kind,
        "status": "active",
        "balance": money(balance),
    }
    world.add("payment_methods", record)
    customer["payment_method_ids"].append(pmid)
    return record


def similar_id(rng: StableRNG, world: World, pmid: str) -> str:
    """An unused payment-method id that differs from ``pmid`` by two swapped digits."""
    digits = pmid[3:]
    for _ in range(50):
        i = rng.integer(0, len(digits) - 2)
        swapped = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2 :]
        candidate = "PM-" + swapped
        if swapped != digits and not world.has("payment_methods", candidate):
            return candidate
    return unique_id(rng, world, "payment_methods", "PM-", "0123456789", 5)


def unused_route_date(
    rng: StableRNG, world: World, first_day: int, last_day: int
) -> tuple[tuple[str, str], str]:
    """An (origin, destination) pair and date with no flight yet (searches stay the task's)."""
    from trace_gym.world.model import day_offset

    taken = {(f["origin"], f["destination"], f["date"]) for f in world.tables["flights"].values()}
    while True:
        origin, destination = rng.sample(AIRPORTS, 2)
        date = day_offset(world.now, rng.integer(first_day, last_day))
        if (origin, destination, date) not in taken:
            return (origin, destination), date


# -- grading helpers -------------------------------------------------------------------------
def new_records(world0: World, world: World, table: str, customer_id: str) -> list[dict[str, Any]]:
    """Records of ``table`` that the episode created for the customer, in id order."""
    old = world0.tables[table]
    return [
        r
        for key, r in sorted(world.tables[table].items())
        if key not in old and r.get("customer_id") == customer_id
    ]


def amounts_in(text: str) -> list[int]:
    """Dollar amounts (``$1,234.50``) in a message, in cents, in order (bounded)."""
    out = []
    for match in _AMOUNT.finditer(text[:MAX_MESSAGE_CHARS]):
        out.append(cents(float(match.group(1).replace(",", ""))))
        if len(out) >= MAX_AMOUNTS_READ:
            break
    return out


def split_of(payments: Any) -> dict[str, int]:
    """A payment split as {payment method id: cents}; malformed entries are skipped."""
    out: dict[str, int] = {}
    for p in payments if isinstance(payments, list) else []:
        if isinstance(p, dict) and isinstance(p.get("amount"), int | float):
            key = str(p.get("payment_method_id"))
            out[key] = out.get(key, 0) + cents(p["amount"])
    return out


# -- scripted user ---------------------------------------------------------------------------
class DoneWhenUser(ScriptedUser):
    """Confirms once, nudges while the work is undone, thanks and leaves once it is done.

    ``done(episode)`` says whether the customer's request has been carried out; the composite
    benchmark can build one per request and ask each.
    """

    def __init__(self, opening: str, done: Callable[[EpisodeState], bool]) -> None:
        super().__init__(opening)
        self.done = done

    nudges = (
        "Yes, that's right. Please go ahead.",
        "Please just take care of everything I asked for.",
    )
    goodbye = "I'll call back later. Goodbye."

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        if self.done(episode):
            return UserReply("Great, thank you. That's all I needed.", done=True)
        return None
