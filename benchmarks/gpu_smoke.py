"""GPU smoke run: 2 GRPO steps on one capability environment, 20 held-out tasks, one JSON.

    bash benchmarks/gpu_smoke.sh [--wheels DIR] [--model PATH] [--dry-run]   # the entry point
    python benchmarks/gpu_smoke.py --dry-run                                  # same checks

Made for a single GPU with a stock CUDA PyTorch image and no network: the model is a local
folder (default: the embedded SmolLM2-135M-Instruct, converted once from its PyPI package),
generation goes through vLLM (TRL's colocate mode) when the ``vllm`` package is installed and
through transformers otherwise, and ``gpu_smoke.sh --wheels DIR`` installs everything else from
wheels copied alongside (``benchmarks/gpu_smoke_requirements.txt`` says how to download them).

``--dry-run`` validates the whole configuration on the CPU and loads nothing: the environment
id, the model folder or embedded package, TRL's ``GRPOConfig`` with the chosen generation
backend, the evaluation settings, and the time budget. The real run writes
``--out`` (default ``benchmarks/results/gpu_smoke.json``): the GPU, the versions, GRPO seconds
per step, generated tokens per second (training rollouts and evaluation), peak GPU memory,
held-out success with its 95 % interval, and whether it stayed within the 8-minute budget.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULT = ROOT / "benchmarks" / "results" / "gpu_smoke.json"
BUDGET_S = 8 * 60
"""The smoke run must finish within this on one GPU (the issue's bound)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="local model folder or 'embedded'")
    parser.add_argument("--env", default="trace/tool-call-v0", help="capability environment")
    parser.add_argument("--difficulty", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=2, help="GRPO optimizer steps")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--eval-tasks", type=int, default=20)
    parser.add_argument(
        "--backend", choices=("auto", "vllm", "transformers"), default="auto",
        help="generation: vLLM when installed (auto), or force one",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--run-dir", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--dry-run", action="store_true", help="validate on the CPU, run nothing")
    return parser.parse_args(argv)


def backend(choice: str) -> str:
    """``vllm`` or ``transformers``; asking for vLLM without the package is an error."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    if choice == "vllm" and not has_vllm:
        raise SystemExit("gpu_smoke: --backend vllm, but the vllm package is not installed")
    if choice == "auto":
        return "vllm" if has_vllm else "transformers"
    return choice


def configs(args: argparse.Namespace, run_dir: Path, generation: str) -> tuple[Any, Any]:
    """The GRPO run and the held-out evaluation, as the library's own config objects (their
    checks run here, in the dry run too)."""
    from trace_train.config import EvalConfig, GRPORunConfig

    grpo_cfg = GRPORunConfig(
        model=args.model, env_id=args.env, difficulty=args.difficulty,
        output_dir=str(run_dir / "grpo"), steps=args.steps, group_size=args.group_size,
        groups_per_step=args.groups_per_step, micro_batch_size=args.group_size,  # a group a pass
        max_turns=4, max_new_tokens=256,
        max_completion_tokens=1536, tool_prompt="hermes", bf16=True, save_steps=args.steps,
        hint_ratio=0.25, learning_rate=1e-5, seed=0,
        use_vllm=generation == "vllm", vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=8192,
    )  # fmt: skip
    eval_cfg = EvalConfig(
        policy="", env_ids=[args.env], episodes=args.eval_tasks, difficulty=args.difficulty,
        out_dir=str(run_dir / "eval"), batch_size=args.eval_tasks, max_turns=4,
        max_new_tokens=256, tool_prompt="hermes",
    )  # fmt: skip
    return grpo_cfg, eval_cfg


def check_model(model: str) -> str:
    """The model folder, or where the embedded model's GGUF is (not converted in a dry run)."""
    if model == "embedded" or model.startswith("embedded:"):
        from trace_train.embedded import DEFAULT_EMBEDDED, find_gguf

        return f"embedded GGUF {find_gguf(model.partition(':')[2] or DEFAULT_EMBEDDED)}"
    folder = Path(model)
    if not (folder / "config.json").is_file():
        raise SystemExit(f"gpu_smoke: --model {model}: no config.json there (a local folder)")
    return str(folder)


