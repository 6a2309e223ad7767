"""SmolLM2-135M on CPU: warm start, then GRPO, on easy precondition tasks; honest numbers.

Held-out success (``eval`` split, greedy) of the base model, after the supervised warm start
and after GRPO, plus seconds per GRPO step. Writes ``benchmarks/results/grpo_cpu.json``.

    OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 python benchmarks/grpo_cpu.py [--steps 8] [--eval 20]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=8, help="GRPO steps (group 4 x 1 group each)")
    ap.add_argument("--eval", type=int, default=20, help="held-out episodes per measurement")
    ap.add_argument("--demos", type=int, default=48, help="oracle demonstrations")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--out", default="runs/bench_grpo_cpu")
    ap.add_argument("--model", default="embedded")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trace_train import grpo, warmstart
    from trace_train.config import GRPORunConfig, WarmstartConfig, load_config

    out = Path(args.out)
    ws_cfg = load_config(
        WarmstartConfig,
        "cpu_smollm2",
        {"model": args.model, "output_dir": str(out / "warmstart"), "demonstrations": args.demos,
         "eval_episodes": args.eval},
    )  # fmt: skip
    t0 = time.time()
    ws = warmstart.train(ws_cfg)
    ws_seconds = time.time() - t0

    g_cfg = load_config(
        GRPORunConfig,
        "cpu_smollm2",
        {"model": args.model, "output_dir": str(out / "grpo"), "steps": args.steps,
         "init_adapter": str(ws.adapter_dir), "eval_episodes": 0},
    )  # fmt: skip
    t0 = time.time()
    result = grpo.train(g_cfg)
    g_seconds = time.time() - t0
    # Held-out after GRPO, once (the "before" of GRPO is the warm start's "after": same weights).
    from transformers import AutoTokenizer

    from trace_train.embedded import resolve_model
    from trace_train.evaluate import evaluate_model

    tok = AutoTokenizer.from_pretrained(resolve_model(args.model))
    tok.padding_side = "left"
    end = evaluate_model(result.model, tok, g_cfg, args.eval)
    lines = [json.loads(x) for x in result.log_path.read_text().splitlines()]
    end["seconds_per_step"] = lines[-1].get("seconds_per_step")
    steps = [x for x in lines if "event" not in x]
    report = {
        "model": args.model,
        "env_id": g_cfg.env_id,
        "difficulty": g_cfg.difficulty,
        "threads": args.threads,
        "tool_prompt": g_cfg.tool_prompt,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "heldout_episodes": args.eval,
        "success_base": ws.before.get("heldout/success"),
        "success_after_warmstart": ws.after.get("heldout/success"),
        "success_after_grpo": end.get("heldout/success"),
        "reward_base": ws.before.get("heldout/reward"),
        "reward_after_warmstart": ws.after.get("heldout/reward"),
        "reward_after_grpo": end.get("heldout/reward"),
        "warmstart_seconds": round(ws_seconds, 1),
        "grpo_steps": result.global_step,
        "grpo_rollouts": steps[-1]["rollouts/total"] if steps else 0,
        "grpo_seconds_per_step": end.get("seconds_per_step"),
        "grpo_seconds_total": round(g_seconds, 1),
        "train_success_per_step": [x.get("env/success") for x in steps],
        "informative_groups_per_step": [x.get("group/informative_share") for x in steps],
    }
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/grpo_cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
