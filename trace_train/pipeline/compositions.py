"""What the compose stage of ``trace run`` builds from the run's adapters, with the
composition library ``trace_train.compose``: the per-task routed policy, the token-level
mixture, and the per-task router's accuracy check.

The mixture's router is trained on oracle episodes of each adapter's own environment (train
split), tokenized exactly as the model sees them in rollouts and labelled with that adapter:
the "rollouts labelled by the environment they came from" of the router recipe
(``trace_train.compose.router_training``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trace_gym
from trace_gym.registration import entry
from trace_train.quiet import quiet

Adapters = dict[str, dict[str, str]]
"""Capability -> ``{"adapter": folder, "env_id": environment it was trained on}``."""


def describe(capability: str, env_id: str) -> str:
    """The routing description of an adapter: the capability and its environment's purpose."""
    return f"{capability.replace('_', ' ')}: {entry(env_id).description}"


def build_routed(base_model: str, adapters: Adapters, out: Path) -> Path:
    """Write a per-task routed policy folder (``routed:DIR``)."""
    from trace_train.compose.routing import RoutedExpert, RoutingConfig, save_routed

    experts = [
        RoutedExpert(cap, info["adapter"], describe(cap, info["env_id"]))
        for cap, info in adapters.items()
    ]
    return save_routed(RoutingConfig(base_model, experts), out)


def router_sequences(
    base_model: str,
    adapters: Adapters,
    tokenizer: Any,
    *,
    per_adapter: int,
    max_turns: int,
    max_new_tokens: int,
    tool_prompt: str,
) -> list:
    """``per_adapter`` oracle episodes of each adapter's environment, labelled with that
    adapter."""
    from trace_train.compose.router_training import LabelledSequence
    from trace_train.config import WarmstartConfig
    from trace_train.rollout import ChatFormat
    from trace_train.warmstart import demonstrations

    fmt = ChatFormat(tokenizer)
    sequences = []
    for cap, info in adapters.items():
        demo_cfg = WarmstartConfig(
            model=base_model,
            env_id=info["env_id"],
            demonstrations=per_adapter,
            max_turns=max(max_turns, 12),  # an oracle needs its turns; the router sees them all
            max_new_tokens=max_new_tokens,
            tool_prompt=tool_prompt,
            seed=7,  # different task seeds from the warm start's
        )
        for row in demonstrations(demo_cfg, fmt):
            sequences.append(LabelledSequence(row["input_ids"], cap))
    return sequences


def build_moe(
    base_model: str,
    adapters: Adapters,
    out: Path,
    *,
    router_sequences_per_adapter: int,
    router_steps: int,
    max_turns: int,
    max_new_tokens: int,
    tool_prompt: str,
) -> tuple[Path, float]:
    """Attach the adapters as frozen experts, train the routers on oracle episodes of their
    environments, save (``moe:DIR``); returns the folder and the router's mean accuracy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.compose.moe import ExpertSpec, MoEConfig, attach_experts, moe_state, save_moe
    from trace_train.compose.router_training import RouterTrainingConfig, train_routers

    base = base_model
    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base)
    experts = [
        ExpertSpec(
            name=cap,
            adapter_dir=info["adapter"],
            description=describe(cap, info["env_id"]),
            capability=cap,
        )
        for cap, info in adapters.items()
    ]
    with quiet():
        attach_experts(model, MoEConfig(base, experts))
    sequences = router_sequences(
        base,
        adapters,
        tokenizer,
        per_adapter=router_sequences_per_adapter,
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        tool_prompt=tool_prompt,
    )
    result = train_routers(model, sequences, RouterTrainingConfig(steps=router_steps))
    moe_state(model).config.stats.update(
        {
            "router_training_accuracy": result.accuracy,
            "router_sequences": len(sequences),
            "trace_gym_version": trace_gym.__version__,
        }
    )
    saved = save_moe(model, out, tokenizer=tokenizer)
    return Path(saved), float(result.accuracy.get("mean", 0.0))


def routing_check(
    adapters: Adapters, routed_dir: Path, *, tasks_per_adapter: int, tool_prompt: str, out: Path
) -> dict:
    """Per-task routing accuracy on ``tasks_per_adapter`` held-out tasks of each adapter's own
    environment (whose capability is known); written to ``out`` for the report."""
    from trace_train.compose.routing import load_routed, task_routing_accuracy
    from trace_train.rollout import make_env

    n = tasks_per_adapter
    if n <= 0:
        return {}
    tasks = []
    for cap, info in adapters.items():
        env = make_env(
            info["env_id"],
            max_turns=None,
            reward_mode="partial",
            env_kwargs={},
            tool_prompt=tool_prompt,
        )
        for seed in range(n):
            _, obs_info = env.reset(seed=seed, options={"split": "eval"})
            tasks.append((obs_info["messages"][:2], cap))
        env.close()
    result = task_routing_accuracy(load_routed(routed_dir), tasks)
    result["tasks"] = len(tasks)
    out.write_text(json.dumps(result, indent=2))
    return result
