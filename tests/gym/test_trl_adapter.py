"""Trainer adapters: dataset rows and the TRL environment_factory class.

The schema tests use the installed transformers' ``get_json_schema`` (what TRL renders tools
with) and, when TRL and torch are installed, a real ``GRPOTrainer`` built on a tiny model.
"""

from __future__ import annotations

import inspect
import json
import os

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.integrations.trl import CUSTOMER_TOOL, ENDED_MESSAGE, environment_class, generate

ENV = "trace/precondition-v0"


def _trl_tool_members(cls: type) -> list[str]:
    """The tool methods TRL collects from an environment class (grpo_trainer.py's rule)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def _play(instance: object, plan: list) -> None:
    for turn in plan:
        if isinstance(turn, str):
            getattr(instance, CUSTOMER_TOOL)(turn)
            continue
        for call in turn.get("tool_calls", [turn]):
            getattr(instance, call["name"])(**call["arguments"])


def test_generate_rows_rebuild_the_same_task() -> None:
    rows = generate(ENV, [3, 4], difficulty=0.7, split="eval")
    assert [r["seed"] for r in rows] == [3, 4]
    env = gym.make(ENV)
    _, info = env.reset(seed=3, options={"difficulty": 0.7, "split": "eval"})
    row = rows[0]
    assert row["task_hash"] == info["task_hash"] and row["task_id"] == info["task_id"]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prompt"][1]["content"] == info["messages"][1]["content"]
    assert {t["function"]["name"] for t in row["tools"]} == set(env.unwrapped.tools.names)
    json.dumps(rows)  # dataset rows are plain JSON
    assert rows[1]["task_hash"] != row["task_hash"]
    assert len(generate(ENV, 3)) == 3


def test_class_exposes_one_method_per_tool_and_is_cached() -> None:
    cls = environment_class(ENV)
    assert cls is environment_class(ENV)
    assert cls is not environment_class(ENV, reward_mode="binary")
    tools = trace_gym.make(ENV).unwrapped.tools.names
    assert sorted(_trl_tool_members(cls)) == sorted([*tools, CUSTOMER_TOOL])
    assert sorted(_trl_tool_members(environment_class(ENV, customer_tool=False))) == sorted(tools)
    inspect.signature(cls)  # TRL calls cls() with no arguments
    assert all(
        p.default is not inspect.Parameter.empty for p in inspect.signature(cls).parameters.values()
    )


def test_schemas_match_the_environment_tools() -> None:
    transformers_utils = pytest.importorskip(
        "transformers.utils", reason="the [train] extra (transformers) is not installed"
    )
    instance = environment_class(ENV)()
    own = {t["function"]["name"]: t["function"] for t in instance._env.tool_schemas()}
    for name in _trl_tool_members(type(instance)):
        schema = transformers_utils.get_json_schema(getattr(instance, name))["function"]
        if name == CUSTOMER_TOOL:
            assert schema["parameters"]["required"] == ["message"]
            continue
        expected = own[name]["parameters"]
        params = schema["parameters"]
        assert schema["description"] == own[name]["description"]
        assert sorted(params["required"]) == sorted(expected["required"])
        for arg, prop in expected["properties"].items():
            got = params["properties"][arg]
            assert got["type"] == prop["type"], (name, arg)
            assert got.get("enum") == prop.get("enum"), (name, arg)
            if prop["type"] == "array":
                assert got["items"] == prop["items"]


def test_reset_uses_the_row_and_the_oracle_earns_full_reward() -> None:
    cls = environment_class(ENV)
    rows = generate(ENV, [0, 1], difficulty=0.5)
    a, b = cls(), cls()
    assert a.get_order(order_id="O-1") == "No task yet: reset() must run before any tool call."
    assert a.reset(**rows[0]) is None  # the row's prompt already holds the task
    b.reset(**rows[0])
    assert a._env.episode.initial_world == b._env.episode.initial_world  # one task per group
    assert a.get_reward() == 0.0  # doing nothing scores 0
    assert "tool.precondition" in a.get_order(order_id="O-00000")  # errors come back as text
    env = gym.make(ENV)
    env.reset(seed=0, options={"difficulty": 0.5})
    _play(a, env.unwrapped.oracle_actions())
    assert a.get_reward() == 1.0
    assert a.get_customer(customer_id="C-00000") == ENDED_MESSAGE
    text = a.reset(seed=1, difficulty=0.5)  # a row without a prompt gets the task as text
    assert isinstance(text, str) and "Tracewell" in text and a.get_reward() == 0.0


def test_grpo_trainer_collects_the_tools(tmp_path) -> None:
    pytest.importorskip("trl", reason="the [train] extra (trl) is not installed")
    torch = pytest.importorskip("torch", reason="the [train] extra (torch) is not installed")
    datasets = pytest.importorskip("datasets", reason="the [train] extra (datasets) is missing")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    from trl import GRPOConfig, GRPOTrainer

    from trace_train.tiny import build_tiny_model_and_tokenizer

    build_tiny_model_and_tokenizer(tmp_path, seed=0, architecture="qwen3", chat_template="qwen3")
    rows = generate(ENV, 2)
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        report_to=[],
        use_cpu=True,
        max_steps=1,
    )
    cls = environment_class(ENV)
    trainer = GRPOTrainer(
        model=str(tmp_path),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        environment_factory=cls,
    )
    assert sorted(t.__name__ for t in trainer.tools) == sorted(_trl_tool_members(cls))
    assert cls.__name__ in trainer.reward_func_names  # get_reward became a reward source
    text = trainer.processing_class.apply_chat_template(
        rows[0]["prompt"], tools=trainer.tools, tokenize=False, add_generation_prompt=True
    )
    assert '"name": "return_order"' in text and '"enum": ["no_longer_needed"' in text
