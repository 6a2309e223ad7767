"""Tooling: ``trace-gym serve``, a registered environment over HTTP and WebSocket with
OpenEnv, and :class:`~trace_gym.serving.serve.RemoteEnv`, the gymnasium client that plays
it remotely (:mod:`~trace_gym.serving.serve`; needs the ``serve`` extra).

Nothing here is imported by ``import trace_gym``.
"""
