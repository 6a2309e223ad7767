"""Options, constraints and their two domains (flights, products) for ``structured-data-v0``.

An *option* is a flat dict of attributes (a flight in the requested cabin: stops, departure,
arrival, duration, fare; an apparel variant: color, size, price, stock, rating, brand). The
generator draws the answer, sets each constraint's threshold so the answer meets it, draws
distractors that are infeasible or strictly worse on the criterion, then *materialises* the
options as nested catalogue records. :func:`option_attrs` reads the attributes back out of the
world, so the verifier grades from the records the agent saw, not from the generator's notes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trace_gym.envs.helpers.commerce_common import (
    APPAREL,
    BRANDS,
    CABIN_FACTORS,
    COLORS,
    SIZES,
    hhmm,
    minutes_of,
    new_flight,
    unused_route_date,
)
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import unique_id
from trace_gym.world.model import World, money

MAX_ATTEMPTS = 30
"""Draws of one distractor before falling back to a strictly worse copy of the answer."""
IMPROVE_PROBABILITY = 0.7
"""Chance that a near duplicate also beats the answer on the criterion (the trap)."""
FIRST_DEPARTURE, LAST_DEPARTURE, LAST_ARRIVAL = 5 * 60, 21 * 60, 23 * 60 + 55
ANSWER_DEPARTURES, ANSWER_LANDING = (7 * 60, 19 * 60), 22 * 60
STOP_MINUTES = 90
"""Extra travel time per stop."""


@dataclass(frozen=True)
class Constraint:
    """``attr op value`` on an option; ``strict`` ones are absolute limits (a gate)."""

    code: str
    attr: str
    op: str
    value: Any
    strict: bool
    text: str


OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "le": lambda a, b: a <= b,
    "ge": lambda a, b: a >= b,
}
OBJECTIVES = {  # name -> (attribute, sign: +1 smaller is better, -1 larger is better, phrase)
    "cheapest": ("price", 1, "cheapest"),
    "earliest": ("departs", 1, "earliest-departing"),
    "shortest": ("duration", 1, "shortest (departure to arrival)"),
    "highest_rated": ("rating", -1, "highest-rated"),
}


def holds(c: Constraint, attrs: dict[str, Any] | None) -> bool:
    return attrs is not None and OPS[c.op](attrs[c.attr], c.value)


def _key(objective: str, attrs: dict[str, Any]) -> Any:
    attr, sign, _ = OBJECTIVES[objective]
    return sign * attrs[attr]


@dataclass
class Drawn:
    constraints: list[Constraint]
    objective: str
    options: list[dict[str, Any]]
    """The answer first, then the distractors."""
    n_near_duplicates: int


# -- flights ---------------------------------------------------------------------------------
def _normalise_flight(o: dict[str, Any]) -> dict[str, Any]:
    o["departs"] = min(max(o["departs"], FIRST_DEPARTURE), LAST_DEPARTURE)
    o["duration"] = min(max(o["duration"], 60), LAST_ARRIVAL - o["departs"])
    o["arrives"] = o["departs"] + o["duration"]
    o["price"] = max(o["price"], 40)
    return o


def _random_flight(rng: StableRNG, like: dict[str, Any] | None) -> dict[str, Any]:
    """A distractor (``like`` the answer's cabin), or the answer itself (``like`` None):
    the answer departs 07:00-19:00 and lands by 22:00, so worse copies always exist."""
    stops = rng.integer(0, 2)
    o = {
        "cabin": like["cabin"] if like else rng.choice(("economy", "business")),
        "stops": stops,
        "departs": 5 * rng.integer(FIRST_DEPARTURE // 5, LAST_DEPARTURE // 5 - 12),
        "duration": 5 * rng.integer(18, 60) + STOP_MINUTES * stops,
        "price": rng.integer(90, 600) * (3 if like and like["cabin"] == "business" else 1),
    }
    if like is None:
        o["departs"] = 5 * rng.integer(ANSWER_DEPARTURES[0] // 5, ANSWER_DEPARTURES[1] // 5)
        o["duration"] = min(o["duration"], ANSWER_LANDING - o["departs"])
    return _normalise_flight(o)


def _constrain_flight(code: str, t: dict[str, Any], rng: StableRNG) -> Constraint:
    if code == "cabin":
        name = t["cabin"].replace("_", " ")
        return Constraint(code, "cabin", "eq", t["cabin"], False, f"it must be in {name} class")
    if code == "stops":
        limit = rng.integer(0, 1)
        t["stops"] = rng.integer(0, limit)
        t["duration"] = 5 * rng.integer(18, 60) + STOP_MINUTES * t["stops"]
        t["duration"] = min(t["duration"], ANSWER_LANDING - t["departs"])
        _normalise_flight(t)
        text = "it must be nonstop" if limit == 0 else "it may have at most one stop"
        return Constraint(code, "stops", "le", limit, True, text + " (an absolute limit)")
    if code == "depart_after":
        value = max(t["departs"] // 60 - rng.integer(0, 2), 0) * 60
        return Constraint(code, "departs", "ge", value, False, f"leave at {hhmm(value)} or later")
    if code == "depart_before":
        value = min(-(-t["departs"] // 60) + rng.integer(0, 2), 23) * 60
        return Constraint(code, "departs", "le", value, False, f"leave by {hhmm(value)}")
    if code == "arrive_before":
        value = min((-(-t["arrives"] // 60) + rng.integer(0, 1)) * 60, LAST_ARRIVAL)
        return Constraint(code, "arrives", "le", value, False, f"arrive by {hhmm(value)}")
    value = (-(-t["price"] // 25) + rng.integer(0, 2)) * 25
    text = f"cost at most ${value} per passenger (an absolute limit)"
    return Constraint("max_price", "price", "le", value, True, text)


def _violate_flight(c: Constraint, o: dict[str, Any], rng: StableRNG, tight: bool) -> None:
    margin = 5 if tight else 5 * rng.integer(2, 18)
    if c.code == "stops":
        o["stops"] = c.value + 1
        o["duration"] += STOP_MINUTES
    elif c.code == "depart_after":
        o["departs"] = c.value - margin
    elif c.code == "depart_before":
        o["departs"] = c.value + margin
    elif c.code == "arrive_before":
        o["duration"] = c.value + margin - o["departs"]
    elif c.code == "max_price":
        o["price"] = c.value + (1 if tight else rng.integer(5, 60))
    _normalise_flight(o)


def _shift_flight(o: dict[str, Any], objective: str, rng: StableRNG, better: bool) -> None:
    step = -1 if better else 1
    if objective == "cheapest":
        o["price"] += step * rng.integer(5, 60)
    elif objective == "earliest":
        o["departs"] += step * 5 * rng.integer(1, 12)
    else:
        o["duration"] += step * 5 * rng.integer(1, 12)
    _normalise_flight(o)


def _materialise_flights(
    rng: StableRNG, world: World, drawn: Drawn
) -> tuple[dict[str, Any], list[str]]:
    route, date = unused_route_date(rng, world, 3, 40)
    ids = []
    for o in drawn.options:
        prices = {o["cabin"]: float(o["price"])}
        economy = o["price"] if o["cabin"] == "economy" else o["price"] / _factor(rng, "business")
        prices.setdefault("economy", float(round(economy)))
        prices["basic_economy"] = float(round(economy * _factor(rng, "basic_economy")))
        prices.setdefault("business", float(round(economy * _factor(rng, "business"))))
        flight = new_flight(
            rng, world, route, date, o["departs"], o["duration"], o["stops"], prices
        )
        ids.append(f"{flight['flight_number']}/{o['cabin']}")
    return {"origin": route[0], "destination": route[1], "date": date}, ids


def _factor(rng: StableRNG, cabin: str) -> float:
    low, high = CABIN_FACTORS[cabin]
    return low + (high - low) * rng.random()


def _flight_opening(
    customer: dict[str, Any], card: str, search: dict[str, Any], drawn: Drawn, passengers: int
) -> str:
    who = f"Hi, I'm {customer['name']} (customer id {customer['customer_id']})."
    people = f"{passengers} passenger{'s' if passengers > 1 else ''}"
    wants = "; ".join(c.text for c in drawn.constraints)
    phrase = OBJECTIVES[drawn.objective][2]
    return (
        f"{who} I need a flight from {search['origin']} to {search['destination']} on "
        f"{search['date']} for {people}. Requirements: {wants}. Please book the {phrase} "
        f"flight that meets all of them, without insurance, paid with my card {card}."
    )


# -- products --------------------------------------------------------------------------------
def _random_product(rng: StableRNG, like: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "color": rng.choice(COLORS),
        "size": rng.choice(SIZES),
        "price": money(rng.integer(1500, 15000) / 100),
        "available": rng.bernoulli(0.85) if like else True,
        "rating": rng.integer(25, 50) / 10 if like else rng.integer(30, 46) / 10,
        "brand": rng.choice(BRANDS),
    }


def _constrain_product(code: str, t: dict[str, Any], rng: StableRNG) -> Constraint:
    if code == "in_stock":
        return Constraint(code, "available", "eq", True, False, "it must be in stock")
    if code in ("color", "size"):
        return Constraint(code, code, "eq", t[code], False, f"{code} {t[code]}")
    if code == "max_price":
        value = (int(t["price"] // 10) + 1 + rng.integer(0, 1)) * 10
        text = f"at most ${value} (an absolute limit)"
        return Constraint(code, "price", "le", value, True, text)
    if code == "min_rating":
        value = max(int(t["rating"] * 2) / 2 - 0.5 * rng.integer(0, 1), 2.5)
        return Constraint(code, "rating", "ge", value, False, f"rated {value:.1f} or higher")
    banned = rng.choice([b for b in BRANDS if b != t["brand"]])
    text = f"nothing from {banned}, ever (an absolute limit)"
    return Constraint("brand_not", "brand", "ne", banned, True, text)


def _violate_product(c: Constraint, o: dict[str, Any], rng: StableRNG, tight: bool) -> None:
    if c.code == "in_stock":
        o["available"] = False
    elif c.code in ("color", "size"):
        pool = COLORS if c.code == "color" else SIZES
        o[c.code] = rng.choice([v for v in pool if v != c.value])
    elif c.code == "max_price":
        o["price"] = money(c.value + (0.01 if tight else rng.integer(100, 3000) / 100))
    elif c.code == "min_rating":
        o["rating"] = round(c.value - (0.1 if tight else 0.1 * rng.integer(2, 5)), 1)
    else:
        o["brand"] = c.value


def _shift_product(o: dict[str, Any], objective: str, rng: StableRNG, better: bool) -> None:
    step = -1 if better else 1
    if objective == "cheapest":
        o["price"] = money(max(o["price"] + step * rng.integer(100, 2000) / 100, 5.0))
    else:
        o["rating"] = round(min(max(o["rating"] - step * 0.1 * rng.integer(1, 4), 1.0), 5.0), 1)


def _materialise_products(
    rng: StableRNG, world: World, drawn: Drawn
) -> tuple[dict[str, Any], list[str]]:
    used = {p["category"] for p in world.tables["products"].values()}
    category = rng.choice([c for c in APPAREL if c not in used] or list(APPAREL))
    taken = {v["item_id"] for p in world.tables["products"].values() for v in p["variants"]}
    ids = [""] * len(drawn.options)
    mine: list[dict[str, Any]] = []
    for i in rng.shuffle(range(len(drawn.options))):
        o = drawn.options[i]
        product = next((p for p in mine if _fits(p, o)), None)
        if product is None:
            pid = unique_id(rng, world, "products", "P-", "0123456789", 5)
            product = {"product_id": pid, "name": f"{o['brand']} {category}",
                       "category": category, "brand": o["brand"], "rating": o["rating"],
                       "variants": []}  # fmt: skip
            world.add("products", product)
            mine.append(product)
        item_id = "I-" + rng.token("0123456789", 6)
        while item_id in taken:
            item_id = "I-" + rng.token("0123456789", 6)
        taken.add(item_id)
        product["variants"].append(
            {
                "item_id": item_id,
                "options": {"color": o["color"], "size": o["size"]},
                "price": o["price"],
                "available": o["available"],
            }  # fmt: skip
        )
        ids[i] = item_id
    return {"category": category}, ids


def _fits(product: dict[str, Any], o: dict[str, Any]) -> bool:
    """Same brand and rating, and no variant with the same options yet."""
    same = product["brand"] == o["brand"] and product["rating"] == o["rating"]
    options = {(v["options"]["color"], v["options"]["size"]) for v in product["variants"]}
    return same and (o["color"], o["size"]) not in options


def _product_opening(
    customer: dict[str, Any], card: str, search: dict[str, Any], drawn: Drawn, passengers: int
) -> str:
    who = f"Hi, I'm {customer['name']} (customer id {customer['customer_id']})."
    wants = "; ".join(c.text for c in drawn.constraints)
    phrase = OBJECTIVES[drawn.objective][2]
    return (
        f"{who} I'd like to buy one {search['category']}. Requirements: {wants}. Please "
        f"order the {phrase} one that meets all of them, paid with my card {card}."
    )


# -- domains ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Domain:
    name: str
    always: tuple[str, ...]
    """Constraint codes every request has (the cabin; being in stock)."""
    pool: tuple[str, ...]
    objectives: tuple[str, ...]
    random_option: Callable[[StableRNG, dict[str, Any] | None], dict[str, Any]]
    constrain: Callable[[str, dict[str, Any], StableRNG], Constraint]
    violate: Callable[[Constraint, dict[str, Any], StableRNG, bool], None]
    shift: Callable[[dict[str, Any], str, StableRNG, bool], None]
    materialise: Callable[[StableRNG, World, Drawn], tuple[dict[str, Any], list[str]]]
    opening: Callable[..., str]


FLIGHTS = Domain(
    "flights", ("cabin",),
    ("stops", "depart_after", "depart_before", "arrive_before", "max_price"),
    ("cheapest", "earliest", "shortest"),
    _random_flight, _constrain_flight, _violate_flight, _shift_flight,
    _materialise_flights, _flight_opening,
)  # fmt: skip
PRODUCTS = Domain(
    "products", ("in_stock",), ("color", "size", "max_price", "min_rating", "brand_not"),
    ("cheapest", "highest_rated"),
    _random_product, _constrain_product, _violate_product, _shift_product,
    _materialise_products, _product_opening,
)  # fmt: skip


def draw_options(rng: StableRNG, spec: Domain, cfg: Any) -> Drawn:
    """The answer, the constraints it meets, and distractors that are infeasible or worse."""
    n_extra = min(cfg.n_constraints, len(spec.always) + len(spec.pool)) - len(spec.always)
    chosen = set(spec.always) | set(rng.sample(spec.pool, n_extra))
    codes = [c for c in (*spec.always, *spec.pool) if c in chosen]  # stops before times
    target = spec.random_option(rng, None)
    objective = rng.choice(spec.objectives)
    constraints = [spec.constrain(code, target, rng) for code in codes]
    violable = [c for c in constraints if c.code != "cabin"]
    options, near = [target], 0
    for _ in range(cfg.n_candidates - 1):
        is_near = bool(violable) and rng.bernoulli(cfg.near_duplicate_share)
        for attempt in range(MAX_ATTEMPTS):
            o = _distractor(rng, spec, target, objective, violable, cfg, is_near)
            if attempt == MAX_ATTEMPTS - 1 or _acceptable(o, target, constraints, objective):
                break
        if not _acceptable(o, target, constraints, objective):
            o = dict(target)  # fallback: a copy that is strictly worse (the answer has room)
            spec.shift(o, objective, rng, False)
            if not _acceptable(o, target, constraints, objective):
                raise RuntimeError(f"no room below the answer {target} by {objective}")
        near += is_near and not all(holds(c, o) for c in constraints)
        options.append(o)
    return Drawn(constraints, objective, options, near)


def _distractor(
    rng: StableRNG,
    spec: Domain,
    target: dict[str, Any],
    objective: str,
    violable: list[Constraint],
    cfg: Any,
    is_near: bool,
) -> dict[str, Any]:
    if is_near:
        o = dict(target)
        spec.violate(rng.choice(violable), o, rng, rng.bernoulli(cfg.tight_threshold_probability))
        if rng.bernoulli(IMPROVE_PROBABILITY):
            spec.shift(o, objective, rng, True)
        return o
    if rng.bernoulli(0.5):
        o = dict(target)
        spec.shift(o, objective, rng, False)
        return o
    return spec.random_option(rng, target)


def _acceptable(
    o: dict[str, Any], target: dict[str, Any], constraints: list[Constraint], objective: str
) -> bool:
    feasible = all(holds(c, o) for c in constraints)
    return not feasible or _key(objective, o) > _key(objective, target)


# -- reading options back from the world -------------------------------------------------------
def option_attrs(world: World, domain: str, option: str | None) -> dict[str, Any] | None:
    """An option's attributes as the catalogue records state them (None if unknown)."""
    if not isinstance(option, str):
        return None
    if domain == "flights":
        number, _, cabin = option.partition("/")
        flight = world.tables["flights"].get(number)
        if flight is None or cabin not in flight["cabins"]:
            return None
        departs, arrives = minutes_of(flight["departs_at"]), minutes_of(flight["arrives_at"])
        return {"cabin": cabin, "stops": len(flight["stops"]), "departs": departs,
                "arrives": arrives, "duration": arrives - departs,
                "price": flight["cabins"][cabin]["price"]}  # fmt: skip
    for product in world.tables["products"].values():
        for v in product["variants"]:
            if v["item_id"] == option:
                return {**v["options"], "price": v["price"], "available": v["available"],
                        "rating": product["rating"], "brand": product["brand"]}  # fmt: skip
    return None


def feasible_optimum(
    world: World, domain: str, constraints: list[Constraint], objective: str, ids: list[str]
) -> list[str]:
    """Brute force over every option of the search (every cabin of every flight): the
    feasible options that are best by the criterion (one, when the task is well made)."""
    every = list(ids)
    if domain == "flights":
        numbers = {i.split("/")[0] for i in ids}
        every = [f"{n}/{c}" for n in sorted(numbers) for c in world.tables["flights"][n]["cabins"]]
    feasible = []
    for option in every:
        attrs = option_attrs(world, domain, option)
        if attrs is not None and all(holds(c, attrs) for c in constraints):
            feasible.append((_key(objective, attrs), option))
    if not feasible:
        return []
    best = min(k for k, _ in feasible)
    return sorted(o for k, o in feasible if k == best)


# -- the answer's place in the search results --------------------------------------------------
def first_listed_share(n_candidates: int) -> float:
    """How often the answer may be the first search result: half of chance (1 / n), so that
    "book the first result" cannot pay; the answer is never first otherwise."""
    return 0.5 / n_candidates


def keep_flight_off_top(rng: StableRNG, drawn: Drawn) -> None:
    """Flights list by departure: when nothing departs before the answer, replace the last
    distractor by a copy of the answer that departs earlier and breaks a constraint (or, for
    a criterion other than the earliest, is worse), so the answer is not the first result."""
    target, constraints = drawn.options[0], drawn.constraints
    if any(o["departs"] < target["departs"] for o in drawn.options[1:]):
        return
    if rng.random() < first_listed_share(len(drawn.options)):
        return
    earlier = ("stops", "max_price", "depart_after", "arrive_before")
    for c in rng.shuffle([c for c in constraints if c.code in earlier]) + [None]:
        o = dict(target)
        if c is None:  # no constraint can be broken by an earlier flight: be worse instead
            _shift_flight(o, drawn.objective, rng, False)
        else:
            _violate_flight(c, o, rng, False)
        if c is None or c.code != "depart_after":
            o["departs"] = target["departs"] - 5 * rng.integer(1, 12)
        if c is not None and c.code == "arrive_before":
            o["duration"] = c.value + 5 * rng.integer(2, 18) - o["departs"]
        _normalise_flight(o)
        if o["departs"] < target["departs"] and _acceptable(
            o, target, constraints, drawn.objective
        ):
            drawn.options[-1] = o
            return


def keep_product_off_top(rng: StableRNG, world: World, category: str, answer: str) -> None:
    """Products list by product id, variants in order: when the answer would be the first
    item listed, move it to the end of its product's variants, or give its product the
    largest id of the category."""
    mine = sorted(
        (p for p in world.tables["products"].values() if p["category"] == category),
        key=lambda p: p["product_id"],
    )
    first = mine[0]
    if first["variants"][0]["item_id"] != answer or (len(mine), len(first["variants"])) == (1, 1):
        return
    if rng.random() < first_listed_share(sum(len(p["variants"]) for p in mine)):
        return
    if len(first["variants"]) > 1:
        first["variants"].append(first["variants"].pop(0))
        return
    last = mine[-1]
    table = world.tables["products"]
    records = {pid: p for pid, p in table.items()}
    first["product_id"], last["product_id"] = last["product_id"], first["product_id"]
    table.clear()
    table.update({p["product_id"]: p for p in records.values()})
