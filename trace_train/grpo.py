"""GRPO-LoRA for one capability environment (TRACE stage 3), on TRL's ``GRPOTrainer``.

Reads top to bottom like cleanrl's ``ppo.py``, as a library: small helpers, then one
:func:`train` whose body follows the run (output folder, base model, LoRA, task dataset,
rollout function, trainer, resume, train, save). The CLI (``trace-train grpo``) only wraps it.

Design choice, ``rollout_func`` rather than ``environment_factory`` (both exist in TRL 1.16):

* the hint swap: hinted rollouts must be *generated* with the ``<expert_guidance>`` prompt and
  *scored* by the update on the hint-free one. With ``rollout_func`` we return ``prompt_ids``
  ourselves (the hint-free prompt) next to the generated ``completion_ids``; with
  ``environment_factory`` TRL owns the prompt it trains on, and swapping it would mean
  overriding the trainer's generate-and-score method (~600 lines).
* environment tokens: we build the completion turn by turn and mark the environment's replies
  with ``env_mask=0``, which TRL multiplies into the loss mask (its ``tool_mask``).
* any chat template: ``environment_factory`` needs a template TRL can parse tool calls with
  (SmolLM2's cannot); we let trace_gym's one parser read the model's text instead.
* all rollouts of a group play one task: the dataset's ``prompt`` is the task key (env id,
  split, difficulty, seed) and TRL repeats each prompt ``num_generations`` times.

Nothing of TRL is overridden. Outputs in ``output_dir``: ``adapter/`` (a standard PEFT folder),
``training_log.jsonl`` (one line per step: reward, success, group variance, tokens, rollouts),
``config.yaml`` (the resolved config) and ``checkpoints/`` (resumable).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_train import distributed, task_seeds
from trace_train.config import GRPORunConfig, save_config
from trace_train.rollout import (
    ChatFormat,
    EpisodeSpec,
    Rollout,
    ServedEnvs,
    hf_generate,
    play_episodes,
    vllm_generate,
)
from trace_train.runlog import RolloutStats, TrainingLog, time_backward, truncate_log

LOG_NAME = "training_log.jsonl"


@dataclass
class GRPOResult:
    """What :func:`train` leaves behind."""

    adapter_dir: Path
    log_path: Path
    global_step: int
    model: Any
    """The trained PeftModel (in memory; tests compare its weights)."""


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def task_keys(cfg: GRPORunConfig) -> list[str]:
    """One task per group, in training order: GRPO's part of the train split's seeds
    (``trace_train.task_seeds``: never a seed the warm start demonstrated); with a curriculum
    band the difficulty ramps linearly from ``difficulty`` to ``difficulty_max``."""
    n = cfg.steps * cfg.groups_per_step
    lo, hi = (
        cfg.difficulty,
        cfg.difficulty_max if cfg.difficulty_max is not None else cfg.difficulty,
    )
    seeds = task_seeds.phase_seeds("grpo", cfg.seed, n)
    return [
        EpisodeSpec(cfg.env_id, task_seed, lo + (hi - lo) * i / max(1, n - 1)).key()
        for i, task_seed in enumerate(seeds)
    ]


def assign_hints(keys: list[str], hints_per_group: int) -> list[bool]:
    """The first ``hints_per_group`` rollouts of each group (equal keys) get the hint."""
    seen: dict[str, int] = {}
    flags = []
    for k in keys:
        flags.append(seen.get(k, 0) < hints_per_group)
        seen[k] = seen.get(k, 0) + 1
    return flags


def make_rollout_func(cfg: GRPORunConfig, tokenizer: Any, stats: RolloutStats):  # noqa: ANN201
    """TRL's ``rollout_func(prompts, trainer) -> dict``: play each group's task, return the
    hint-free prompt ids, the completion ids with ``env_mask`` and the verifier's reward."""
    fmt = ChatFormat(tokenizer)
    served = ServedEnvs(cfg.env_urls) if cfg.env_urls else None  # else in process
    # importance_weighted divides by the behaviour policy's probability of each token
    weighting = cfg.hinted_rollouts == "importance_weighted"

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        keys = [p if isinstance(p, str) else p[-1]["content"] for p in prompts]
        # Under several processes this process holds part of a group: hints by global position.
        hints = distributed.global_hints(
            trainer, keys, lambda every: assign_hints(every, cfg.hints_per_group)
        )
        specs = [EpisodeSpec.from_key(k, hint=h) for k, h in zip(keys, hints, strict=True)]
        if getattr(trainer, "use_vllm", False):
            generate = vllm_generate(trainer)
        else:
            model = trainer.accelerator.unwrap_model(trainer.model)
            generate = hf_generate(
                model,
                tokenizer,
                fmt.stop_ids,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                prefill_dtype=cfg.prefill_dtype,
                decode_dtype=cfg.decode_dtype,
                clock=stats.clock,
                with_logprobs=weighting,
            )
        rollouts: list[Rollout] = play_episodes(
            generate,
            fmt,
            specs,
            max_turns=cfg.max_turns,
            max_new_tokens=cfg.max_new_tokens,
            max_completion_tokens=cfg.max_completion_tokens,
            reward_mode=cfg.reward_mode,
            env_kwargs=cfg.env_kwargs,
            agent_name="grpo",
            tool_prompt=cfg.tool_prompt,
            clock=stats.clock,
            served=served,
        )
        dropping = cfg.hinted_rollouts == "drop"
        mask_harness_faults(trainer, rollouts, in_baseline=lambda r: not (dropping and r.spec.hint))
        stats.add(gather_for_log(trainer, rollouts))
        vllm = getattr(trainer, "use_vllm", False)
        logprobs = [r.logprobs for r in rollouts] if (vllm or weighting) else None
        rewards: list[float | None] = [r.reward for r in rollouts]
        env_mask = [r.env_mask for r in rollouts]
        if dropping:
            # A dropped rollout carries no loss (every token masked) and no reward: TRL counts
            # a None reward as unscorable, leaves it out of the group's mean and spread, and
            # gives it a zero advantage. Keeping its reward in the group's statistics would
            # not bias the hint-free rollouts' gradient (a baseline that does not depend on
            # their own actions never does), but it is a baseline for another policy: when
            # the hinted rollouts succeed and the hint-free ones all fail, every hint-free
            # rollout would get the same negative advantage, a group counted informative that
            # only pushes down whatever was sampled, and the group's spread would rescale
            # the advantages by a variance the trained policy does not have. Left out.
            rewards = [None if r.spec.hint else r.reward for r in rollouts]
            env_mask = [[0] * len(r.env_mask) if r.spec.hint else r.env_mask for r in rollouts]
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],  # hint-free: the swap happens here
            "completion_ids": [r.completion_ids for r in rollouts],
            "env_mask": env_mask,  # 0 = environment token (or a dropped rollout), no loss
            "logprobs": logprobs,  # the behaviour policy's (hinted prompt for hinted rows)
            "env_reward": rewards,
            "env_success": [float(r.success) for r in rollouts],
            "hinted": [bool(r.spec.hint) for r in rollouts],
        }

    return rollout_func


