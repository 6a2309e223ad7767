"""The agent that plays a fixed list of assistant turns: the base of the oracle and of the
deficit agents (a module of its own so that :mod:`~trace_gym.agents.baselines`, which builds
deficit agents, and :mod:`~trace_gym.agents.deficit`, which extends it, import it one way)."""

from __future__ import annotations

from typing import Any

from trace_gym.core.env import TraceEnv


class PlanAgent:
    """Plays a fixed list of assistant turns, then says goodbye until the episode ends."""

    def __init__(self, plan: list[Any], name: str = "plan") -> None:
        self.plan = list(plan)
        self.name = name
        self._next = 0

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self._next = 0

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        self._next += 1
        if self._next <= len(self.plan):
            return self.plan[self._next - 1]
        return "Is there anything else I can help you with?"
