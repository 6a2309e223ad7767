"""``trace/multistep-v0``: carry out every part of a compound request, in an order that works.

## Capability
*Multi-step task completion*: a customer asks for 2 to 6 changes at once; some need a result
of an earlier step (book the flight a search finds, then add bags to the NEW reservation id
the booking returns). The agent must do every one of them, each after what it depends on, with
the values the tools returned, before saying it is finished, and touch nothing else.

## Task (seed 0, train split, difficulty 0.5)
A customer (id and card given) lists four changes: "(1) book 3 passengers in economy on the
flight from DFW to ATL on 2026-06-03 that leaves at 11:25, without insurance, paid with my
card PM-93461; (2) add one checked bag for each passenger on my reservation R-T27M68, charged
to my card PM-93461; (3) add one checked bag for each passenger on my reservation R-4SUEZQ,
...; (4) cancel my order O-04537, because my plans changed". The search for the booking
lists 12 flights on that route and date.
Operations (:mod:`~trace_gym.envs.helpers.multistep_ops`): cancel an order, change its address, cancel
a reservation, move a reservation's payment to a gift card, add bags (independent); book a
flight found by a search, add bags to that new booking, rebook a reservation (route and cabin
from the reservation, flight from a search), one bag per passenger (count from the
reservation) (dependent). At higher difficulty the request lists them out of the order they
must be done in, and the last one may only come up once the agent reports back.

## Tools
``get_customer``, ``get_order``, ``get_reservation``, ``get_payment_method``,
``search_flights``, ``get_flight`` (read); ``cancel_order``, ``modify_order_address``,
``cancel_reservation``, ``book_reservation``, ``add_baggage``, ``update_reservation_payment``,
``update_reservation_flights`` (write).

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``op<k>_<kind>`` (one per operation) | 0.8 / operations | the final world shows the change (bags: on the right reservation, paid with the named card; the booking: the right flight, cabin, passengers, no insurance, the named card) |
| ``op<k>_<kind>.after_<read>`` (one per read a write needs) | 0.2 / such reads | a successful read giving that information (the search listing the flight, the reservation) came before the operation's first write |
| ``dependent_operations_done`` (gate) | 0 | every operation that needs an earlier result (book, rebook, bags on the new booking, one bag per passenger) is done: the independent ones alone earn nothing |
| ``no_unrequested_write`` (gate) | 0 | every successful write is one of the request's operations on its record (one booking at most, on the flight asked for; a rebooking onto another flight is not the one asked for; bags on a new booking only when asked) |

Ordering is graded only where a write needs an earlier result: bags on the new booking need
the booking (the tools enforce that), a booking or rebooking needs its search, a rebooking or
"one bag per passenger" needs the reservation. Ending early is not special-cased: the final
world is graded as it stands, so undone operations fail. Doing nothing scores 0.

## Episode end
The customer thanks and leaves once every operation is done and the agent talks to them. If
the agent says it is finished ("all done", "anything else?") earlier, the customer leaves and
the episode is verified as it stands, except that a held-back request is raised instead when
everything asked so far is done. Other messages get a nudge to carry on. Truncated at
``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| operations | 2 | 6 |
| operations needing an earlier result | 1 (of 2) | 5 (of 6): all but one |
| request listed out of execution order | never | always (a shuffle) |
| last operation held back until the agent reports | never | 50 % |
| other orders and reservations of the customer | 0 | 3 |

The rates are declared in ``MultistepEnv.knob_rates`` and hold over 1,000 seeds.

## Version history
* v0: initial version. Revised before release (issue: information-free policies must not
  win): searches list 12 flights instead of 2 (a policy taking the first listed flight won
  35 % of booking tasks), a booking or rebooking onto another flight than the one asked for
  is an unrequested write, and the dependent operations gate the score (doing only the
  independent ones earned 0.4-0.6). Search flights are nonstop, each drawn from one 64-bit
  output. Seeds with a booking or rebooking changed meaning.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.config import check_overrides
from trace_gym.core.env import CallRecord, EpisodeState
from trace_gym.core.plans import Segment, call_kind, turn_calls
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import Check, Verification
from trace_gym.envs.helpers.multistep_ops import (
    BUILDERS,
    INDEPENDENT,
    Context,
    Operation,
    expected,
    is_write_of,
    new_reservation_ids,
    outcome,
    provides,
)
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_customer, new_order, new_reservation
from trace_gym.world.model import World
from trace_gym.world.tools import ID_ARGUMENTS, VOCABULARY, touches

CAPABILITY = "multistep_completion"
ENV_ID = "trace/multistep-v0"
OPERATIONS_SHARE = 0.8
"""Weight of the per-operation checks together; the rest goes to read-before-write order."""
MAX_OPERATIONS = 6
MAX_DISTRACTORS = 6
CLOSING_CUES = (
    "anything else", "all done", "all set", "done", "complete", "taken care", "finished",
    "that's everything", "goodbye", "bye", "have a nice", "have a great", "can't help",
    "cannot help", "unable",
)  # fmt: skip
"""Phrases by which the customer hears the agent say it is finished (lower case)."""
THANKS = "Great, that's everything. Thank you!"
LEAVE = "Oh, I thought there was more to do, but alright. Goodbye."
NUDGE = "Please go ahead with everything I asked for."
REPORT = "I've taken care of everything so far. Is there anything else?"
FINAL = "All done: every change you asked for has been made."


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MultistepConfig(SpecConfig):
    """Generator settings; :meth:`from_difficulty` maps difficulty to them."""

    n_operations: int = knob(4, low=2, high=MAX_OPERATIONS, doc="operations in the request")
    n_dependent: int = knob(
        2, low=1, high=MAX_OPERATIONS, doc="operations that need an earlier result"
    )
    shuffle_probability: float = knob(
        0.5, low=0.0, high=1.0, doc="the request lists the operations out of execution order"
    )
    held_back_probability: float = knob(
        0.25, low=0.0, high=1.0, doc="the last operation is raised once the agent reports back"
    )
    n_distractors: int = knob(
        2, low=0, high=MAX_DISTRACTORS, doc="other pending orders and confirmed reservations"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_dependent > self.n_operations:
            raise ConfigError(
                f"n_dependent must be in 1..n_operations ({self.n_operations}), "
                f"got {self.n_dependent}"
            )

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> MultistepConfig:
        check_overrides(cls, overrides, "multistep")
        n_operations = 2 + round(4 * d)
        base = {
            "n_operations": n_operations,
            # all but one: the share of operations an agent can do without tracking results
            # then falls as difficulty rises (a fixed share of 1/2 would keep such an agent's
            # reward flat; a share that jumps with rounding could make it rise)
            "n_dependent": n_operations - 1,
            "shuffle_probability": d,
            "held_back_probability": 0.5 * d,
            "n_distractors": round(3 * d),
        }
        values = {**base, **overrides}
        if "n_operations" in overrides and "n_dependent" not in overrides:
            values["n_dependent"] = min(values["n_dependent"], values["n_operations"])
        return cls(**values)


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MultistepTask:
    customer_id: str
    card: str
    ops: list[Operation]
    """The operations in the reference execution order (each after what it needs)."""
    mentioned: list[int]
    """Indices of the operations in the order the opening lists them."""
    held_back: int | None
    """The operation raised only when the agent reports back (the last one), or None."""
    opening: str
    n_distractors: int
    owned: list[list[str]]
    """[table, id] of the customer and every record of theirs."""
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def _draw_kinds(rng: StableRNG, cfg: MultistepConfig) -> list[str]:
    """Operation kinds in execution order: dependent ones from a small grammar (one booking
    at most; bags on the new booking only after it), the rest independent."""
    dependent: list[str] = []
    while len(dependent) < cfg.n_dependent:
        options = ["rebook", "bags_per_passenger"]
        options.append("book" if "book" not in dependent else "bags_new")
        if "bags_new" in dependent:
            options.remove("bags_new")
        dependent.append(rng.choice(options))
    independent = [rng.choice(INDEPENDENT) for _ in range(cfg.n_operations - cfg.n_dependent)]
    order = rng.shuffle(dependent + independent)
    if "bags_new" in order and order.index("bags_new") < order.index("book"):
        i, j = order.index("bags_new"), order.index("book")
        order[i], order[j] = order[j], order[i]
    return order


def generate_into(world: World, rng: StableRNG, cfg: MultistepConfig) -> MultistepTask:
    """Add one customer with a compound request (and the records it acts on) to ``world``."""
    customer = new_customer(rng, world)
    ctx = Context(rng, world, customer, customer["payment_method_ids"][0])
    ops = [BUILDERS[kind](ctx) for kind in _draw_kinds(rng, cfg)]
    kinds = [op.kind for op in ops]
    if "bags_new" in kinds:
        i = kinds.index("bags_new")
        ops[i] = dataclasses.replace(ops[i], after=kinds.index("book"))
    for _ in range(cfg.n_distractors):
        (new_order if rng.bernoulli(0.5) else new_reservation)(rng, world, customer)
    mentioned = list(range(len(ops)))
    if rng.bernoulli(cfg.shuffle_probability):
        mentioned = rng.shuffle(mentioned)
    held = len(ops) - 1 if rng.bernoulli(cfg.held_back_probability) else None
    mentioned = [i for i in mentioned if i != held]
    items = "; ".join(f"({k}) {ops[i].phrase}" for k, i in enumerate(mentioned, 1))
    cid = customer["customer_id"]
    return MultistepTask(
        customer_id=cid,
        card=ctx.card,
        ops=ops,
        mentioned=mentioned,
        held_back=held,
        opening=f"Hi, I'm {customer['name']} (customer id {cid}). I need a few things "
        f"done today: {items}.",
        n_distractors=cfg.n_distractors,
        owned=_owned(customer),
        world={},
    )


def _owned(customer: dict[str, Any]) -> list[list[str]]:
    out = [["customers", customer["customer_id"]]]
    out += [["orders", k] for k in customer["order_ids"]]
    out += [["reservations", k] for k in customer["reservation_ids"]]
    out += [["payment_methods", k] for k in customer["payment_method_ids"]]
    return out


# -- verifier ---------------------------------------------------------------------------------
def _in_scope(task: MultistepTask, calls: list[CallRecord]) -> list[CallRecord]:
    """Calls naming the customer's records, and reads naming none (searches)."""
    return [
        c
        for c in calls
        if touches(c, task.owned)
        or (
            c.kind == "read"
            and isinstance(c.arguments, dict)
            and not set(c.arguments) & set(ID_ARGUMENTS)
        )
    ]