def verifier_reward(
    prompts: list, completions: list, env_reward: list[float | None], **_: Any
) -> list[float | None]:
    """The reward is the environment verifier's final score (forwarded by the rollout);
    ``None`` for a rollout the update leaves out (a dropped hinted rollout)."""
    return [None if r is None else float(r) for r in env_reward]


def load_policy_model(cfg: GRPORunConfig, out: Path) -> tuple[Any, Any, Any]:
    """Base model and tokenizer, with the starting adapter continued or merged; returns
    ``(model, tokenizer, peft_config or None)``."""
    import torch
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.embedded import resolve_model
    from trace_train.quiet import quiet

    path = resolve_model(cfg.model)
    # On a CPU bf16 only autocasts the update: float32 weights decode faster there.
    dtype = torch.bfloat16 if cfg.bf16 and _has_accelerator() else torch.float32
    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    tokenizer.padding_side = "left"  # GRPO generation pads on the left
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type="CAUSAL_LM",
    )
    if cfg.init_adapter and cfg.merge_init_adapter:
        with quiet():
            model = PeftModel.from_pretrained(model, cfg.init_adapter).merge_and_unload()
            model.save_pretrained(out / "merged_base")
        tokenizer.save_pretrained(out / "merged_base")
        model.name_or_path = str(out / "merged_base")
        return model, tokenizer, lora
    if cfg.init_adapter:
        # is_trainable=True: a frozen loaded adapter trains nothing (TRL issues #3031, #6700)
        with quiet():
            model = PeftModel.from_pretrained(model, cfg.init_adapter, is_trainable=True)
        return model, tokenizer, None
    return model, tokenizer, lora


