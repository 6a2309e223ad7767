"""The wire format of a served environment, shared by the server and the clients.

The protocol is OpenEnv's, the payloads are trace_gym's:

* action (:class:`TraceAction`): ``{"turn": ...}`` where ``turn`` is exactly what
  ``env.step`` accepts (a string, an assistant-message dict, a list of tool calls);
* reset: ``seed`` plus gymnasium's ``options`` dict, or the same options as top-level keys
  (``split``, ``difficulty``, ``hint``, ``config``, ``task_seed``) for OpenEnv clients that
  pass keyword arguments. An unknown key is an error, never dropped: a seed or split that
  silently fell back to a default would put the rollouts of one GRPO group on different tasks;
* observation (:class:`TraceObservation`): ``text`` (the gymnasium observation),
  ``terminated``, ``truncated`` and the full ``info`` dict, with OpenEnv's ``reward`` and
  ``done``; the step that ends an episode also carries its ``record`` (the
  ``trace_gym.episode.v1`` log line ``episode_record`` writes);
* a client may set its session's constructor arguments with the reset argument
  ``env_kwargs`` (:data:`SESSION_KWARGS`: ``tool_prompt``, ``reward_mode``, ``max_turns``,
  ``config``), so a trainer plays a served environment exactly as it would build it in process;
* beyond the loopback address every request but ``/health`` carries ``Authorization: Bearer
  TOKEN``, the shared token of :data:`TOKEN_ENV`.
"""

from __future__ import annotations

from typing import Any

try:
    from openenv.core.env_server import Action, Observation, State
    from pydantic import Field
except ImportError as exc:  # the base install stays light; serving is an extra
    raise ImportError(
        f"trace_gym.serving needs openenv-core ({exc}): pip install 'trace-rl[serve]'"
    ) from exc

from trace_gym.errors import TraceGymError

TOKEN_ENV = "TRACE_GYM_SERVE_TOKEN"
"""Environment variable holding the shared token, read by the server and by the clients."""
SESSION_KWARGS = ("tool_prompt", "reward_mode", "max_turns", "config")
"""Constructor arguments a client may choose for its own session (reset's ``env_kwargs``);
anything else (a sandbox setting, say) stays the server's choice."""


class ServeError(TraceGymError):
    """The server refused a request or could not be reached."""


class TraceAction(Action):
    """One assistant turn, exactly as ``env.step`` takes it."""

    turn: Any = Field(
        ...,
        description="A string (text to the customer, JSON tool calls or <tool_call> blocks), "
        "an assistant-message dict, or a list of tool calls",
    )


class TraceObservation(Observation):
    """What ``env.reset`` / ``env.step`` return, plus OpenEnv's ``reward`` and ``done``."""

    text: str = Field(default="", description="The gymnasium observation")
    terminated: bool = Field(default=False)
    truncated: bool = Field(default=False)
    info: dict[str, Any] = Field(default_factory=dict, description="The gymnasium info dict")
    record: dict[str, Any] | None = Field(
        default=None, description="The finished episode's trace_gym.episode.v1 record"
    )


class TraceState(State):
    """Where the session's episode stands."""

    env_id: str = ""
    task_id: str | None = None
    ended: bool = False