def operation_results(
    task: MultistepTask, ep: EpisodeState, calls: list[CallRecord]
) -> list[tuple[bool, Any]]:
    """(done, what the final world shows) per operation."""
    return [
        outcome(task.ops, i, ep.initial_world, ep.world, task.customer_id, calls)
        for i in range(len(task.ops))
    ]


def _read_first(
    task: MultistepTask, i: int, read: dict[str, Any], calls: list[CallRecord], new: set[str]
) -> bool:
    op = task.ops[i]
    writes = [c for c in calls if is_write_of(op, c, task.customer_id, new)]
    if not writes:
        return False
    return any(provides(read, op, c) for c in calls if c.index < writes[0].index)


def unrequested_writes(
    task: MultistepTask, ep: EpisodeState, calls: list[CallRecord]
) -> list[CallRecord]:
    """Successful writes that are not one of the request's operations on its record."""
    new = new_reservation_ids(ep.initial_world, ep.world)
    bookings = sum(op.kind == "book" for op in task.ops)
    stray = []
    for c in calls:
        if not (c.ok and c.changed_world):
            continue
        mine = [op for op in task.ops if is_write_of(op, c, task.customer_id, new)]
        if mine and mine[0].kind == "book":
            bookings -= 1
            mine = mine if bookings >= 0 else []
        if not mine:
            stray.append(c)
    return stray


