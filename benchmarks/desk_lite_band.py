"""Does the warm-started SmolLM2-135M solve 10-40 % of held-out desk-lite tasks?

Issue 26 needs a target the base model sometimes solves, so that targeted adapters and plain
GRPO can both learn and be told apart. This measures the band for one design (an *attempt*):

1. ``warmstart``: ``trace-train warmstart`` on oracle demonstrations of ``--env`` at difficulty
   0 (``difficulty_spread`` off), the warm start's part of the train split
   (``trace_train.task_seeds``, disjoint from GRPO's and from every held-out split), compact
   prompt. Resumes from its checkpoints; none is deleted (``save_total_limit`` unset).
   ``--adapter DIR`` skips it and evaluates a stored adapter (its hash and rebuild command
   are recorded), e.g. one warm-started on another desk-lite version.
2. ``eval``: ``trace-train eval`` of base + adapter on ``--heldout`` seeds of ``--split``
   (``eval`` by default: held out from training, and not the ``test`` split a later
   pre-registered comparison reports on), difficulty 0, greedy.
3. The record: per-task outcomes in seed order, the capability each failure was on, the
   success rate with a Wilson 95 % interval, the compact first prompt's token counts on the
   same seeds, the exact commands, seconds per phase and provenance
   (``trace_train.provenance``). Each attempt is kept under its name in ``--out``; earlier
   attempts stay.

Each phase writes ``<run-dir>/<phase>.done.json``; a rerun skips finished phases::

    OMP_NUM_THREADS=1 python benchmarks/desk_lite_band.py --attempt a1-2req-48demos
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trace_gym.episodes import read_episodes

ENV_ID = "trace/desk-lite-v0"
"""The default target (attempts a1-a7); ``--env trace/desk-lite-v1`` the two-member one."""
BAND = (0.10, 0.40)
"""The held-out success band the issue asks of the warm-started model."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--attempt", required=True, help="name of this design attempt in --out")
    p.add_argument("--design", default="2 requests at difficulty 0 (tool-call, clarify, "
                   "recover-communicate)", help="what this attempt's design is, in words")  # fmt: skip
    p.add_argument("--env", default=ENV_ID, help="the desk-lite id to warm-start and evaluate")
    p.add_argument("--adapter", default=None,
                   help="a stored adapter (trace-train store-adapter) to evaluate: no warm start")  # fmt: skip
    p.add_argument("--run-dir", default="runs/desk_lite_band", help="evaluation and markers")
    p.add_argument("--warmstart-dir", default="runs/desk_lite_warmstart",
                   help="the warm start's run folder (its adapter, checkpoints and log)")  # fmt: skip
    p.add_argument("--out", default="benchmarks/results/desk_lite_band.json")
    p.add_argument("--demos", type=int, default=48, help="warm-start demonstrations")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--warmstart-lr", type=float, default=None,
                   help="warm-start learning rate (default: the cpu_smollm2 preset's 2e-4)")  # fmt: skip
    p.add_argument(
        "--lora-rank",
        type=int,
        default=None,
        help="warm-start LoRA rank, alpha set equal (preset: 16)",
    )
    p.add_argument("--lora-targets", default=None,
                   help="comma-separated modules the warm-start adapter wraps (preset: q,k,v,o)")  # fmt: skip
    p.add_argument("--mix", default=None,
                   help="member demonstrations mixed into the warm start, as YAML: "
                   "'{trace/tool-call-v0: 32, trace/clarify-v0: 32}'")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="warm-start seed (init, shuffle, tasks)")
    p.add_argument("--heldout", type=int, default=48, help="held-out tasks (seeds 0..N-1)")
    p.add_argument("--split", default="eval", choices=("eval", "test"))
    p.add_argument("--max-turns", type=int, default=10, help="the oracle needs at most 8")
    p.add_argument("--batch-size", type=int, default=8, help="evaluation episodes side by side")
    return p.parse_args(argv)


def warmstart_command(args: argparse.Namespace) -> list[str]:
    return [
        "trace-train", "warmstart", "--config", "cpu_smollm2", "--env-id", args.env,
        "--difficulty", "0.0", "--difficulty-spread", "false",
        "--demonstrations", str(args.demos), "--epochs", f"{args.epochs:g}",
        "--max-turns", str(args.max_turns), "--max-completion-tokens", "1536",
        "--max-length", "3072", "--tool-prompt", "compact", "--bf16", "true",
        "--eval-episodes", "0", "--seed", str(args.seed), "--save-steps", "6",
        "--output-dir", args.warmstart_dir,
    ] + ([] if args.warmstart_lr is None else ["--learning-rate", f"{args.warmstart_lr:g}"]) + (
        [] if args.lora_rank is None
        else ["--lora-rank", str(args.lora_rank), "--lora-alpha", str(args.lora_rank)]
    ) + ([] if args.lora_targets is None else ["--lora-targets", f"[{args.lora_targets}]"]) + (
        [] if args.mix is None else ["--mix-demonstrations", args.mix]
    )  # fmt: skip


