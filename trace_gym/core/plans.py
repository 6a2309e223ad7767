"""Oracle plans and the helpers that rewrite them (the deficit agents' lapses use them).

A plan is a list of assistant turns: a string (a message to the customer), one call
``{"name", "arguments"}`` or ``{"tool_calls": [call, ...]}``. A :class:`Segment` is the part
of a task's plan that exercises one capability (a composite has one per request). These live
in the core, beside the environments, so an environment module can write its own lapse
without importing the agents package.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trace_gym.primitives.seeding import StableRNG
from trace_gym.primitives.tools import ToolRefusal, ToolSet
from trace_gym.world.model import World


@dataclass(frozen=True)
class Segment:
    """The oracle's turns for one capability's part of a task."""

    capability: str
    task: Any
    """The capability environment's task (its ``world`` may be empty inside the composite)."""
    world: World
    """The initial world the task lives in."""
    actions: list[Any]
    tools: ToolSet


def turn_calls(turn: Any) -> list[dict[str, Any]]:
    """The tool calls of one oracle turn ([] for a message to the customer)."""
    if isinstance(turn, dict):
        return list(turn["tool_calls"]) if "tool_calls" in turn else [turn]
    return []


def as_turn(calls: list[dict[str, Any]]) -> Any:
    """One assistant turn making ``calls`` (None when there are none)."""
    if not calls:
        return None
    return calls[0] if len(calls) == 1 else {"tool_calls": calls}


def map_calls(actions: list[Any], fn: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list:
    """Apply ``fn`` to every call (None drops it); turns left without calls disappear."""
    out = []
    for turn in actions:
        if isinstance(turn, str):
            out.append(turn)
            continue
        kept = [c for c in (fn(dict(call)) for call in turn_calls(turn)) if c is not None]
        if kept:
            out.append(as_turn(kept))
    return out


def call_kind(tools: ToolSet, name: str) -> str | None:
    tool = tools.get(name)
    return tool.kind if tool is not None else None


def accepted(seg: Segment, call: dict[str, Any]) -> bool:
    """Whether ``call`` passes its schema and changes a copy of the segment's world (a lapse
    plays only calls the world accepts: a refused one would leave the customer waiting)."""
    tool = seg.tools.get(call["name"])
    if tool is None or tool.validate(call["arguments"]) is not None:
        return False
    world = seg.world.snapshot()
    before = world.snapshot()
    try:
        tool.handler(world, **copy.deepcopy(call["arguments"]))
    except ToolRefusal:
        return False
    return world != before


def replace_call(actions: list[Any], old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
    """``actions`` with the call ``old`` (compared by value) replaced by ``new``."""
    out = []
    for turn in actions:
        calls = turn_calls(turn)
        if old not in calls:
            out.append(turn)
            continue
        swapped = [new if c == old else c for c in calls]
        out.append(swapped[0] if len(swapped) == 1 else {"tool_calls": swapped})
    return out


Lapse = Callable[[Segment, StableRNG], list[Any]]
LAPSES: dict[str, Lapse] = {}
"""Capability -> how an agent lacking it plays a segment. A spec's ``lapse`` is entered
when the spec is built; environments not built on a spec use
:func:`trace_gym.agents.deficit.register_lapse`."""
