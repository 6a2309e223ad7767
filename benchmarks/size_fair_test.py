"""How many paired test tasks the pre-registered fair comparison needs, from its pilot.

The rule is fixed here before the pilot's result exists (issue 26: "at least 160, or more if
the pilot's discordance says so"):

1. ``d``: the share of the pilot's tasks on which the mixture (``moe``) and plain GRPO
   (``plain-grpo``) differ, taken no lower than ``FLOOR_DISCORDANCE`` (48 tasks estimate it
   coarsely, and a low estimate would size too small a test);
2. ``n``: the smallest multiple of 8 (one evaluation batch) from ``MIN_TASKS`` up to
   ``MAX_TASKS`` at which the exact McNemar test (alpha 0.05, two-sided) detects a difference of
   ``DIFFERENCE`` (the paper's +9.2 points of TRACE over GRPO) with probability
   ``TARGET_POWER`` (``trace_diagnose.stats.mcnemar_power``); ``MAX_TASKS`` when none does (the
   CPU budget: each task costs ~20 s per policy on one thread), with the power it has.

    python benchmarks/size_fair_test.py benchmarks/results/fair_cpu_pilot.json

When the registered config trains more than the pilot did, the pilot's discordance describes
another config; ``--discordance D`` then sizes by the same rule from an assumed one, which the
plan states.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DIFFERENCE = 0.092
TARGET_POWER = 0.8
FLOOR_DISCORDANCE = 0.15
MIN_TASKS, MAX_TASKS, STEP = 160, 240, 8


def discordance(record: dict, first: str = "plain-grpo", then: str = "moe") -> float:
    """Share of the pilot's tasks where ``first`` and ``then`` differ (from ``per_task``)."""
    outcomes = record["per_task"]["outcomes"]
    missing = [name for name in (first, then) if name not in outcomes]
    if missing:
        raise SystemExit(f"the pilot record has no per-task outcomes for {', '.join(missing)}")
    a, b = outcomes[first], outcomes[then]
    return sum(x != y for x, y in zip(a, b, strict=True)) / len(a)


def size(observed: float) -> dict:
    from trace_diagnose.stats import mcnemar_power

    d = max(observed, FLOOR_DISCORDANCE, DIFFERENCE)
    table = {n: round(mcnemar_power(n, d, DIFFERENCE), 3) for n in range(MIN_TASKS, MAX_TASKS + 1, STEP)}  # fmt: skip
    n = next((n for n, power in table.items() if power >= TARGET_POWER), MAX_TASKS)
    return {
        "observed_discordance": round(observed, 4),
        "discordance_used": round(d, 4),
        "difference": DIFFERENCE,
        "tasks": n,
        "power": table[n],
        "power_by_tasks": table,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("pilot", type=Path, nargs="?", help="the pilot's targeted_vs_plain.py record (JSON)")  # fmt: skip
    ap.add_argument("--discordance", type=float, help="size from this discordance instead")
    args = ap.parse_args(argv)
    if (args.pilot is None) == (args.discordance is None):
        ap.error("give the pilot's record or --discordance, one of the two")
    if args.discordance is not None and not 0 <= args.discordance <= 1:
        ap.error(f"--discordance {args.discordance}: a share of tasks, from 0 to 1")
    observed = args.discordance
    if observed is None:
        observed = discordance(json.loads(args.pilot.read_text()))
    sized = size(observed)
    sized["discordance_from"] = str(args.pilot) if args.pilot else "assumed (--discordance)"
    print(json.dumps(sized, indent=2))
    return sized


if __name__ == "__main__":
    main()
