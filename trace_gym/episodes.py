"""Playing episodes, writing them as JSON lines, and re-scoring them offline.

Re-scoring is replay: the environment is rebuilt from the record's id and kwargs, reset with
the same seed and options, and fed the recorded actions. Because tasks, users and verifiers
are deterministic, the replayed reward equals the online reward (a property the test suite
checks on every environment).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from trace_gym.core.env import TraceEnv
from trace_gym.errors import EpisodeLogError, TraceGymError

EPISODE_FORMAT = "trace_gym.episode.v1"


def run_episode(
    env: gym.Env,
    agent: Any,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Play one episode with ``agent``; return its ``trace_gym.episode.v1`` record."""
    inner: TraceEnv = env.unwrapped  # type: ignore[assignment]
    obs, info = env.reset(seed=seed, options=options)
    agent.reset(inner, obs, info)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
        done = terminated or truncated
    return inner.episode_record(agent=getattr(agent, "name", type(agent).__name__))


def write_episodes(path: str | Path, records: Iterable[dict[str, Any]], append: bool = True) -> int:
    """Write records as JSON lines; returns how many were written."""
    n = 0
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def read_episodes(path: str | Path) -> Iterator[dict[str, Any]]:
    """Read a JSON-lines episode log, with an error naming the file and line when broken."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EpisodeLogError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict) or record.get("format") != EPISODE_FORMAT:
                raise EpisodeLogError(f"{path}:{lineno}: not a {EPISODE_FORMAT} record")
            yield record


@dataclass(frozen=True)
class Rescored:
    """The outcome of replaying one record."""

    task_id: str
    logged_reward: float
    replayed_reward: float
    passed: bool
    verification: dict[str, Any]

    @property
    def matches(self) -> bool:
        return abs(self.logged_reward - self.replayed_reward) < 1e-9


def rescore(record: dict[str, Any]) -> Rescored:
    """Replay a record's actions on a fresh environment and verify the result."""
    missing = [k for k in ("env_id", "task_seed", "actions", "reset_options") if k not in record]
    if missing:
        raise EpisodeLogError(f"episode record lacks {missing}")
    kwargs = dict(record.get("env_kwargs") or {})
    env = gym.make(record["env_id"], disable_env_checker=True, **kwargs)
    try:
        env.reset(seed=int(record["task_seed"]), options=dict(record["reset_options"]))
        done = False
        for action in record["actions"]:
            if done:
                raise EpisodeLogError(f"{record.get('task_id')}: actions continue after the end")
            _, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        if not done:
            raise EpisodeLogError(f"{record.get('task_id')}: the actions do not finish the episode")
        inner: TraceEnv = env.unwrapped  # type: ignore[assignment]
        replay = inner.episode_record()
    except TraceGymError as exc:
        raise EpisodeLogError(f"{record.get('task_id')}: cannot replay: {exc}") from exc
    finally:
        env.close()
    return Rescored(
        task_id=str(record.get("task_id")),
        logged_reward=float(record.get("final_reward", float("nan"))),
        replayed_reward=float(replay["final_reward"]),
        passed=bool(replay["is_success"]),
        verification=replay["verification"],
    )