def trl_config(cfg: GRPORunConfig, out: Path, stop_ids: list[int] | None = None) -> Any:
    """TRL's ``GRPOConfig`` for this run (one generation batch = one optimizer step);
    ``stop_ids`` end a vLLM turn (:func:`trace_train.rollout.vllm_generate`)."""
    from trl import GRPOConfig

    world = int(os.environ.get("WORLD_SIZE", "1"))
    micro = micro_batch_size(cfg)
    rollouts_per_step = cfg.group_size * cfg.groups_per_step
    if rollouts_per_step % (micro * world):
        raise ValueError(
            f"group_size*groups_per_step={rollouts_per_step} must be divisible by "
            f"micro_batch_size*processes={micro}*{world}"
        )
    accumulation = rollouts_per_step // (micro * world)
    return GRPOConfig(
        output_dir=str(out / "checkpoints"),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,  # all groups of a step come from one rollout call
        num_generations=cfg.group_size,
        max_completion_length=cfg.max_completion_tokens,
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        max_grad_norm=cfg.max_grad_norm,
        temperature=max(cfg.temperature, 1e-3),
        top_p=cfg.top_p,
        shuffle_dataset=False,  # keep the curriculum order; resume skips finished batches
        seed=cfg.seed,
        bf16=cfg.bf16,
        fp16=False,
        use_cpu=not _has_accelerator(),
        activation_checkpointing=cfg.gradient_checkpointing,  # the old name warns
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        report_to="none",
        disable_tqdm=False,
        ddp_find_unused_parameters=False,  # several processes: every LoRA weight is used
        **vllm_arguments(cfg, stop_ids),
    )


def vllm_arguments(cfg: GRPORunConfig, stop_ids: list[int] | None = None) -> dict[str, Any]:
    """``GRPOConfig``'s vLLM arguments (TRL 1.x names): mode, server URL or colocated memory
    share and context, and the turn's stop tokens (vLLM's ``SamplingParams.stop_token_ids``)."""
    if not cfg.use_vllm:
        return {"use_vllm": False}
    args: dict[str, Any] = {"use_vllm": True, "vllm_mode": cfg.vllm_mode}
    if cfg.vllm_mode == "server" and cfg.vllm_server_base_url:
        args["vllm_server_base_url"] = cfg.vllm_server_base_url
    if cfg.vllm_mode == "colocate":
        args["vllm_gpu_memory_utilization"] = cfg.vllm_gpu_memory_utilization
        if cfg.vllm_max_model_length:
            args["vllm_max_model_length"] = cfg.vllm_max_model_length
    if stop_ids:
        args["generation_kwargs"] = {"stop_token_ids": list(stop_ids)}
    return args


def check_vllm(cfg: GRPORunConfig) -> None:
    """``use_vllm`` needs the ``vllm`` package (and a GPU): one clear error before the model
    loads, instead of TRL's at trainer construction."""
    import importlib.util

    from trace_train.config import ConfigError

    if cfg.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "use_vllm: true needs the vllm package (pip install vllm, on a CUDA machine); "
            "set use_vllm: false to generate with transformers"
        )


def micro_batch_size(cfg: GRPORunConfig) -> int:
    """Rollouts per forward/backward pass: the configured number; unset, one group on a GPU
    (its parallelism pays) and one rollout on a CPU, where a pass of one holds one
    conversation's activations and logits and pads nothing: 0.36x the memory and a 1.55x faster
    backward than a group of 4 (``benchmarks/grpo_memory.py``), while a group of 8
    service-desk episodes in one pass ran a 24 GB machine out of memory. The update is the
    same either way for every loss type but ``bnpo``, which TRL normalises per pass."""
    if cfg.micro_batch_size:
        return cfg.micro_batch_size
    return cfg.group_size if _has_accelerator() else 1


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available()


