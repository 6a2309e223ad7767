"""GRPO with a signal on a random model: hinted rollouts play the oracle's turns.

A random model never solves a task, so every reward would be 0 and GRPO would have no signal.
The hinted rollouts therefore play the oracle's turns (the tests' stand-in for "the hint
helps"): rewards differ within each group, advantages are non-zero and the LoRA must move,
provided the hinted rollouts train (``hinted_rollouts: importance_weighted``; the oracle, being
deterministic, reports a behaviour log-probability of 0 for its tokens). Under ``drop`` they
leave the update, and with it the only signal a random model has.
Shared by ``test_grpo.py`` and the processes ``test_distributed.py`` launches.
"""

from __future__ import annotations

import pytest
import torch

from tests.train.envtiny import ENV_ID
from trace_train import grpo
from trace_train.config import GRPORunConfig
from trace_train.rollout import action_text

HINT_MARKER = "expert_guidance"


def oracle_on_hinted_rows(tokenizer_holder: dict):
    """A stand-in for ``grpo.hf_generate``: sample as usual, but rows whose prompt carries the
    hint get the oracle's turn for the task (all rows of a group share the task)."""
    import gymnasium as gym

    real = grpo.hf_generate
    oracle_cache: dict[str, list[str]] = {}

    def factory(model, tokenizer, stop_ids, **kw):
        generate = real(model, tokenizer, stop_ids, **kw)
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")

        def wrapped(batch, max_new_tokens):
            outs = generate(batch, max_new_tokens)
            for i, prefix in enumerate(batch):
                text = tokenizer.decode(prefix)
                if HINT_MARKER not in text:
                    continue
                key = tokenizer_holder["key"]
                if key not in oracle_cache:
                    env = gym.make(ENV_ID, disable_env_checker=True)
                    spec = grpo.EpisodeSpec.from_key(key)
                    env.reset(seed=spec.task_seed, options={"difficulty": spec.difficulty})
                    oracle_cache[key] = [action_text(a) for a in env.unwrapped.oracle_actions()]
                # assistant headers so far, less the generation prompt's (a turn's tool
                # responses may be one message or several, so end markers do not count turns)
                turn = text.count("<|im_start|>assistant") - 1
                plan = oracle_cache[key]
                reply = plan[turn] if turn < len(plan) else "Done."
                ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [end]
                # the oracle is deterministic: its behaviour probability of each token is 1
                outs[i] = (ids, [0.0] * len(ids) if kw.get("with_logprobs") else None)
            tokenizer_holder.setdefault("generated", []).extend(tuple(o[0]) for o in outs)
            return outs

        return wrapped

    return factory


def train_with_oracle_hints(
    cfg: GRPORunConfig,
    callbacks: list,
    loss_inputs: list | None = None,
    generated: list | None = None,
):
    """``grpo.train`` with the hinted rollouts playing the oracle (so rewards differ within a
    group); ``loss_inputs``, when given, receives the tensors of every loss computation, and
    ``generated`` every model turn's token ids as generation returned them."""
    from trl import GRPOTrainer

    mp = pytest.MonkeyPatch()
    holder: dict = {} if generated is None else {"generated": generated}
    real_play = grpo.play_episodes
    real_loss = GRPOTrainer._compute_loss

    def play(generate, fmt, specs, **kw):
        holder["key"] = specs[0].key()
        return real_play(generate, fmt, specs, **kw)

    def compute_loss(self, model, inputs):
        if loss_inputs is not None:
            loss_inputs.append(
                {k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)}
            )
        return real_loss(self, model, inputs)

    mp.setattr(grpo, "hf_generate", oracle_on_hinted_rows(holder))
    mp.setattr(grpo, "play_episodes", play)
    mp.setattr(GRPOTrainer, "_compute_loss", compute_loss)
    try:
        return grpo.train(cfg, callbacks=callbacks)
    finally:
        mp.undo()
