"""Environment speed: reset, step, and full oracle episode + verification per second, p50/p99,
at difficulty 0, 0.5 and 1, side by side (same run, interleaved) with reasoning-gym's item
generation + scoring on a few of its tasks.

    python benchmarks/env_speed.py [--episodes 200] [--env ID ...] [--clock cpu] [--markdown OUT.md]

``--clock cpu`` times with this thread's CPU clock instead of the wall clock: on a machine
shared with other jobs, wall-clock p99 measures the scheduler (a preempted call takes a whole
time slice), CPU time measures the environment.

reasoning-gym items are single-turn question/answer pairs, so its "episode" is one generation
plus one scoring call; ours is a multi-turn tool-use episode with a verifier. The comparison
says how much a richer environment costs per rollout, not that the two do the same work.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

import trace_gym
from trace_gym.agents import OracleAgent

RG_TASKS = ("basic_arithmetic", "chain_sum", "leg_counting", "letter_counting")
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def bench_env(env_id: str, difficulty: float, episodes: int) -> dict:
    env = gym.make(env_id, disable_env_checker=True)
    resets, steps, episode_times = [], [], []
    for seed in range(episodes):
        t0 = clock()
        obs, info = env.reset(seed=seed, options={"difficulty": difficulty})
        t1 = clock()
        resets.append(t1 - t0)
        agent = OracleAgent()
        agent.reset(env.unwrapped, obs, info)
        done = False
        while not done:
            action = agent.act(obs, info)
            s0 = clock()
            obs, _, terminated, truncated, info = env.step(action)
            steps.append(clock() - s0)
            done = terminated or truncated
        episode_times.append(clock() - t0)
        assert info["is_success"], f"oracle failed on {env_id} seed {seed}"
    env.close()
    return {
        "name": env_id,
        "difficulty": difficulty,
        "reset_p50_ms": 1e3 * statistics.median(resets),
        "reset_p99_ms": 1e3 * pct(resets, 0.99),
        "step_p50_ms": 1e3 * statistics.median(steps),
        "step_p99_ms": 1e3 * pct(steps, 0.99),
        "episodes_per_s": len(episode_times) / sum(episode_times),
    }


def bench_reasoning_gym(task: str, items: int) -> dict | None:
    try:
        import reasoning_gym
    except ImportError:
        return None
    data = reasoning_gym.create_dataset(task, size=items, seed=1)
    gen, score = [], []
    for i in range(items):
        t0 = clock()
        entry = data[i]
        t1 = clock()
        data.score_answer(entry["answer"], entry)
        score.append(clock() - t1)
        gen.append(t1 - t0)
    total = [g + s for g, s in zip(gen, score, strict=True)]
    return {
        "name": f"reasoning-gym/{task}",
        "difficulty": "-",
        "reset_p50_ms": 1e3 * statistics.median(gen),
        "reset_p99_ms": 1e3 * pct(gen, 0.99),
        "step_p50_ms": 1e3 * statistics.median(score),
        "step_p99_ms": 1e3 * pct(score, 0.99),
        "episodes_per_s": len(total) / sum(total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    parser.add_argument("--env", action="append", default=None, help="only these ids")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    rows = []
    for env_id in args.env or trace_gym.registered_ids():
        for d in (0.0, 0.5, 1.0):
            rows.append(bench_env(env_id, d, args.episodes))
            rg = bench_reasoning_gym(RG_TASKS[len(rows) % len(RG_TASKS)], args.episodes)
            if rg is not None:  # interleaved: the peer runs under the same machine load
                rows.append(rg)
    header = (
        "| environment | difficulty | reset p50 (ms) | reset p99 (ms) | step p50 (ms) "
        "| step p99 (ms) | episodes/s |\n|---|---|---|---|---|---|---|"
    )
    lines = [header]
    for r in rows:
        d = r["difficulty"] if isinstance(r["difficulty"], str) else f"{r['difficulty']:.1f}"
        lines.append(
            f"| {r['name']} | {d} | {r['reset_p50_ms']:.3f} | {r['reset_p99_ms']:.3f} | "
            f"{r['step_p50_ms']:.3f} | {r['step_p99_ms']:.3f} | {r['episodes_per_s']:.0f} |"
        )
    table = "\n".join(lines)
    print(table)
    print("\nreasoning-gym rows: reset = item generation, step = score_answer, episode = both.")
    print(f"clock: {args.clock}")
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
