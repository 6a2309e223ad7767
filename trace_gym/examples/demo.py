"""A short tour of trace_gym: seeded episodes on every environment with the oracle and the
baseline agents, the verifier's verdicts, and the speed.

    python -m trace_gym.examples.demo [--episodes 20]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import trace_gym
from trace_gym.agents import make_agent

AGENTS = ("oracle", "null", "random:0", "call_every_tool")


def show_one_episode(env_id: str, seed: int) -> None:
    """Print one oracle episode turn by turn, then the checks."""
    env = gym.make(env_id, render_mode="ansi")
    record = trace_gym.run_episode(env, make_agent("oracle"), seed=seed)
    print(f"\n=== {env_id}, seed {seed}: one oracle episode ===")
    print(env.unwrapped.render())
    print("checks:")
    for c in record["verification"]["checks"]:
        print(f"  [{'ok' if c['passed'] else 'FAIL':4}] {c['name']:<24} score {c['score']:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="episodes per agent and env")
    args = parser.parse_args(argv)
    ids = trace_gym.registered_ids()
    show_one_episode(ids[0], seed=7)
    print(f"\n=== {args.episodes} seeded episodes per agent (eval split, difficulty 0.5) ===")
    print(
        f"{'environment':<34} {'agent':<16} {'success':>8} {'mean reward':>12} {'episodes/s':>11}"
    )
    for env_id in ids:
        env = gym.make(env_id, disable_env_checker=True)
        for spec in AGENTS:
            start = time.perf_counter()
            records = [
                trace_gym.run_episode(env, make_agent(spec), seed=s, options={"split": "eval"})
                for s in range(args.episodes)
            ]
            rate = len(records) / (time.perf_counter() - start)
            success = sum(r["is_success"] for r in records) / len(records)
            reward = sum(r["final_reward"] for r in records) / len(records)
            print(f"{env_id:<34} {spec:<16} {success:>8.0%} {reward:>12.3f} {rate:>11.0f}")
    print(
        "\nThe oracle solves every task; doing nothing, random calls and calling every tool fail."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
