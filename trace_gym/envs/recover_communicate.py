"""``trace/recover-communicate-v0``: diagnose a failed call, fix its cause, retry, report.

## Capability
*Error recovery and communication*: when the natural call fails with a typed error, find
the cause (from the error or the records), make the prerequisite call that removes it, retry,
and tell the customer the result with its exact values, changing nothing else.

## Task (seed 0, train split, difficulty 0.5)
A customer asks to upgrade an order to express or overnight shipping and to hear the fee and
the new delivery date. The upgrade is blocked by 1 to 3 planted faults, checked in this
order by the tool: the account is locked until identity is verified (fix:
``verify_identity`` with the date of birth the customer gave); the order is on hold (fix:
``release_order_hold``, which itself needs a verified identity at higher difficulty); the
order's card has expired (fix: ``set_order_payment_method`` to the other card the customer
named by its last four digits). Orders from the legacy system report every cause as the
generic ``cause=request_failed``, so only the records tell what is wrong.

## Tools
``get_customer``, ``get_order``, ``get_payment_method`` (read); ``verify_identity``,
``release_order_hold``, ``set_order_payment_method``, ``upgrade_shipping`` (write).

## Reward (checks; all hard)
| check | weight | passes when |
|---|---|---|
| ``diagnosed`` | 0.2 | before each fix, the error named its cause or the records showing it were read (partial: the share of faults) |
| ``fixed`` | 0.2 | every fault is gone from the final world (partial: the share) |
| ``request_succeeded`` | 0.3 | the world changed exactly as fixes plus upgrade change it |
| ``reports_result`` | 0.3 | the first message after the upgrade (the customer leaves on it) names the fee and the delivery date, no other amount than the fee or the order total and no other date than that or today, in at most 600 characters |
| ``no_unnecessary_changes`` (gate) | 0 | every change agrees with the reference end state (no other card, speed or record touched) |

Doing nothing scores 0 on every task.

## Episode end
Terminated when the customer leaves (after the message that follows a successful upgrade, or
after four replies without progress); truncated at ``max_turns``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| faults | 1 | 3 |
| the hold needs identity verification first (longer chain) | never | 80 % |
| generic error text (legacy orders) | never | 60 % |
| other cards (closed or expired) | 0 | 2 |
| the customer names a backup card that must not be used (no card fault) | never | 80 % |

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
from trace_gym.world.generate import draw_now
from trace_gym.world.model import World, cents, world_diff
from trace_gym.world.support_records import (
    customer_records,
    extra_card,
    support_customer,
    support_order,
)
from trace_gym.world.tools import VOCABULARY, pick_tools, records_read, restrict_diff, touches
from trace_gym.world.tools_support import SPEEDS

CAPABILITY = "error_recovery_communication"
ENV_ID = "trace/recover-communicate-v0"
FAULTS = ("account_locked", "order_on_hold", "card_expired")
"""Planted faults, in the order the upgrade checks them."""
NESTED = "identity_unverified"
"""The hold's own prerequisite: releasing it needs a verified identity."""
HOLDS = ("address_check", "fraud_review", "payment_review")
MAX_FINAL_CHARS = 600
_AMOUNT = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+)\.(\d{2})(?!\d)")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecoverConfig:
    """Generator settings; :meth:`from_difficulty` maps difficulty to them."""

    n_faults: int = 2
    """Faults blocking the upgrade (1-3)."""
    nested_probability: float = 0.4
    """Chance that a hold (without an account lock) also needs identity verification."""
    vague_error_probability: float = 0.3
    """Chance that the order is a legacy one whose errors name no cause."""
    n_other_cards: int = 1
    """Closed or expired cards of the customer besides the order's card and the backup."""
    decoy_backup_probability: float = 0.4
    """Chance that, without a card fault, the customer still names a backup card."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_faults <= len(FAULTS):
            raise ConfigError(f"n_faults must be in 1..{len(FAULTS)}, got {self.n_faults}")
        for name in ("nested_probability", "vague_error_probability", "decoy_backup_probability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {value}")
        if not 0 <= self.n_other_cards <= 5:
            raise ConfigError(f"n_other_cards must be in 0..5, got {self.n_other_cards}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> RecoverConfig:
        base = cls(
            n_faults=1 + round(2 * d),
            nested_probability=0.8 * d,
            vague_error_probability=0.6 * d,
            n_other_cards=round(2 * d),
            decoy_backup_probability=0.8 * d,
        )
        return apply_overrides(base, overrides, "recover")


# -- task -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecoverTask:
    customer_id: str
    order_id: str
    speed: str
    faults: list[str]
    """Planted faults in the order the upgrade meets them (``identity_unverified`` nested)."""
    fix_calls: list[dict[str, Any]]
    """The reference fixes, in order; then ``upgrade_shipping(order_id, speed)``."""
    date_of_birth: str
    expired_card: str
    backup_card: str
    """The card the customer named ('' when they named none)."""
    vague_errors: bool
    fee: float
    estimated_delivery: str
    opening: str
    owned: list[list[str]]
    world: dict[str, Any] = field(repr=False)


# -- generator --------------------------------------------------------------------------------
def generate_task(rng: StableRNG, cfg: RecoverConfig) -> RecoverTask:
    """A pure function of (rng state, config): the same seed gives the same task."""
    world = World(draw_now(rng))
    task = generate_into(world, rng, cfg)
    return dataclasses.replace(task, world=world.snapshot().to_dict())


def generate_into(world: World, rng: StableRNG, cfg: RecoverConfig) -> RecoverTask:
    """Add one blocked upgrade request (its customer and records) to ``world``."""
    customer = support_customer(rng, world)
    order = support_order(rng, world, customer, status=rng.choice(("pending", "processing")))
    cid, oid = customer["customer_id"], order["order_id"]
    speed = rng.choice(tuple(SPEEDS))
    chosen = set(rng.sample(FAULTS, cfg.n_faults))
    faults = [f for f in FAULTS if f in chosen]
    vague = rng.bernoulli(cfg.vague_error_probability)
    order["legacy_system"] = vague
    for _ in range(cfg.n_other_cards):
        extra_card(rng, world, customer, status=rng.choice(("closed", "expired")))
    backup = ""
    if "card_expired" in chosen or rng.bernoulli(cfg.decoy_backup_probability):
        backup = extra_card(rng, world, customer)["payment_method_id"]
    expired = order["payment_method_id"]
    fixes = _plant(world, rng, customer, order, faults, cfg.nested_probability, backup)
    if NESTED in _fault_names(world, cid, oid):
        faults.insert(faults.index("order_on_hold") + 1, NESTED)
    ref = _after(world, fixes + [_upgrade_call(oid, speed)])
    result_order = ref.tables["orders"][oid]
    return RecoverTask(
        customer_id=cid,
        order_id=oid,
        speed=speed,
        faults=faults,
        fix_calls=fixes,
        date_of_birth=customer["date_of_birth"],
        expired_card=expired if "card_expired" in chosen else "",
        backup_card=backup,
        vague_errors=vague,
        fee=ref.log[-1]["amount"],
        estimated_delivery=result_order["estimated_delivery"],
        opening=_opening(world, customer, order, speed, backup),
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
    if "card_expired" in faults:
        world.tables["payment_methods"][order["payment_method_id"]]["status"] = "expired"
        fixes.append(_call("set_order_payment_method", order_id=oid, payment_method_id=backup))
    return fixes


def _fault_names(world: World, cid: str, oid: str) -> list[str]:
    """The faults present in ``world`` (recomputed from the records, not from the plan)."""
    customer, order = world.tables["customers"][cid], world.tables["orders"][oid]
    out = []
    if customer.get("account_status") == "locked":
        out.append("account_locked")
    if order.get("hold"):
        out.append("order_on_hold")
        if not customer.get("identity_verified", True) and "account_locked" not in out:
            out.append(NESTED)
    if world.tables["payment_methods"][order["payment_method_id"]]["status"] != "active":
        out.append("card_expired")
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
    world: World, customer: dict[str, Any], order: dict[str, Any], speed: str, backup: str
) -> str:
    text = (
        f"Hi, I'm {customer['name']} (customer id {customer['customer_id']}). Please upgrade "
        f"my order {order['order_id']} to {speed} shipping, and tell me the fee and the new "
        f"delivery date. For verification, my date of birth is {customer['date_of_birth']}."
    )
    if backup:
        card = world.tables["payment_methods"][backup]
        text += (
            f" If there's a problem with my card, use my other card, the {card['brand']} "
            f"ending in {card['last4']}."
        )
    return text


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _upgrade_call(order_id: str, speed: str) -> dict[str, Any]:
    return _call("upgrade_shipping", order_id=order_id, speed=speed)


# -- verifier ---------------------------------------------------------------------------------
def cause_records(task: RecoverTask, fault: str) -> list[tuple[str, str]]:
    """Records that show a fault's cause (needed unless an error named the cause)."""
    if fault == "order_on_hold":
        return [("orders", task.order_id)]
    if fault == "card_expired":
        return [("orders", task.order_id), ("payment_methods", task.expired_card)]
    return [("customers", task.customer_id)]


