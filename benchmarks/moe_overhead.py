"""Prefill and decode latency of the token-routed LoRA mixture, as ratios to the base model.

Side by side in one run, interleaved round by round (the shared CPU is noisy), medians:

* ``base``            the plain base model
* ``peft_single``     peft with one adapter active (unmerged): the lower bound for any routing
* ``peft_mixed``      peft mixed-batch inference (``adapter_names`` per row, 4 adapters)
* ``moe_concat``      trace_train mixture, 4 experts + base slot, ``concat_masked`` kernel
* ``moe_sorted``      same, ``sorted_segments`` kernel
* ``moe_dense``       same routing, every expert computed and one-hot weighted (dense mixture)

Routers are random, so tokens spread over all slots (the worst case for grouping). Run::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/moe_overhead.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

from trace_train.compose.moe import (
    ExpertSpec,
    MoEConfig,
    RouterSpec,
    attach_experts,
    router_parameters,
)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def base_model(args) -> Qwen2ForCausalLM:
    cfg = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=int(args.hidden * 2.75),
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(1, args.hidden // 256),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).eval()


def make_adapters(args, root: str) -> list[str]:
    dirs = []
    for i in range(args.experts):
        torch.manual_seed(100 + i)
        cfg = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=TARGETS)
        cfg.init_lora_weights = False
        path = f"{root}/a{i}"
        get_peft_model(base_model(args), cfg).save_pretrained(path)
        dirs.append(path)
    return dirs


def build_variants(args, dirs: list[str]) -> dict:
    """name -> (model, extra forward kwargs)."""
    variants = {"base": (base_model(args), {})}
    single = PeftModel.from_pretrained(base_model(args), dirs[0], adapter_name="a0").eval()
    variants["peft_single"] = (single, {})
    mixed = PeftModel.from_pretrained(base_model(args), dirs[0], adapter_name="a0").eval()
    for i, d in enumerate(dirs[1:], start=1):
        mixed.load_adapter(d, adapter_name=f"a{i}")
    names = [f"a{i % len(dirs)}" for i in range(args.batch)]
    variants["peft_mixed"] = (mixed, {"adapter_names": names})
    for kernel in ["concat_masked", "sorted_segments", "dense"]:
        experts = [ExpertSpec(name=f"e{i}", adapter_dir=d) for i, d in enumerate(dirs)]
        model = attach_experts(
            base_model(args), MoEConfig("bench", experts, RouterSpec(kernel=kernel))
        )
        g = torch.Generator().manual_seed(1)
        for p in router_parameters(model):
            p.data = torch.randn(p.shape, generator=g)
        variants[f"moe_{kernel.split('_')[0]}"] = (model, {})
    return variants


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(variants: dict, args) -> dict[str, dict[str, list[float]]]:
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prefill), generator=g)
    step = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    times = {name: {"prefill": [], "decode": []} for name in variants}
    caches = {}
    with torch.no_grad():
        for name, (model, kw) in variants.items():  # warm-up and decode caches
            cache = DynamicCache(config=model.config)
            model(prompt, cache=cache, use_cache=True, **kw)
            caches[name] = cache
        for _ in range(args.rounds):
            for name, (model, kw) in variants.items():
                times[name]["prefill"].append(timed(lambda m=model, k=kw: m(prompt, **k)))
                cache = caches[name]

                def decode(m=model, k=kw, c=cache) -> None:
                    for _ in range(args.decode_steps):
                        m(step, cache=c, use_cache=True, **k)
                    c.crop(-args.decode_steps)

                times[name]["decode"].append(timed(decode) / args.decode_steps)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--decode-steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        variants = build_variants(args, make_adapters(args, root))
        times = measure(variants, args)
    base = {k: statistics.median(v) for k, v in times["base"].items()}
    print(
        f"hidden {args.hidden}, {args.layers} layers, {args.experts} experts r={args.rank} on "
        f"all 7 linears, batch {args.batch}, prefill {args.prefill} tokens, decode step with a "
        f"{args.prefill}-token cache; fp32, 1 thread, median of {args.rounds} interleaved rounds"
    )
    print("\n| variant | prefill ms | prefill / base | decode ms/step | decode / base |")
    print("| --- | --- | --- | --- | --- |")
    for name, t in times.items():
        pre, dec = statistics.median(t["prefill"]), statistics.median(t["decode"])
        print(
            f"| {name} | {pre * 1e3:.1f} | {pre / base['prefill']:.2f} | "
            f"{dec * 1e3:.2f} | {dec / base['decode']:.2f} |"
        )


if __name__ == "__main__":
    main()