# ---------------------------------------------------------------------------------------------
# Several processes (accelerate launch: TRL splits each group across them, see
# trace_train.distributed) and served environments (harness faults masked)
# ---------------------------------------------------------------------------------------------
def mask_harness_faults(
    trainer: Any, rollouts: list[Rollout], in_baseline: Any = lambda r: True
) -> None:
    """Take the episodes the harness failed (``Rollout.fault``: a served environment lost
    mid-episode, an environment's internal error) out of the update: none of their tokens
    carries loss, and their reward is the mean of their group's other rollouts, so they move
    neither the group's baseline nor, with a zero advantage, the policy. TRL has no per-sample
    mask, and a ``None`` reward would count as 0. The group may span processes: its rewards
    are gathered first. ``in_baseline`` says which rollouts the group's statistics count
    (dropped hinted rollouts do not)."""
    groups: dict[str, list[float]] = {}
    everyone = distributed.gather_to_all(
        trainer, [(r.spec.key(), r.reward, r.fault is None and in_baseline(r)) for r in rollouts]
    )
    for key, reward, healthy in everyone:
        if healthy:
            groups.setdefault(key, []).append(reward)
    for r in rollouts:
        if r.fault is None:
            continue
        healthy_rewards = groups.get(r.spec.key(), [])
        r.reward = sum(healthy_rewards) / len(healthy_rewards) if healthy_rewards else 0.0
        if not r.completion_ids:  # TRL reads a completion's last token
            r.completion_ids = list(r.prompt_ids[-1:])
            r.logprobs = [0.0] if r.logprobs is not None else None
        r.env_mask = [0] * len(r.completion_ids)


def gather_for_log(trainer: Any, rollouts: list[Rollout]) -> list[Rollout]:
    """Every process's rollouts of this call, for the training log the main process writes:
    light copies (token ids and episode logs stay with the process that played them)."""
    if trainer.accelerator.num_processes == 1:
        return rollouts
    light = [
        dataclasses.replace(
            r,
            completion_ids=[],
            gen_prompt_ids=[],
            logprobs=None,
            record={"turns": r.record.get("turns", 0)},
        )
        for r in rollouts
    ]
    return distributed.gather_to_all(trainer, light)


