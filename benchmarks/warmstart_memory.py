"""Warm-start memory and speed: how the supervised pass holds its activations.

The warm start (``trace-train warmstart``) trains LoRA on oracle conversations of ~1,000
tokens. Held all at once, a batch of four keeps every layer's activations and the full
49,152-word logits of every position for the backward pass. Three levers, measured side by
side in one run on the same demonstrations, each variant in its own process (so that its
peak resident memory is its own):

- ``micro_batch_size=1``: the same optimizer step over four passes of one conversation
  (gradients accumulate; no padding to the longest conversation of the batch);
- ``gradient_checkpointing``: recompute each layer's activations in the backward pass;
- both.

    OMP_NUM_THREADS=2 python benchmarks/warmstart_memory.py     # ~12 min on 2 cores

Writes ``benchmarks/results/warmstart_memory.json``: per variant, peak resident memory,
seconds per optimizer step and training tokens per second, and each as a ratio to the
first variant (the old default).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RESULTS = Path(__file__).parent / "results"
VARIANTS = {  # micro_batch_size 0: the whole batch of 4 in one pass
    "batch 4 (old default)": {"micro_batch_size": 0},
    "micro-batch 1 x 4": {"micro_batch_size": 1},
    "batch 4 + gradient checkpointing": {"micro_batch_size": 0, "gradient_checkpointing": True},
    "micro-batch 1 x 4 + gradient checkpointing": {
        "micro_batch_size": 1,
        "gradient_checkpointing": True,
    },
}


def config(args: argparse.Namespace, output_dir: str, **variant: object):  # noqa: ANN201
    from trace_train.config import WarmstartConfig
    from trace_train.decoding import bf16_supported

    return WarmstartConfig(
        model=args.model,
        env_id="trace/tool-call-v0",
        difficulty=0.0,
        difficulty_spread=False,
        max_turns=3,
        tool_prompt="compact",
        demonstrations=args.demos,
        epochs=1.0,
        batch_size=4,
        eval_episodes=0,
        save_steps=10_000,  # no checkpoint inside the measurement
        resume=False,
        bf16=bf16_supported(),
        output_dir=output_dir,
        **variant,
    )


def measure_one(args: argparse.Namespace) -> None:
    """Child process: train one variant, print its numbers as one JSON line."""
    import torch

    from trace_train import warmstart

    torch.set_num_threads(args.threads)
    variant = json.loads(args.one)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(args, tmp, **variant)
        started = time.time()
        result = warmstart.train(cfg)
        end = [json.loads(x) for x in result.log_path.read_text().splitlines()][-1]
    print(json.dumps({"peak_rss_gb": peak_rss_gb(), "train_seconds": end["seconds"],
                      "steps": end["step"], "demonstrations": end["demonstrations"],
                      "process_seconds": round(time.time() - started, 1)}))  # fmt: skip


def peak_rss_gb() -> float:
    """This process's peak resident memory so far."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # kB on Linux


def run_variants(script: str, variants: dict[str, dict], child_args: list[str]) -> list[dict]:
    """Run ``script --one VARIANT`` once per variant, each in a fresh process (so that its peak
    resident memory is its own); the rows are the numbers each child printed last."""
    rows = []
    for name, variant in variants.items():
        print(f"-- {name}", flush=True)
        child = [sys.executable, script, *child_args, "--one", json.dumps(variant)]
        done = subprocess.run(child, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"variant {name!r} failed:\n{done.stderr[-3000:]}")
        numbers = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append({"variant": name, "config": variant, **numbers})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def write_report(
    report: dict, script: str, args: argparse.Namespace, argv: list[str] | None
) -> dict:
    """Add what every memory benchmark records (LoRA, threads, load, the command that ran),
    write it to ``args.out`` and print it."""
    report = {
        **report,
        "lora": "rank 16 on q/k/v/o, base frozen, bf16 autocast where the CPU has it",
        "threads": args.threads,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "command": f"OMP_NUM_THREADS={args.threads} python benchmarks/{Path(script).name} "
        + shlex.join(sys.argv[1:] if argv is None else argv).strip(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


def training_tokens(args: argparse.Namespace) -> list[int]:
    """Length of each demonstration conversation (the oracle plays, no model runs)."""
    from transformers import AutoTokenizer

    from trace_train import warmstart
    from trace_train.embedded import resolve_model
    from trace_train.rollout import ChatFormat

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.model))
    rows = warmstart.supervised_demonstrations(config(args, "unused"), ChatFormat(tokenizer))
    return [len(r["input_ids"]) for r in rows]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--demos", type=int, default=16, help="conversations (4 optimizer steps)")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--out", default=str(RESULTS / "warmstart_memory.json"))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: the child process's variant
    args = ap.parse_args(argv)
    if args.one is not None:
        measure_one(args)
        return {}

    lengths = training_tokens(args)
    child_args = ["--model", args.model, "--demos", str(args.demos), "--threads", str(args.threads)]
    rows = run_variants(__file__, VARIANTS, child_args)
    for row in rows:
        row["tokens_per_second"] = round(sum(lengths) / row["train_seconds"], 1)
        row["seconds_per_step"] = round(row["train_seconds"] / row["steps"], 1)
    first = rows[0]
    for row in rows:
        row["memory_vs_old_default"] = round(row["peak_rss_gb"] / first["peak_rss_gb"], 2)
        row["speed_vs_old_default"] = round(first["train_seconds"] / row["train_seconds"], 2)
    report = {
        "model": "SmolLM2-135M-Instruct (embedded)" if args.model == "embedded" else args.model,
        "env_id": "trace/tool-call-v0",
        "demonstrations": len(lengths),
        "tokens_per_conversation": {
            "min": min(lengths),
            "max": max(lengths),
            "mean": round(sum(lengths) / len(lengths)),
        },  # fmt: skip
        "variants": rows,
    }
    return write_report(report, __file__, args, argv)


if __name__ == "__main__":
    main()
