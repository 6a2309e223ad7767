"""Trainer adapters: dataset rows for dataset-driven trainers and a TRL environment class.

* :func:`generate` turns seeds into dataset rows (prompt messages, tools, env id, seed,
  difficulty, split, task id, task hash), the columns a ``GRPOTrainer`` dataset needs.
* :func:`environment_class` builds a class for ``GRPOTrainer(environment_factory=...)``
  (TRL >= 1.x, transformers >= 5.2): a zero-argument constructor, ``reset(**row)`` that
  rebuilds the row's task from its ``seed`` / ``difficulty`` / ``split`` (so the rollouts of a
  GRPO group share one task), one public typed method per tool with a Google-style docstring
  (TRL renders its schema with ``transformers.utils.get_json_schema``), and ``get_reward()``,
  the environment's verification score computed on demand.

In TRL's tool loop the rollout ends when the model answers without a tool call, and the
environment never sees that answer. Environments whose scripted user must be talked to
(a clarifying question, a refusal the customer pushes back on) need a way to reach the
user inside the loop, so the class also has ``send_message_to_customer(message)`` (turn it
off with ``customer_tool=False``).

Example::

    from trl import GRPOTrainer
    from datasets import Dataset
    from trace_gym.integrations.trl import environment_class, generate

    rows = generate("trace/precondition-v0", seeds=range(256), difficulty=0.5)
    trainer = GRPOTrainer(model=..., train_dataset=Dataset.from_list(rows),
                          environment_factory=environment_class("trace/precondition-v0"))
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, Literal

import gymnasium as gym

from trace_gym.core.env import TraceEnv
from trace_gym.errors import ConfigError, TraceGymError
from trace_gym.primitives.seeding import check_difficulty, check_split
from trace_gym.primitives.tools import Tool
from trace_gym.registration import entry

ENDED_MESSAGE = "The conversation has ended; no further actions are possible."
NOT_STARTED_MESSAGE = "No task yet: reset() must run before any tool call."
CUSTOMER_TOOL = "send_message_to_customer"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}
_CLASS_CACHE: dict[tuple[str, str], type] = {}


# -- dataset rows ---------------------------------------------------------------------------
def generate(
    env_id: str,
    seeds: int | Iterable[int],
    difficulty: float = 0.5,
    split: str = "train",
    **make_kwargs: Any,
) -> list[dict[str, Any]]:
    """One dataset row per seed (``seeds`` may be a count: ``range(seeds)``).

    Row columns: ``prompt`` (system prompt and the customer's opening, OpenAI messages),
    ``tools`` (OpenAI function schemas), ``env_id``, ``capability``, ``seed``, ``difficulty``,
    ``split``, ``task_id``, ``task_hash``. The row is all that ``reset(**row)`` of
    :func:`environment_class` needs to rebuild the same task.
    """
    entry(env_id)
    difficulty, split = check_difficulty(difficulty), check_split(split)
    seed_list = range(seeds) if isinstance(seeds, int) else [int(s) for s in seeds]
    env = gym.make(env_id, disable_env_checker=True, **make_kwargs)
    rows = []
    try:
        for seed in seed_list:
            _, info = env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
            rows.append(
                {
                    "prompt": [dict(m) for m in info["messages"]],
                    "tools": info["tools"],
                    "env_id": env_id,
                    "capability": info["capability"],
                    "seed": int(seed),
                    "difficulty": difficulty,
                    "split": split,
                    "task_id": info["task_id"],
                    "task_hash": info["task_hash"],
                }
            )
    finally:
        env.close()
    return rows


# -- tool methods ---------------------------------------------------------------------------
def _python_type(schema: dict[str, Any]) -> Any:
    """The type hint whose ``get_json_schema`` rendering matches a JSON schema property."""
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if kind == "array":
        return list[_python_type(schema.get("items") or {"type": "string"})]
    if isinstance(kind, str) and kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    raise ConfigError(f"cannot type a tool argument with schema {schema!r}")


def _docstring(description: str, properties: dict[str, Any]) -> str:
    lines = [description.strip() or "Call this tool."]
    if properties:
        lines += ["", "Args:"]
        for name, prop in properties.items():
            text = " ".join(str(prop.get("description") or name.replace("_", " ")).split())
            lines.append(f"    {name}: {text}")
    lines += ["", "Returns:", "    The tool result as JSON, or an error to recover from."]
    return "\n".join(lines)


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method ``name(self, arg: type, ...) -> str`` that runs ``tool`` in the episode."""
    properties: dict[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", list(properties)))
    bad = [n for n in [tool.name, *properties] if not _IDENTIFIER.match(n)]
    if bad:
        raise ConfigError(f"tool {tool.name!r}: {bad} are not Python identifiers")
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    # Python wants required parameters first; optional ones default to None (left out).
    ordered = sorted(properties, key=lambda n: n not in required)
    for name in ordered:
        hint = _python_type(properties[name])
        default = inspect.Parameter.empty
        if name not in required:
            hint, default = hint | None, None
        annotations[name] = hint
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
            )
        )

    def method(self: Any, **arguments: Any) -> str:
        given = {k: v for k, v in arguments.items() if v is not None or k in required}
        return self._call_tool(tool.name, given)

    method.__name__ = method.__qualname__ = tool.name
    method.__doc__ = _docstring(tool.description, properties)
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    return method


