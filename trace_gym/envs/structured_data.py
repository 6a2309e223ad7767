"""``trace/structured-data-v0``: pick the one option that meets every constraint.

## Capability
*Structured data reasoning*: read nested search results (flights with stops and per-cabin
fares; products with variants), apply every constraint of the request to every candidate, rank
the feasible ones by the requested criterion, and act on exactly the best one.

## Task (seed 0, train split, difficulty 0.5)
A customer (id given) wants one flight (route, date, passengers, cabin) or one apparel item
(category) under 2 to 6 constraints ("nonstop", "leaving at or after 14:00", "at most $350
per person"; "in blue", "size M", "rated at least 4.0", "not from Moda") and a criterion
("the cheapest", "the earliest", "the shortest", "the highest-rated"). Distractors are near
duplicates of the answer that break one constraint, often while beating it on the criterion,
or feasible options that are worse. A brute-force check in the generator makes the feasible
optimum unique. Budget and stop limits (flights), budget and a banned brand (products) are
stated as absolute limits: booking an option that breaks one is forbidden.

## Tools
``search_flights``, ``get_flight``, ``search_products``, ``get_product`` (read);
``book_reservation``, ``place_order`` (write).

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``searched_first`` | 0.15 | the request's search ran before the booking |
| ``correct_option`` (gate) | 0.65 | the one booking is the unique feasible optimum |
| ``booking_details`` | 0.2 | partial: passengers, no insurance, the named card |
| ``constraints_met`` (diagnostic) | 0 | the share of constraints the booked option meets |
| ``no_forbidden_option`` (gate) | 0 | the booked option breaks no absolute limit |
| ``single_booking`` (gate) | 0 | at most one reservation / one item was booked |

Booking a wrong option scores 0 (a feasible but worse one too), and so does booking nothing
(no decision): partial credit only grades the details of the right booking. The answer is
the first search result in at most half of chance (``1 / (2 n)`` of tasks), so "search and
book the first result" wins about 4 % at difficulty 0 and nothing above.

## Episode end
The customer leaves once a booking exists and the agent talks to them, or after three
replies without one; truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| constraints | 2 | 6 (5 for products) |
| candidates | 12 | 20 |
| near-duplicate share of distractors | 0.2 | 0.8 |
| thresholds right next to a distractor's value | 0 | 80 % |

## Version history
* v0: initial version.
* v0, revised before release: 12-20 candidates (were 3-12); the answer is rarely the first
  search result; a wrong booking scores 0 and no booking is undecided. Seeds changed
  meaning (new golden hashes).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import EpisodeState
from trace_gym.core.plans import Segment
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.core.user import ScriptedUser
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.envs.helpers import structured_options as so
from trace_gym.envs.helpers.commerce_common import DoneWhenUser, call, new_records, split_of
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_customer
from trace_gym.world.model import World, cents

CAPABILITY = "structured_data_reasoning"
ENV_ID = "trace/structured-data-v0"
DOMAINS = ("flights", "products")
WEIGHTS = {"searched_first": 0.15, "correct_option": 0.65}
DETAILS_WEIGHT = 0.2


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StructuredDataConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    n_constraints: int = knob(
        4, low=2, high=6, doc="constraints of the request (capped by the domain's pool)"
    )
    n_candidates: int = knob(
        16, low=2, high=30, doc="options in the search results, the answer included"
    )
    near_duplicate_share: float = knob(
        0.5, low=0.0, high=1.0, doc="distractors that copy the answer and break one constraint"
    )
    tight_threshold_probability: float = knob(
        0.4, low=0.0, high=1.0, doc="a distractor sits right next to a threshold"
    )
    domains: tuple[str, ...] = knob(DOMAINS, choices=DOMAINS, doc="flights and/or products")

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "n_constraints": 2 + round(4 * d),
            "n_candidates": 12 + round(8 * d),
            "near_duplicate_share": 0.2 + 0.6 * d,
            "tight_threshold_probability": 0.8 * d,
        }


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StructuredDataTask:
    domain: str
    customer_id: str
    payment_method_id: str
    search: dict[str, Any]
    """Arguments of the search that lists the candidates."""
    constraints: list[dict[str, Any]]
    """:class:`~trace_gym.envs.helpers.structured_options.Constraint` fields (plain JSON)."""
    objective: str
    answer: str
    """Option id of the unique feasible optimum (``flight_number/cabin`` or an item id)."""
    passengers: int
    candidates: list[str]
    n_near_duplicates: int
    opening: str
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_into(world: World, rng: StableRNG, cfg: StructuredDataConfig) -> StructuredDataTask:
    """Add one option-selection request (customer, catalogue entries) to ``world``."""
    domain = rng.choice(cfg.domains)
    spec = so.FLIGHTS if domain == "flights" else so.PRODUCTS
    customer = new_customer(rng, world)
    card = customer["payment_method_ids"][0]
    drawn = so.draw_options(rng, spec, cfg)
    if domain == "flights":
        so.keep_flight_off_top(rng, drawn)
    passengers = rng.integer(1, 3) if domain == "flights" else 1
    search, ids = spec.materialise(rng, world, drawn)
    answer = ids[0]
    if domain == "products":
        so.keep_product_off_top(rng, world, search["category"], answer)
    # the generator's invariant, recomputed on the world as the verifier sees it
    found = so.feasible_optimum(world, domain, drawn.constraints, drawn.objective, ids)
    if found != [answer]:
        raise RuntimeError(f"structured-data generator made optimum {found}, meant {answer}")
    order = rng.shuffle(ids)
    opening = spec.opening(customer, card, search, drawn, passengers)
    return StructuredDataTask(
        domain=domain,
        customer_id=customer["customer_id"],
        payment_method_id=card,
        search=search,
        constraints=[dataclasses.asdict(c) for c in drawn.constraints],
        objective=drawn.objective,
        answer=answer,
        passengers=passengers,
        candidates=order,
        n_near_duplicates=drawn.n_near_duplicates,
        opening=opening,
        owned=[["customers", customer["customer_id"]], ["payment_methods", card]],
        world={},
    )


# -- verifier ---------------------------------------------------------------------------------
def _bookings(task: StructuredDataTask, ep: EpisodeState) -> list[tuple[str, dict[str, Any]]]:
    """(option id, record) of every unit the episode booked for the customer."""
    if task.domain == "flights":
        new = new_records(ep.initial_world, ep.world, "reservations", task.customer_id)
        return [(f"{r['flights'][0]['flight_number']}/{r['cabin']}", r) for r in new]
    new = new_records(ep.initial_world, ep.world, "orders", task.customer_id)
    return [(item["item_id"], r) for r in new for item in r["items"]]


def _details(task: StructuredDataTask, record: dict[str, Any]) -> list[bool]:
    pays = split_of(record.get("payments")) or {record["payment_method_id"]: 0}
    paid_by_card = list(pays) == [task.payment_method_id]
    if task.domain == "products":
        return [paid_by_card]
    return [record["passengers"] == task.passengers, not record["travel_insurance"], paid_by_card]


def _searched_first(task: StructuredDataTask, ep: EpisodeState) -> bool:
    name = "search_flights" if task.domain == "flights" else "search_products"
    for c in ep.calls:
        if c.ok and c.changed_world:
            return False
        if c.ok and c.name == name and _same_search(task, c.arguments):
            return True
    return False


def _same_search(task: StructuredDataTask, arguments: dict[str, Any]) -> bool:
    if task.domain == "products":
        return str(arguments.get("category", "")).strip().lower() == task.search["category"]
    return arguments == task.search


def verify(task: StructuredDataTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade the booking the episode made against the unique feasible optimum.

    Bookings are found as new records of the task's customer, so ``scoped`` (the composite
    benchmark) changes nothing here: other requests' bookings belong to other customers.
    """
    constraints = [so.Constraint(**c) for c in task.constraints]
    booked = _bookings(task, ep)
    option, record = booked[-1] if booked else (None, None)
    attrs = so.option_attrs(ep.initial_world, task.domain, option) if option else None
    met = [c.code for c in constraints if so.holds(c, attrs)]
    broken = [c.code for c in constraints if c.strict and c.code not in met]
    details = _details(task, record) if record is not None else [False]
    checks = [
        Check("searched_first", CAPABILITY, float(_searched_first(task, ep) and bool(booked)),
              WEIGHTS["searched_first"], expected=task.search,
              message="the candidates were listed before the booking"),
        Check("correct_option", CAPABILITY, float(option == task.answer),
              WEIGHTS["correct_option"], gate=True, expected=task.answer, actual=option,
              message="book the one option that meets every requirement and is best"),
        Check("constraints_met", CAPABILITY, fraction(len(met), len(constraints)), 0.0,
              hard=False, expected=[c.code for c in constraints], actual=met,
              message="diagnostic: the share of the requirements the booked option meets"),
        Check("booking_details", CAPABILITY, fraction(sum(details), len(details)),
              DETAILS_WEIGHT, expected="passengers, no insurance, the customer's card",
              actual=details),
        Check("no_forbidden_option", CAPABILITY, float(not (attrs is not None and broken)), 0.0,
              gate=True, expected=[], actual=broken if attrs is not None else [],
              message="the booked option breaks an absolute limit of the request"),
        Check("single_booking", CAPABILITY, float(len(booked) <= 1), 0.0, gate=True,
              expected=1, actual=len(booked), message="book exactly one option"),
    ]  # fmt: skip
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,), decided=bool(booked))


