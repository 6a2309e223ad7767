"""Policies that play trace_gym episodes, parsed from one string.

=================================  =========================================================
spec                               policy
=================================  =========================================================
``hf:PATH``                        a local (or cached hub) causal LM, batched ``generate``
``hf:PATH+adapter:DIR``            the same model with one PEFT adapter
``embedded``                       the embedded SmolLM2 (see :mod:`trace_train.embedded`)
``moe:DIR`` / ``routed:DIR``       a token-level LoRA mixture / a task-routed adapter set
``litellm:provider/model``         any model litellm can call (OpenAI-format tools)
``oracle``, ``null``, ``random:S``  trace_gym's scripted agents (``agent:NAME`` also works)
``call_every_tool``
=================================  =========================================================

Model policies play through :mod:`trace_train.rollout`, the engine GRPO trains with, so an
adapter is evaluated on exactly the text format it was trained on. Agent policies (scripted,
litellm) play through ``trace_gym.run_episode``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trace_train.rollout import (
    ChatFormat,
    EpisodeSpec,
    ServedEnvs,
    hf_generate,
    make_env,
    play_episodes,
)

SCRIPTED = ("oracle", "null", "random", "call_every_tool", "deficit", "spam")


class PolicyError(ValueError):
    """A policy spec could not be parsed or loaded."""


@dataclass
class PlaySettings:
    """Generation limits shared by every policy."""

    max_turns: int | None = None
    max_new_tokens: int = 192
    max_completion_tokens: int = 2048
    temperature: float = 0.0
    reward_mode: str = "partial"
    batch_size: int = 8
    tool_prompt: str = "hermes"
    prefill_dtype: str = "auto"
    decode_dtype: str = "auto"
    env_urls: list[str] = field(default_factory=list)
    """``trace-gym serve`` endpoints model policies play on (empty: in process)."""


class ModelPolicy:
    """A causal LM (optionally with adapters) playing batches of episodes."""

    def __init__(self, model: Any, tokenizer: Any, name: str) -> None:
        self.model, self.tokenizer, self.name = model, tokenizer, name
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.fmt = ChatFormat(tokenizer)

    def play(self, specs: Sequence[EpisodeSpec], settings: PlaySettings) -> list[dict[str, Any]]:
        generate = hf_generate(
            self.model,
            self.tokenizer,
            self.fmt.stop_ids,
            temperature=settings.temperature,
            prefill_dtype=settings.prefill_dtype,
            decode_dtype=settings.decode_dtype,
        )
        rollouts = play_episodes(
            generate,
            self.fmt,
            specs,
            max_turns=settings.max_turns,
            max_new_tokens=settings.max_new_tokens,
            max_completion_tokens=settings.max_completion_tokens,
            reward_mode=settings.reward_mode,
            agent_name=self.name,
            tool_prompt=settings.tool_prompt,
            served=ServedEnvs(settings.env_urls) if settings.env_urls else None,
        )
        return [r.record for r in rollouts]


class AgentPolicy:
    """An agent object (``reset``/``act``) playing one episode at a time."""

    batch_size = 1

    def __init__(self, make_agent: Any, name: str, tool_prompt: str = "none") -> None:
        self.make_agent, self.name, self.tool_prompt = make_agent, name, tool_prompt

    def play(self, specs: Sequence[EpisodeSpec], settings: PlaySettings) -> list[dict[str, Any]]:
        import trace_gym

        records = []
        for spec in specs:
            env = make_env(
                spec.env_id,
                max_turns=settings.max_turns,
                reward_mode=settings.reward_mode,
                env_kwargs={"tool_prompt": self.tool_prompt},
            )
            options = {"difficulty": spec.difficulty, "split": spec.split, "hint": False}
            record = trace_gym.run_episode(
                env, self.make_agent(), seed=spec.task_seed, options=options
            )
            record["agent"] = self.name
            records.append(record)
            env.close()
        return records


class LiteLLMAgent:
    """Calls ``litellm.completion`` with the episode's OpenAI-format messages and tools."""

    def __init__(self, model: str, temperature: float, max_tokens: int) -> None:
        self.name = f"litellm:{model}"
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens

    def reset(self, env: Any, obs: str, info: dict[str, Any]) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any]) -> dict[str, Any]:
        import litellm  # lazy: 3-5 s import, network-free with LITELLM_LOCAL_MODEL_COST_MAP

        response = litellm.completion(
            model=self.model,
            messages=info["messages"],
            tools=info["tools"] or None,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        message = response.choices[0].message
        out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        calls = getattr(message, "tool_calls", None) or []
        if calls:
            out["tool_calls"] = [
                {
                    "id": c.id or f"call_{i}",
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for i, c in enumerate(calls)
            ]
        return out


def load_hf(path: str, adapter: str | None = None) -> tuple[Any, Any]:
    """A model (with an optional PEFT adapter) and its tokenizer, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.embedded import resolve_model
    from trace_train.quiet import quiet

    path = resolve_model(path)
    # On a GPU in bfloat16 (as GRPO trains there); on a CPU float32 decodes faster.
    gpu = torch.cuda.is_available()
    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(adapter if _has_tokenizer(adapter) else path)
        tokenizer.padding_side = "left"
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.bfloat16 if gpu else torch.float32
        )
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter)
    return model.to("cuda" if gpu else "cpu").eval(), tokenizer


def _has_tokenizer(folder: str | None) -> bool:
    from pathlib import Path

    return bool(folder) and (Path(folder) / "tokenizer_config.json").is_file()


def parse_policy(spec: str, settings: PlaySettings | None = None) -> ModelPolicy | AgentPolicy:
    """Build a policy from its spec string (table in the module docstring)."""
    settings = settings or PlaySettings()
    kind, _, rest = spec.partition(":")
    if spec == "embedded" or kind == "embedded":
        model, tok = load_hf(spec)
        return ModelPolicy(model, tok, spec)
    if kind == "hf":
        if not rest:
            raise PolicyError("hf: needs a path, e.g. hf:runs/base or hf:BASE+adapter:DIR")
        path, _, adapter = rest.partition("+adapter:")
        model, tok = load_hf(path, adapter or None)
        return ModelPolicy(model, tok, spec)
    if kind in ("moe", "routed"):
        return _composed(kind, rest, spec)
    if kind == "litellm":
        if "/" not in rest:
            raise PolicyError(f"{spec!r}: litellm models are written provider/model")
        return AgentPolicy(
            lambda: LiteLLMAgent(rest, settings.temperature, settings.max_new_tokens), spec
        )
    name = rest if kind == "agent" else spec
    if name.partition(":")[0] in SCRIPTED:
        from trace_gym.agents import make_agent

        make_agent(name)  # fail now on a bad spec, not in the middle of a run
        return AgentPolicy(lambda: make_agent(name), name)
    raise PolicyError(
        f"unknown policy {spec!r}; use hf:PATH, hf:PATH+adapter:DIR, embedded, moe:DIR, "
        f"routed:DIR, litellm:provider/model, or one of {', '.join(SCRIPTED[:5])}"
    )


def _composed(kind: str, folder: str, spec: str) -> ModelPolicy:
    """``moe:DIR`` through ``trace_train.compose.moe.load_moe``, ``routed:DIR`` through
    ``trace_train.compose.routing.load_routed`` (both written by the composition stage)."""
    if kind == "routed":
        from trace_train.compose.routing import load_routed

        return RoutedModelPolicy(load_routed(folder), spec)
    from trace_train.compose.moe import load_moe

    model, tokenizer = load_moe(folder)
    tokenizer.padding_side = "left"
    return ModelPolicy(model, tokenizer, spec)


class RoutedModelPolicy(ModelPolicy):
    """Task-level routing: the routed policy picks one adapter per task from the task's opening
    messages; episodes that share an adapter are played as one batch."""

    def __init__(self, routed: Any, name: str) -> None:
        routed.tokenizer.padding_side = "left"
        super().__init__(routed.model, routed.tokenizer, name)
        self.routed = routed

    def play(self, specs: Sequence[EpisodeSpec], settings: PlaySettings) -> list[dict[str, Any]]:
        by_adapter: dict[str | None, list[int]] = {}
        for i, spec in enumerate(specs):
            env = make_env(
                spec.env_id,
                max_turns=settings.max_turns,
                reward_mode=settings.reward_mode,
                env_kwargs={},
                tool_prompt=settings.tool_prompt,
            )
            _, info = env.reset(
                seed=spec.task_seed, options={"difficulty": spec.difficulty, "split": spec.split}
            )
            env.close()
            by_adapter.setdefault(self.routed.choose_adapter(info["messages"]), []).append(i)
        records: list[dict[str, Any]] = [{}] * len(specs)
        for adapter, idx in by_adapter.items():
            self.routed.activate(adapter)
            for i, record in zip(idx, super().play([specs[i] for i in idx], settings), strict=True):
                records[i] = {**record, "routed_adapter": adapter}
        return records


def describe(policy: ModelPolicy | AgentPolicy) -> str:
    """A short JSON description for summaries."""
    return json.dumps({"name": policy.name, "kind": type(policy).__name__})
