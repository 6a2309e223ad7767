"""``trace-gym serve ID``: an OpenEnv server for one registered environment.

Every WebSocket connection (``/ws``) is one session with its own ``gym.make(ID)`` instance
(:class:`TraceServedEnv`), so trainers on other machines can run many rollouts against one
server; OpenEnv also serves ``/health``, ``/schema`` and ``/metadata``. (OpenEnv's plain HTTP
``/reset`` and ``/step`` build a fresh environment per request, so multi-turn episodes need
the WebSocket.) The payloads are those of :mod:`trace_gym.serving.protocol`.

Serving beyond this machine needs a shared token (``--token`` or ``TRACE_GYM_SERVE_TOKEN``):
every request but ``/health`` must then carry ``Authorization: Bearer TOKEN``, and is refused
otherwise. A served SWE environment runs client-supplied code, so an open port must not mean
open sessions. On the loopback address no token is needed.

:func:`create_app` is the FastAPI application (for a Dockerfile), :func:`app_from_env` the
same configured by environment variables (``uvicorn --factory
trace_gym.serving.server:app_from_env``), :func:`serve` runs it in the foreground.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import os
from typing import Any

import gymnasium as gym

try:
    from openenv.core.env_server import Environment
    from openenv.core.env_server.types import EnvironmentMetadata
    from starlette.websockets import WebSocketDisconnect
except ImportError as exc:  # the base install stays light; serving is an extra
    raise ImportError(
        f"trace_gym.serving needs openenv-core ({exc}): pip install 'trace-rl[serve]'"
    ) from exc

import trace_gym
from trace_gym.core.env import RESET_OPTIONS
from trace_gym.errors import ConfigError
from trace_gym.registration import entry
from trace_gym.serving.protocol import (
    SESSION_KWARGS,
    TOKEN_ENV,
    TraceAction,
    TraceObservation,
    TraceState,
)

DEFAULT_PORT = 8000
DEFAULT_MAX_SESSIONS = 64


class TraceServedEnv(Environment[TraceAction, TraceObservation, TraceState]):
    """One session: a ``gym.make(env_id)`` instance behind OpenEnv's Environment interface."""

    # Sessions share nothing: each holds its own environment, world and RNG.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, make_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self._make_kwargs = dict(make_kwargs or {})
        self._session_kwargs: dict[str, Any] = {}
        self._env = gym.make(env_id, **self._make_kwargs)
        self._state = TraceState(env_id=env_id)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        env_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TraceObservation:
        unknown = sorted(set(kwargs) - set(RESET_OPTIONS))
        if unknown:
            raise ConfigError(
                f"unknown reset argument(s) {unknown}; known: seed, options, env_kwargs, "
                f"{', '.join(RESET_OPTIONS)}"
            )
        if env_kwargs is not None:
            self._use_session_kwargs(dict(env_kwargs))
        merged = {**(options or {}), **kwargs}
        obs, info = self._env.reset(seed=seed, options=merged)
        self._state = TraceState(
            env_id=self.env_id, episode_id=episode_id or info["task_id"], task_id=info["task_id"]
        )
        return TraceObservation(text=obs, info=info, reward=None, done=False)

    def _use_session_kwargs(self, env_kwargs: dict[str, Any]) -> None:
        """Rebuild this session's environment with the client's constructor arguments."""
        unknown = sorted(set(env_kwargs) - set(SESSION_KWARGS))
        if unknown:
            raise ConfigError(
                f"env_kwargs {unknown} cannot be set by a client; allowed: {list(SESSION_KWARGS)}"
            )
        if env_kwargs != self._session_kwargs:
            self._env.close()
            self._env = gym.make(self.env_id, **{**self._make_kwargs, **env_kwargs})
            self._session_kwargs = env_kwargs

    def step(
        self, action: TraceAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TraceObservation:
        obs, reward, terminated, truncated, info = self._env.step(action.turn)
        self._state.step_count += 1
        self._state.ended = bool(terminated or truncated)
        return TraceObservation(
            text=obs,
            reward=float(reward),
            done=self._state.ended,
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=info,
            record=self._env.unwrapped.episode_record() if self._state.ended else None,
        )

    @property
    def state(self) -> TraceState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        row = entry(self.env_id)
        return EnvironmentMetadata(
            name=row.id,
            description=f"{row.description} (capability: {row.capability})",
            version=trace_gym.__version__,
            documentation_url="https://github.com/meta-pytorch/OpenEnv",
        )

    def close(self) -> None:
        self._env.close()


def create_app(
    env_id: str,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    token: str | None = None,
    **make_kwargs: Any,
) -> Any:
    """The OpenEnv FastAPI application serving ``env_id`` (for ``uvicorn`` or a Dockerfile);
    with ``token``, every request but ``/health`` must carry it (:class:`_RequireToken`)."""
    from openenv.core.env_server import create_app as openenv_create_app

    entry(env_id)  # an unknown id fails here, with suggestions, not in the first session
    if max_sessions < 1:
        raise ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
    gym.make(env_id, **make_kwargs).close()  # bad make kwargs fail at startup too
    factory = functools.partial(TraceServedEnv, env_id, make_kwargs)
    app = openenv_create_app(
        factory,
        TraceAction,
        TraceObservation,
        env_name=env_id,
        max_concurrent_envs=max_sessions,
    )
    app.add_middleware(_QuietClientClose)
    if token:
        app.add_middleware(_RequireToken, token=token)
    return app


def app_from_env() -> Any:
    """:func:`create_app` configured by environment variables, for ``uvicorn --factory``.

    ``TRACE_GYM_ENV_ID`` (required), ``TRACE_GYM_MAX_SESSIONS`` (default 64) and
    ``TRACE_GYM_SERVE_TOKEN`` (required unless every client is on this machine: uvicorn's
    ``--host`` is not visible here), so a container runs
    ``uvicorn --factory trace_gym.serving.server:app_from_env --workers N``.
    """
    env_id = os.environ.get("TRACE_GYM_ENV_ID")
    if not env_id:
        raise ConfigError("set TRACE_GYM_ENV_ID to the environment to serve")
    raw = os.environ.get("TRACE_GYM_MAX_SESSIONS", str(DEFAULT_MAX_SESSIONS))
    try:
        max_sessions = int(raw)
    except ValueError:
        raise ConfigError(f"TRACE_GYM_MAX_SESSIONS must be an integer, got {raw!r}") from None
    return create_app(env_id, max_sessions=max_sessions, token=os.environ.get(TOKEN_ENV) or None)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_token(host: str, token: str | None) -> None:
    """Serving beyond this machine needs a shared token: one clear error otherwise."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"serving on {host} accepts other machines, so it needs a shared token: pass "
            f"--token TOKEN or set {TOKEN_ENV} (clients send the same {TOKEN_ENV}); "
            "without one, serve on 127.0.0.1"
        )


class _RequireToken:
    """ASGI middleware: refuse every request but ``/health`` without the shared token.

    HTTP gets a 401 with one line saying so; a WebSocket handshake is refused (HTTP 403)
    before a session opens, so no environment is built for a caller without the token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") == "/health":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"detail": f"missing or wrong token (set {TOKEN_ENV})"}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _QuietClientClose:
    """ASGI middleware: a client that closes its socket first is a normal end of session.

    OpenEnv's WebSocket handler closes the socket after the client's ``close`` message; when
    the client has already closed its side (OpenEnv's own client does), Starlette raises
    ``WebSocketDisconnect`` out of the handler and the server logs a traceback per session.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    log_level: str = "warning",
    token: str | None = None,
    **make_kwargs: Any,
) -> None:
    """Run the server in the foreground until interrupted (``token``: :func:`check_token`)."""
    import uvicorn

    check_token(host, token)
    app = create_app(env_id, max_sessions=max_sessions, token=token, **make_kwargs)
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws_max_size=64 * 2**20)