def adapter_dir(args: argparse.Namespace) -> Path:
    return Path(args.adapter) if args.adapter else Path(args.warmstart_dir) / "adapter"


def eval_command(args: argparse.Namespace, run: Path) -> list[str]:
    return [
        "trace-train", "eval", "--policy", f"hf:embedded+adapter:{adapter_dir(args)}",
        "--env", args.env, "--episodes", str(args.heldout), "--difficulty", "0.0",
        "--split", args.split, "--seed-start", "0", "--temperature", "0.0",
        "--max-turns", str(args.max_turns), "--max-new-tokens", "128",
        "--max-completion-tokens", "1536", "--tool-prompt", "compact",
        "--batch-size", str(args.batch_size), "--out-dir", str(run / "eval"),
    ]  # fmt: skip


def run_phase(run: Path, name: str, command: list[str]) -> dict[str, Any]:
    """Run ``command`` unless ``<name>.done.json`` says it finished; its seconds and command."""
    marker = run / f"{name}.done.json"
    if marker.exists():
        return json.loads(marker.read_text())
    started = time.time()
    subprocess.run(command, check=True)
    record = {"command": shlex.join(command), "seconds": round(time.time() - started, 1)}
    marker.write_text(json.dumps(record, indent=2) + "\n")
    return record


def mix_record(args: argparse.Namespace) -> dict[str, Any]:
    """The member demonstrations mixed into the warm start: id -> count and task seeds."""
    import yaml

    from trace_train import task_seeds

    mix = yaml.safe_load(args.mix) if args.mix else {}
    return {env_id: task_seeds.record("warmstart", args.seed, n) for env_id, n in mix.items()}


def training_loss(log: Path) -> dict[str, Any]:
    """The warm start's training loss: first step, last step, and the mean of the last ten
    steps (one step's batch of 4 is noisy): how far it fit its demonstrations."""
    from trace_train.runlog import read_log

    rows = read_log(log) if log.exists() else []
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    if not losses:
        return {}
    return {
        "loss_first": round(losses[0], 4),
        "loss_last": round(losses[-1], 4),
        "loss_last_10_steps_mean": round(statistics.fmean(losses[-10:]), 4),
    }


def stored_adapter_record(args: argparse.Namespace) -> dict[str, Any]:
    """A stored adapter's hash, rebuild command and training settings (its provenance)."""
    stored = json.loads((adapter_dir(args) / "provenance.json").read_text())
    return {
        "stored_adapter": str(adapter_dir(args)),
        "sha256": stored["sha256"],
        "rebuild": stored["rebuild"],
        "trained_on": stored.get("training", {}).get("env_id"),
    }


def first_failed(required: list[str], lacking: list[str]) -> str | None:
    """The first request (in the order the customer raised them) whose capability failed:
    a request never reached also fails, but the episode broke down at the first one."""
    return next((c for c in required if c in lacking), None)


def outcomes(episodes: Path) -> list[dict[str, Any]]:
    """One row per held-out task, in seed order."""
    rows = []
    for r in read_episodes(episodes):  # not str.splitlines: a model's U+2028 splits a record
        v = r.get("verification") or {}
        required, lacking = v.get("required_capabilities", []), v.get("lacking_capabilities", [])
        rows.append({
            "seed": r["task_seed"],
            "success": bool(r["is_success"]),
            "reward": round(float(r["final_reward"]), 4),
            "required_capabilities": required,
            "lacking_capabilities": lacking,
            "failed_on": None if r["is_success"] else first_failed(required, lacking),
            "failed_checks": [c["name"] for c in v.get("checks", []) if not c["passed"]],
            "end_reason": r.get("end_reason"),
            "tool_calls": sum(len(m.get("tool_calls") or []) for m in r["messages"]),
            "error_counts": r.get("error_counts", {}),
        })  # fmt: skip
    return sorted(rows, key=lambda row: row["seed"])


