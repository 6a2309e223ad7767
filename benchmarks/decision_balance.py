"""Decision balance, measured from the environments alone: for every environment that declares
the decision its verifier judges, the share of each decision class and what a decision-blind
policy ("read everything, then always take this decision, done well") wins, per difficulty.

    python benchmarks/decision_balance.py [--seeds 1000] [--envs trace/clarify-v0 ...]
        [--json benchmarks/results/decision_balance.json]
        [--markdown benchmarks/results/decision_balance.md]

Held-out: seeds ``0 .. N-1`` of the eval split, which no test and no check of the suite is
sized on. Each task's class is read twice, from ``info["decision"]`` and from what the
oracle's plan does (a refusal or other control call, a question before its write, or a write
alone), and the two must agree one to one, so the shares do not rest on the environment's
own label. The decision-blind policies play every task; the issue this answers asks that
none wins more than half of the tasks at any difficulty (before: always granting won 67-79 %
of precondition-v0 and 69-74 % of policy-pressure-v0, always asking 92 % of clarify-v0).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import trace_gym  # noqa: F401  (registers the environments)
from trace_gym.agents.decision_blind import declared_decisions
from trace_gym.agents.information_free import tool_kind, turn_calls
from trace_gym.registration import load_registry
from trace_gym.testing.soundness import MAX_DECISION_BLIND_SUCCESS, decision_table

DIFFICULTIES = (0.0, 0.5, 1.0)


def oracle_action(env: Any) -> str:
    """What the oracle's plan does with the current task, from its tool kinds alone: a
    control call (``control:refuse``), a question before its first write (``ask, write``),
    or a write (``write``); ``none`` when it does neither."""
    inner = env.unwrapped
    asked = False
    for turn in inner.oracle_actions():
        calls = turn_calls(turn)
        if calls is None:
            asked |= "?" in turn
            continue
        kinds = [(tool_kind(inner, c["name"]), c["name"]) for c in calls]
        control = [name for kind, name in kinds if kind == "control"]
        if control:
            return f"control:{control[0]}"
        if any(kind == "write" for kind, _ in kinds):
            return "ask, write" if asked else "write"
    return "none"


def agreement(env_id: str, seeds: int) -> dict[str, dict[str, int]]:
    """Per declared class, how often the oracle's plan does each kind of thing."""
    env = gym.make(env_id, disable_env_checker=True)
    counts: dict[str, dict[str, int]] = {}
    for d in DIFFICULTIES:
        for seed in range(seeds):
            info = env.reset(seed=seed, options={"difficulty": d, "split": "eval"})[1]
            row = counts.setdefault(str(info["decision"]), {})
            action = oracle_action(env)
            row[action] = row.get(action, 0) + 1
    env.close()
    return counts


def markdown(result: dict[str, Any]) -> str:
    rows, seeds = result["rows"], result["seeds_per_difficulty"]
    lines = [
        f"Decision balance over {seeds} eval seeds per difficulty (held out; resets for the "
        "shares, one episode per seed for each decision-blind policy). Bound: no "
        f"decision-blind policy wins more than {MAX_DECISION_BLIND_SUCCESS:.0%} of the tasks.",
        "",
        "| environment | decision | declared | share d=0 / 0.5 / 1 | decision-blind success "
        "d=0 / 0.5 / 1 | wins on another class |",
        "|---|---|---|---|---|---|",
    ]
    for env_id in result["envs"]:
        mine = [r for r in rows if r["env"] == env_id]
        for decision in dict.fromkeys(r["decision"] for r in mine):
            cells = sorted((r for r in mine if r["decision"] == decision), key=lambda r: r["difficulty"])  # fmt: skip
            shares = " / ".join(f"{r['share']:.3f}" for r in cells)
            blind = " / ".join(f"{r.get('blind_success', float('nan')):.3f}" for r in cells)
            other = sum(len(r.get("won_other_class", [])) for r in cells)
            declared = cells[0]["declared"]
            lines.append(
                f"| {env_id.removeprefix('trace/')} | {decision} | {declared} | {shares} | "
                f"{blind} | {other} |"
            )
    worst = max(rows, key=lambda r: r.get("blind_success", -1.0))
    lines += [
        "",
        f"Highest decision-blind success: {worst['blind_success']:.3f} "
        f"(`decision_blind:{worst['decision']}` on {worst['env']} at d={worst['difficulty']:g}); "
        f"{'within' if result['within_bound'] else 'OVER'} the bound of "
        f"{MAX_DECISION_BLIND_SUCCESS:.2f}.",
        "",
        "The class each task needs, against what the oracle's plan does (all difficulties):",
        "",
    ]
    for env_id, table in result["agreement"].items():
        pairs = "; ".join(
            f"{decision}: " + ", ".join(f"{a} {n}" for a, n in sorted(actions.items()))
            for decision, actions in table.items()
        )
        lines.append(f"- {env_id.removeprefix('trace/')}: {pairs}")
    lines += ["", f"Command: `{result['command']}` ({result['seconds']:.0f} s)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1000, help="eval seeds per difficulty")
    parser.add_argument("--envs", nargs="*", help="ids (default: those declaring decisions)")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/decision_balance.json"))  # fmt: skip
    parser.add_argument("--markdown", type=Path, default=Path("benchmarks/results/decision_balance.md"))  # fmt: skip
    args = parser.parse_args(argv)
    if args.seeds < 200:
        parser.error(
            f"--seeds must be at least 200 (got {args.seeds}): the bound is 0.5 +- nothing"
        )
    started = time.perf_counter()
    env_ids = args.envs or [
        e.id
        for e in load_registry()
        if declared_decisions(gym.make(e.id, disable_env_checker=True))
    ]
    rows: list[dict[str, Any]] = []
    agree: dict[str, Any] = {}
    for env_id in env_ids:
        start = time.perf_counter()
        got = decision_table(env_id, DIFFICULTIES, n_seeds=args.seeds, share_seeds=args.seeds)
        rows += got
        agree[env_id] = agreement(env_id, args.seeds)
        best = max((r.get("blind_success", 0.0) for r in got), default=0.0)
        print(f"{env_id}: best decision-blind success {best:.3f} ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    measured = [r["blind_success"] for r in rows if "blind_success" in r]
    result = {
        "seeds_per_difficulty": args.seeds,
        "split": "eval",
        "difficulties": list(DIFFICULTIES),
        "bound": MAX_DECISION_BLIND_SUCCESS,
        "within_bound": bool(measured) and max(measured) <= MAX_DECISION_BLIND_SUCCESS,
        "envs": env_ids,
        "rows": rows,
        "agreement": agree,
        "seconds": round(time.perf_counter() - started, 1),
        "command": " ".join(
            [
                "python benchmarks/decision_balance.py",
                shlex.join(sys.argv[1:] if argv is None else argv),
            ]
        ).strip(),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    args.markdown.write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
