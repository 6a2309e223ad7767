"""Clients of a served environment: :class:`RemoteEnv` plays it like ``gym.make(ID)``.

::

    from trace_gym.serving.client import RemoteEnv

    env = RemoteEnv("http://127.0.0.1:8000", env_id="trace/precondition-v0")
    obs, info = env.reset(seed=3, options={"split": "eval", "difficulty": 0.8})
    obs, reward, terminated, truncated, info = env.step('{"name": "get_order", ...}')
    env.close()

:class:`TraceEnvClient` is the OpenEnv client class itself (async; ``.sync()`` for blocking
use), for code that drives many sessions from one event loop. Both send the shared token
(``TRACE_GYM_SERVE_TOKEN``) when there is one; :func:`server_metadata` reads what a server
serves.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any

import gymnasium as gym

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from websockets.exceptions import ConnectionClosed, WebSocketException
except ImportError as exc:  # the base install stays light; serving is an extra
    raise ImportError(
        f"trace_gym.serving needs openenv-core ({exc}): pip install 'trace-rl[serve]'"
    ) from exc

from trace_gym.core.spaces import AnyText
from trace_gym.errors import TraceGymError
from trace_gym.serving.protocol import (
    TOKEN_ENV,
    ServeError,
    TraceAction,
    TraceObservation,
    TraceState,
)


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
