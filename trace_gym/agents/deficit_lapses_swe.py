"""Lapses of the five SWE capabilities, for :class:`trace_gym.agents.deficit.DeficitAgent`.

Each rewrites the oracle's fix of one problem the way an agent lacking the capability
patches it; the result is sent in the segment's own form (a ``submit_patch`` call in the
single-turn environments, ``edit`` calls in ``trace/swe-repair-v0``).

| capability | lapse |
|---|---|
| ``semantic_logic_precision`` | edits the right lines but leaves the operator as it was |
| ``deep_call_graph_traversal`` | special-cases the public function the issue calls (the symptom) |
| ``diff_context_precision`` | quotes only the changed line, which first matches a twin |
| ``multi_site_consistency`` | fixes the first site only |
| ``structural_refactor_awareness`` | writes the logic inline and misses an edge case |
"""

from __future__ import annotations

import re
from typing import Any

from trace_gym.agents.deficit import Segment, register_lapse
from trace_gym.core.seeding import StableRNG
from trace_gym.envs.swe_common import SweTask, render_patch

Triple = tuple[str, str, str]


def _emit(seg: Segment, edits: list[Triple]) -> list[Any]:
    """``edits`` in the form the segment's oracle used."""
    names = {a.get("name") for a in seg.actions if isinstance(a, dict)}
    if "edit" in names:
        return [
            {"name": "edit", "arguments": {"path": p, "patch": render_patch([(p, s, r)])}}
            for p, s, r in edits
        ]
    return [{"name": "submit_patch", "arguments": {"patch": render_patch(edits)}}]


def _oracle(task: SweTask) -> list[Triple]:
    return [(p, s, r) for p, s, r in task.oracle_edits]


@register_lapse("semantic_logic_precision")
def unchanged_operator(seg: Segment, rng: StableRNG) -> list[Any]:
    """Touch the defective lines, keep their meaning (the operator or bound stays wrong)."""
    return _emit(seg, [(p, s, s.rstrip("\n") + "  # checked\n") for p, s, _ in _oracle(seg.task)])


@register_lapse("deep_call_graph_traversal")
def patch_the_symptom(seg: Segment, rng: StableRNG) -> list[Any]:
    """Make the issue's call return the expected value in the public function itself."""
    task: SweTask = seg.task
    found = re.search(r"assert M\.(\w+)\((.*)\) == (.*)", task.target_test)
    path = f"{task.module}.py"
    if found is None:
        return unchanged_operator(seg, rng)
    fn, args, expected = found.groups()
    start = task.source.index(f"def {fn}(")
    header = task.source[start : task.source.index("\n", start) + 1]
    arg = header[header.index("(") + 1 : header.index(")")].split(",")[0].strip()
    special = f"{header}    if {arg} == {args}:\n        return {expected}\n"
    return _emit(seg, [(path, header, special)])


@register_lapse("diff_context_precision")
def too_little_context(seg: Segment, rng: StableRNG) -> list[Any]:
    """Quote only the changed line; it first occurs in the twin defined earlier."""
    out = []
    for p, s, r in _oracle(seg.task):
        old = [ln for ln in s.split("\n") if ln.strip()][-1]
        new = [ln for ln in r.split("\n") if ln.strip()][-1]
        out.append((p, old + "\n", new + "\n"))
    return _emit(seg, out)


@register_lapse("multi_site_consistency")
def first_site_only(seg: Segment, rng: StableRNG) -> list[Any]:
    """Fix the site the issue names first and stop."""
    return _emit(seg, _oracle(seg.task)[:1])


@register_lapse("structural_refactor_awareness")
def inline_rewrite(seg: Segment, rng: StableRNG) -> list[Any]:
    """Write the helper's job inline, covering the issue's example only."""
    out = []
    for p, s, _ in _oracle(seg.task):
        if "round(total, 2)" in s:
            inline = s.replace("round(total, 2)", "round(total + 1e-9, 2)")
        else:
            inline = s.replace(
                "round(done / planned, 4)", "round(done / planned, 4) if planned else 0.0"
            )
        out.append((p, s, inline))
    return _emit(seg, out)
