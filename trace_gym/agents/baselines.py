"""Model-free agents: the oracle and plans (upper bound), and baselines that must fail.

An agent is anything with ``name``, ``reset(env, obs, info)`` and ``act(obs, info) -> action``.
Agents receive the unwrapped environment at reset so the oracle can read its task; the
baselines only look at observations, like a model would.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from trace_gym.agents.plan import PlanAgent
from trace_gym.core.env import TraceEnv
from trace_gym.primitives.seeding import StableRNG, derive_seed

ID_PATTERN = re.compile(r"\b(?:C|O|R|PM|I|GC|CERT|F)-[A-Z0-9]+(?:-\d+)?\b")
"""Record ids as the customer-service world writes them (C-01234, O-12345, R-4F2K1Q, ...)."""


class Agent(Protocol):
    name: str

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None: ...

    def act(self, obs: str, info: dict[str, Any]) -> Any: ...


class OracleAgent(PlanAgent):
    """Plays the environment's oracle solution for the current task."""

    def __init__(self) -> None:
        super().__init__([], name="oracle")

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.plan = env.oracle_actions()
        self._next = 0


class NullAgent:
    """Does nothing useful: only talks, never calls a tool."""

    name = "null"

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        return "I'm sorry, I can't help with that."


ID_PREFIXES = {
    "customer_id": "C-",
    "order_id": "O-",
    "reservation_id": "R-",
    "payment_method_id": "PM-",
    "item_id": "I-",
    "item_ids": "I-",
}


def arguments_from_schema(
    schema: dict[str, Any], rng: StableRNG, ids: list[str], name: str = ""
) -> Any:
    """Plausible arguments for a JSON schema: for an argument named like ``order_id`` an id of
    that kind seen so far, enum members, small numbers, ..."""
    kind = schema.get("type")
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if kind == "object":
        props = schema.get("properties", {})
        return {k: arguments_from_schema(v, rng, ids, k) for k, v in props.items()}
    prefix = ID_PREFIXES.get(name)
    if prefix is not None and kind == "array":
        matching = [i for i in ids if i.startswith(prefix)]
        return matching or [rng.token("0123456789", 5)]
    if kind == "array":
        n = max(int(schema.get("minItems", 1)), 1)
        return [arguments_from_schema(schema.get("items", {}), rng, ids) for _ in range(n)]
    if kind == "integer":
        return rng.integer(int(schema.get("minimum", 0)), int(schema.get("maximum", 10)))
    if kind == "number":
        return round(rng.integer(0, 50000) / 100, 2)
    if kind == "boolean":
        return rng.bernoulli(0.5)
    matching = [i for i in ids if prefix is not None and i.startswith(prefix)]
    if matching:
        return rng.choice(matching)
    if ids and rng.bernoulli(0.8):
        return rng.choice(ids)
    return rng.token("abcdefghijklmnopqrstuvwxyz", rng.integer(1, 8))


class _ObservingAgent:
    """Collects record ids from everything the agent has seen."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.tools: list[dict[str, Any]] = []

    def _observe(self, text: str) -> None:
        for found in ID_PATTERN.findall(text):
            if found not in self.ids:
                self.ids.append(found)


class RandomAgent(_ObservingAgent):
    """Each turn: random text, or a random tool with plausible random arguments (seeded)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        self.rng = StableRNG(seed)

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.rng = StableRNG(derive_seed("random-agent", self.seed, info["task_seed"]))
        self.ids, self.tools = [], info["tools"]
        self._observe(obs)

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        self._observe(obs)
        if not self.tools or self.rng.bernoulli(0.25):
            return self.rng.choice(("ok", "Let me check.", "Done!", "Could you repeat that?"))
        fn = self.rng.choice(self.tools)["function"]
        args = arguments_from_schema(fn["parameters"], self.rng, self.ids)
        return {"name": fn["name"], "arguments": args}


class CallEveryToolAgent(_ObservingAgent):
    """Calls every tool once (arguments from the ids in the request), then says it is done."""

    name = "call_every_tool"

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.ids, self.tools = [], info["tools"]
        self._observe(obs)
        self._done = False

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        self._observe(obs)
        if self._done:
            return "All done."
        self._done = True
        rng = StableRNG(derive_seed("call-every-tool", info["task_seed"]))
        calls = []
        for tool in self.tools:
            fn = tool["function"]
            calls.append(
                {
                    "name": fn["name"],
                    "arguments": arguments_from_schema(fn["parameters"], rng, self.ids),
                }
            )
        return {"tool_calls": calls}


def make_agent(spec: str) -> Agent:
    """An agent from a short spec: ``oracle``, ``null``, ``random[:SEED]``, ``call_every_tool``,
    or ``deficit:CAP=P,CAP=P[:SEED]`` (a competent agent that lapses in those capabilities)."""
    name, _, arg = spec.partition(":")
    if name == "deficit":
        from trace_gym.agents.deficit import deficit_agent_from_spec

        return deficit_agent_from_spec(spec)
    if name == "oracle":
        return OracleAgent()
    if name == "null":
        return NullAgent()
    if name == "random":
        return RandomAgent(int(arg or 0))
    if name in ("call_every_tool", "spam"):
        return CallEveryToolAgent()
    raise ValueError(
        f"unknown agent {spec!r}; use oracle, null, random[:SEED], call_every_tool or "
        "deficit:CAP=P,...[:SEED]"
    )
