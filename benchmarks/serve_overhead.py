"""Serving overhead: step latency and episodes/s through ``trace-gym serve`` (OpenEnv, WebSocket)
vs the same environment in process, at 1, 8 and 64 concurrent sessions, side by side; then
the trainer's view in the same run: seconds to play one GRPO group through the rollout engine
(``trace_train.rollout.play_episodes``, as ``trace-train grpo`` plays it) with the environments
in the trainer's own process, on one server process, and on two server processes
(round-robin, ``env_urls``).

    python benchmarks/serve_overhead.py [--env trace/precondition-v0] [--episodes 256]

Both sides play the same seeded oracle episodes (the actions are computed beforehand, so the
agent costs nothing). In process, N sessions are N environments stepped in turn by one thread.
Served, one asyncio client drives N WebSocket sessions (OpenEnv's ``EnvClient``) against one
server process, the pattern of a trainer that batches rollouts; step latency is the round trip
of one step message. Client and server share the machine, so the served numbers include the
client's JSON and WebSocket work. In the trainer's view every row of a group writes the
oracle's turn (tokenised by a tokenizer trained on the environment's text, the tests' tiny
one), so the seconds are the environment side of a rollout: chat formatting, tokenising,
stepping, and the protocol when served; a real model adds its generation time to every row
alike. Results: ``benchmarks/results/serve_overhead.json`` and Markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gymnasium as gym

import trace_gym  # noqa: F401  (registers the environments)
from trace_gym.serving.client import TraceEnvClient
from trace_gym.serving.protocol import TraceAction

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "serve_overhead.json"
SESSIONS = (1, 8, 64)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def plans(env_id: str, seeds: list[int]) -> dict[int, list]:
    env = gym.make(env_id, disable_env_checker=True)
    out = {}
    for seed in seeds:
        env.reset(seed=seed)
        out[seed] = env.unwrapped.oracle_actions()
    return out


def summary(steps: list[float], episodes: int, wall: float, rewards: list[float]) -> dict:
    return {
        "steps": len(steps),
        "episodes": episodes,
        "step_p50_ms": 1e3 * statistics.median(steps),
        "step_p99_ms": 1e3 * pct(steps, 0.99),
        "episodes_per_s": episodes / wall,
        "mean_final_reward": statistics.fmean(rewards),
    }


def in_process(env_id: str, sessions: int, per_session: int, plan: dict[int, list]) -> dict:
    """N environments, each playing its episodes, stepped round-robin by one thread."""
    envs = [gym.make(env_id) for _ in range(sessions)]
    queues = [[s * per_session + k for k in range(per_session)] for s in range(sessions)]
    steps, rewards = [], []
    t0 = time.perf_counter()
    active = []
    for env, queue in zip(envs, queues, strict=True):
        seed = queue.pop(0)
        env.reset(seed=seed)
        active.append([env, queue, list(plan[seed])])
    while active:
        for slot in list(active):
            env, queue, actions = slot
            s0 = time.perf_counter()
            _, reward, terminated, truncated, _ = env.step(actions.pop(0))
            steps.append(time.perf_counter() - s0)
            if terminated or truncated:
                rewards.append(reward)
                if queue:
                    seed = queue.pop(0)
                    env.reset(seed=seed)
                    slot[2] = list(plan[seed])
                else:
                    active.remove(slot)
    wall = time.perf_counter() - t0
    return summary(steps, sessions * per_session, wall, rewards)


async def served(url: str, sessions: int, per_session: int, plan: dict[int, list]) -> dict:
    """N WebSocket sessions driven concurrently from one event loop."""
    steps: list[float] = []
    rewards: list[float] = []

    async def session(index: int) -> None:
        client = TraceEnvClient(url, message_timeout_s=120)
        await client.connect()
        try:
            for k in range(per_session):
                seed = index * per_session + k
                await client.reset(seed=seed)
                for action in plan[seed]:
                    s0 = time.perf_counter()
                    result = await client.step(TraceAction(turn=action))
                    steps.append(time.perf_counter() - s0)
                rewards.append(result.reward)
                assert result.done
        finally:
            await client.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(session(i) for i in range(sessions)))
    wall = time.perf_counter() - t0
    return summary(steps, sessions * per_session, wall, rewards)


def start_server(env_id: str, max_sessions: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "trace_gym.cli", "serve", env_id, "--port", str(port)]
    proc = subprocess.Popen(cmd + ["--max-sessions", str(max_sessions)], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start within 60 s")


def table(rows: list[dict]) -> str:
    lines = [
        "| sessions | where | step p50 (ms) | step p99 (ms) | episodes/s | served / in-process episodes/s |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        local, remote = row["in_process"], row["served"]
        ratio = remote["episodes_per_s"] / local["episodes_per_s"]
        for where, r in (("in process", local), ("served", remote)):
            lines.append(
                f"| {row['sessions']} | {where} | {r['step_p50_ms']:.3f} | {r['step_p99_ms']:.3f} "
                f"| {r['episodes_per_s']:.0f} | {'' if r is local else f'{ratio:.2f}'} |"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The trainer's view: one GRPO group through the rollout engine
# ---------------------------------------------------------------------------------------------
def oracle_generate(tokenizer, plan: list[str]):
    """A ``Generate`` whose every row writes the oracle's next turn (all rows of a group play
    one task, so one plan serves them)."""
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in plan]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    turn = {"n": 0}

    def generate(batch, max_new_tokens):
        out = ids[min(turn["n"], len(ids) - 1)] + [end]
        turn["n"] += 1
        return [(out, None) for _ in batch]

    return generate


def group_seconds(env_id: str, urls: list[str], groups: int, group_size: int) -> dict:
    """Mean seconds to play a group of ``group_size`` rollouts of one task, over ``groups``
    tasks; ``urls`` empty plays in process."""
    sys.path.insert(0, str(ROOT))
    from tests.train.envtiny import env_corpus
    from trace_train.rollout import ChatFormat, EpisodeSpec, ServedEnvs, action_text, play_episodes
    from trace_train.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(env_corpus(), vocab_size=3000)
    fmt = ChatFormat(tokenizer)
    env = gym.make(env_id, disable_env_checker=True)
    served = ServedEnvs(urls) if urls else None
    seconds, rewards = [], []
    for seed in range(groups):
        env.reset(seed=seed, options={"difficulty": 0.0})
        plan = [action_text(a) for a in env.unwrapped.oracle_actions()]
        specs = [EpisodeSpec(env_id, seed, 0.0)] * group_size
        t0 = time.perf_counter()
        rollouts = play_episodes(
            oracle_generate(tokenizer, plan), fmt, specs, max_turns=8, max_new_tokens=512,
            max_completion_tokens=4096, served=served,
        )  # fmt: skip
        seconds.append(time.perf_counter() - t0)
        rewards += [r.reward for r in rollouts]
        assert not any(r.fault for r in rollouts)
    return {
        "groups": groups,
        "group_size": group_size,
        "seconds_per_group": statistics.fmean(seconds),
        "seconds_per_group_p50": statistics.median(seconds),
        "mean_reward": statistics.fmean(rewards),
    }


def trainer_view(env_id: str, groups: int, group_size: int) -> dict:
    procs = [start_server(env_id, group_size) for _ in range(2)]
    urls = [url for _, url in procs]
    try:
        group_seconds(env_id, urls[:1], 1, 2)  # warm-up: imports, first sessions
        rows = {
            "in_process": group_seconds(env_id, [], groups, group_size),
            "served_1_process": group_seconds(env_id, urls[:1], groups, group_size),
            "served_2_processes": group_seconds(env_id, urls, groups, group_size),
        }
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(timeout=10)
    rewards = {v["mean_reward"] for v in rows.values()}
    assert len(rewards) == 1, rows  # the same episodes wherever the environment ran
    return rows


def trainer_table(rows: dict) -> str:
    base = rows["in_process"]["seconds_per_group"]
    lines = [
        "| environments | s per group (mean) | s per group (p50) | vs in process |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("in_process", "in the trainer's process"),
        ("served_1_process", "served, 1 server process"),
        ("served_2_processes", "served, 2 server processes (round-robin)"),
    ):
        r = rows[name]
        lines.append(
            f"| {label} | {r['seconds_per_group']:.3f} | {r['seconds_per_group_p50']:.3f} "
            f"| {r['seconds_per_group'] / base:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="trace/precondition-v0")
    parser.add_argument("--episodes", type=int, default=256, help="per side and session count")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--groups", type=int, default=8, help="GRPO groups per side")
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    per_session = {n: max(2, -(-args.episodes // n)) for n in SESSIONS}
    plan = plans(args.env, list(range(max(n * per_session[n] for n in SESSIONS))))
    proc, url = start_server(args.env, max(SESSIONS))
    rows = []
    try:
        asyncio.run(served(url, 1, 2, plan))  # warm-up: imports and first-session setup
        for n in SESSIONS:
            local = in_process(args.env, n, per_session[n], plan)
            remote = asyncio.run(served(url, n, per_session[n], plan))
            assert remote["mean_final_reward"] == local["mean_final_reward"], (n, remote, local)
            rows.append({"sessions": n, "in_process": local, "served": remote})
            print(f"{n} sessions: done", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    trainer = trainer_view(args.env, args.groups, args.group_size)
    result = {
        "env_id": args.env,
        "episodes_per_session": {str(n): k for n, k in per_session.items()},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "rows": rows,
        "trainer_view": trainer,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(rows))
    print()
    print(trainer_table(trainer))


if __name__ == "__main__":
    main()
