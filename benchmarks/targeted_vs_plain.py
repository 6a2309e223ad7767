"""TRACE against plain GRPO at the same rollouts: the paper's central comparison, CPU-sized.

One ``trace run`` (default ``trace_train/configs/compare_cpu.yaml``) does every step:

1. warm start the base model on oracle demonstrations of the target (``trace/service-desk-v0``);
2. diagnose the config's base agent on the target's eval split (ground-truth labels from the
   verifier's capability-tagged checks) and select the capabilities to train: the scripted
   agent with planted gaps in compare_cpu.yaml (the warm-started 135M model solved no task,
   which selects nothing), the model itself when ``diagnose.agent`` is unset;
3. TRACE: one GRPO adapter per selected capability, on that capability's environment;
   plain GRPO: one adapter on the target's own train split with as many rollouts as all the
   capability adapters together (same GRPO settings);
4. compose the adapters (per task: ``routed``; per token: ``moe``) and evaluate the base, plain
   GRPO and the compositions on the same held-out test tasks of the target.

This script then writes ``benchmarks/results/targeted_vs_plain.json`` (success per policy
with Wilson intervals, paired Newcombe intervals and exact McNemar p against the base and
against plain GRPO, the rollouts each used, seconds per stage, the command) and
``targeted_vs_plain.png`` (held-out success against the rollout budget). The run folder
resumes, so an interrupted benchmark picks up where it stopped.

The record also keeps every policy's outcome on each test task (``per_task``, one task order)
and what each arm spent besides its rollouts (``arm_costs``: tokens, seconds, CPU seconds).

A pre-registered comparison runs from its plan, which fixes the config, the settings, the run
folder and the result path of each replicate, and the rule that turns the primary comparison
into a win, a loss or a null; the result records the plan's hash and the commit that added it:

    python benchmarks/targeted_vs_plain.py --plan benchmarks/preregistration/PLAN.yaml --replicate NAME

    OMP_NUM_THREADS=2 python benchmarks/targeted_vs_plain.py   # ~2 h on 2 cores: warm start
                                                               # 36 min, GRPO 54, evaluation 21
    python benchmarks/targeted_vs_plain.py --set grpo.steps=... --set evaluate.episodes=200
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trace_train.pipeline import PipelineConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RESULTS = Path(__file__).parent / "results"
CONFIG = Path(__file__).parents[1] / "trace_train" / "configs" / "compare_cpu.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", default=str(CONFIG), help="trace run config (YAML)")
    ap.add_argument("--run-dir", help="run folder (default: the config's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, as in `trace run --set`")  # fmt: skip
    ap.add_argument("--out", default=str(RESULTS / "targeted_vs_plain"),
                    help="result path without suffix (.json and .png are written)")  # fmt: skip
    ap.add_argument("--plan", help="a pre-registration (YAML): its config, settings, run folder "
                    "and result path replace the options above, and its rule gives the verdict")  # fmt: skip
    ap.add_argument("--replicate", help="which of the plan's replicates to run (its name)")
    return ap.parse_args(argv)


def comparison(run_dir: Path, first: str, then: str) -> dict | None:
    """``then`` against ``first`` on the tasks both played: paired flips, Newcombe's paired
    interval and the exact McNemar p (None when either was not evaluated)."""
    from trace_diagnose.stats import mcnemar_exact, newcombe_paired
    from trace_train.pipeline.report import _outcomes

    a = _outcomes(run_dir / "evaluate" / first / "episodes.jsonl")
    b = _outcomes(run_dir / "evaluate" / then / "episodes.jsonl")
    if not a or not b or a.keys() != b.keys():
        return None
    both = sum(a[t] and b[t] for t in a)
    gained = sum(b[t] and not a[t] for t in a)
    lost = sum(a[t] and not b[t] for t in a)
    lo, hi = newcombe_paired(both, gained, lost, len(a) - both - gained - lost) or (-1.0, 1.0)
    return {
        "diff": (gained - lost) / len(a),
        "ci95_paired_newcombe": [round(lo, 4), round(hi, 4)],
        "verdict": "better" if lo > 0 else "worse" if hi < 0 else "no measurable difference",
        "gained": gained,
        "lost": lost,
        "mcnemar_exact_p": round(mcnemar_exact(gained, lost), 4),
    }


def training_signal(folder: Path) -> dict:
    """How much of a GRPO run's budget carried a gradient (groups whose trained rollouts'
    rewards differed: a group where every one scores the same has zero advantage and teaches
    nothing), and what the run spent: tokens the model wrote and the environment returned,
    seconds and CPU seconds of training.

    Under ``hinted_rollouts: drop`` (the default) only the hint-free rollouts of a group train
    and form its baseline, so a group counts when *they* differ: a group whose hinted
    rollouts succeed and hint-free ones all fail has zero advantage everywhere."""
    import yaml

    from trace_train.runlog import training_time

    config = yaml.safe_load((folder / "config.yaml").read_text())
    group_size = config["group_size"]
    dropped = config.get("hinted_rollouts", "drop") == "drop" and config.get("hint_ratio", 0) > 0
    share = "group/informative_share_no_hint" if dropped else "group/informative_share"
    lines = [json.loads(x) for x in (folder / "training_log.jsonl").read_text().splitlines()]
    steps = [x for x in lines if share in x]
    groups = sum(x["rollouts/step"] // group_size for x in steps)
    informative = sum(round(x[share] * x["rollouts/step"] / group_size) for x in steps)
    rewards = [x["reward/mean"] for x in steps]
    return {
        "groups": groups,
        "informative_groups": informative,
        "informative_counts": "hint-free rollouts only (hinted ones dropped)"
        if dropped
        else "all rollouts",
        "mean_train_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "tokens_model": sum(x.get("tokens/model", 0) for x in steps),
        "tokens_env": sum(x.get("tokens/env", 0) for x in steps),
        **training_time(lines),
    }


COST_KEYS = ("rollouts", "tokens_model", "tokens_env", "train_seconds", "train_cpu_seconds")


def _total(values) -> float | None:
    """The arm's total, or ``None`` when one adapter's share is unknown: a partial sum would
    read as the whole."""
    values = list(values)
    return None if any(v is None for v in values) else round(sum(values), 1)


def evaluation_machines(run_dir: Path, folder: str) -> list[dict] | None:
    """Which CPU played which of a policy's test episodes (``machines.jsonl``: one line per
    invocation, with its first episode); None for an evaluation older than that file."""
    from trace_train.evaluate import MACHINES_NAME

    path = run_dir / "evaluate" / folder / MACHINES_NAME
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def per_task_outcomes(run_dir: Path, policies: list[str]) -> dict:
    """Every policy's held-out outcome per task, in one task order (the base's evaluation
    order), keyed by policy name: what a reader needs to recompute any paired statistic."""
    from trace_train.pipeline.report import _outcomes

    played = {
        name: _outcomes(run_dir / "evaluate" / name.replace(":", "__") / "episodes.jsonl")
        for name in policies
    }
    first = next((o for o in played.values() if o), None)
    if first is None:
        return {"task_ids": [], "outcomes": {}}
    order = list(first)
    for name, outcomes in played.items():
        if outcomes is not None and outcomes.keys() != first.keys():
            raise SystemExit(f"{name} was evaluated on other tasks than {policies[0]}: no pairing")
    return {
        "task_ids": order,
        "outcomes": {
            name: [int(outcomes[t]) for t in order]
            for name, outcomes in played.items()
            if outcomes is not None
        },
    }


def summarize(config: PipelineConfig, command: str) -> dict:
    """The benchmark's record, from the run folder's report.json and evaluation logs."""
    from trace_diagnose.stats import wilson

    run_dir = Path(config.run_dir)
    report = json.loads((run_dir / "report.json").read_text())
    trace_rollouts = sum(a.get("rollouts") or 0 for a in report["adapters"])
    plain = report.get("plain_grpo") or {}
    # A composition spends every adapter's rollouts; a single adapter only its own.
    rollouts = {"base": 0, "plain-grpo": plain.get("rollouts", 0)}
    rollouts.update(
        {f"adapter:{a['capability']}": a.get("rollouts") or 0 for a in report["adapters"]}
    )
    policies = []
    for row in report["policies"]:
        name, n = row["name"], row["episodes"]
        k = round(row["success"] * n)
        folder = name.replace(":", "__")
        policies.append(
            {
                "name": name,
                "rollouts": rollouts.get(name, trace_rollouts),
                "successes": k,
                "episodes": n,
                "success_rate": k / n,
                "success_ci95_wilson": [round(x, 4) for x in wilson(k, n)],
                "mean_reward": row["reward"],
                # success per decision class (the service desk's requests: <member>:<class>)
                # and the balanced accuracy, which always taking one decision cannot raise
                "per_decision": {
                    d: {"n": v["n"], "success_rate": v["success_rate"]}
                    for d, v in (row.get("decisions") or {}).items()
                },
                "balanced_accuracy": row.get("balanced_accuracy"),
                "vs_base": comparison(run_dir, "base", folder) if name != "base" else None,
                "vs_plain_grpo": comparison(run_dir, "plain-grpo", folder)
                if name not in ("base", "plain-grpo")
                else None,
                # greedy decoding can differ between CPUs' kernels: where each episode ran
                "machines": evaluation_machines(run_dir, folder),
            }
        )
    stages = report["stages"]
    adapters = [
        {
            **{k: a.get(k) for k in ("capability", "env_id", "steps", "rollouts")},
            **training_signal(run_dir / Path(a["log"]).parent),
        }
        for a in report["adapters"]
    ]
    plain_run = {
        **{k: plain.get(k) for k in ("env_id", "steps", "rollouts")},
        **(training_signal(run_dir / Path(plain["log"]).parent) if plain else {}),
    }
    return {
        "target": report["target"],
        "difficulty": config.difficulty,
        "model": report["model"],
        "heldout": f"{report['eval_split']} split of the target, same tasks for every policy, greedy",
        "diagnosed_agent": report["base_policy"],
        "selected_capabilities": report["core"],
        "adapters": adapters,
        "plain_grpo": plain_run,
        "trace_rollouts": trace_rollouts,
        # equal rollouts, as the paper reports; beside it what each arm spent in tokens and
        # CPU seconds (TRACE's composition also trains a router: its stage is counted apart)
        "arm_costs": {
            "trace": {
                **{k: _total(a.get(k) for a in adapters) for k in COST_KEYS},
                "compose_cpu_seconds": stages.get("compose", {}).get("cpu_seconds"),
            },
            "plain-grpo": {k: plain_run.get(k) for k in COST_KEYS},
        },
        "policies": policies,
        # per policy, its outcome on each test task, in the order of task_ids
        "per_task": per_task_outcomes(run_dir, [p["name"] for p in policies]),
        "stage_seconds": {name: s.get("seconds") for name, s in stages.items()},
        "stage_cpu_seconds": {name: s.get("cpu_seconds") for name, s in stages.items()},
        "wall_seconds": round(sum(s.get("seconds") or 0 for s in stages.values()), 1),
        "command": command,
    }


def load_plan(path: Path, replicate: str | None) -> tuple[dict, dict]:
    """A pre-registration and one of its replicates, checked for what the verdict needs and
    against the config file it registered (``config_sha256``)."""
    import yaml

    plan = yaml.safe_load(path.read_text())
    missing = [k for k in ("config", "settings", "primary", "replicates") if k not in plan]
    if missing:
        raise SystemExit(f"--plan {path}: missing {', '.join(missing)}")
    config = Path(__file__).parents[1] / plan["config"]
    if (
        plan.get("config_sha256")
        and hashlib.sha256(config.read_bytes()).hexdigest() != plan["config_sha256"]
    ):
        raise SystemExit(
            f"--plan {path}: {plan['config']} changed since the plan was registered "
            "(its sha256 differs); run the registered config, or register a new plan"
        )
    replicates = {r["name"]: r for r in plan["replicates"]}
    if replicate not in replicates:
        raise SystemExit(f"--plan {path}: give --replicate, one of {sorted(replicates)}")
    return plan, replicates[replicate]


def plan_registration(path: Path) -> dict:
    """The commit that added the plan to the repository, and when: the plan predates every
    result only if this commit comes before the results' (a reader checks it with git log)."""
    import subprocess

    git = ["git", "log", "--diff-filter=A", "--format=%H %cI", "--", str(path)]
    found = subprocess.run(git, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    commit, _, when = (found.stdout.strip().splitlines() or [""])[-1].partition(" ")
    return {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "added_in_commit": commit or None,  # None: the plan is not committed (not pre-registered)
        "added_at": when or None,
    }


def preregistered_verdict(plan: dict, record: dict, run_dir: Path) -> dict:
    """The plan's primary comparison and its rule: a win when the paired 95 % interval of
    ``policy`` minus ``against`` lies above 0 and the exact McNemar p is under ``alpha``, a
    loss when it lies below 0 with the same p, a null otherwise; invalid when either GRPO arm
    had no informative group (then both policies are the warm-started model and nothing was
    compared), or when the diagnosis selected no capability (then there is no TRACE arm and
    plain GRPO, sized by the adapters' rollouts, never ran)."""
    primary = plan["primary"]
    policy, against = primary["policy"], primary["against"]
    alpha = float(primary.get("alpha", 0.05))
    if not record["adapters"]:
        why = "the diagnosis selected no capability: no adapter, so no TRACE arm to compare"
        return {"verdict": "invalid", "why": why}
    for arm in (*record["adapters"], record["plain_grpo"]):
        if not arm.get("informative_groups"):
            name = arm.get("capability") or "plain GRPO"
            return {"verdict": "invalid", "why": f"{name}: no informative GRPO group"}
    result = comparison(run_dir, against.replace(":", "__"), policy.replace(":", "__"))
    if result is None:
        return {"verdict": "invalid", "why": f"{policy} or {against} was not evaluated"}
    lo, hi = result["ci95_paired_newcombe"]
    significant = result["mcnemar_exact_p"] < alpha
    verdict = "win" if lo > 0 and significant else "loss" if hi < 0 and significant else "null"
    return {"verdict": verdict, "policy": policy, "against": against, "alpha": alpha, **result}


def plot(record: dict, path: Path) -> None:
    """Held-out success (95 % Wilson interval) against the rollouts each policy trained on."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = {"base": ("tab:grey", "o"), "plain-grpo": ("tab:red", "s"),
             "routed": ("tab:blue", "D"), "moe": ("tab:green", "^")}  # fmt: skip
    budget = max(1, record["trace_rollouts"])
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    for i, p in enumerate(record["policies"]):
        colour, marker = style.get(p["name"], ("tab:purple", "v"))
        lo, hi = p["success_ci95_wilson"]
        x = p["rollouts"] + (i - len(record["policies"]) / 2) * budget * 0.02  # side by side
        y = p["success_rate"]
        ax.errorbar([x], [y], yerr=[[y - lo], [hi - y]], fmt=marker, color=colour, capsize=4,
                    label=f"{p['name']}: {p['successes']}/{p['episodes']}")  # fmt: skip
    ax.set_xlabel("GRPO rollouts (TRACE: all capability adapters together)")
    ax.set_ylabel("held-out success")
    ax.set_ylim(
        -0.02, max(0.3, max(p["success_ci95_wilson"][1] for p in record["policies"]) + 0.05)
    )
    ax.set_title(f"{record['model']} on {record['target']} (d={record['difficulty']:g}), CPU")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from trace_train.pipeline import PipelineConfig, run_pipeline
    from trace_train.pipeline.cli import _overrides

    overrides = _overrides(args.set)
    plan = replicate = None
    if args.plan:
        # the plan fixes everything; a --set on top is a deviation, recorded as one
        plan, replicate = load_plan(Path(args.plan), args.replicate)
        deviations, overrides = overrides, {}
        overrides.update({**plan["settings"], **replicate.get("settings", {})})
        overrides.update(deviations)
        overrides["run_dir"] = replicate["run_dir"]
        args.config, args.out = plan["config"], replicate["out"]
    if args.run_dir:
        overrides["run_dir"] = args.run_dir
    config = PipelineConfig.load(args.config, overrides)
    started = time.time()
    run_pipeline(config)
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    command = f"OMP_NUM_THREADS={threads} python benchmarks/targeted_vs_plain.py"
    record = summarize(
        config, " ".join([command, shlex.join(sys.argv[1:] if argv is None else argv)]).strip()
    )
    record["this_invocation_seconds"] = round(time.time() - started, 1)
    # what the numbers were made from: commit, config, base and adapter hashes, seeds, dtypes
    record["provenance"] = json.loads((Path(config.run_dir) / "provenance.json").read_text())
    if plan is not None:
        record["preregistration"] = {
            **plan_registration(Path(args.plan)),
            "replicate": replicate["name"],
            "deviations": args.set,
            **preregistered_verdict(plan, record, Path(config.run_dir)),
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    plot(record, out.with_suffix(".png"))
    for p in record["policies"]:
        vs = p["vs_plain_grpo"] or p["vs_base"]
        against = "plain GRPO" if p["vs_plain_grpo"] else "base"
        tail = f"  vs {against} {vs['diff']:+.1%} {vs['ci95_paired_newcombe']}" if vs else ""
        if p["balanced_accuracy"] is not None:
            tail += f"  balanced accuracy {p['balanced_accuracy']:.1%}"
        print(
            f"{p['name']:<11} {p['successes']:>3}/{p['episodes']} ({p['rollouts']} rollouts){tail}"
        )
    if plan is not None:
        pre = record["preregistration"]
        print(f"pre-registered verdict ({pre['replicate']}): {pre['verdict']}"
              + (f" ({pre['why']})" if "why" in pre else ""))  # fmt: skip
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")
    return record


if __name__ == "__main__":
    main()
