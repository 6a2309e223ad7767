"""``trace-train warmstart``: supervised LoRA on the environment's oracle demonstrations.

Why: a model that never succeeds gives GRPO no signal (all rewards equal, zero advantages).
Untrained, SmolLM2-135M writes no valid tool call (0 in 10 samples). A short
supervised pass on oracle episodes from the ``train`` split teaches the tool-call format; its
adapter then seeds ``trace-train grpo`` (``init_adapter``, or merged with
``merge_init_adapter``).

The demonstrations are played through the same rollout engine GRPO and evaluation use, with
the oracle "generating" the assistant turns, so the supervised tokens are exactly the format
the model later samples in: hint-free prompt, assistant turns (loss), environment replies as
user turns (no loss, TRL's ``assistant_masks``). Training is TRL's ``SFTTrainer`` with a peft
``LoraConfig``; held-out success before and after goes in ``training_log.jsonl``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_train import distributed, task_seeds
from trace_train.config import WarmstartConfig, save_config
from trace_train.rollout import ChatFormat, EpisodeSpec, Generate, action_text, play_episodes
from trace_train.runlog import RolloutStats, TrainingLog, time_backward, truncate_log

LOG_NAME = "training_log.jsonl"


@dataclass
class WarmstartResult:
    """What :func:`train` leaves behind."""

    adapter_dir: Path
    log_path: Path
    before: dict[str, Any]
    after: dict[str, Any]
    model: Any


def demonstration_specs(cfg: WarmstartConfig) -> list[EpisodeSpec]:
    """The warm start's part of the train split (``trace_train.task_seeds``: GRPO never
    draws these seeds) of ``env_id``, then of each ``mix_demonstrations`` id; difficulties
    spread evenly over [0, 1] unless fixed."""
    specs = []
    for env_id, n in {cfg.env_id: cfg.demonstrations, **cfg.mix_demonstrations}.items():
        specs += [
            EpisodeSpec(
                env_id,
                task_seed,
                i / max(1, n - 1) if cfg.difficulty_spread else cfg.difficulty,
                "train",
            )
            for i, task_seed in enumerate(task_seeds.phase_seeds("warmstart", cfg.seed, n))
        ]
    return specs


def oracle_generate(fmt: ChatFormat) -> tuple[Generate, dict]:
    """A :data:`Generate` that writes the oracle's next turn for the one episode in play."""
    state: dict[str, Any] = {"plan": [], "turn": 0}
    end = (
        fmt.stop_ids[-1]
        if fmt.turn_end is None
        else fmt.tokenizer.convert_tokens_to_ids(fmt.turn_end)
    )

    def generate(batch: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], None]]:
        plan, turn = state["plan"], state["turn"]
        state["turn"] += 1
        text = plan[turn] if turn < len(plan) else "Is there anything else I can help with?"
        return [(fmt.encode(text) + [end], None) for _ in batch]

    return generate, state


