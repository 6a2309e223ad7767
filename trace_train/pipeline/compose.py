"""The compose stage of ``trace run``: per-task routing and the token-level mixture.

Both read the adapters the train stage produced. The mixture's router is trained on oracle
episodes of each adapter's own environment (train split), tokenized exactly as the model sees
them in rollouts and labelled with that adapter: the "rollouts labelled by the environment
they came from" of the router recipe (``trace_train.compose.router_training``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trace_gym
from trace_gym.registration import entry
from trace_train.quiet import quiet


def describe(capability: str, env_id: str) -> str:
    """The routing description of an adapter: the capability and its environment's purpose."""
    return f"{capability.replace('_', ' ')}: {entry(env_id).description}"


def build_routed(run: Any, adapters: dict[str, dict[str, str]]) -> Path:
    """Write a per-task routed policy folder (``routed:DIR``)."""
    from trace_train.compose.routing import RoutedExpert, RoutingConfig, save_routed

    experts = [
        RoutedExpert(cap, info["adapter"], describe(cap, info["env_id"]))
        for cap, info in adapters.items()
    ]
    return save_routed(RoutingConfig(run.base_model, experts), run.path("compose", "routed"))


def router_sequences(run: Any, adapters: dict[str, dict[str, str]], tokenizer: Any) -> list:
    """Oracle episodes of each adapter's environment, labelled with that adapter."""
    from trace_train.compose.router_training import LabelledSequence
    from trace_train.config import WarmstartConfig
    from trace_train.rollout import ChatFormat
    from trace_train.warmstart import demonstrations

    cfg = run.config
    fmt = ChatFormat(tokenizer)
    sequences = []
    for cap, info in adapters.items():
        demo_cfg = WarmstartConfig(
            model=run.base_model,
            env_id=info["env_id"],
            demonstrations=cfg.router_sequences,
            max_turns=max(cfg.max_turns, 12),
            max_new_tokens=cfg.max_new_tokens,
            tool_prompt=cfg.tool_prompt,
            seed=7,  # different task seeds from the warm start's
        )
        for row in demonstrations(demo_cfg, fmt):
            sequences.append(LabelledSequence(row["input_ids"], cap))
    return sequences


def build_moe(run: Any, adapters: dict[str, dict[str, str]]) -> tuple[Path, float]:
    """Attach the adapters as frozen experts, train the routers, save (``moe:DIR``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.compose.moe import ExpertSpec, MoEConfig, attach_experts, moe_state, save_moe
    from trace_train.compose.router_training import RouterTrainingConfig, train_routers

    base = run.base_model
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
    sequences = router_sequences(run, adapters, tokenizer)
    result = train_routers(model, sequences, RouterTrainingConfig(steps=run.config.router_steps))
    moe_state(model).config.stats.update(
        {
            "router_training_accuracy": result.accuracy,
            "router_sequences": len(sequences),
            "trace_gym_version": trace_gym.__version__,
        }
    )
    out = save_moe(model, run.path("compose", "moe"), tokenizer=tokenizer)
    return Path(out), float(result.accuracy.get("mean", 0.0))


def routing_check(run: Any, adapters: dict[str, dict[str, str]], routed_dir: Path) -> dict:
    """Per-task routing accuracy on held-out tasks of the adapters' own environments (whose
    capability is known); written to ``compose/routing_check.json`` for the report."""
    import json

    from trace_train.compose.routing import load_routed, task_routing_accuracy
    from trace_train.rollout import make_env

    n = run.config.routing_check_tasks
    if n <= 0:
        return {}
    tasks = []
    for cap, info in adapters.items():
        env = make_env(
            info["env_id"],
            max_turns=None,
            reward_mode="partial",
            env_kwargs={},
            tool_prompt=run.config.tool_prompt,
        )
        for seed in range(n):
            _, obs_info = env.reset(seed=seed, options={"split": "eval"})
            tasks.append((obs_info["messages"][:2], cap))
        env.close()
    result = task_routing_accuracy(load_routed(routed_dir), tasks)
    result["tasks"] = len(tasks)
    run.path("compose", "routing_check.json").write_text(json.dumps(result, indent=2))
    return result
