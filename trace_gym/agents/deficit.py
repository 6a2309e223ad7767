"""Scripted deficit agents: a competent policy that lapses in chosen capabilities.

A :class:`DeficitAgent` plays the environment's oracle plan, one *segment* per capability the
task needs (the composite ``trace/service-desk-v0`` has one per request; a capability
environment has one). For each segment it draws, with the profile's probability for that
capability, whether it lapses; a lapse rewrites the segment the way an agent lacking the
capability would act:

| capability | lapse |
|---|---|
| ``precondition_verification`` | reads only the record in question, acts unless that record alone shows a violation or a rule at its boundary (misread as broken) |
| ``structured_data_reasoning`` | ignores one constraint and books the best option of the rest (a near miss) |
| ``multistep_completion`` | stops after the first sub-task |
| ``tool_call_precision`` | fumbles one argument of one write |
| ``payment_calculation`` | miscounts one amount |
| ``policy_compliance_under_pressure`` | withstands one push, gives in to the next (or at once to a false claim) |
| ``error_recovery_communication`` | does not recover from the error |
| ``information_gathering`` | guesses instead of asking; asks needlessly when nothing is missing |
| ``semantic_logic_precision`` | edits the right lines but leaves the operator as it was |
| ``deep_call_graph_traversal`` | special-cases the public function the issue calls (the symptom) |
| ``diff_context_precision`` | quotes only the changed line, which first matches a twin |
| ``multi_site_consistency`` | fixes the first site only |
| ``structural_refactor_awareness`` | writes the logic inline and misses an edge case |

Every capability's lapse sits beside its environment (the spec's ``lapse``), the SWE ones
included. Capabilities without a specific lapse use a generic
one: the segment's writes and decisions are dropped (the agent talks but never acts).

Lapse draws depend on (agent seed, task seed, capability) only, not on the difficulty, so a
difficulty sweep compares the same lapses on harder tasks. The agent's ``lapsed`` attribute
lists the capabilities it lapsed in on the current task (for tests; the episode log only
shows the actions, like a real trajectory).

Spec form: ``deficit:precondition=0.7,structured_data=0.5[:SEED]``; profile keys are full
capability names or the short names in :data:`SHORT_NAMES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from trace_gym.agents.plan import PlanAgent
from trace_gym.core.env import TraceEnv
from trace_gym.core.plans import (  # noqa: F401  (re-exported: lapses import them from here)
    LAPSES,
    Lapse,
    Segment,
    as_turn,
    call_kind,
    map_calls,
    turn_calls,
)
from trace_gym.primitives.seeding import StableRNG, derive_seed


def _short_names() -> dict[str, str]:
    from trace_gym.core.spec import short_of
    from trace_gym.registration import load_registry

    return {short_of(e.id): e.capability for e in load_registry() if "composite" not in e.tags}


SHORT_NAMES = _short_names()
"""Short profile keys (the registry ids' names: ``tool_call`` for ``trace/tool-call-v0``) ->
capability names, for every registered environment that is not a composite."""
CAPABILITIES = tuple(SHORT_NAMES.values())
SPEC_PREFIX = "deficit"
__all__ = [
    "Segment",
    "as_turn",
    "call_kind",
    "map_calls",
    "turn_calls",
]  # plan helpers, re-exported


def register_lapse(capability: str) -> Callable[[Lapse], Lapse]:
    """Decorator: use ``fn(segment, rng) -> actions`` as the lapse of ``capability``."""

    def wrap(fn: Lapse) -> Lapse:
        LAPSES[capability] = fn
        return fn

    return wrap


def capability_name(key: str) -> str:
    """The capability a profile key names (a short or a full name)."""
    if key in SHORT_NAMES:
        return SHORT_NAMES[key]
    if key in CAPABILITIES:
        return key
    known = ", ".join(sorted({*SHORT_NAMES, *CAPABILITIES}))
    raise ValueError(f"unknown capability {key!r} in a deficit profile; known: {known}")


def short_name(capability: str) -> str:
    """The short name of a capability (itself when it has none)."""
    for short, full in SHORT_NAMES.items():
        if full == capability:
            return short
    return capability


@register_lapse("__generic__")
def drop_actions(seg: Segment, rng: StableRNG) -> list[Any]:
    """Generic lapse: keep the reads and the talk, drop every write and decision."""
    return map_calls(
        seg.actions, lambda c: c if call_kind(seg.tools, c["name"]) == "read" else None
    )


# -- the agent --------------------------------------------------------------------------------
def plan_segments(env: TraceEnv) -> list[Segment]:
    """The oracle plan of the env's current task, one segment per capability."""
    split = getattr(env, "oracle_segments", None)
    if callable(split):
        return list(split(env.task))
    world = env.episode.initial_world.snapshot()
    return [Segment(env.capability, env.task, world, env.oracle_actions(), env.tools)]


class DeficitAgent(PlanAgent):
    """The oracle with per-capability lapses (see the module docstring).

    Args:
        profile: capability (short or full name) -> lapse probability in [0, 1].
        seed: agent seed; the lapses on a task follow from (seed, task seed, capability).
    """

    def __init__(self, profile: dict[str, float], seed: int = 0) -> None:
        resolved: dict[str, float] = {}
        for key, p in profile.items():
            p = float(p)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"lapse probability of {key!r} must be in [0, 1], got {p}")
            resolved[capability_name(key)] = p
        self.profile = resolved
        self.seed = int(seed)
        self.lapsed: list[str] = []
        parts = ",".join(f"{short_name(c)}={p:g}" for c, p in sorted(resolved.items()))
        super().__init__([], name=f"{SPEC_PREFIX}:{parts}:{self.seed}")

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.plan, self.lapsed, self._next = [], [], 0
        for seg in plan_segments(env):
            p = self.profile.get(seg.capability, 0.0)
            rng = StableRNG(derive_seed(SPEC_PREFIX, self.seed, info["task_seed"], seg.capability))
            if p > 0.0 and rng.bernoulli(p):
                lapse = LAPSES.get(seg.capability, LAPSES["__generic__"])
                self.plan += lapse(dataclasses.replace(seg, actions=list(seg.actions)), rng)
                self.lapsed.append(seg.capability)
            else:
                self.plan += seg.actions


def deficit_agent_from_spec(spec: str) -> DeficitAgent:
    """``deficit:precondition=0.7,structured_data=0.5[:SEED]`` -> a :class:`DeficitAgent`."""
    head, _, rest = spec.partition(":")
    if head != SPEC_PREFIX or not rest:
        raise ValueError(f"not a deficit agent spec: {spec!r}; use deficit:CAP=P[,CAP=P...][:SEED]")
    body, _, seed = rest.partition(":")
    profile: dict[str, float] = {}
    for item in filter(None, body.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"{spec!r}: {item!r} is not CAP=PROBABILITY")
        profile[key.strip()] = float(value)
    try:
        seed_value = int(seed) if seed else 0
    except ValueError:
        raise ValueError(f"{spec!r}: the seed must be an integer, got {seed!r}") from None
    return DeficitAgent(profile, seed_value)
