"""Per-task routing accuracy of the frozen base model as a zero-shot classifier, on
environments whose capability is known.

For each capability environment, the task's system prompt and opening message are routed
over one adapter per capability (described by the capability name and its environment's
registry description) plus "no adapter". The adapters are fresh zero-initialised LoRAs: the
decision uses only the base model (``RoutedPolicy.label_logprobs`` disables adapters), so
their weights do not matter here. A uniform random router scores 1 / (capabilities + 1).

    OMP_NUM_THREADS=2 python benchmarks/routing_accuracy.py [--model embedded] [--tasks 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded", help="base model folder or 'embedded'")
    ap.add_argument("--tasks", type=int, default=3, help="eval-split tasks per environment")
    ap.add_argument("--out", default="benchmarks/results/routing_accuracy.json")
    args = ap.parse_args()

    import gymnasium as gym
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    import trace_gym
    from trace_gym.registration import load_registry
    from trace_train.compose.routing import (
        RoutedExpert,
        RoutingConfig,
        build_routed,
        task_routing_accuracy,
    )
    from trace_train.embedded import resolve_model
    from trace_train.pipeline.compositions import describe

    base = resolve_model(args.model)
    envs = [e for e in load_registry() if e.id != "trace/service-desk-v0"]
    tmp = Path(tempfile.mkdtemp(prefix="routing_bench_"))
    experts = []
    for entry in envs:  # zero-initialised LoRA B: the adapter changes nothing
        model = AutoModelForCausalLM.from_pretrained(base)
        lora = LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj", "v_proj"])
        get_peft_model(model, lora).save_pretrained(tmp / entry.capability)
        experts.append(
            RoutedExpert(
                entry.capability, str(tmp / entry.capability), describe(entry.capability, entry.id)
            )
        )
    policy = build_routed(RoutingConfig(base, experts))
    tasks = []
    for entry in envs:
        env = gym.make(entry.id, disable_env_checker=True)
        for seed in range(args.tasks):
            _, info = env.reset(seed=seed, options={"split": "eval"})
            tasks.append((info["messages"][:2], entry.capability))
    start = time.perf_counter()
    result = task_routing_accuracy(policy, tasks)
    seconds = time.perf_counter() - start
    result.update(
        {
            "model": args.model,
            "tasks": len(tasks),
            "labels": len(experts) + 1,
            "chance": 1 / (len(experts) + 1),
            "seconds_per_task": seconds / len(tasks),
            "trace_gym_version": trace_gym.__version__,
        }
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("accuracy", "chance", "tasks", "seconds_per_task")}))
    for expected, row in result["confusion"].items():
        print(f"{expected:<34} -> {row}")


if __name__ == "__main__":
    main()
