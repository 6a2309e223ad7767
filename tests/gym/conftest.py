"""Helpers the environment tests share: play a fixed plan, read a seed's task, find a seed.

Imported as ``from tests.gym.conftest import find, play, task_of``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trace_gym
from trace_gym.agents.baselines import PlanAgent

SEARCH_SEEDS = 500
"""Seeds ``find`` tries before it gives up."""


def play(env: Any, plan: list, seed: int, d: float = 0.5) -> dict:
    """One episode of ``env`` at difficulty ``d`` played by a fixed plan of actions."""
    return trace_gym.run_episode(env, PlanAgent(plan), seed=seed, options={"difficulty": d})


def task_of(env: Any, seed: int, d: float = 0.5) -> Any:
    """The task ``env`` generates for ``seed`` at difficulty ``d``."""
    env.reset(seed=seed, options={"difficulty": d})
    return env.task


def find(env: Any, want: Callable[[Any], bool], d: float = 0.5) -> int:
    """The first seed whose task satisfies ``want``."""
    for seed in range(SEARCH_SEEDS):
        if want(task_of(env, seed, d)):
            return seed
    raise AssertionError(f"no such task in {SEARCH_SEEDS} seeds")