def verify(task: MultistepTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """One check per operation, one per read a write needs first, and a gate on other writes.

    ``scoped`` (the composite benchmark) keeps only the calls that name this customer's
    records, plus searches; bookings are found as the customer's new records either way.
    """
    calls = _in_scope(task, ep.calls) if scoped else list(ep.calls)
    new = new_reservation_ids(ep.initial_world, ep.world)
    checks = []
    results = operation_results(task, ep, calls)
    for i, (op, (done, actual)) in enumerate(zip(task.ops, results, strict=True)):
        checks.append(Check(f"op{i + 1}_{op.kind}", CAPABILITY, float(done),
                            OPERATIONS_SHARE / len(task.ops), expected=expected(op), actual=actual,
                            message=f"the final world shows: {op.phrase}"))  # fmt: skip
    edges = [(i, read) for i, op in enumerate(task.ops) for read in op.reads]
    for i, read in edges:
        op = task.ops[i]
        checks.append(Check(f"op{i + 1}_{op.kind}.after_{read['name']}", CAPABILITY,
                            float(_read_first(task, i, read, calls, new)),
                            (1 - OPERATIONS_SHARE) / len(edges), expected=read,
                            message="the information this write needs was read before it"))  # fmt: skip
    dependent = [
        f"op{i + 1}_{op.kind}"
        for i, (op, (done, _)) in enumerate(zip(task.ops, results, strict=True))
        if op.kind not in INDEPENDENT and not done
    ]
    checks.append(Check("dependent_operations_done", CAPABILITY, float(not dependent), 0.0,
                        gate=True, expected=[], actual=dependent,
                        message="every operation that needs an earlier result is done"))  # fmt: skip
    stray = unrequested_writes(task, ep, calls)
    checks.append(Check("no_unrequested_write", CAPABILITY, float(not stray), 0.0, gate=True,
                        expected=[op.tool for op in task.ops],
                        actual=[{"name": c.name, "arguments": c.arguments} for c in stray],
                        message="no write outside the request"))  # fmt: skip
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,))