def demonstrations(
    cfg: WarmstartConfig,
    fmt: ChatFormat,
    counts: dict[str, int] | None = None,
    show_progress: bool = True,
) -> list[dict[str, list[int]]]:
    """Token ids and assistant masks of one oracle episode per spec (failed ones dropped).
    ``counts``, when given, receives how many were dropped (``unfinished``) and how many cut
    to ``max_length`` (``truncated``), so the caller can say what was not learned."""
    import gymnasium as gym
    from tqdm.auto import tqdm

    import trace_gym

    unknown = sorted(set(cfg.mix_demonstrations) - set(trace_gym.registered_ids()))
    if unknown:
        raise ValueError(
            f"mix_demonstrations: unknown env id(s) {unknown}; registered: "
            f"{trace_gym.registered_ids()}"
        )
    generate, state = oracle_generate(fmt)
    rows = []
    counts = counts if counts is not None else {}
    specs = demonstration_specs(cfg)
    counts.update(requested=len(specs), unfinished=0, truncated=0)
    # Hundreds of long service-desk episodes take minutes: a bar with the time remaining
    # (main process only; the others play the same demonstrations silently).
    specs = tqdm(
        specs, desc="demonstrations", leave=False,
        disable=not (show_progress and distributed.is_main()),
    )  # fmt: skip
    for spec in specs:
        env_kwargs = cfg.env_kwargs if spec.env_id == cfg.env_id else {}
        env = gym.make(spec.env_id, disable_env_checker=True, **env_kwargs)
        env.reset(seed=spec.task_seed, options={"difficulty": spec.difficulty, "split": "train"})
        state["plan"], state["turn"] = [action_text(a) for a in env.unwrapped.oracle_actions()], 0
        env.close()
        (rollout,) = play_episodes(
            generate,
            fmt,
            [spec],
            max_turns=cfg.max_turns,
            max_new_tokens=cfg.max_length,
            max_completion_tokens=cfg.max_length,
            reward_mode=cfg.reward_mode,
            env_kwargs=env_kwargs,
            agent_name="oracle",
            tool_prompt=cfg.tool_prompt,
        )
        if not rollout.success:  # e.g. the turn limit cut the oracle short: not a demonstration
            counts["unfinished"] += 1
            continue
        counts["truncated"] += (
            len(rollout.prompt_ids) + len(rollout.completion_ids) > cfg.max_length
        )
        ids = (rollout.prompt_ids + rollout.completion_ids)[: cfg.max_length]
        mask = ([0] * len(rollout.prompt_ids) + rollout.env_mask)[: cfg.max_length]
        rows.append({"input_ids": ids, "assistant_masks": mask})
    if not rows:
        raise RuntimeError(
            f"no oracle demonstration of {cfg.env_id} succeeded within max_turns={cfg.max_turns} "
            f"and max_length={cfg.max_length} tokens of conversation; raise them"
        )
    return rows


def supervised_demonstrations(
    cfg: WarmstartConfig, fmt: ChatFormat, counts: dict[str, int] | None = None
) -> list[dict[str, list[int]]]:
    """The demonstrations the warm start can learn from: those with an assistant token left
    after truncation to ``max_length`` (the router's training uses all of them)."""
    every = demonstrations(cfg, fmt, counts)
    rows = [row for row in every if any(row["assistant_masks"])]
    if counts is not None:
        counts["cut_before_first_turn"] = len(every) - len(rows)
    if not rows:
        raise RuntimeError(
            f"every oracle demonstration of {cfg.env_id} is cut off before its first assistant "
            f"turn by max_length={cfg.max_length} tokens; raise max_length or use "
            "tool_prompt: compact"
        )
    return rows


def train(cfg: WarmstartConfig, callbacks: list | None = None) -> WarmstartResult:
    """Supervised LoRA on oracle demonstrations; resumable; returns the adapter folder."""
    from trace_train.quiet import quiet, silence_trl_notices, step_bar_only

    silence_trl_notices()
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    from trace_train.embedded import resolve_model
    from trace_train.evaluate import evaluate_model

    # -- 1. run folder ---------------------------------------------------------------------------
    # Under several processes (accelerate launch) only the main one writes files.
    main = distributed.is_main()
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / LOG_NAME
    ckpt_root = out / "checkpoints"
    last = get_last_checkpoint(str(ckpt_root)) if ckpt_root.is_dir() else None
    resume_from = last if (cfg.resume and last) else None
    if main:
        save_config(cfg, out / "config.yaml")
        truncate_log(log_path, int(Path(last).name.split("-")[-1]) if resume_from else -1)

    # -- 2. base model and demonstrations --------------------------------------------------------
    path = resolve_model(cfg.model)
    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    counts: dict[str, int] = {}
    dataset = Dataset.from_list(supervised_demonstrations(cfg, ChatFormat(tokenizer), counts))
    counts["used"] = len(dataset)
    if (counts["unfinished"] or counts["truncated"]) and main:
        print(f"[trace-train] warm start: {demonstration_shortfall(cfg, counts)}", file=sys.stderr)

    # -- 3. held-out success of the base model ---------------------------------------------------
    evaluating = bool(cfg.eval_episodes) and main
    before = evaluate_model(model, tokenizer, cfg, cfg.eval_episodes) if evaluating else {}
    if before and not resume_from:
        _log(log_path, {"event": "eval_before", "step": 0, **before})

    # -- 4. supervised LoRA (loss on assistant tokens only) --------------------------------------
    micro = cfg.micro_batch_size or cfg.batch_size
    args = SFTConfig(
        output_dir=str(ckpt_root),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=cfg.batch_size // micro,
        num_train_epochs=cfg.epochs,
        learning_rate=cfg.learning_rate,
        max_length=cfg.max_length,
        seed=cfg.seed,
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        report_to="none",
        bf16=cfg.bf16,  # autocast only: the model loaded in float32 above
        use_cpu=not torch.cuda.is_available(),
        activation_checkpointing=cfg.gradient_checkpointing,  # the old name warns
        padding_free=False,
        ddp_find_unused_parameters=False,  # several processes: every LoRA weight is used
    )
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=list(cfg.lora_targets),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    stats = RolloutStats()
    with quiet():
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora,
            callbacks=[TrainingLog(log_path, stats), *(callbacks or [])],
        )
    time_backward(trainer, stats)
    step_bar_only(trainer)
    started = time.time()
    with quiet():  # the trainer's step progress bar stays
        trainer.train(resume_from_checkpoint=resume_from)
    seconds = time.time() - started

    # -- 5. save, and held-out success after -----------------------------------------------------
    policy = trainer.model
    adapter_dir = out / "adapter"
    after: dict[str, Any] = {}
    if main:
        with quiet():
            policy.save_pretrained(adapter_dir)
            tokenizer.save_pretrained(adapter_dir)
        after = evaluate_model(policy, tokenizer, cfg, cfg.eval_episodes) if evaluating else {}
        end = {
            "event": "train_end",
            "step": trainer.state.global_step,
            "seconds": round(seconds, 2),
        }
        demos = {f"demonstrations_{k}": v for k, v in counts.items() if k != "used"}
        _log(log_path, {**end, "demonstrations": len(dataset), **demos, **after})
        meta = {
            "env_id": cfg.env_id,
            "base_model": cfg.model,
            "trained_with": "trace-train warmstart",
            "provenance": _provenance(cfg, path, adapter_dir, policy),
        }
        (adapter_dir / "trace_train.json").write_text(json.dumps(meta, indent=2) + "\n")
    distributed.wait_for_everyone(trainer)  # no process returns before the adapter is written
    return WarmstartResult(adapter_dir, log_path, before, after, policy)


