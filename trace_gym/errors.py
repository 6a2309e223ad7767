"""Errors of two kinds, kept apart on purpose.

* **Agent mistakes** never raise. They become an :class:`ActionError` with a stable
  :class:`ErrorCode`, are returned to the agent as the tool result so it can recover, and are
  recorded in ``info["error"]``. Trainers and the diagnoser key on these codes, so a code is
  never renamed within a major version.
* **Developer mistakes** (an unknown environment id, a bad config value, a missing extra) raise
  a :class:`TraceGymError` subclass whose message quotes the bad value and says what to do.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    """Stable codes for everything an agent can get wrong in one turn."""

    INVALID_JSON = "parse.invalid_json"
    """A JSON action or a ``<tool_call>`` block that is not valid JSON."""
    UNCLOSED_BLOCK = "parse.unclosed_block"
    """A ``<tool_call>`` block opened and never closed."""
    INVALID_SHAPE = "parse.invalid_shape"
    """Valid JSON, or a dict, that is not an assistant message or a tool call."""
    EMPTY_ACTION = "parse.empty_action"
    """Nothing but whitespace."""
    TOO_DEEP = "parse.too_deep"
    """JSON (or an action object) nested deeper than the parser accepts."""
    TOO_LARGE = "parse.too_large"
    """JSON text, a number literal, or a count of tool calls beyond the parser's bounds."""
    UNKNOWN_TOOL = "tool.unknown"
    """A call to a tool this environment does not have."""
    SCHEMA = "tool.schema"
    """Arguments that do not match the tool's JSON schema."""
    PRECONDITION = "tool.precondition"
    """The world refused the call (e.g. cancelling an order that is already cancelled)."""
    TURN_LIMIT = "turn.limit"
    """The episode ran out of turns before it ended."""


@dataclass(frozen=True)
class ActionError:
    """One agent mistake: a stable code, a message for the agent, where it happened."""

    code: ErrorCode
    message: str
    tool: str | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.tool is not None:
            out["tool"] = self.tool
        if self.path is not None:
            out["path"] = self.path
        return out


class TraceGymError(Exception):
    """Base class for developer-facing errors in trace_gym."""


class UnknownEnvError(TraceGymError, KeyError):
    """An environment id that no registry lists."""

    def __init__(self, env_id: str, known: list[str]) -> None:
        close = difflib.get_close_matches(env_id, known, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        super().__init__(
            f"unknown environment id {env_id!r}.{hint} Run `trace-gym list` for all ids."
        )
        self.env_id = env_id

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class ConfigError(TraceGymError, ValueError):
    """A configuration value out of range or of the wrong type."""


class RegistryError(TraceGymError, ValueError):
    """A malformed registry file, or an entry point that is not its id's spec."""


class EpisodeLogError(TraceGymError, ValueError):
    """An episode log line that cannot be read or replayed."""
