"""Tooling: a registered environment served over HTTP and WebSocket with OpenEnv, and played
remotely (needs the ``serve`` extra, ``openenv-core``).

* :mod:`~trace_gym.serving.protocol`: the wire format both sides share (actions,
  observations, session state, the shared token's variable);
* :mod:`~trace_gym.serving.server`: ``trace-gym serve ID``, one session per WebSocket
  connection, and the application factory for uvicorn and containers;
* :mod:`~trace_gym.serving.client`: :class:`~trace_gym.serving.client.RemoteEnv`, which
  behaves like ``gym.make(ID)`` against a server, and the async OpenEnv client.

Nothing here is imported by ``import trace_gym``.
"""