def dry_run(args: argparse.Namespace) -> dict[str, Any]:
    import trace_gym
    from trace_train import grpo

    generation = backend(args.backend)
    if args.env not in trace_gym.registered_ids():
        raise SystemExit(f"gpu_smoke: unknown env {args.env!r}; see trace-gym list")
    run_dir = Path(tempfile.mkdtemp(prefix="gpu_smoke_dry_"))
    grpo_cfg, eval_cfg = configs(args, run_dir, generation)
    grpo.check_vllm(grpo_cfg)
    trl_args = grpo.trl_config(grpo_cfg, run_dir / "grpo", stop_ids=[0])
    plan = {
        "dry_run": True,
        "generation": generation,
        "model": check_model(args.model),
        "env_id": args.env,
        "grpo": {
            "steps": trl_args.max_steps,
            "rollouts_per_step": grpo_cfg.group_size * grpo_cfg.groups_per_step,
            "per_device_batch": trl_args.per_device_train_batch_size,
            "gradient_accumulation": trl_args.gradient_accumulation_steps,
            "use_vllm": trl_args.use_vllm,
        },
        "eval_tasks": eval_cfg.episodes,
        "budget_s": BUDGET_S,
    }
    print(json.dumps(plan, indent=2))
    return plan


def generated_tokens(records: list[dict], tokenizer: Any) -> int:
    """Tokens the policy wrote in these episodes (its assistant turns, re-tokenised)."""
    return sum(
        len(tokenizer(str(m.get("content") or ""), add_special_tokens=False)["input_ids"])
        for r in records
        for m in r["messages"]
        if m["role"] == "assistant"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import trace_gym
    from trace_train import grpo
    from trace_train.embedded import resolve_model
    from trace_train.evaluate import evaluate
    from trace_train.runlog import read_log

    if not torch.cuda.is_available():
        raise SystemExit("gpu_smoke: no CUDA device; use --dry-run to check the configuration")
    started = time.perf_counter()
    generation = backend(args.backend)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    model = resolve_model(args.model)  # converts the embedded model once
    args.model = model
    grpo_cfg, eval_cfg = configs(args, run_dir, generation)
    torch.cuda.reset_peak_memory_stats()

    # -- GRPO ------------------------------------------------------------------------------
    t0 = time.perf_counter()
    result = grpo.train(grpo_cfg)
    grpo_s = time.perf_counter() - t0
    steps = [x for x in read_log(result.log_path) if "event" not in x]
    gen_s = sum(
        x["time/step_seconds"] * (x.get("time/prefill_share", 0) + x.get("time/decode_share", 0))
        for x in steps
    )
    model_tokens = sum(x["tokens/model"] for x in steps)
    grpo_peak = torch.cuda.max_memory_allocated() / 2**30
    del result
    torch.cuda.empty_cache()

    # -- held-out evaluation of the trained adapter ----------------------------------------
    torch.cuda.reset_peak_memory_stats()
    adapter = run_dir / "grpo" / "adapter"
    eval_cfg.policy = f"hf:{model}+adapter:{adapter}"
    t0 = time.perf_counter()
    summary = evaluate(eval_cfg, progress=False)
    eval_s = time.perf_counter() - t0
    records = list(trace_gym.read_episodes(Path(eval_cfg.out_dir) / "episodes.jsonl"))
    from transformers import AutoTokenizer

    eval_tokens = generated_tokens(records, AutoTokenizer.from_pretrained(model))
    eval_peak = torch.cuda.max_memory_allocated() / 2**30
    total_s = time.perf_counter() - started
    overall = summary["overall"]
    return {
        "machine": {
            "gpu": torch.cuda.get_device_name(0),
            "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
            "python": platform.python_version(),
            "versions": _versions(),
        },
        "generation": generation,
        "model": model,
        "env_id": args.env,
        "difficulty": args.difficulty,
        "grpo": {
            "steps": len(steps),
            "rollouts": sum(x["rollouts/step"] for x in steps),
            "seconds": round(grpo_s, 1),
            "seconds_per_step": round(grpo_s / max(1, len(steps)), 1),
            "generated_tokens": model_tokens,
            "generation_seconds": round(gen_s, 1),
            "tokens_per_s": round(model_tokens / gen_s, 1) if gen_s else None,
            "reward_mean": [x["reward/mean"] for x in steps],
            "success": [x["env/success"] for x in steps],
            "peak_gpu_memory_gib": round(grpo_peak, 2),
        },
        "eval": {
            "tasks": overall["episodes"],
            "success_rate": overall["success_rate"],
            "success_ci95": overall["success_ci95"],
            "mean_reward": overall["mean_reward"],
            "seconds": round(eval_s, 1),
            "generated_tokens": eval_tokens,
            "tokens_per_s": round(eval_tokens / eval_s, 1) if eval_s else None,
            "peak_gpu_memory_gib": round(eval_peak, 2),
        },
        "total_seconds": round(total_s, 1),
        "within_budget": total_s <= BUDGET_S,
        "budget_s": BUDGET_S,
    }


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "vllm"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return 0
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    if not report["within_budget"]:
        print(f"gpu_smoke: took {report['total_seconds']} s, over the {BUDGET_S} s budget")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
