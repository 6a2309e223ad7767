"""GRPO memory and speed: how many rollouts one forward/backward pass holds.

A GRPO step updates on ``group_size * groups_per_step`` rollouts. Passed all of a group at
once, the update holds every rollout's activations and full-vocabulary logits together (a
group of 8 service-desk episodes ran a 24 GB machine out of memory); passed one at a time,
with the gradients accumulated, it is the same update for TRL's default ``dapo`` loss.
Measured side by side in one run, each variant in its own process (so that its peak resident
memory is its own), on the same seeded rollouts (the variants' token counts are checked
equal):

    OMP_NUM_THREADS=2 python benchmarks/grpo_memory.py      # ~15 min on 2 cores

Writes ``benchmarks/results/grpo_memory.json``: per variant, peak resident memory, seconds in
the backward pass and per step, and each as a ratio to the first variant (one group per pass,
the old default).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from warmstart_memory import peak_rss_gb, run_variants, write_report  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RESULTS = Path(__file__).parent / "results"


def variants(group_size: int) -> dict[str, dict]:
    """One group per pass (the old default everywhere), half a group, one rollout (the CPU
    default now)."""
    half = {f"{group_size // 2} rollouts per pass": {"micro_batch_size": group_size // 2}}
    return {
        f"group of {group_size} in one pass (old default)": {"micro_batch_size": group_size},
        **(half if group_size >= 4 else {}),
        "1 rollout per pass (CPU default now)": {"micro_batch_size": 1},
    }


def config(args: argparse.Namespace, output_dir: str, **variant: object):  # noqa: ANN201
    from trace_train.config import GRPORunConfig
    from trace_train.decoding import bf16_supported

    return GRPORunConfig(
        model=args.model,
        env_id=args.env,
        difficulty=0.0,
        group_size=args.group,
        groups_per_step=1,
        steps=args.steps,
        max_turns=3,
        max_new_tokens=min(128, args.completion_tokens),  # a turn fits the episode budget
        max_completion_tokens=args.completion_tokens,
        tool_prompt="compact",
        temperature=0.8,
        bf16=bf16_supported(),
        eval_episodes=0,
        save_steps=10_000,  # no checkpoint inside the measurement
        resume=False,
        output_dir=output_dir,
        **variant,
    )


def measure_one(args: argparse.Namespace) -> None:
    """Child process: train one variant, print its numbers as one JSON line."""
    import torch

    from trace_train import grpo

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(args, tmp, **json.loads(args.one))
        started = time.time()
        result = grpo.train(cfg)
        steps = [x for x in map(json.loads, result.log_path.read_text().splitlines())
                 if "time/step_seconds" in x and "rollouts/step" in x]  # fmt: skip

    def seconds_in(phase: str) -> float:
        return round(sum(x[f"time/{phase}_share"] * x["time/step_seconds"] for x in steps), 1)

    print(json.dumps({
        "peak_rss_gb": peak_rss_gb(),
        "steps": len(steps),
        "step_seconds": round(sum(x["time/step_seconds"] for x in steps), 1),
        "backward_seconds": seconds_in("backward"),
        "decode_seconds": seconds_in("decode"),
        "rollout_tokens": [[x["tokens/prompt"], x["tokens/model"]] for x in steps],
        "process_seconds": round(time.time() - started, 1),
    }))  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--env", default="trace/precondition-v0")
    ap.add_argument("--group", type=int, default=4, help="rollouts per group (one group a step)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--completion-tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--out", default=str(RESULTS / "grpo_memory.json"))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: the child process's variant
    args = ap.parse_args(argv)
    if args.one is not None:
        measure_one(args)
        return {}

    child_args = [
        "--model", args.model, "--env", args.env, "--group", str(args.group),
        "--steps", str(args.steps), "--completion-tokens", str(args.completion_tokens),
        "--threads", str(args.threads),
    ]  # fmt: skip
    rows = run_variants(__file__, variants(args.group), child_args)
    first = rows[0]
    for row in rows:
        row["memory_vs_old_default"] = round(row["peak_rss_gb"] / first["peak_rss_gb"], 2)
        row["backward_speed_vs_old_default"] = round(
            first["backward_seconds"] / max(row["backward_seconds"], 1e-9), 2
        )
    report = {
        "model": "SmolLM2-135M-Instruct (embedded)" if args.model == "embedded" else args.model,
        "env_id": args.env,
        "group_size": args.group,
        "steps": args.steps,
        "max_completion_tokens": args.completion_tokens,
        # Sampling is seeded, so every variant should play the same rollouts; if not, their
        # decode times differ too and only the backward columns compare.
        "same_rollouts": all(r["rollout_tokens"] == first["rollout_tokens"] for r in rows),
        "variants": rows,
    }
    return write_report(report, __file__, args, argv)


if __name__ == "__main__":
    main()