def _provenance(cfg: WarmstartConfig, base: str, adapter_dir: Path, model: Any) -> dict[str, Any]:
    """The run's record (:func:`trace_train.provenance.run_record`): commit, the
    demonstrations' task seeds, the full config, base and adapter hashes, each phase's
    precision (the oracle writes the demonstrations: no model generates them), the machine."""
    from trace_train import provenance
    from trace_train.decoding import resolve_phase_dtypes

    weights = str(next(model.parameters()).dtype).removeprefix("torch.")
    evaluation = resolve_phase_dtypes(cfg.prefill_dtype, cfg.decode_dtype, model.device)
    return provenance.run_record(
        cfg,
        phase="warmstart",
        base_model=base,
        adapters={"adapter": adapter_dir},
        dtypes={
            "weights": weights,
            "update": "bfloat16 autocast" if cfg.bf16 and weights == "float32" else weights,
            "eval_prefill": evaluation["prefill"],
            "eval_decode": evaluation["decode"],
        },
        seeds={"run_seed": cfg.seed,
               "tasks": task_seeds.record("warmstart", cfg.seed, cfg.demonstrations),
               **({"mixed_in_tasks": {env_id: task_seeds.record("warmstart", cfg.seed, n)
                                      for env_id, n in cfg.mix_demonstrations.items()}}
                  if cfg.mix_demonstrations else {})},
    )  # fmt: skip


def demonstration_shortfall(cfg: WarmstartConfig, counts: dict[str, int]) -> str:
    """What part of the requested demonstrations the warm start cannot learn from, and the
    settings that decide it (a long target such as the service desk loses most otherwise)."""
    parts = [f"learning from {counts['used']} of {counts['requested']} oracle demonstrations"]
    if counts["unfinished"]:
        parts.append(
            f"{counts['unfinished']} did not finish within max_turns={cfg.max_turns} and "
            f"max_length={cfg.max_length} tokens (dropped)"
        )
    if counts["truncated"]:
        parts.append(
            f"{counts['truncated']} cut at max_length={cfg.max_length} tokens (their later "
            "turns are not learned)"
        )
    if counts.get("cut_before_first_turn"):
        parts[-1] += f", {counts['cut_before_first_turn']} of them before the first (dropped)"
    return "; ".join(parts) + "; raise max_turns / max_length to use them"


def _log(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