# -- oracle -----------------------------------------------------------------------------------
def oracle(task: StructuredDataTask, world: World) -> list[Any]:
    """Search, then book the answer, then tell the customer."""
    search = "search_flights" if task.domain == "flights" else "search_products"
    if task.domain == "flights":
        number, cabin = task.answer.split("/")
        price = world.tables["flights"][number]["cabins"][cabin]["price"]
        split = [{"payment_method_id": task.payment_method_id,
                  "amount": cents(price) * task.passengers / 100}]  # fmt: skip
        book = call("book_reservation", customer_id=task.customer_id, flight_number=number,
                    cabin=cabin, passengers=task.passengers, insurance=False,
                    payment_methods=split)  # fmt: skip
    else:
        book = call("place_order", customer_id=task.customer_id, item_ids=[task.answer],
                    payment_method_id=task.payment_method_id)  # fmt: skip
    return [call(search, **task.search), book, f"Done: I booked {task.answer} for you."]


# -- scripted user ----------------------------------------------------------------------------
def _booked(task: StructuredDataTask, ep: EpisodeState) -> bool:
    return bool(_bookings(task, ep))


def make_user(task: StructuredDataTask) -> ScriptedUser:
    """The customer: confirms, and leaves once something was booked for them."""
    # A partial of a module function, not a closure: a live environment must pickle.
    return DoneWhenUser(task.opening, functools.partial(_booked, task))


