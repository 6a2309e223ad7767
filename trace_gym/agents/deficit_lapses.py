"""The capability-specific lapses of :class:`~trace_gym.agents.deficit.DeficitAgent`.

Each lapse takes the oracle's segment for one capability and returns the turns an agent
lacking that capability would play. A lapse may be harmless on an easy task (a check that
was skipped did not matter there), which is what makes a fixed deficit agent's reward fall as
difficulty rises. Environment modules are imported inside the lapse, so a capability whose
environment has not landed costs nothing here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trace_gym.agents.deficit import Segment, register_lapse
from trace_gym.core.seeding import StableRNG


@register_lapse("precondition_verification")
def skip_eligibility_check(seg: Segment, rng: StableRNG) -> list[Any]:
    """Read only the record in question; refuse only when it alone shows the violation,
    otherwise carry out the request (the rules that need other records go unchecked)."""
    from trace_gym.envs.precondition import REQUESTS
    from trace_gym.world.policy import deciding_records

    task, plan = seg.task, seg.actions
    request = REQUESTS[task.request]
    own_record = [(request.table, task.target_id)]
    if (
        task.violated
        and deciding_records(seg.world, task.request, task.target_id, [task.violated]) == own_record
    ):
        return [plan[0], *plan[-2:]]  # the violation is in plain sight: refuse as the oracle
    write = {"name": request.write_tool, "arguments": dict(task.reference_arguments)}
    return [plan[0], write, f"Done: your {request.noun} {task.target_id} has been processed."]


@register_lapse("structured_data_reasoning")
def near_miss_option(seg: Segment, rng: StableRNG) -> list[Any]:
    """Forget one constraint and book the best option under the others (a near miss when
    a distractor breaks only that constraint; the right answer when none does)."""
    from trace_gym.envs import structured_data as sd
    from trace_gym.envs import structured_options as so

    task = seg.task
    constraints = [so.Constraint(**c) for c in task.constraints]
    forgotten = rng.below(len(constraints))
    kept = constraints[:forgotten] + constraints[forgotten + 1 :]
    best = so.feasible_optimum(seg.world, task.domain, kept, task.objective, task.candidates)
    if not best:
        return seg.actions
    return sd.oracle(dataclasses.replace(task, answer=best[0]), seg.world)


_SLOT_ARGUMENT = {"order": "order_id", "speed": "speed", "date": "date", "window": "window"}


@register_lapse("information_gathering")
def guess_instead_of_asking(seg: Segment, rng: StableRNG) -> list[Any]:
    """Never ask: take wrongly stated values at face value and guess missing ones (another of
    the customer's orders, another speed, day or window); decline without checking records."""
    from trace_gym.world.model import day_offset
    from trace_gym.world.tools_support import DELIVERY_WINDOWS, SPEEDS

    task = seg.task
    if task.reference_call is None:  # decline at once, without reading what decides it
        return [t for t in seg.actions if isinstance(t, str) or "tool_calls" not in t][-2:]
    arguments = dict(task.reference_call["arguments"])
    for slot in task.ask_slots:
        name = _SLOT_ARGUMENT.get(slot)
        if name not in arguments:
            continue
        if slot in task.wrong:
            arguments[name] = task.wrong[slot]
            continue
        options = {
            "order": [k for t, k in task.owned if t == "orders"],
            "speed": list(SPEEDS),
            "window": list(DELIVERY_WINDOWS),
            "date": [day_offset(seg.world.now, k) for k in (1, 2, 3, 4)],
        }[slot]
        others = [v for v in options if v != arguments[name]]
        if others:
            arguments[name] = rng.choice(others)
    write = {"name": task.reference_call["name"], "arguments": arguments}
    return [write, "All done: your request has been completed."]
