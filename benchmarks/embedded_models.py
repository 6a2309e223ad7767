"""Compare small instruct models that install offline from PyPI, as the embedded default.

For each model: CPU generation speed on a trace_gym prompt, held-out success (``eval`` split,
greedy) before and after a short supervised warm start on oracle demonstrations, and the warm
start's wall time. Writes ``benchmarks/results/embedded_models.json``.

    OMP_NUM_THREADS=2 python benchmarks/embedded_models.py --models smollm2 gemma3-270m
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def generation_speed(path: str, new_tokens: int = 48) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.rollout import ChatFormat, make_env

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    load = time.time() - t0
    env = make_env("trace/precondition-v0", max_turns=4, reward_mode="partial", env_kwargs={})
    _, info = env.reset(seed=0, options={"split": "eval", "difficulty": 0.0})
    ids = ChatFormat(tok).prompt_ids(info["system_prompt"], info["messages"][1]["content"])
    x = torch.tensor([ids])
    t0 = time.time()
    with torch.no_grad():
        out = model.generate(
            x, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
        )
    seconds = time.time() - t0
    return {
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "load_seconds": round(load, 2),
        "prompt_tokens": len(ids),
        "gen_tokens_per_second": round((out.shape[1] - len(ids)) / seconds, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3-270m"])
    ap.add_argument("--eval", type=int, default=10)
    ap.add_argument("--demos", type=int, default=24)
    ap.add_argument("--out", default="runs/bench_embedded")
    # One sequence per step bounds memory: Gemma 3's 262k-token vocabulary makes the logits of
    # a 4 x 2048-token batch ~8.6 GB in float32 (a batch of 4 ran this 24 GB machine out of
    # memory even for SmolLM2 beside another job).
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--max-length", type=int, default=1536)
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    from trace_train import warmstart
    from trace_train.config import WarmstartConfig, load_config
    from trace_train.embedded import GEMMA_TEMPLATE, embedded_model_path

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    results = {}
    for name in args.models:
        path = str(embedded_model_path(name))
        tok = AutoTokenizer.from_pretrained(path)
        if not getattr(tok, "chat_template", None):  # folders converted before the fix
            tok.chat_template = GEMMA_TEMPLATE
            tok.save_pretrained(path)
        row = {"path": path, **generation_speed(path)}
        cfg = load_config(
            WarmstartConfig,
            "cpu_smollm2",
            {"model": path, "output_dir": f"{args.out}/{name}", "demonstrations": args.demos,
             "epochs": 1, "eval_episodes": args.eval, "resume": False,
             "batch_size": args.batch_size, "max_length": args.max_length},
        )  # fmt: skip
        t0 = time.time()
        ws = warmstart.train(cfg)
        row.update(
            warmstart_seconds=round(time.time() - t0, 1),
            success_base=ws.before.get("heldout/success"),
            success_after_warmstart=ws.after.get("heldout/success"),
            reward_base=ws.before.get("heldout/reward"),
            reward_after_warmstart=ws.after.get("heldout/reward"),
        )
        results[name] = row
        print(json.dumps({name: row}, indent=2), flush=True)
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)
    Path("benchmarks/results/embedded_models.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
