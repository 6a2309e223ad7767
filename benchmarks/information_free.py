"""Information-free policies against every registered environment: success and mean partial
reward per policy, environment and difficulty (0, 0.5, 1), on the eval split.

    python benchmarks/information_free.py [--seeds 60] [--envs trace/clarify-v0 ...]
        [--json benchmarks/results/information_free.json]
        [--markdown benchmarks/results/information_free.md]

The Markdown table (for docs/environments.md) shows, per policy family and environment, the worst
success rate and the worst mean reward over the family's members and the three difficulties;
a cell over the bound (success > 10 % or mean reward > 0.15) is marked, and the violations are
listed below the table. The oracle row is the reference (it must read 1.00 / 1.00).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import trace_gym  # noqa: F401  (registers the environments)
from trace_gym.registration import load_registry
from trace_gym.testing.soundness import MAX_MEAN_REWARD, MAX_SUCCESS, information_free_table

FAMILIES = (
    "oracle",
    "null",
    "read_then_stall",
    "refuse_citing_rule",
    "refuse_with_reason",
    "refuse_with_reason (no reads)",
    "grant_by_copying",
    "fixed_question_template",
    "first_search_result",
    "keyword_stuffed",
)


def family(policy: str) -> str:
    if policy.startswith("refuse_with_reason:") and policy.endswith("_no_reads"):
        return "refuse_with_reason (no reads)"
    return policy.split(":")[0]


def over(row: dict[str, Any]) -> bool:
    return row["policy"] != "oracle" and (
        row["success"] > MAX_SUCCESS or row["mean_reward"] > MAX_MEAN_REWARD
    )


def markdown(rows: list[dict[str, Any]], env_ids: list[str], seeds: int) -> str:
    short = {e: e.removeprefix("trace/").removesuffix("-v0") for e in env_ids}
    cells: dict[tuple[str, str], str] = {}
    for env_id in env_ids:
        mine = [r for r in rows if r["env"] == env_id]
        for fam in FAMILIES:
            measured = [r for r in mine if "n" in r and family(r["policy"]) == fam]
            skipped = [
                r for r in mine if "skipped" in r and family(r["policy"]) == fam.split(" (")[0]
            ]
            if measured:
                success = max(r["success"] for r in measured)
                reward = max(r["mean_reward"] for r in measured)
                if fam == "oracle":
                    success = min(r["success"] for r in measured)
                    reward = min(r["mean_reward"] for r in measured)
                mark = " **over**" if any(over(r) for r in measured) else ""
                cells[fam, env_id] = f"{success:.2f} / {reward:.2f}{mark}"
            elif skipped:
                cells[fam, env_id] = "n/a"
            else:
                cells[fam, env_id] = ""
    head = "| policy | " + " | ".join(short[e] for e in env_ids) + " |"
    lines = [
        f"Worst success / mean partial reward over difficulties 0, 0.5, 1 ({seeds} eval seeds "
        f"each; bound: success <= {MAX_SUCCESS:.2f}, reward <= {MAX_MEAN_REWARD:.2f}). "
        "n/a: the policy does not apply (no hook, exempt, or no task where it makes a choice).",
        "",
        head,
        "|" + "---|" * (len(env_ids) + 1),
    ]
    for fam in FAMILIES:
        lines.append(f"| {fam} | " + " | ".join(cells[fam, e] for e in env_ids) + " |")
    bad = [r for r in rows if "n" in r and over(r)]
    lines += ["", f"Over the bound: {len(bad)} (policy, difficulty) rows; the worst of each:"]
    worst: dict[tuple[str, str], dict[str, Any]] = {}
    for r in bad:
        key = (r["env"], family(r["policy"]))
        if key not in worst or (r["success"], r["mean_reward"]) > (
            worst[key]["success"],
            worst[key]["mean_reward"],
        ):
            worst[key] = r
    for (env_id, _), r in sorted(worst.items()):
        count = sum(
            1 for b in bad if (b["env"], family(b["policy"])) == (env_id, family(r["policy"]))
        )
        lines.append(
            f"- {short[env_id]} `{r['policy']}` d={r['difficulty']}: success "
            f"{r['success']:.2f}, mean reward {r['mean_reward']:.2f} (n={r['n']}; "
            f"{count} rows of this family over)"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=60, help="eval seeds per difficulty")
    parser.add_argument("--envs", nargs="*", help="environment ids (default: all registered)")
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/results/information_free.json")
    )
    parser.add_argument(
        "--markdown", type=Path, default=Path("benchmarks/results/information_free.md")
    )
    args = parser.parse_args()
    env_ids = args.envs or [e.id for e in load_registry()]
    rows: list[dict[str, Any]] = []
    for env_id in env_ids:
        start = time.perf_counter()
        got = information_free_table(env_id, n_seeds=args.seeds)
        rows += got
        bad = sum(1 for r in got if "n" in r and over(r))
        print(f"{env_id}: {bad} rows over the bound ({time.perf_counter() - start:.0f} s)")
    result = {
        "seeds_per_difficulty": args.seeds,
        "split": "eval",
        "bounds": {"max_success": MAX_SUCCESS, "max_mean_reward": MAX_MEAN_REWARD},
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(rows, env_ids, args.seeds)
    args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