# ---------------------------------------------------------------------------------------------
# Hinted rollouts: importance-weighted against the policy that generated them
# ---------------------------------------------------------------------------------------------
def hint_aware_trainer(base: type, cfg: GRPORunConfig, stats: RolloutStats) -> type:
    """TRL's ``GRPOTrainer`` with one addition after it scores a generation batch: each
    row's ``hinted`` flag is kept as a tensor (``inputs["hinted"]`` in the loss, for tests
    and the log), and with ``hinted_rollouts: importance_weighted`` the hinted rows' tokens
    are weighted by the truncated ratio of :func:`hint_importance_weights`.

    Why an override: TRL corrects for a different behaviour policy only when vLLM generates
    (``vllm_importance_sampling_correction``). Its loss accepts per-token advantages
    ``(B, T)``, so the weight is folded into the advantage: with one generation per optimizer
    step the PPO ratio is 1 in value, so each token's gradient is
    ``weight * advantage * grad log pi_theta(token | hint-free prompt)``, the truncated
    importance-sampling estimate, and clipping acts on the ratio as usual."""
    import torch

    class HintAwareGRPOTrainer(base):  # type: ignore[misc, valid-type]
        def _generate_and_score_completions(self, inputs: list[dict]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            device = out["advantages"].device
            hinted = torch.tensor([bool(x.get("hinted")) for x in inputs], device=device)
            out["hinted"] = hinted
            if cfg.hinted_rollouts != "importance_weighted" or not bool(hinted.any()):
                return out
            weights = hint_importance_weights(self, out, hinted, cfg.hint_weight_cap)
            out["hint_weights"] = weights
            stats.add_hint_weights(weights[hinted], _loss_mask(out)[hinted])
            out["advantages"] = out["advantages"].unsqueeze(1) * weights
            return out

    return HintAwareGRPOTrainer


def _loss_mask(out: dict[str, Any]) -> Any:
    mask = out["completion_mask"]
    return mask * out["tool_mask"] if out.get("tool_mask") is not None else mask


def hint_importance_weights(trainer: Any, out: dict[str, Any], hinted: Any, cap: float) -> Any:
    """Per-token weights ``(B, T)``: 1 for hint-free rows (sampled from the trained policy)
    and for tokens outside the loss; for a hinted row's model tokens
    ``min(pi_theta(token | hint-free prompt) / pi_behaviour(token | hinted prompt), cap)``,
    the numerator from a forward pass of the current policy on the hint-free prompt, the
    denominator the probability recorded when the token was sampled. Per token, not per
    sequence: a product over hundreds of tokens would be all variance."""
    import torch

    behaviour = out.get("sampling_per_token_logps")
    if behaviour is None:
        raise RuntimeError("importance_weighted hinted rollouts need the behaviour logprobs")
    rows = hinted.nonzero().squeeze(1)
    prompt_ids, completion_ids = out["prompt_ids"][rows], out["completion_ids"][rows]
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([out["prompt_mask"][rows], out["completion_mask"][rows]], dim=1)
    with torch.no_grad():
        current, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            ids,
            attention,
            completion_ids.size(1),
            batch_size=trainer.args.per_device_train_batch_size,
        )
    mask = _loss_mask(out)[rows].bool()
    ratio = torch.exp((current - behaviour[rows]).clamp(max=30.0)).clamp(max=cap)
    weights = torch.ones_like(out["completion_mask"], dtype=current.dtype)
    weights[rows] = torch.where(mask, ratio, torch.ones_like(ratio))
    return weights


def held_out_eval(cfg: GRPORunConfig | Any, model: Any, tokenizer: Any, n: int) -> dict[str, Any]:
    """Greedy episodes on the ``eval`` split (seeds 0..n-1) at the run's start difficulty."""
    from trace_train.evaluate import evaluate_model

    return evaluate_model(model, tokenizer, cfg, episodes=n, split="eval")


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------
def train(cfg: GRPORunConfig, callbacks: list | None = None) -> GRPOResult:
    """Train one LoRA adapter on ``cfg.env_id`` with GRPO; resumable (see module docstring)."""
    from trace_train.quiet import quiet, silence_trl_notices, step_bar_only

    silence_trl_notices()
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOTrainer

    import trace_gym

    if cfg.env_id not in trace_gym.registered_ids():
        raise ValueError(f"unknown env id {cfg.env_id!r}; registered: {trace_gym.registered_ids()}")
    check_vllm(cfg)

    # -- 1. run folder and resolved config ------------------------------------------------------
    # Under several processes (accelerate launch) only the main one writes files.
    main = distributed.is_main()
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if main:
        save_config(cfg, out / "config.yaml")
    log_path = out / LOG_NAME
    last = get_last_checkpoint(str(out / "checkpoints")) if (out / "checkpoints").is_dir() else None
    resume_from = last if (cfg.resume and last) else None
    resumed_step = int(Path(resume_from).name.split("-")[-1]) if resume_from else 0
    # Lines after the checkpoint belong to steps that will run again: drop them.
    prior_rollouts = 0
    if main:
        prior_rollouts = truncate_log(log_path, resumed_step if resume_from else -1)

    # -- 2. base model, LoRA, tokenizer ---------------------------------------------------------
    model, tokenizer, lora = load_policy_model(cfg, out)

    # -- 3. task dataset: one row per group, the prompt is the task key -------------------------
    dataset = Dataset.from_dict({"prompt": task_keys(cfg)})

    # -- 4. multi-turn rollouts against the environment -----------------------------------------
    stats = RolloutStats(total=prior_rollouts, group_size=cfg.group_size)
    stats.hint_weight_cap = cfg.hint_weight_cap
    rollout_func = make_rollout_func(cfg, tokenizer, stats)

    # -- 5. the trainer ------------------------------------------------------------------------
    with quiet():
        trainer = hint_aware_trainer(GRPOTrainer, cfg, stats)(
            model=model,
            reward_funcs=verifier_reward,
            args=trl_config(cfg, out, ChatFormat(tokenizer).stop_ids),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora,
            rollout_func=rollout_func,
            callbacks=[TrainingLog(log_path, stats), *(callbacks or [])],
        )
    time_backward(trainer, stats)
    step_bar_only(trainer)
    policy = trainer.model
    if cfg.eval_episodes and not resume_from and main:
        _log_line(
            log_path,
            {
                "event": "eval_before",
                "step": 0,
                **held_out_eval(cfg, policy, tokenizer, cfg.eval_episodes),
            },
        )

    # -- 6. train (resuming restores adapter, optimizer, scheduler, RNG and data position) ------
    started = time.time()
    with quiet():  # the trainer's step progress bar stays
        trainer.train(resume_from_checkpoint=resume_from)
    seconds = time.time() - started

    # -- 7. save the adapter, the held-out result and the run metadata --------------------------
    adapter_dir = out / "adapter"
    if main:
        with quiet():
            policy.save_pretrained(adapter_dir)
            tokenizer.save_pretrained(adapter_dir)
        steps_run = trainer.state.global_step - resumed_step
        end = {
            "event": "train_end",
            "step": trainer.state.global_step,
            "seconds": round(seconds, 2),
        }
        end["seconds_per_step"] = round(seconds / max(1, steps_run), 3)
        if cfg.eval_episodes:
            end.update(held_out_eval(cfg, policy, tokenizer, cfg.eval_episodes))
        _log_line(log_path, end)
        meta = _metadata(cfg, adapter_dir, policy)
        (adapter_dir / "trace_train.json").write_text(json.dumps(meta, indent=2) + "\n")
    distributed.wait_for_everyone(trainer)  # no process returns before the adapter is written
    return GRPOResult(adapter_dir, log_path, trainer.state.global_step, policy)


