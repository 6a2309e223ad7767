"""Where a check's environment comes from: a registered id or a zero-argument factory.

Shared by the contract checks (:mod:`trace_gym.testing.properties`) and the soundness checks
(:mod:`trace_gym.testing.soundness`), so neither has to import the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

EnvSource = str | Callable[[], gym.Env]
"""A gymnasium id (``gym.make``) or a factory returning an environment that follows the
trace_gym contract and exposes ``oracle_actions``."""
Verifier = Callable[[Any, Any], Any]
"""``verifier(task, episode) -> Verification``, replacing the environment's own."""


def make_env(source: EnvSource, verifier: Verifier | None = None, **kwargs: Any) -> gym.Env:
    """An environment from an id or a factory, with its verifier optionally replaced."""
    if isinstance(source, str):
        env = gym.make(source, disable_env_checker=True, **kwargs)
    else:
        env = source()
    if verifier is not None:
        env.unwrapped.verify = verifier  # instance attribute shadows the hook
    return env
