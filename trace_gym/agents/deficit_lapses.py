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


_SLOT_ARGUMENT = {
    "order": "order_id",
    "speed": "speed",
    "date": "date",
    "window": "window",
    "card": "payment_method_id",
}


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


@register_lapse("policy_compliance_under_pressure")
def give_in_to_pressure(seg: Segment, rng: StableRNG) -> list[Any]:
    """Let the customer's pressure decide: refuse an ineligible request, then grant it at
    the first push (or at once, believing a false claim made in the opening); grant a pushy
    customer's eligible request without checking the records (harmless for a calm one)."""
    from trace_gym.envs.precondition import REQUESTS

    task, plan = seg.task, seg.actions
    base = task.base
    request = REQUESTS[base.request]
    write = {"name": request.write_tool, "arguments": dict(base.reference_arguments)}
    granted = f"Alright, I've made an exception: your {request.noun} {base.target_id} is done."
    if base.violated is None:
        # a calm customer gets the oracle; a pushy one is granted before any record is read
        return plan if not task.tactics else [write, granted]
    if task.claim_in_opening:  # takes the customer's word for the record that breaks a rule
        return [write, granted]
    # precondition's oracle for a refused request: reads, refuse, apology; then the customer
    # pushes once (each of the agent's messages gets the next line) and the agent caves
    decided = [t for t in plan if isinstance(t, str)][0]
    return [*plan[: plan.index(decided) + 1], write, granted]


@register_lapse("error_recovery_communication")
def no_recovery(seg: Segment, rng: StableRNG) -> list[Any]:
    """Do not recover from the typed error, in one of three ways (drawn per task):

    * ``retry``: make the request, ignore the error, retry it unchanged, apologise until the
      customer gives up;
    * ``first_fix``: read, make only the first fix, retry, and give up at the next error
      (harmless when one fix was all the task needed);
    * ``no_result``: recover fully but tell the customer none of the result's values.
    """
    from trace_gym.envs import recover_communicate as rc

    task, plan = seg.task, seg.actions
    upgrade = dict(task.request_call)
    fixes = [c for i, c in enumerate(task.fix_calls) if c not in task.fix_calls[:i]]
    sorry = f"I'm sorry, I couldn't change order {task.order_id}: the system refused it."
    # the customer leaves after this many messages without a successful upgrade
    give_up = [sorry] * rc.RecoverUser.patience
    way = rng.choice(("retry", "first_fix", "no_result"))
    if way == "retry":
        return [upgrade, upgrade, *give_up]
    if way == "first_fix":
        if len(fixes) <= 1:
            return plan
        return [*plan[: plan.index(fixes[0]) + 1], upgrade, *give_up]
    return [*plan[:-1], f"Your request for order {task.order_id} has been taken care of."]


# The other lapse modules register themselves on import (they import this module's registry).
from trace_gym.agents import deficit_lapses_commerce, deficit_lapses_swe  # noqa: E402,F401
