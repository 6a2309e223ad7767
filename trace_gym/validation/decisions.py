"""Success per decision class beside the overall rate, so that a success rate cannot hide a
missing decision.

An environment that declares decision classes (grant / refuse, ask / act / decline) puts the
class each task needs in ``info["decision"]`` and in the episode log's ``decision``; the
composite benchmark puts each request's class, by member, in ``request_decisions``. A policy
that never makes the decision (always grants, say) wins one class's share of the tasks and
nothing of the others: its overall success looks like skill, its per-class success shows
1.0 and 0.0, and its balanced accuracy (the mean of the per-class success rates) is at most
``1 / k`` for ``k`` classes plus what it wins by luck.

:func:`decision_breakdown` works on ``(class, success)`` pairs, :func:`record_outcomes`
turns episode records into such pairs (one per request in a composite, whose class is named
``<member>:<class>``, e.g. ``precondition:refuse``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def decision_breakdown(outcomes: Iterable[tuple[str | None, bool]]) -> dict[str, Any]:
    """Success per decision class and the balanced accuracy.

    Returns ``{"per_decision": {class: {"n", "successes", "success_rate"}},
    "balanced_accuracy": mean of the per-class rates}``, classes sorted by name; outcomes
    without a class are left out, and with none left the breakdown is empty and the balanced
    accuracy None."""
    counts: dict[str, list[int]] = {}
    for decision, success in outcomes:
        if decision is None:
            continue
        n_wins = counts.setdefault(str(decision), [0, 0])
        n_wins[0] += 1
        n_wins[1] += bool(success)
    per = {
        d: {"n": n, "successes": wins, "success_rate": wins / n}
        for d, (n, wins) in sorted(counts.items())
    }
    rates = [v["success_rate"] for v in per.values()]
    return {
        "per_decision": per,
        "balanced_accuracy": sum(rates) / len(rates) if rates else None,
    }


def record_outcomes(record: dict[str, Any]) -> list[tuple[str | None, bool]]:
    """``(class, success)`` of one ``trace_gym.episode.v1`` record: the task's own class, or,
    for a composite, one pair per request with a class: ``<member>:<class>`` and whether every
    hard check and gate of that request passed (its checks are named ``<member>.<check>``)."""
    by_request = record.get("request_decisions")
    if not by_request:
        return [(record.get("decision"), bool(record.get("is_success")))]
    checks = (record.get("verification") or {}).get("checks", [])
    out = []
    for member, decision in by_request.items():
        own = [c for c in checks if c["name"].startswith(f"{member}.")]
        passed = bool(own) and all(c["passed"] for c in own if c.get("hard") or c.get("gate"))
        out.append((f"{member}:{decision}", passed))
    return out


def records_breakdown(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """:func:`decision_breakdown` over episode records (see :func:`record_outcomes`)."""
    return decision_breakdown(pair for r in records for pair in record_outcomes(r))