# -- oracle -----------------------------------------------------------------------------------
def oracle(task: MultistepTask, world: World) -> list[Any]:
    """Each operation's reads, then its write, in execution order; the id of the new booking
    comes from replaying the plan on a copy of the world (new ids are deterministic)."""
    scratch = world.snapshot()
    turns: list[Any] = []
    new_booking = None
    for i, op in enumerate(task.ops):
        if i == task.held_back:
            turns.append(REPORT)
        turns += op.reads
        arguments = dict(op.arguments)
        if op.kind == "bags_new":
            arguments["reservation_id"] = new_booking
        result = VOCABULARY[op.tool].handler(scratch, **arguments)
        if op.kind == "book":
            new_booking = result["reservation_id"]
        turns.append({"name": op.tool, "arguments": arguments})
    return [*turns, FINAL]


# -- scripted user ----------------------------------------------------------------------------
def _closing(text: str) -> bool:
    low = text.lower()
    return any(cue in low for cue in CLOSING_CUES)


class MultistepUser(ScriptedUser):
    """Waits until every operation is done; leaves when told the agent is finished."""

    def __init__(self, task: MultistepTask) -> None:
        super().__init__(task.opening)
        self.task = task
        self.revealed = task.held_back is None

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        """The reply when ``agent_text`` concerns this request, else None (composite use):
        thanks when everything is done, the held-back request, or leaving when the agent
        says it is finished after it started on this request."""
        done = [d for d, _ in operation_results(self.task, episode, episode.calls)]
        if all(done):
            return UserReply(THANKS, done=True)
        closing = _closing(agent_text)
        held = self.task.held_back
        if not self.revealed and (not closing or all(done[:held])):
            self.revealed = True
            return UserReply(f"Oh, and one more thing: please {self.task.ops[held].phrase}.")
        started = any(done) or any(
            c.ok and c.changed_world and touches(c, self.task.owned) for c in episode.calls
        )
        return UserReply(LEAVE, done=True) if closing and started else None

    def reply(self, agent_text: str, episode: EpisodeState) -> UserReply:
        answer = self.respond(agent_text, episode)
        if answer is not None:
            return answer
        if _closing(agent_text):
            return UserReply(LEAVE, done=True)
        return UserReply(NUDGE)


