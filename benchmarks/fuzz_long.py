"""Long fuzzing: N adversarial actions per environment through the property suite's
``check_garbage_actions`` (every action format; nesting beyond the recursion limit, integers
past 4,300 digits, non-finite and huge numbers, wrong types in ids, other environments' tool
names, the oracle's own calls with one value broken), with progress, written to
benchmarks/results/fuzz_long.json.

    python benchmarks/fuzz_long.py [--actions 100000] [--env trace/precondition-v0 ...]

Each environment must end with zero internal errors and no exception from ``step``; the
result also counts the error codes the actions drew, to show which categories were reached.
Exit status 1 when any environment failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
from hypothesis import settings

import trace_gym
from trace_gym import testing
from trace_gym.core.env import internal_error_count

RESULT = Path(__file__).parent / "results" / "fuzz_long.json"
ROUND_EXAMPLES = 50
"""Hypothesis examples per round (one progress line per round)."""


class _CountCodes(gym.Wrapper):
    """Counts ``info["error"]`` codes (and successful turns) into a shared counter."""

    def __init__(self, env: gym.Env, counter: collections.Counter) -> None:
        super().__init__(env)
        self.counter = counter

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        error = out[4]["error"]
        self.counter[error["code"] if error else "ok"] += 1
        return out


def fuzz(env_id: str, actions: int) -> dict[str, Any]:
    codes: collections.Counter = collections.Counter()

    def factory() -> gym.Env:
        return _CountCodes(gym.make(env_id, disable_env_checker=True), codes)

    factory.__name__ = env_id
    start, done, errors_before = time.perf_counter(), 0, internal_error_count()
    failure = None
    while done < actions and failure is None:
        try:
            done += testing.check_garbage_actions(factory, min_actions=0)
        except AssertionError as exc:
            failure = str(exc)[:2000]
        rate = done / (time.perf_counter() - start)
        print(f"  {env_id}: {done:>7} / {actions} actions ({rate:.0f}/s)", flush=True)
    seconds = time.perf_counter() - start
    return {
        "env_id": env_id,
        "actions": done,
        "seconds": round(seconds, 1),
        "actions_per_s": round(done / seconds, 1),
        "internal_errors": internal_error_count() - errors_before,
        "passed": failure is None and internal_error_count() == errors_before,
        "failure": failure,
        "error_codes": dict(sorted(codes.items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=int, default=testing.LONG_FUZZ_ACTIONS)
    parser.add_argument("--env", action="append", default=None, help="environment id(s)")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    # Not derandomized: every round draws new examples.
    settings.register_profile(
        "fuzz-long",
        settings.get_profile("trace-long"),
        max_examples=ROUND_EXAMPLES,
        derandomize=False,
    )
    settings.load_profile("fuzz-long")
    rows = [fuzz(env_id, args.actions) for env_id in (args.env or trace_gym.registered_ids())]
    result = {
        "actions_per_env": args.actions,
        "python": platform.python_version(),
        "environments": rows,
        "all_passed": all(r["passed"] for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        "\n| environment | actions | internal errors | passed | actions/s |\n|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['env_id']} | {r['actions']} | {r['internal_errors']} | {r['passed']} "
            f"| {r['actions_per_s']:.0f} |"
        )
    print(f"\nwritten to {args.out}")
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