def fix_records(task: RecoverTask, fault: str) -> list[tuple[str, str]]:
    """Records that the fix needs in any case (the customer's cards, to find the backup)."""
    if fault == "card_expired":
        return [("customers", task.customer_id), ("payment_methods", task.backup_card)]
    return []


FIX_TOOLS = {"order_on_hold": "release_order_hold", "card_expired": "set_order_payment_method"}
"""Fault -> the tool that removes it (both identity faults: ``verify_identity``)."""


def _fix_turn(fault: str, calls: list[CallRecord]) -> int | None:
    """Turn of the first successful call that removes ``fault``."""
    want = FIX_TOOLS.get(fault, "verify_identity")
    turns = [c.turn for c in calls if c.ok and c.name == want and c.changed_world]
    return turns[0] if turns else None


def _diagnosed(task: RecoverTask, fault: str, calls: list[CallRecord]) -> bool:
    """The cause was named by an error or read, and the fix's records read, before the fix."""
    turn = _fix_turn(fault, calls)
    before = [c for c in calls if turn is None or c.turn < turn]
    seen = records_read(before)
    named = any(
        c.error is not None and str(c.error.get("message", "")).startswith(f"cause={fault}:")
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


def _report_check(task: RecoverTask, ep: EpisodeState, calls: list[CallRecord]) -> Check:
    """The report is the first message after the successful upgrade: the customer leaves on
    it, and inside the composite later messages belong to other requests."""
    done = [c.turn for c in calls if c.ok and c.name == "upgrade_shipping"]
    after = [t for t in ep.agent_texts if done and t[0] > done[0]]
    last = after[0] if after else (0, "")
    amounts, dates = report_values(last[1])
    total = ep.initial_world.tables["orders"][task.order_id]["total"]
    ok = (
        bool(after)
        and len(last[1]) <= MAX_FINAL_CHARS
        and cents(task.fee) in amounts
        and set(amounts) <= {cents(task.fee), cents(total)}
        and task.estimated_delivery in dates
        and set(dates) <= {task.estimated_delivery, ep.initial_world.now[:10]}
    )
    return Check(
        "reports_result", CAPABILITY, float(ok), 0.3,
        expected={"fee": task.fee, "estimated_delivery": task.estimated_delivery},
        actual={"amounts_cents": amounts, "dates": dates, "chars": len(last[1])},
        message="the first message after the upgrade reports the fee and the delivery date",
    )  # fmt: skip


def verify(task: RecoverTask, ep: EpisodeState, *, scoped: bool = False) -> Verification:
    """Grade an episode (``scoped``: only calls naming the task's own records count)."""
    calls = [c for c in ep.calls if not scoped or touches(c, task.owned)]
    world0 = ep.initial_world
    before = _owned_part(world0, task.owned, world0.log)
    calls_ref = task.fix_calls + [_upgrade_call(task.order_id, task.speed)]
    base = _owned_part(world0, task.owned, [])
    expected = restrict_diff(world_diff(base, _apply(base.snapshot(), calls_ref)), task.owned)
    after = _owned_part(ep.world, task.owned, ep.world.log)
    actual = restrict_diff(world_diff(before, after), task.owned)
    diagnosed = [f for f in task.faults if _diagnosed(task, f, calls)]
    remaining = _fault_names(ep.world, task.customer_id, task.order_id)
    fixed = [f for f in task.faults if f not in remaining]
    bad = _agrees(actual, expected)
    checks = [
        Check("diagnosed", CAPABILITY, fraction(len(diagnosed), len(task.faults)), 0.2,
              expected=task.faults, actual=diagnosed,
              message="before each fix, the cause was named by an error or read in the records"),
        Check("fixed", CAPABILITY, fraction(len(fixed), len(task.faults)), 0.2,
              expected=task.faults, actual=fixed, message="faults gone from the final world"),
        Check("request_succeeded", CAPABILITY, float(actual == expected), 0.3,
              expected=expected, actual=actual,
              message="world diff equals the fixes plus the upgrade"),
        _report_check(task, ep, calls),
        Check("no_unnecessary_changes", CAPABILITY, float(not bad), 0.0, gate=True,
              expected=[d["path"] for d in expected], actual=bad,
              message="changes the reference end state does not make"),
    ]  # fmt: skip
    return Verification(tuple(checks), required_capabilities=(CAPABILITY,))


# -- oracle -----------------------------------------------------------------------------------
_READ = {"customers": ("get_customer", "customer_id"), "orders": ("get_order", "order_id"),
         "payment_methods": ("get_payment_method", "payment_method_id")}  # fmt: skip


def oracle(task: RecoverTask, world: World) -> list[Any]:
    """Read what shows each cause, apply the fixes in order, upgrade, report the values."""
    needed: list[tuple[str, str]] = []
    for fault in task.faults:
        records = cause_records(task, fault) + fix_records(task, fault)
        needed += [r for r in records if r not in needed]
    reads = [_call(_READ[t][0], **{_READ[t][1]: k}) for t, k in needed]
    fixes = [c for i, c in enumerate(task.fix_calls) if c not in task.fix_calls[:i]]
    return [
        {"tool_calls": reads} if len(reads) > 1 else reads[0],
        *fixes,
        _upgrade_call(task.order_id, task.speed),
        f"Your order {task.order_id} now ships {task.speed}. The fee of {task.fee:.2f} has "
        f"been charged, and the new estimated delivery date is {task.estimated_delivery}.",
    ]


# -- scripted user ----------------------------------------------------------------------------
class RecoverUser(ScriptedUser):
    """Repeats its details when asked, leaves after hearing the result of the upgrade."""

    patience = 4
    nudges = ("Please go ahead with the upgrade.",)

    def __init__(self, task: RecoverTask, world: World) -> None:
        super().__init__(task.opening)
        self.task = task
        self.card = ""
        if task.backup_card:
            card = world.tables["payment_methods"][task.backup_card]
            self.card = f"My other card is the {card['brand']} ending in {card['last4']}."

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        """The reply when ``agent_text`` is about this request, else None (composite use)."""
        if any(
            c.ok and c.name == "upgrade_shipping" and touches(c, self.task.owned)
            for c in episode.calls
        ):
            return UserReply("Great, thank you!", done=True)
        low = agent_text.lower()
        if "?" not in low:
            return None
        parts = []
        if any(w in low for w in ("birth", "identity", "verif")):
            parts.append(f"My date of birth is {self.task.date_of_birth}.")
        if "card" in low or "payment" in low:
            parts.append(self.card or "Please use the card on the order.")
        return UserReply(" ".join(parts)) if parts else None


# -- environment ------------------------------------------------------------------------------
class RecoverCommunicateEnv(TraceEnv):
    """Error recovery and communication; see the module docstring for the full description."""

    env_id = ENV_ID
    capability = CAPABILITY
    version = 0
    default_max_turns = 14
    tools = ToolSet(
        pick_tools(
            "get_customer",
            "get_order",
            "get_payment_method",
            "verify_identity",
            "release_order_hold",
            "set_order_payment_method",
            "upgrade_shipping",
        )
    )

    def generate(self, rng: StableRNG, difficulty: float, config: dict[str, Any]) -> RecoverTask:
        return generate_task(rng, RecoverConfig.from_difficulty(difficulty, config))

    def build_world(self, task: RecoverTask) -> World:
        return World.from_dict(task.world)

    def make_user(self, task: RecoverTask) -> ScriptedUser:
        return RecoverUser(task, World(task.world["now"], task.world["tables"]))

    def system_prompt(self, task: RecoverTask) -> str:
        return (
            "You are a customer-service agent for Tracewell, an online shop. "
            f"The current time is {task.world['now']}.\n\n"
            "Use the tools to look records up and to make changes. A tool that refuses says "
            "why as 'cause=<code>: <reason>'. Change only what the customer's request needs. "
            "When you are done, tell the customer the outcome in a message without a tool "
            "call; write amounts with two decimals (12.34) and dates as YYYY-MM-DD."
        )

    def hint(self, task: RecoverTask) -> str:
        return (
            "When a call fails, read the cause in the error; if it is generic, look at the "
            "account, the order and its payment method to find what blocks it. Remove each "
            "blocker with the tool made for it, using only details the customer gave, then "
            "retry; a fix can have its own prerequisite. Do not change anything that is not "
            "blocking. Finish with a short message that states the exact fee and delivery "
            "date the successful call returned."
        )

    def verify(self, task: RecoverTask, episode: EpisodeState) -> Verification:
        return verify(task, episode)

    def oracle(self, task: RecoverTask) -> list[Any]:
        return oracle(task, World.from_dict(task.world))

    def difficulty_features(self, task: RecoverTask) -> dict[str, Any]:
        cards = [k for t, k in task.owned if t == "payment_methods"]
        return {
            "n_faults": len(task.faults),
            "chain_length": len(task.fix_calls),
            "nested_prerequisite": NESTED in task.faults,
            "vague_errors": task.vague_errors,
            "n_cards": len(cards),
            "decoy_backup": bool(task.backup_card) and not task.expired_card,
        }