# -- the spec ---------------------------------------------------------------------------------
def instructions(task: MultistepTask) -> str:
    return (
        "The customer has several requests. Carry out every one of them with the tools, in "
        "an order that works, using the ids and values the tools return. Change nothing "
        "the customer did not ask for. Only when everything is done, tell the customer in "
        "a message without a tool call; the customer leaves when you say you are finished."
    )


def hint(task: MultistepTask) -> str:
    return (
        "Before acting, list every change the customer asked for. Mark which ones need a "
        "result of another step (something a search or a record lookup shows, or the id "
        "of a record you create) and do each of those after that step, copying the "
        "returned value exactly rather than guessing it. Tick the changes off as the tools "
        "confirm them; when you report back, listen for any further request, and say you "
        "are finished only once every change is done."
    )


def features(task: MultistepTask) -> dict[str, Any]:
    ops = task.ops
    return {
        "kinds": [op.kind for op in ops],
        "n_operations": len(ops),
        "n_dependencies": sum(len(op.reads) + (op.after is not None) for op in ops),
        "n_info_from_result": sum(bool(op.reads) or op.after is not None for op in ops),
        "interleaved": task.mentioned != sorted(task.mentioned) or task.held_back is not None,
        "held_back": task.held_back is not None,
        "n_distractors": task.n_distractors,
    }


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Do the first sub-task (its reads and its write), then tell the customer everything is
    done: the customer, hearing the agent is finished, leaves with the rest undone."""
    turns: list[Any] = []
    for turn in seg.actions:
        if isinstance(turn, str):
            continue  # a report that would bring up a held-back request
        turns.append(turn)
        if any(call_kind(seg.tools, c["name"]) == "write" for c in turn_calls(turn)):
            break
    return [*turns, FINAL]


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Carry out every part of a compound request of 2-6 operations (cancel, "
    "change address, move payment, book the flight a search finds, add bags to the new "
    "booking's id, rebook), each after the result it needs, before saying it is finished; "
    "touch nothing else.",
    config=MultistepConfig,
    verify=verify,
    world_oracle=oracle,
    user=MultistepUser,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "get_order",
        "get_reservation",
        "get_payment_method",
        "search_flights",
        "get_flight",
        "cancel_order",
        "modify_order_address",
        "cancel_reservation",
        "book_reservation",
        "add_baggage",
        "update_reservation_payment",
        "update_reservation_flights",
    ),
    max_turns=20,
    tags=(
        CAPABILITY,
        "multi_step_task_completion",
        "task_completion",
        "compound_requests",
        "dependent_operations",
        "premature_termination",
    ),
    generate_into=generate_into,
    initial_world_from_task=True,
    lapse=lapse,
    env_name="MultistepEnv",
    knob_rates=(
        # over 1,000 seeds: held back 0.503 at d = 1
        KnobRate("n_operations", 0.0, 1.0, 0.0, equals=2),
        KnobRate("n_operations", 1.0, 1.0, 0.0, equals=6),
        KnobRate("n_info_from_result", 0.0, 1.0, 0.0, equals=1),
        KnobRate("n_info_from_result", 1.0, 1.0, 0.0, equals=5),
        KnobRate("interleaved", 0.0, 0.0, 0.0),
        KnobRate("interleaved", 1.0, 1.0, 0.0),
        KnobRate("held_back", 0.0, 0.0, 0.0),
        KnobRate("held_back", 1.0, 0.5, 0.05),
        KnobRate("n_distractors", 0.0, 0.0, 0.0),
        KnobRate("n_distractors", 1.0, 1.0, 0.0, equals=3),
    ),
    # Distinct masked task templates per 1,000 seeds (298 measured at d = 0, where two operations are drawn from a few kinds; 860 at 0.5 and 988 at 1).
    template_floor=250,
)
MultistepEnv = SPEC.env_class
"""Multi-step task completion; see the module docstring for the full description."""