# -- the spec ---------------------------------------------------------------------------------
def instructions(task: StructuredDataTask) -> str:
    return (
        "Find options with the search tools. Book or order exactly one option: the one "
        "that meets every requirement the customer states and is best by the customer's "
        "criterion. Never book an option that breaks a limit the customer calls absolute. "
        "Add travel insurance only when asked. When you are done, tell the customer in a "
        "message without a tool call."
    )


def hint(task: StructuredDataTask) -> str:
    return (
        "List every requirement of the request, including the implicit ones (cabin class, "
        "stock). Run the search once, then check each candidate against each requirement, "
        "reading nested fields (stops, per-cabin fares, variant options) rather than "
        "headline values; watch values right at a threshold. Rank only the candidates that "
        "pass every requirement and book just the best one."
    )


def features(task: StructuredDataTask) -> dict[str, Any]:
    world = World.view(task.world)  # read only: no copy
    constraints = [so.Constraint(**c) for c in task.constraints]
    feasible = [
        o
        for o in task.candidates
        if all(so.holds(c, so.option_attrs(world, task.domain, o)) for c in constraints)
    ]
    return {
        "domain": task.domain,
        "objective": task.objective,
        "n_constraints": len(task.constraints),
        "n_strict": sum(c.strict for c in constraints),
        "n_candidates": len(task.candidates),
        "n_near_duplicates": task.n_near_duplicates,
        "n_feasible": len(feasible),
    }


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Forget one constraint and book the best option under the others (a near miss when
    a distractor breaks only that constraint; the right answer when none does)."""
    task = seg.task
    constraints = [so.Constraint(**c) for c in task.constraints]
    forgotten = rng.below(len(constraints))
    kept = constraints[:forgotten] + constraints[forgotten + 1 :]
    best = so.feasible_optimum(seg.world, task.domain, kept, task.objective, task.candidates)
    if not best:
        return seg.actions
    return oracle(dataclasses.replace(task, answer=best[0]), seg.world)


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Choose the unique option meeting 2-6 constraints among nested flight or "
    "product search results with near-duplicate distractors, and book exactly that one.",
    config=StructuredDataConfig,
    verify=verify,
    world_oracle=oracle,
    user=make_user,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "search_flights",
        "get_flight",
        "search_products",
        "get_product",
        "book_reservation",
        "place_order",
    ),
    max_turns=10,
    tags=(
        CAPABILITY,
        "constraint_satisfaction",
        "option_selection",
        "search_result_filtering",
        "data_lookup",
    ),
    knob_rates=(
        KnobRate("domain", 0.0, 0.5, 0.05, equals="flights"),
        KnobRate("domain", 1.0, 0.5, 0.05, equals="flights"),
        KnobRate("n_near_duplicates", 1.0, 1.0, 0.0),
    ),
    template_floor=60,
    generate_into=generate_into,
    lapse=lapse,
    env_name="StructuredDataEnv",
)
StructuredDataEnv = SPEC.env_class
"""Structured data reasoning; see the module docstring for the full description."""
