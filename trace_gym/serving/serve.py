"""Serve a registered environment over HTTP and WebSocket with OpenEnv, and play it remotely.

``trace-gym serve ID`` runs an `OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ server
(``openenv-core``, installed by the ``serve`` extra) for one registered environment. Every
WebSocket connection (``/ws``) is one session with its own ``gym.make(ID)`` instance, so
trainers on other machines can run many rollouts against one server; OpenEnv also serves
``/health``, ``/schema`` and ``/metadata``. (OpenEnv's plain HTTP ``/reset`` and ``/step``
build a fresh environment per request, so multi-turn episodes need the WebSocket.)

The protocol is OpenEnv's, the payloads are trace_gym's:

* action: ``{"turn": ...}`` where ``turn`` is exactly what ``env.step`` accepts (a string, an
  assistant-message dict, a list of tool calls);
* reset: ``seed`` plus gymnasium's ``options`` dict, or the same options as top-level keys
  (``split``, ``difficulty``, ``hint``, ``config``, ``task_seed``) for OpenEnv clients that
  pass keyword arguments. An unknown key is an error, never dropped: a seed or split that
  silently fell back to a default would put the rollouts of one GRPO group on different tasks;
* observation: ``text`` (the gymnasium observation), ``terminated``, ``truncated`` and the full
  ``info`` dict, with OpenEnv's ``reward`` and ``done``; the step that ends an episode also
  carries its ``record`` (the ``trace_gym.episode.v1`` log line ``episode_record`` writes);
* a client may set its session's constructor arguments with the reset argument
  ``env_kwargs`` (:data:`SESSION_KWARGS`: ``tool_prompt``, ``reward_mode``, ``max_turns``,
  ``config``), so a trainer plays a served environment exactly as it would build it in process.

Serving beyond this machine needs a shared token (``--token`` or ``TRACE_GYM_SERVE_TOKEN``):
every request but ``/health`` must then carry ``Authorization: Bearer TOKEN`` (the clients here
send ``TRACE_GYM_SERVE_TOKEN``), and is refused otherwise. A served SWE environment runs
client-supplied code, so an open port must not mean open sessions. On the loopback address no
token is needed.

:class:`RemoteEnv` behaves like ``gym.make(ID)`` against a server::

    from trace_gym.serving.serve import RemoteEnv

    env = RemoteEnv("http://127.0.0.1:8000", env_id="trace/precondition-v0")
    obs, info = env.reset(seed=3, options={"split": "eval", "difficulty": 0.8})
    obs, reward, terminated, truncated, info = env.step('{"name": "get_order", ...}')
    env.close()

:class:`TraceEnvClient` is the OpenEnv client class itself (async; ``.sync()`` for blocking
use), for code that drives many sessions from one event loop.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import json
import math
import os
from typing import Any

import gymnasium as gym

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, Environment, Observation, State
    from openenv.core.env_server.types import EnvironmentMetadata
    from pydantic import Field
    from starlette.websockets import WebSocketDisconnect
    from websockets.exceptions import ConnectionClosed, WebSocketException
except ImportError as exc:  # the base install stays light; serving is an extra
    raise ImportError(
        f"trace_gym.serving.serve needs openenv-core ({exc}): pip install 'trace-rl[serve]'"
    ) from exc

import trace_gym
from trace_gym.core.env import RESET_OPTIONS
from trace_gym.core.spaces import AnyText
from trace_gym.errors import ConfigError, TraceGymError
from trace_gym.registration import entry

DEFAULT_PORT = 8000
DEFAULT_MAX_SESSIONS = 64
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
    ``uvicorn --factory trace_gym.serving.serve:app_from_env --workers N``.
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


class TraceEnvClient(EnvClient[TraceAction, TraceObservation, TraceState]):
    """OpenEnv's WebSocket client for a served trace_gym environment (async); sends the shared
    token (``token``, default ``$TRACE_GYM_SERVE_TOKEN``) when there is one."""

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._token = token if token is not None else os.environ.get(TOKEN_ENV)

    async def connect(self) -> TraceEnvClient:
        """OpenEnv's ``connect``, with the ``Authorization`` header (its own sends none)."""
        if self._ws is not None or not self._token:
            await super().connect()
            return self
        from websockets.asyncio.client import connect as ws_connect

        try:
            self._ws = await ws_connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_message_size,
                additional_headers={"Authorization": f"Bearer {self._token}"},
            )
        except Exception as exc:
            raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc
        return self

    def _step_payload(self, action: Any) -> dict[str, Any]:
        turn = action.turn if isinstance(action, TraceAction) else action
        return {"turn": turn}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TraceObservation]:
        obs = TraceObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> TraceState:
        return TraceState(**payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        # A server at capacity sends its reason and closes right after the connection opens:
        # the next send fails, but the reason is still waiting to be read.
        try:
            await self._send(message)
        except ConnectionClosed:
            pass
        response = await self._receive()
        if response.get("type") == "error":
            data = response.get("data", {})
            raise RuntimeError(
                f"Server error: {data.get('message', 'unknown error')} "
                f"(code: {data.get('code', 'UNKNOWN')})"
            )
        return response

    async def disconnect(self) -> None:
        """Ask the server to end the session and let it close the connection first.

        OpenEnv's client closes its side right after the close message, and the server then
        fails (and logs a traceback) closing a connection that is already gone.
        """
        ws, self._ws = self._ws, None
        if ws is None:
            return
        try:
            await ws.send(json.dumps({"type": "close"}))
            await asyncio.wait_for(ws.wait_closed(), timeout=self._connect_timeout)
        except (OSError, TimeoutError, asyncio.TimeoutError, WebSocketException):
            pass  # the session ends on the server when the connection drops anyway
        finally:
            await ws.close()


class RemoteEnv(gym.Env):
    """A served environment with the ``gym.make(ID)`` interface.

    ``reset(seed=, options=) -> (obs, info)`` and ``step(action) -> (obs, reward, terminated,
    truncated, info)`` return what the in-process environment returns. Given ``env_id``, the
    constructor checks that the server serves that environment. ``env_kwargs`` (keys in
    :data:`SESSION_KWARGS`) build the session's environment as ``gym.make(ID, **env_kwargs)``
    would; ``token`` (default ``$TRACE_GYM_SERVE_TOKEN``) is sent with every request. After the
    episode ends, ``episode_record()`` is the server's record of it. One instance is one
    session; ``close()`` ends it.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        base_url: str,
        *,
        env_id: str | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        env_kwargs: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs) if env_kwargs else None
        self.observation_space = AnyText()
        self.action_space = AnyText()
        self._record: dict[str, Any] | None = None
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if env_id is not None:
            meta = server_metadata(self.base_url, timeout_s=connect_timeout_s, token=token)
            if meta["name"] != env_id:
                raise ServeError(f"{self.base_url} serves {meta['name']!r}, not {env_id!r}")
        self._client = TraceEnvClient(
            self.base_url,
            token=token,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
        ).sync()
        try:
            self._call(self._client.connect)
        except ServeError:
            self.close()  # stops the client's event-loop thread
            raise

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ConnectionError, RuntimeError, TimeoutError, OSError) as exc:
            raise ServeError(f"{self.base_url}: {exc}") from exc
        except ConnectionClosed as exc:
            raise ServeError(f"{self.base_url}: the server closed the session ({exc})") from exc

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        extra = {"env_kwargs": self.env_kwargs} if self.env_kwargs is not None else {}
        result = self._call(self._client.reset, seed=seed, options=dict(options or {}), **extra)
        self._record = None
        return result.observation.text, result.observation.info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = self._call(self._client.step, TraceAction(turn=action))
        obs = result.observation
        self._record = obs.record
        reward = float(result.reward) if result.reward is not None else math.nan
        return obs.text, reward, obs.terminated, obs.truncated, obs.info

    def episode_record(self, agent: str = "unknown") -> dict[str, Any]:
        """The finished episode as the server's environment logged it (``episode_record``)."""
        if self._record is None:
            raise TraceGymError("episode_record() needs a finished episode")
        return {**self._record, "agent": agent}

    def state(self) -> TraceState:
        """The session's episode id, task id and step count on the server."""
        return self._call(self._client.state)

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            self._client = None
            client.close()


def server_metadata(
    base_url: str, *, timeout_s: float = 10.0, token: str | None = None
) -> dict[str, Any]:
    """The server's ``/metadata`` (``name`` is the environment id)."""
    import httpx

    token = token if token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/metadata", timeout=timeout_s, headers=headers)
    except httpx.HTTPError as exc:
        raise ServeError(f"cannot reach {base_url}: {exc}") from exc
    if response.status_code == 401:
        raise ServeError(
            f"{base_url} refused the request: it needs the shared token ({TOKEN_ENV})"
            if not token
            else f"{base_url} refused the request: wrong token in {TOKEN_ENV}"
        )
    if response.is_error:
        raise ServeError(f"cannot read {base_url}/metadata: HTTP {response.status_code}")
    return response.json()