def prompt_tokens(args: argparse.Namespace) -> dict[str, Any]:
    """Tokens of the first prompt (system + opening, SmolLM2's chat template, compact tools)
    on the held-out seeds the evaluation plays."""
    import gymnasium as gym
    from transformers import AutoTokenizer

    import trace_gym  # noqa: F401  (registers the ids)
    from trace_train.embedded import embedded_model_path
    from trace_train.rollout import ChatFormat

    fmt = ChatFormat(AutoTokenizer.from_pretrained(embedded_model_path()))
    env = gym.make(args.env, disable_env_checker=True, tool_prompt="compact")
    counts = []
    for seed in range(args.heldout):
        _, info = env.reset(seed=seed, options={"difficulty": 0.0, "split": args.split})
        counts.append(len(fmt.prompt_ids(info["system_prompt_no_hint"], info["messages"][1]["content"])))  # fmt: skip
    return {
        "seeds": f"{args.split} 0..{args.heldout - 1}, difficulty 0",
        "min": min(counts),
        "median": statistics.median(counts),
        "max": max(counts),
        "per_task": counts,
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from trace_diagnose.stats import wilson

    n, wins = len(rows), sum(r["success"] for r in rows)
    low, high = wilson(wins, n) or (0.0, 1.0)
    failed_on: dict[str, int] = {}
    for r in rows:
        if r["failed_on"] is not None:
            failed_on[r["failed_on"]] = failed_on.get(r["failed_on"], 0) + 1
    rate = wins / n if n else 0.0
    first_solved: dict[str, list[int]] = {}
    for r in rows:  # the first request is the one every episode reaches
        if r["required_capabilities"]:
            tally = first_solved.setdefault(r["required_capabilities"][0], [0, 0])
            tally[0] += r["required_capabilities"][0] not in r["lacking_capabilities"]
            tally[1] += 1
    return {
        "tasks": n,
        "successes": wins,
        "success_rate": round(rate, 4),
        "success_ci95_wilson": [round(low, 4), round(high, 4)],
        "in_band": BAND[0] <= rate <= BAND[1],
        "failures_by_first_failed_capability": dict(sorted(failed_on.items())),
        "first_request_solved_by_capability": {
            c: f"{k}/{m}" for c, (k, m) in sorted(first_solved.items())
        },
        "mean_reward": round(statistics.fmean(r["reward"] for r in rows), 4) if rows else 0.0,
    }


def provenance(args: argparse.Namespace) -> dict[str, Any]:
    from trace_train.embedded import embedded_model_path
    from trace_train.provenance import run_record

    return run_record(
        vars(args),
        phase="desk_lite_band",
        base_model=embedded_model_path(),
        adapters={"warmstart": adapter_dir(args)},
        dtypes={
            "warmstart": "bfloat16 autocast, float32 weights",
            "eval_prefill": "auto",
            "eval_decode": "auto (float32 on a CPU)",
        },  # fmt: skip
        seeds={
            "warmstart": args.seed,
            "warmstart_tasks": "trace_train.task_seeds warmstart part",
            "heldout": f"{args.split} 0..{args.heldout - 1}",
        },  # fmt: skip
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    run = Path(args.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    warm = None if args.adapter else run_phase(run, "warmstart", warmstart_command(args))
    evaluated = run_phase(run, "eval", eval_command(args, run))
    rows = outcomes(run / "eval" / "episodes.jsonl")
    from trace_train import task_seeds

    attempt = {
        "design": args.design,
        "env_id": args.env,
        "warmstart": stored_adapter_record(args)
        if args.adapter
        else {
            **warm,
            "demonstrations": args.demos,
            "epochs": args.epochs,
            "learning_rate": args.warmstart_lr or 2e-4,
            "lora_rank": args.lora_rank or 16,
            "lora_targets": args.lora_targets or "q_proj,k_proj,v_proj,o_proj",
            **training_loss(Path(args.warmstart_dir) / "training_log.jsonl"),
            "tasks": task_seeds.record("warmstart", args.seed, args.demos),
            "mixed_in": mix_record(args),
        },  # fmt: skip
        "evaluation": {
            **evaluated,
            "split": args.split,
            "difficulty": 0.0,
            "decoding": "greedy (temperature 0)",
        },  # fmt: skip
        "band": summary(rows),
        "prompt_tokens": prompt_tokens(args),
        "per_task": rows,
        "provenance": provenance(args),
    }
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.exists() else {}
    report["band_asked"] = list(BAND)
    report.setdefault("attempts", {})[args.attempt] = attempt
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(attempt["band"], indent=1))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