def _customer_method() -> Callable[..., str]:
    """The ``send_message_to_customer`` method (named as TRL will key it: ``__name__``)."""

    def send_message_to_customer(self, message: str) -> str:  # noqa: ANN001  (see below)
        """Send a message to the customer (a question, a confirmation, an outcome); get the reply.

        Args:
            message: What to tell or ask the customer.

        Returns:
            The customer's reply.
        """
        # `self` stays unannotated: get_json_schema only drops an unannotated receiver.
        return self._talk(message)

    return send_message_to_customer


# -- the environment class ----------------------------------------------------------------
class TraceGymTRLEnv:
    """Base of the generated classes: one trace_gym episode per ``reset`` (see the module
    docstring). Subclasses set ``env_id`` and ``make_kwargs``; tools are added as methods."""

    env_id: str = ""
    make_kwargs: dict[str, Any] = {}

    def __init__(self) -> None:
        self._gym = gym.make(self.env_id, disable_env_checker=True, **self.make_kwargs)
        self._env: TraceEnv = self._gym.unwrapped  # type: ignore[assignment]
        self._started = False

    def reset(self, **row: Any) -> str | None:
        """Start the row's task. Uses the row's ``seed``, ``difficulty`` and ``split``.

        Returns None when the row carries a ``prompt`` (the dataset already holds the system
        prompt and the customer's opening), else the system prompt and opening as text.
        """
        options: dict[str, Any] = {}
        for key in ("difficulty", "split"):
            if row.get(key) is not None:
                options[key] = row[key]
        seed = row.get("seed")
        _, info = self._gym.reset(seed=None if seed is None else int(seed), options=options)
        self._started = True
        if row.get("prompt"):
            return None
        return f"{info['system_prompt']}\n\n{info['messages'][-1]['content']}"

    def get_reward(self) -> float:
        """The verification score of the episode as it stands (the reward mode applies)."""
        if not self._started:
            return 0.0
        return float(self._env.verification().reward(self._env.reward_mode))

    @property
    def info(self) -> dict[str, Any]:
        """The verification of the episode so far, as in ``info["verification"]``."""
        return self._env.verification().to_dict()

    def _step(self, action: Any) -> list[dict[str, Any]] | str:
        if not self._started:
            return NOT_STARTED_MESSAGE
        before = len(self._env.episode.messages)
        try:
            self._gym.step(action)
        except TraceGymError:  # the episode is over (a terminal tool, the turn limit)
            return ENDED_MESSAGE
        return self._env.episode.messages[before + 1 :]

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        new = self._step({"name": name, "arguments": arguments})
        if isinstance(new, str):
            return new
        out = [m["content"] for m in new if m["role"] == "tool"]
        out += [m["content"] for m in new if m["role"] == "system"]  # error notes
        if self._env.episode.end_reason is not None:
            out.append(ENDED_MESSAGE)
        return "\n".join(out)

    def _talk(self, message: str) -> str:
        new = self._step(message)
        if isinstance(new, str):
            return new
        out = [m["content"] for m in new if m["role"] in ("user", "system")]
        if self._env.episode.end_reason is not None:
            out.append(ENDED_MESSAGE)
        return "\n".join(out) or "(no reply)"


def environment_class(env_id: str, *, customer_tool: bool = True, **make_kwargs: Any) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` playing ``env_id``.

    ``make_kwargs`` go to ``gym.make`` (``reward_mode``, ``max_turns``, ...). The same
    arguments give the same class (TRL names the reward column after it).
    """
    registry_row = entry(env_id)
    key = (env_id, json.dumps([customer_tool, make_kwargs], sort_keys=True, default=str))
    if key in _CLASS_CACHE:
        return _CLASS_CACHE[key]
    probe = gym.make(env_id, disable_env_checker=True, **make_kwargs).unwrapped
    namespace: dict[str, Any] = {
        "env_id": env_id,
        "make_kwargs": dict(make_kwargs),
        "__doc__": f"{env_id} for TRL's environment_factory: {registry_row.description}",
        "__module__": __name__,
    }
    for tool in probe.tools:
        if tool.name in namespace or hasattr(TraceGymTRLEnv, tool.name):
            raise ConfigError(f"{env_id}: tool name {tool.name!r} clashes with the adapter")
        namespace[tool.name] = _tool_method(tool)
    if customer_tool:
        namespace[CUSTOMER_TOOL] = _customer_method()
    stem = "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", env_id) if p)
    cls = type(f"{stem}Env", (TraceGymTRLEnv,), namespace)
    _CLASS_CACHE[key] = cls
    return cls
