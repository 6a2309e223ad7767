"""Generation speed on this CPU against the memory-bandwidth bound of the weights.

Side by side in one run, on one model and one real prompt (``trace/tool-call-v0``, compact
tool list, the prompt a GRPO group plays):

* prefill tokens/s in float32 and bfloat16 (autocast over float32 weights, what the rollout
  engine does; and a bfloat16 copy of the weights, for reference);
* decode tokens/s at batch 1 and 8, same precisions;
* a GRPO group of 8 through the rollout engine: rows decoded one at a time (the previous
  path) against decoded together (the batched path), same tokens;
* the bound: a decode step reads every weight once and each row's cached keys and values, so
  tokens/s <= batch x bandwidth / (weight bytes + batch x KV bytes of the context). Bandwidth
  is measured here with a large tensor copy (read + write). Prefill is compute-bound: no bound.

Writes ``benchmarks/results/decode_speed.json`` and prints a Markdown table.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python benchmarks/decode_speed.py [--model embedded]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def bandwidth_gbs(mb: int = 512, repeats: int = 3) -> float:
    """Copy bandwidth in GB/s: bytes read plus bytes written over the best of a few copies."""
    import torch

    src = torch.ones(mb * 2**20 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * 4 / best / 1e9


def weight_bytes(model) -> int:
    """Bytes of the distinct parameter tensors (a tied embedding counts once: the output
    layer reads it whole every token, the input lookup reads one row)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def kv_bytes_per_token(model) -> int:
    """Bytes of keys and values one cached token holds (float32 cache, all layers)."""
    c = model.config.get_text_config()
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return 2 * c.num_hidden_layers * heads * head_dim * 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="embedded", help="embedded (SmolLM2-135M) or a folder")
    ap.add_argument("--new-tokens", type=int, default=32, help="decoded tokens per row")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--out", default="benchmarks/results/decode_speed.json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trace_train.decoding import PhaseClock, bf16_supported, decode_batch, prefill
    from trace_train.policies import load_hf
    from trace_train.rollout import ChatFormat, EpisodeSpec, _start, hf_generate

    model, tok = load_hf(args.model)
    fmt = ChatFormat(tok)
    live = _start(
        EpisodeSpec("trace/tool-call-v0", 0, 0.0, "eval"), fmt, None, "partial", {}, "compact"
    )
    prompt = live.rollout.prompt_ids
    live.env.close()
    n_new = args.new_tokens
    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    variants = {  # name -> (model, autocast dtype for the engine)
        "float32": (model, "float32"),
        "bf16_autocast": (model, "bfloat16"),
        "bf16_weights": (bf16_model, "float32"),
    }
    bw = bandwidth_gbs()
    rows = []

    def timed(fn):
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start

    with torch.inference_mode():
        prefill(model, prompt[:16], None, 0)  # warm-up (first-call allocations)
        for name, (m, dtype) in variants.items():
            _, s = timed(lambda m=m, dtype=dtype: prefill(m, prompt, None, 0, dtype))
            rows.append({"phase": "prefill", "precision": name, "batch": 1,
                         "tokens": len(prompt), "seconds": s})  # fmt: skip
            logits, cache = prefill(m, prompt, None, 0, dtype)
            for batch in (1, 8):
                starts = [(logits, copy.deepcopy(cache)) for _ in range(batch)]
                clock = PhaseClock()
                decode_batch(m, [prompt] * batch, starts, n_new, [-1], dtype=dtype, clock=clock)
                s = clock.flush()["decode"]
                rows.append({"phase": "decode", "precision": name, "batch": batch,
                             "tokens": batch * (n_new - 1), "seconds": s})  # fmt: skip
        # A GRPO group of 8 through the engine: prefill shared, then one at a time vs batched.
        engine = {}
        for batched in (False, True):
            clock = PhaseClock()
            gen = hf_generate(model, tok, [-1], temperature=0.0, batch_decode=batched,
                              prefill_dtype="float32", decode_dtype="float32", clock=clock)  # fmt: skip
            out, s = timed(lambda gen=gen: gen([prompt] * 8, n_new))
            engine["batched" if batched else "one_at_a_time"] = {
                "seconds": s,
                "tokens": sum(len(ids) for ids, _ in out),
                "phases": clock.flush(),
                "outputs": [ids for ids, _ in out],
            }
    same = engine["batched"].pop("outputs") == engine["one_at_a_time"].pop("outputs")

    fp32_bytes = weight_bytes(model)
    bf16_bytes = weight_bytes(bf16_model)
    kv = kv_bytes_per_token(model)
    context = len(prompt) + n_new / 2  # mean cached length while decoding
    for r in rows:
        r["tokens_per_s"] = r["tokens"] / r["seconds"]
        if r["phase"] == "decode":
            # One decode step reads every weight once and each row's cached keys and values.
            wb = bf16_bytes if r["precision"] == "bf16_weights" else fp32_bytes
            kv_step = r["batch"] * kv * context / (2 if r["precision"] == "bf16_weights" else 1)
            r["bound_tokens_per_s"] = r["batch"] * bw * 1e9 / (wb + kv_step)
            r["bound_weights_only_tokens_per_s"] = r["batch"] * bw * 1e9 / wb
            r["share_of_bound"] = r["tokens_per_s"] / r["bound_tokens_per_s"]
    result = {
        "model": args.model if args.model != "embedded" else "SmolLM2-135M-Instruct (embedded)",
        "parameters": sum(p.numel() for p in model.parameters()),
        "weight_bytes_float32": fp32_bytes,
        "weight_bytes_bfloat16": bf16_bytes,
        "kv_bytes_per_cached_token": kv,
        "bandwidth_gb_s": bw,
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "bf16_native": bf16_supported(),
        "prompt_tokens": len(prompt),
        "new_tokens_per_row": n_new,
        "rows": rows,
        "engine_group_of_8": {
            **engine,
            "same_tokens": same,
            "speedup": engine["one_at_a_time"]["seconds"] / engine["batched"]["seconds"],
        },  # fmt: skip
        "command": (
            f"OMP_NUM_THREADS={args.threads} python benchmarks/decode_speed.py "
            f"--model {args.model} --new-tokens {n_new}"
        ),
        "note": "timed on a shared 2-core machine (load ~7): compare rows of one run",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


def table(result: dict) -> str:
    lines = [
        f"{result['model']}, {result['threads']} thread(s), copy bandwidth "
        f"{result['bandwidth_gb_s']:.1f} GB/s, prompt {result['prompt_tokens']} tokens",
        "",
        "| phase | precision | batch | tokens/s | bound tokens/s (weights + KV) | share of bound |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        bound = f"{r['bound_tokens_per_s']:.0f}" if "bound_tokens_per_s" in r else ""
        share = f"{r['share_of_bound']:.0%}" if "share_of_bound" in r else ""
        lines.append(
            f"| {r['phase']} | {r['precision']} | {r['batch']} | {r['tokens_per_s']:.1f} | "
            f"{bound} | {share} |"
        )
    e = result["engine_group_of_8"]
    lines += [
        "",
        f"Engine, a GRPO group of 8 x {result['new_tokens_per_row']} tokens: one at a time "
        f"{e['one_at_a_time']['seconds']:.1f} s, batched {e['batched']['seconds']:.1f} s "
        f"({e['speedup']:.1f}x), same tokens: {e['same_tokens']}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
