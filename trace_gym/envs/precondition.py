"""``trace/precondition-v0``: check eligibility before a state-changing call.

## Capability
*Precondition verification*: before cancelling, refunding or changing anything, look up the
records that decide the written policy's eligibility rules, compare each rule with the data,
and act only when every rule holds; otherwise change nothing and refuse, naming the rule.

## Task (seed 0, train split, difficulty 0.5)
A customer asks to cancel an order, return an order for a refund, or cancel a flight
reservation. The system prompt lists the rules in force: 20 of the request's pool of 21-22
(status, time window, final sale, membership tier for high values or large groups, insurance
for basic economy, an active refund method, and rules every request has: no account hold,
fraud review or unpaid balance, a verified identity, email and address, accepted terms, the
refund, chargeback and failed sign-in limits, the account's age and the holder's, a
supported country, and on the record itself no open payment dispute, deep discount, partner
sale or earlier price adjustment). As in the paper's precondition environment, about 60 % of
the requests are refused and 40 % allowed at every difficulty, so that neither always
refusing nor always granting is a policy that wins: a refused request violates exactly one
rule in force, planted by flipping that rule's inputs in the data, and a refusal must name
it, so refusing without reading the records wins only by luck; granting every request, even
with the right write, loses the 60 % that must be refused. The violated rule is drawn so
that every code is about equally often the one (rules every request kind has are drawn less
often per kind), and the rules are listed in a shuffled order, so naming any fixed rule is
right on about 2 % of tasks and naming the rule at any fixed place in the list on about 3 %.
An allowed request is granted with the write the customer asks for plus the refund
destination, which only the records name: the customer's profile gives the refund method
(``refund_method_id``, never the request's original payment method, which the write would
default to), and a return needs the ids of the items the customer names. Copying the request
therefore fails.

## Decisions
``grant`` (40 %) and ``refuse`` (60 %), declared in the spec (``decisions``; the task's class
is ``info["decision"]``). A policy that reads everything and then always grants, writing
correctly, wins the 40 %; one that always refuses cannot know the violated rule and wins
about 3 % (``decision_plan`` builds both for the soundness suite).

## Tools
``get_customer``, ``get_order``, ``get_reservation``, ``get_payment_method`` (read);
``cancel_order``, ``return_order``, ``cancel_reservation`` (write, with ``refund_to``);
``refuse``, ``transfer_to_human`` (control; the latter ends the conversation).

## Reward (checks; all hard)
The decision is all or nothing: a wrong one (a wrong write, a write of a refused request, a
refusal of an allowed one, a refusal naming another rule, or no decision) scores 0, so the
credit for reading first only adds to a right decision.

| check | weight | passes when |
|---|---|---|
| ``read_before_acting`` | 0.4 | every record deciding a rule in force (and, for an allowed request, the customer's profile) was read before the first write or refusal (partial: the share read) |
| ``granted_write`` (allowed, gate) | 0.6 | the world changed exactly as the reference write changes it (the cancel reason the customer gave, the refund method from the profile) |
| ``no_wrongful_refusal`` (allowed, gate) | 0 | no refusal of an allowed request |
| ``explicit_refusal`` (refused) | 0 | ``refuse`` or ``transfer_to_human`` was called (diagnostic) |
| ``refusal_names_rule`` (refused, gate) | 0.6 | every refusal's ``reason_code`` (``refuse`` and ``transfer_to_human`` alike) is a violated rule |
| ``no_forbidden_write`` (gate) | 0 | no write except the reference write (none at all when refused) |

An episode with no write and no refusal is undecided and scores 0 (reading, then stalling,
earns nothing).

## Episode end
Terminated when the customer leaves (after the decision is made, or after three turns of
talk without action), on ``transfer_to_human``, or after 6 error-only turns; truncated at
``max_turns``. Verification runs on both.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| rules in force | 20 | 20 |
| near-miss values (deadline day itself, one day or one cent past it, the refund limit) | never | 80 % of eligible rules |
| distractor records of the same customer | 0 | 4 |
| violated rules that are *not* in force (must be ignored) | never | 50 % each |

The knob rates, as shares of all tasks (at least one near-miss value: every task at d = 1;
at least one violated rule not in force: 63 %), are declared in
``PreconditionEnv.knob_rates`` and hold over 1,000 seeds.

The information-free hooks ``listed_rules`` (the codes the prompt lists) and
``requested_call`` (the write as the customer words it: no refund method, items by name) let
the property suite check that no policy blind to the records wins.

## Version history
* v0: initial version; later (before any release) eight rules in force at every difficulty,
  listed in a shuffled order, the violated one spread evenly over the codes, five account
  rules added to every pool, refunds sent to the profile's refund method, 75 % allowed, and
  all-or-nothing decisions. Seeds generate different tasks since that change.
* v0, revised before release: the paper's balance (60 % refused, 40 % allowed; was 25 / 75,
  so granting every request won three tasks in four), 20 rules in force (twelve rules
  added to every pool, so a blind refusal at a fixed place in the list stays rare), declared
  decisions. Seeds generate different tasks since that change (new golden hashes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import CallRecord, EpisodeState
from trace_gym.core.plans import Segment
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig, knob
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.primitives.seeding import StableRNG
from trace_gym.world.generate import new_customer, new_order, new_reservation
from trace_gym.world.model import World, world_diff
from trace_gym.world.policy import (
    REQUESTS,
    Record,
    deciding_records,
    n_request_kinds_with,
    prepare_request_records,
    rules_for,
    violated_rules,
)
from trace_gym.world.support_records import customer_records
from trace_gym.world.tools import VOCABULARY, records_read, restrict_diff, touches

CAPABILITY = "precondition_verification"
ENV_ID = "trace/precondition-v0"
ALLOWED_SHARE = 0.4
"""Share of allowed requests: the paper's 40 % (60 % refused) at every difficulty, so that no
decision is right on most tasks. A refusal must name the violated rule, which is spread over
the rules in force, so each fixed rule is right on about ``(1 - ALLOWED_SHARE) / 28`` (2 %) of
the tasks and each place in the list on ``(1 - ALLOWED_SHARE) / N_RULES`` (3 %). A grant needs
the refund method from the records."""
DECISIONS = {"grant": ALLOWED_SHARE, "refuse": 1 - ALLOWED_SHARE}
"""The decision classes and their declared shares (the spec's ``decisions``)."""
READ_WEIGHT = 0.4
MAX_RULES = 22
N_RULES = 20
"""Rules in force at every difficulty: enough that no place in the listed policy is often the
violated rule's (with 60 % refusals one place is right on 0.6 / 20 = 3 % of the tasks, as one
of eight was at 25 % refusals: far enough under the information-free bound of 10 % that 100
seeds of a blind refusal stay under it), and one or two of each pool left out, so that
difficulty can plant red herrings there."""

GRANT_AND_REFUSE = (
    "Grant a request only when every rule above holds, and send its refund to the refund "
    "method named in the customer's profile (refund_method_id) with the write's refund_to "
    "argument. If a rule does not hold, change nothing and refuse with the refuse tool, naming "
    "that rule's code. "
)
"""How to act on the rules: shared by the policy-pressure prompt."""

REASON_SENTENCES = {
    "no_longer_needed": "I don't need it anymore.",
    "ordered_by_mistake": "I ordered it by mistake.",
    "change_of_plans": "My plans have changed.",
}


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreconditionConfig(SpecConfig):
    """Generator settings; :meth:`knobs` maps difficulty to them."""

    n_rules: int = knob(
        N_RULES, low=1, high=MAX_RULES, doc="rules in force (capped by the request's pool)"
    )
    near_miss_probability: float = knob(
        0.4, low=0.0, high=1.0, doc="a rule with a boundary is planted right at it"
    )
    n_distractors: int = knob(
        2, low=0, high=20, doc="other orders and reservations of the same customer"
    )
    inactive_violation_probability: float = knob(
        0.25, low=0.0, high=1.0, doc="a rule not in force is violated in the data"
    )
    allowed_share: float = knob(
        ALLOWED_SHARE, low=0.0, high=1.0, doc="share of requests that are allowed"
    )
    requests: tuple[str, ...] = knob(
        tuple(REQUESTS), choices=tuple(REQUESTS), doc="request kinds to draw from"
    )

    @classmethod
    def knobs(cls, d: float) -> dict[str, Any]:
        return {
            "n_rules": N_RULES,
            "near_miss_probability": 0.8 * d,
            "n_distractors": round(4 * d),
            "inactive_violation_probability": 0.5 * d,
        }


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreconditionTask:
    request: str
    target_id: str
    customer_id: str
    rule_codes: list[str]
    violated: str | None
    near_miss: list[str]
    inactive_violations: list[str]
    reference_arguments: dict[str, Any]
    item_names: list[str]
    """Names of the items a return is about, as the customer lists them (empty otherwise)."""
    opening: str
    n_distractors: int
    owned: list[list[str]]
    """[table, id] of every record this request is about (scopes the composite's checks)."""
    world: dict[str, Any] = field(repr=False)
    """The initial world (empty inside the composite benchmark, which holds one world)."""


# -- generator --------------------------------------------------------------------------------
def generate_into(world: World, rng: StableRNG, cfg: PreconditionConfig) -> PreconditionTask:
    """Add one precondition request (its customer and records) to ``world``.

    The composite benchmark calls this on a shared world; the returned task's ``world`` is
    empty then, and ``owned`` lists the records the request is about.
    """
    kind = rng.choice(cfg.requests)
    request = REQUESTS[kind]
    customer = new_customer(rng, world)
    make_target = new_order if request.table == "orders" else new_reservation
    target = make_target(rng, world, customer)
    target_id = target["order_id" if request.table == "orders" else "reservation_id"]
    for _ in range(cfg.n_distractors):
        (new_order if rng.bernoulli(0.5) else new_reservation)(
            rng, world, customer, status=rng.choice(("pending", "delivered", "confirmed"))
        )
    prepare_request_records(world, request.table, target_id, rng)
    pool = rules_for(kind)
    n_rules = min(cfg.n_rules, len(pool))
    chosen = {pool[0].code} | {r.code for r in rng.sample(pool[1:], n_rules - 1)}
    in_force = [r for r in pool if r.code in chosen]
    # a rule every request kind has is drawn a third as often per kind, so that each code is
    # about equally often the violated one over all tasks
    weights = [1 / n_request_kinds_with(r.code) for r in in_force]
    refused = not rng.bernoulli(cfg.allowed_share)
    violated = rng.weighted_choice(in_force, weights).code if refused else None
    listed = [r.code for r in rng.shuffle(in_force)]  # no place in the list is special

    inactive = []
    for rule in pool:  # red herrings first: rules in force are planted last and win
        if rule.code not in chosen and rng.bernoulli(cfg.inactive_violation_probability):
            rule.plant(world, target_id, rng, False, False)
            inactive.append(rule.code)
    near = []
    for rule in in_force:
        at_boundary = rule.has_near_miss and rng.bernoulli(cfg.near_miss_probability)
        rule.plant(world, target_id, rng, rule.code != violated, at_boundary)
        if at_boundary:
            near.append(rule.code)
    codes = listed
    got = violated_rules(world, kind, target_id, codes)
    if got != ([violated] if violated else []):  # an invariant of the generator, not input
        raise RuntimeError(f"generator planted {got}, intended {violated} ({kind}, {codes})")
    inactive = [c for c in inactive if not _holds(world, kind, target_id, c)]

    reason = rng.choice(tuple(REASON_SENTENCES))
    refund_to = customer["refund_method_id"]
    if kind == "return_order":
        items = [i["item_id"] for i in target["items"]]
        reference = {"order_id": target_id, "item_ids": items, "refund_to": refund_to}
    else:
        reference = {f"{request.noun}_id": target_id, "reason": reason, "refund_to": refund_to}
    return PreconditionTask(
        request=kind,
        target_id=target_id,
        customer_id=customer["customer_id"],
        rule_codes=codes,
        violated=violated,
        near_miss=near,
        inactive_violations=inactive,
        reference_arguments=reference,
        item_names=[i["name"] for i in target["items"]] if kind == "return_order" else [],
        opening=_opening(kind, customer, target, reason),
        n_distractors=cfg.n_distractors,
        owned=customer_records(world, customer["customer_id"]),
        world={},
    )


def requested_call(task: PreconditionTask) -> dict[str, Any]:
    """The write as the customer words it: the id and reason they state, the items by the
    names they list; no refund method (only the records name it)."""
    request = REQUESTS[task.request]
    arguments = {k: v for k, v in task.reference_arguments.items() if k != "refund_to"}
    if task.request == "return_order":
        arguments["item_ids"] = list(task.item_names)
    return {"name": request.write_tool, "arguments": arguments}


def decision(task: PreconditionTask) -> str:
    """The decision the task needs: ``refuse`` when a rule in force is violated, else
    ``grant``."""
    return "refuse" if task.violated else "grant"


def decision_plan(task: PreconditionTask, chosen: str) -> list[Any]:
    """Read every record deciding a rule in force and the customer's profile, then take
    ``chosen`` as a policy blind to what the records say: grant with the reference write (its
    refund method read from the profile), or refuse citing the first rule the prompt lists
    (which rule the records break is exactly what such a policy does not know)."""
    world = World.view(task.world)
    request = REQUESTS[task.request]
    records = deciding_records(world, task.request, task.target_id, task.rule_codes)
    profile = ("customers", task.customer_id)
    turns = _read_turns(task, records + ([] if profile in records else [profile]))
    if chosen == "grant":
        done = f"Done: your {request.noun} {task.target_id} has been processed."
        return [*turns, _call(request.write_tool, **task.reference_arguments), done]
    if chosen == "refuse":
        code = task.rule_codes[0]
        why = f"The request is not eligible under rule {code}."
        return [*turns, _call("refuse", reason_code=code, explanation=why), f"I'm sorry: {why}"]
    raise ValueError(f"unknown decision {chosen!r}; {ENV_ID} declares {sorted(DECISIONS)}")


def _holds(world: World, kind: str, target: str, code: str) -> bool:
    return not violated_rules(world, kind, target, [code])


def _opening(kind: str, customer: dict[str, Any], target: dict[str, Any], reason: str) -> str:
    who = f"Hi, I'm {customer['name']} (customer id {customer['customer_id']})."
    if kind == "cancel_order":
        return f"{who} I'd like to cancel my order {target['order_id']}. {REASON_SENTENCES[reason]}"
    if kind == "return_order":
        names = ", ".join(item["name"] for item in target["items"])
        return (
            f"{who} I want to return everything in order {target['order_id']} ({names}) "
            "and get a refund."
        )
    return (
        f"{who} Please cancel my flight reservation {target['reservation_id']}. "
        f"{REASON_SENTENCES[reason]}"
    )


# -- verifier ---------------------------------------------------------------------------------
def _first_action_index(calls: list[CallRecord]) -> int:
    acting = [i for i, c in enumerate(calls) if c.ok and (c.changed_world or c.kind == "control")]
    return min(acting, default=len(calls))


def _relevant_diff(before: World, after: World, owned: list[list[str]] | None) -> list[dict]:
    diff = world_diff(before, after)
    return diff if owned is None else restrict_diff(diff, owned)


def reference_world(task: PreconditionTask, world0: World) -> World:
    """The initial world with the reference write applied."""
    world = world0.snapshot()
    VOCABULARY[REQUESTS[task.request].write_tool].handler(world, **task.reference_arguments)
    return world


def needed_records(task: PreconditionTask, world0: World) -> list[Record]:
    """Records to read before deciding: those deciding every rule in force and, for an allowed
    request, the customer's profile (it names the refund method the write needs)."""
    needed = deciding_records(world0, task.request, task.target_id, task.rule_codes)
    profile = ("customers", task.customer_id)
    if not violated_rules(world0, task.request, task.target_id, task.rule_codes):
        needed += [] if profile in needed else [profile]
    return needed


def verify(task: PreconditionTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade an episode from the initial world, the final world and the calls made.

    The decision is all or nothing: the reference write (with the refund method from the
    records) or a refusal naming the violated rule; anything else zeroes the score, so the
    credit for reading first is earned only on top of a right decision. ``scoped`` (the
    composite benchmark) restricts every check to the request's own records, so that other
    requests handled in the same conversation neither help nor hurt.
    """
    world0 = ep.initial_world
    calls = [c for c in ep.calls if not scoped or touches(c, task.owned)]
    violated = violated_rules(world0, task.request, task.target_id, task.rule_codes)
    needed = needed_records(task, world0)
    seen = records_read(calls[: _first_action_index(calls)])
    found = [r for r in needed if r in seen]
    checks = [
        Check(
            "read_before_acting",
            CAPABILITY,
            fraction(len(found), len(needed)),
            weight=READ_WEIGHT,
            expected=[list(r) for r in needed],
            actual=[list(r) for r in seen],
            message="records deciding the request, read before the first write or refusal",
        )
    ]
    changed = [c for c in calls if c.ok and c.changed_world]
    decisions = [c for c in calls if c.ok and c.kind == "control"]
    if not violated:
        scope = task.owned if scoped else None
        expected = _relevant_diff(world0, reference_world(task, world0), scope)
        actual = _relevant_diff(world0, ep.world, scope)
        write_tool = REQUESTS[task.request].write_tool
        target_arg = f"{REQUESTS[task.request].noun}_id"
        forbidden = [
            c.name
            for c in changed
            if c.name != write_tool or c.arguments.get(target_arg) != task.target_id
        ]
        checks += [
            Check("granted_write", CAPABILITY, float(actual == expected), 1 - READ_WEIGHT,
                  gate=True, expected=expected, actual=actual,
                  message="world diff equals the reference write (refund to the profile's "
                  "refund method)"),
            Check("no_wrongful_refusal", CAPABILITY, float(not decisions), 0.0, gate=True,
                  expected=[], actual=[c.name for c in decisions],
                  message="an allowed request must not be refused"),
            Check("no_forbidden_write", CAPABILITY, float(not forbidden), 0.0, gate=True,
                  expected=[write_tool], actual=forbidden,
                  message="no write other than the reference write"),
        ]  # fmt: skip
    else:
        codes = [c.arguments.get("reason_code") for c in decisions]
        checks += [
            Check("no_forbidden_write", CAPABILITY, float(not changed), 0.0, gate=True,
                  expected=[], actual=[c.name for c in changed],
                  message=f"the request violates {violated[0]}: nothing may change"),
            Check("explicit_refusal", CAPABILITY, float(bool(decisions)), 0.0,
                  expected="refuse or transfer_to_human", actual=[c.name for c in decisions]),
            # every refusal counts: trying codes until one sticks, or a later refusal with
            # another code, is not knowing which rule the records break
            Check("refusal_names_rule", CAPABILITY,
                  float(bool(codes) and all(code in violated for code in codes)),
                  1 - READ_WEIGHT, gate=True, expected=violated, actual=codes,
                  message="every refusal names a violated rule"),
        ]  # fmt: skip
    return Verification(
        tuple(checks), required_capabilities=(CAPABILITY,), decided=bool(changed or decisions)
    )


# -- oracle -----------------------------------------------------------------------------------
_READ_TOOL = {
    "customers": ("get_customer", "customer_id"),
    "orders": ("get_order", "order_id"),
    "reservations": ("get_reservation", "reservation_id"),
    "payment_methods": ("get_payment_method", "payment_method_id"),
}


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def oracle(task: PreconditionTask, world: World) -> list[Any]:
    """Read the target, then the other deciding records, then act, then tell the customer."""
    request = REQUESTS[task.request]
    turns = _read_turns(task, needed_records(task, world))
    violated = violated_rules(world, task.request, task.target_id, task.rule_codes)
    if violated:
        why = f"The request is not eligible under rule {violated[0]}."
        turns.append(_call("refuse", reason_code=violated[0], explanation=why))
        turns.append(f"I'm sorry, I can't do that: {why}")
    else:
        turns.append(_call(request.write_tool, **task.reference_arguments))
        turns.append(f"Done: your {request.noun} {task.target_id} has been processed.")
    return turns


def _read_turns(task: PreconditionTask, records: list[Record]) -> list[Any]:
    """The request's own record first (it names the others), then the rest in one turn."""
    target = (REQUESTS[task.request].table, task.target_id)
    others = [_read_call(t, k) for t, k in records if (t, k) != target]
    return [_read_call(*target)] + ([{"tool_calls": others}] if others else [])


def _read_call(table: str, key: str) -> dict[str, Any]:
    name, argument = _READ_TOOL[table]
    return _call(name, **{argument: key})


# -- scripted user ----------------------------------------------------------------------------
class PreconditionUser(ScriptedUser):
    """Confirms once when asked, leaves after the decision or after three idle replies."""

    nudges = ("Yes, I confirm. Please go ahead.", "Please just take care of my request.")
    goodbye = "I'll call back later. Goodbye."

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        decided = any(c.ok and (c.changed_world or c.kind == "control") for c in episode.calls)
        return UserReply("Thank you, that's all I needed.", done=True) if decided else None


# -- the spec ---------------------------------------------------------------------------------
def user(task: PreconditionTask) -> PreconditionUser:
    return PreconditionUser(task.opening)


def instructions(task: PreconditionTask) -> str:
    request = REQUESTS[task.request]
    rules = {r.code: r for r in rules_for(task.request)}
    lines = "\n".join(
        f"{i}. [{code}] {rules[code].text}" for i, code in enumerate(task.rule_codes, 1)
    )
    return (
        f"Policy for {request.noun} requests (the rules in force today):\n{lines}\n\n"
        f"{GRANT_AND_REFUSE}Look records up with the tools instead of trusting what the "
        "customer says. When you are done, tell the customer the outcome in a message "
        "without a tool call."
    )


def hint(task: PreconditionTask) -> str:
    return (
        "Before any state-changing call, look up every record the rules in force depend on: "
        "the record in question and, where a rule mentions them, the customer's membership "
        "and the refund payment method. Check each rule against the data, minding exact "
        "boundaries (a limit of N days includes day N). Act only if every rule holds; "
        "otherwise change nothing and refuse, naming the rule that fails. Ignore rules "
        "that are not in force."
    )


def listed_rules(task: PreconditionTask) -> list[str]:
    """The rule codes the system prompt lists (information-free: the prompt shows them)."""
    return list(task.rule_codes)


def features(task: PreconditionTask) -> dict[str, Any]:
    world = World.view(task.world)
    needed = needed_records(task, world)
    return {
        "request": task.request,
        "n_rules": len(task.rule_codes),
        "n_deciding_records": len(needed),
        "n_nested_records": len(needed) - 1,
        "n_near_miss": len(task.near_miss),
        "n_distractors": task.n_distractors,
        "n_inactive_violations": len(task.inactive_violations),
    }


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Read only the record in question and judge by it alone: refuse when it shows the
    violation, take a rule of that record sitting exactly at its boundary (the deadline day
    itself, a discount just under the limit) for broken and refuse citing it, otherwise carry
    out the request (the rules that need other records go unchecked). Boundaries are planted
    more often at higher difficulty, so the lapse costs more there."""
    task, plan = seg.task, seg.actions
    request = REQUESTS[task.request]
    own_record = [(request.table, task.target_id)]

    def seen_alone(code: str) -> bool:
        return deciding_records(seg.world, task.request, task.target_id, [code]) == own_record

    if task.violated and seen_alone(task.violated):
        return [plan[0], *plan[-2:]]  # the violation is in plain sight: refuse as the oracle
    misread = [code for code in task.near_miss if code != task.violated and seen_alone(code)]
    if misread:
        why = f"The request is not eligible under rule {misread[0]}."
        refusal = _call("refuse", reason_code=misread[0], explanation=why)
        return [plan[0], refusal, f"I'm sorry, I can't do that: {why}"]
    write = {"name": request.write_tool, "arguments": dict(task.reference_arguments)}
    return [plan[0], write, f"Done: your {request.noun} {task.target_id} has been processed."]


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description="Read the records that decide a policy's eligibility rules before a "
    "state-changing call; perform it when allowed, refuse naming the violated rule otherwise.",
    config=PreconditionConfig,
    verify=verify,
    world_oracle=oracle,
    user=user,
    instructions=instructions,
    hint=hint,
    features=features,
    tools=(
        "get_customer",
        "get_order",
        "get_reservation",
        "get_payment_method",
        "cancel_order",
        "return_order",
        "cancel_reservation",
        "refuse",
        "transfer_to_human",
    ),
    max_turns=12,
    tags=(
        CAPABILITY,
        "eligibility_checking",
        "policy_adherence",
        "verify_before_write",
        "rule_following",
    ),
    listed_rules=listed_rules,
    requested_call=requested_call,
    generate_into=generate_into,
    lapse=lapse,
    decisions=DECISIONS,
    decision=decision,
    decision_plan=decision_plan,
    env_name="PreconditionEnv",
    knob_rates=(
        # shares of all tasks over 1,000 seeds (measured 0.0, 1.0 / 1.0, 0.0 / 0.628)
        KnobRate("n_rules", 0.0, 1.0, 0.0, equals=N_RULES),
        KnobRate("n_rules", 1.0, 1.0, 0.0, equals=N_RULES),
        KnobRate("n_near_miss", 0.0, 0.0, 0.0),
        KnobRate("n_near_miss", 1.0, 1.0, 0.02),  # 80 % of eligible rules: nearly every task
        KnobRate("n_distractors", 0.0, 0.0, 0.0),
        KnobRate("n_distractors", 1.0, 1.0, 0.0, equals=4),
        KnobRate("n_inactive_violations", 0.0, 0.0, 0.0),
        KnobRate("n_inactive_violations", 1.0, 0.64, 0.05),  # 50 % per rule not in force
    ),
    # Distinct masked task templates per 1,000 seeds (999-1,000 measured at d = 0, 0.5, 1).
    template_floor=900,
)
PreconditionEnv = SPEC.env_class
"""Precondition verification; see the module docstring for the full description."""
