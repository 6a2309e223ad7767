"""What happened in one episode: the calls made and the state verifiers and users read.

Its own module so that the engine (:mod:`~trace_gym.core.env`), which builds users, and the
scripted users (:mod:`~trace_gym.core.user`), which read the episode, both import it and not
each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_gym.world.model import World


@dataclass
class CallRecord:
    """One executed (or rejected) tool call."""

    turn: int
    index: int
    id: str
    name: str
    arguments: Any
    kind: str | None
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None
    changed_world: bool = False


@dataclass
class EpisodeState:
    """Everything that happened in one episode; verifiers read it, never write it."""

    task: Any
    initial_world: World
    world: World
    messages: list[dict[str, Any]]
    calls: list[CallRecord] = field(default_factory=list)
    agent_texts: list[tuple[int, str]] = field(default_factory=list)
    turn: int = 0
    end_reason: str | None = None
    error_counts: dict[str, int] = field(default_factory=dict)
    consecutive_error_turns: int = 0

    def successful(self, kind: str | None = None, name: str | None = None) -> list[CallRecord]:
        """Calls that ran without error, optionally of one tool kind or name."""
        return [
            c
            for c in self.calls
            if c.ok and (kind is None or c.kind == kind) and (name is None or c.name == name)
        ]

    @property
    def final_text(self) -> str:
        """The agent's last message to the user ('' if none)."""
        return self.agent_texts[-1][1] if self.agent_texts else ""