def _metadata(cfg: GRPORunConfig, adapter_dir: Path, model: Any) -> dict[str, Any]:
    """``trace_train.json``: what the adapter is for, and where it came from
    (:func:`trace_train.provenance.run_record`: commit, seeds, the full config, the base
    model's and every adapter's hash, the precision of each phase, the machine)."""
    import trace_gym
    from trace_train import provenance
    from trace_train.embedded import resolve_model

    entry = next((e for e in trace_gym.load_registry() if e.id == cfg.env_id), None)
    adapters = {"adapter": adapter_dir}
    if cfg.init_adapter:
        adapters["init_adapter"] = cfg.init_adapter
    record = provenance.run_record(
        cfg,
        phase="grpo",
        base_model=resolve_model(cfg.model),
        adapters=adapters,
        dtypes=phase_dtypes(cfg, model),
        seeds={"run_seed": cfg.seed,
               "tasks": task_seeds.record("grpo", cfg.seed, cfg.steps * cfg.groups_per_step)},
    )  # fmt: skip
    return {
        "env_id": cfg.env_id,
        "capability": entry.capability if entry else None,
        "description": entry.description if entry else None,
        "base_model": cfg.model,
        "trained_with": "trace-train grpo",
        "hinted_rollouts": cfg.hinted_rollouts,
        "versions": record["machine"]["versions"],
        "provenance": record,
    }


def phase_dtypes(cfg: GRPORunConfig, model: Any) -> dict[str, str]:
    """The precision each phase of a GRPO run ran in: the stored weights, the update's
    forward and backward passes, and the rollouts' prompt encoding and decoding."""
    from trace_train.decoding import resolve_phase_dtypes

    weights = str(next(model.parameters()).dtype).removeprefix("torch.")
    if cfg.use_vllm:
        generation = {"prefill": "vllm", "decode": "vllm"}
    else:
        generation = resolve_phase_dtypes(cfg.prefill_dtype, cfg.decode_dtype, model.device)
    return {
        "weights": weights,
        "update": "bfloat16 autocast" if cfg.bf16 and weights == "float32" else weights,
        "rollout_prefill": generation["prefill"],
        "rollout_decode": generation["decode"],
    }


def _log_line(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
