"""One GRPO run as ``test_distributed.py`` launches it: alone, or as one of N processes.

    python -m tests.train.ddp_worker MODEL OUT                       # one process
    accelerate launch --cpu --num_processes 2 -m tests.train.ddp_worker MODEL OUT

Hinted rollouts play the oracle (``oracle_hints``) and generation is greedy, so every process
plays exactly the rollouts a single process would play for its share of the group. Each
process writes ``OUT/rank<R>.pt``: its LoRA tensors after training and the keys and hint flags
of the rollouts it played.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from tests.train.oracle_hints import train_with_oracle_hints
from trace_train import distributed, grpo
from trace_train.config import GRPORunConfig


def config(model: str, out: Path, steps: int) -> GRPORunConfig:
    # One group of 4 with 2 hinted (importance-weighted, so they train): rewards differ, so
    # the update is not zero. Greedy decoding
    # and float32 everywhere: the processes play the same tokens a single process would.
    return GRPORunConfig(
        model=model, output_dir=str(out / "run"), group_size=4, groups_per_step=1, steps=steps,
        micro_batch_size=1, max_turns=4, max_new_tokens=96, max_completion_tokens=1024,
        temperature=0.0, prefill_dtype="float32", decode_dtype="float32",
        learning_rate=1e-2, lora_rank=4, lora_alpha=8, lora_targets=["q_proj", "v_proj"],
        hint_ratio=0.5, hinted_rollouts="importance_weighted", difficulty=0.0, save_steps=1,
        seed=0,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    played: list[tuple[str, bool]] = []
    real_play = grpo.play_episodes

    def play(generate, fmt, specs, **kw):
        played.extend((s.key(), s.hint) for s in specs)
        return real_play(generate, fmt, specs, **kw)

    grpo.play_episodes = play
    result = train_with_oracle_hints(config(args.model, args.out, args.steps), [])
    lora = {n: p.detach().clone() for n, p in result.model.named_parameters() if "lora_" in n}
    torch.save(
        {"lora": lora, "played": played, "world": distributed.world_size()},
        args.out / f"rank{distributed.rank()}.pt",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
