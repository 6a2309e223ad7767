"""Whole episodes of the token-routed mixture against the base model, with and without KV-cache
reuse: what the final evaluation of the fair comparison pays per policy.

``moe_overhead.py`` times one forward of a synthetic model on 128-token prompts; a desk-lite-v1
episode is a ~1,000-token prompt and up to 8 turns, where what dominates is encoding the
conversation. The rollout engine keeps each episode's KV cache between turns and shares a
prompt's cache between rows; a mixture could not (its causal-mean router state was not in the
cache), so it re-encoded the whole conversation every turn. Now the state rides in the cache.

Side by side, one run, the same 4 desk-lite-v1 ``eval`` tasks played greedily at batch 4:

* ``base``           SmolLM2-135M (embedded), caches reused: context only, it plays other
                     episodes (it writes other tokens, far fewer than a random router's)
* ``moe_reuse``      the same base with two stored LoRA adapters as experts (the two desk-lite
                     warm starts, ``benchmarks/adapters``) and a seeded random router, so tokens
                     spread over every slot (the worst case); caches reused
* ``moe_no_reuse``   the same mixture, every turn encoded afresh (how it ran before)

The two mixture rows play the same policy greedily, so their ratio is the engine's cost (their
tokens can part only by rounding: reuse prefills in bfloat16 where the CPU has it, as
evaluation does, plain ``generate`` runs in float32; the record counts identical episodes).
Run::

    OMP_NUM_THREADS=1 python benchmarks/moe_episodes.py [--tasks 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ADAPTERS = Path(__file__).parent / "adapters"
EXPERTS = {"v1_warmstart": "desk-lite-v1-warmstart", "a6_warmstart": "desk-lite-warmstart-a6"}
OUT = Path(__file__).parent / "results" / "moe_episodes.json"


def mixture(base_path: str, seed: int):  # noqa: ANN201 - a transformers model
    import torch
    from transformers import AutoModelForCausalLM

    from trace_train.compose.moe import ExpertSpec, MoEConfig, attach_experts, router_parameters

    experts = [ExpertSpec(name=n, adapter_dir=str(ADAPTERS / d)) for n, d in EXPERTS.items()]
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).eval()
    attach_experts(model, MoEConfig(base_path, experts))
    g = torch.Generator().manual_seed(seed)
    for p in router_parameters(model):
        p.data = torch.randn(p.shape, generator=g) * 0.05
    return model


def play(model, tok, tasks: int, reuse: bool, args) -> dict:  # noqa: ANN001
    from trace_train.rollout import ChatFormat, EpisodeSpec, hf_generate, play_episodes

    fmt = ChatFormat(tok)
    specs = [EpisodeSpec("trace/desk-lite-v1", s, 0.0, "eval") for s in range(tasks)]
    generate = hf_generate(model, tok, fmt.stop_ids, temperature=0.0, reuse_cache=reuse)
    started = time.perf_counter()
    rollouts = play_episodes(generate, fmt, specs, max_turns=args.max_turns,
                             max_new_tokens=args.max_new_tokens, max_completion_tokens=2048,
                             tool_prompt="compact")  # fmt: skip
    seconds = time.perf_counter() - started
    model_tokens = sum(len(r.env_mask) - sum(r.env_mask) for r in rollouts)
    return {
        "seconds": round(seconds, 1),
        "model_tokens": model_tokens,
        "env_tokens": sum(sum(r.env_mask) for r in rollouts),
        "seconds_per_model_token": round(seconds / max(1, model_tokens), 4),
        "successes": sum(r.success for r in rollouts),
        "completions": [r.completion_ids for r in rollouts],
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random router")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)

    from trace_train.embedded import resolve_model
    from trace_train.policies import load_hf

    base_path = resolve_model("embedded")
    base, tok = load_hf(base_path)
    tok.padding_side = "left"
    moe = mixture(base_path, args.seed)
    variants = {"base": (base, True), "moe_reuse": (moe, True), "moe_no_reuse": (moe, False)}
    rows = {}
    for name, (model, reuse) in variants.items():
        rows[name] = play(model, tok, args.tasks, reuse, args)
        print(f"{name}: {rows[name]['seconds']} s", flush=True)
    pairs = zip(rows["moe_reuse"]["completions"], rows["moe_no_reuse"]["completions"], strict=True)
    same = sum(a == b for a, b in pairs)
    for row in rows.values():
        del row["completions"]
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    record = {
        "what": f"{args.tasks} desk-lite-v1 eval tasks, greedy, batch {args.tasks}, "
        f"{args.max_turns} turns of {args.max_new_tokens} tokens",
        "rows": rows,
        # Exactness is tested in float32 (tests/train/test_moe.py); here reuse prefills in
        # bfloat16 (``auto``, as evaluation does) and plain generate runs in float32, so
        # greedy tokens may part where two candidates are within rounding of each other.
        "episodes_with_identical_tokens_with_and_without_reuse": f"{same}/{args.tasks}",
        "moe_no_reuse_over_moe_reuse": round(
            rows["moe_no_reuse"]["seconds"] / rows["moe_reuse"]["seconds"], 2
        ),
        "cpu": platform.processor() or platform.machine(),
        "cpu_flags": _cpu_flags(),
        "command": f"OMP_NUM_THREADS={threads} python benchmarks/moe_episodes.py "
        f"--tasks {args.tasks}",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    for name, row in rows.items():
        print(f"{name:<13} {row['seconds']:>7.1f} s  {row['model_tokens']:>5} model tokens  "
              f"{row['seconds_per_model_token']:.3f} s/token")  # fmt: skip
    print(f"no reuse / reuse: {record['moe_no_reuse_over_moe_reuse']}x "
          f"({same}/{args.tasks} episodes with identical tokens)")  # fmt: skip
    return record


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    return sorted(f for f in flags if f.startswith(("avx", "amx")))


if __name__ == "__main__":
    main()
