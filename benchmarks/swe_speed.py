"""SWE environment speed: reset, and verification of one patch, p50/p99, side by side (same
run, interleaved, each method on the same task in turn) with the previous runner and with
"pytest in a fresh subprocess per verification".

    python benchmarks/swe_speed.py [--tasks 40] [--out benchmarks/results/swe_speed.json]

Each verification grades the oracle-patched module against the visible, target and hidden
tests of a generated task:

* ``compute (bwrap)``: what the environments do now. The calls of every test go into the
  bubblewrap sandbox (user namespace, seccomp, tmpfs, control group) with the module; the
  values come back and are compared here (``swe_common.run_suite``);
* ``compute (none)``: the same without isolation (the explicit opt-in);
* ``previous runner (bwrap)``: the design before issue 25, in the same sandbox: every test
  file, hidden ones included, copied in and run by the small in-sandbox runner, whose
  printed report was the verdict (forgeable; measured only to compare the cost);
* ``pytest subprocess``: the same files in a fresh temporary directory and
  ``python -m pytest -q`` in a new process, no sandbox (what a naive harness does).

The verification cache is bypassed so every measurement starts a sandbox. The machine's load
average is recorded with the results: on a shared machine, timings move with it; the ratios
of one run are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym

import trace_gym
from trace_gym.envs.helpers import swe_common
from trace_gym.sandbox import Sandbox, sandbox_available


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def patched_source(task) -> str:
    edits = swe_common.parse_patch(swe_common.render_patch([tuple(e) for e in task.oracle_edits]))
    return swe_common.apply_patch(task.files, edits, f"{task.module}.py")[f"{task.module}.py"]


def compute_once(task, source: str, sandbox: Sandbox) -> float:
    swe_common._RUN_CACHE.clear()
    token = swe_common._CONTEXT.set(swe_common._RunContext(sandbox))
    try:
        t0 = time.perf_counter()
        suite = swe_common.run_suite(task, source)
        elapsed = time.perf_counter() - t0
    finally:
        swe_common._CONTEXT.reset(token)
    assert suite.passed(task.target_name), suite.run.reason
    return elapsed


def previous_runner_once(task, source: str, sandbox: Sandbox) -> float:
    files = {**task.files, f"{task.module}.py": source, "test_hidden.py": task.hidden_tests,
             swe_common.RUNNER_FILE: swe_common.RUNNER}  # fmt: skip
    t0 = time.perf_counter()
    run = sandbox.run(files, swe_common.RUNNER_FILE, ["test_visible", "test_target", "test_hidden"])
    elapsed = time.perf_counter() - t0
    assert run.report and run.report[task.target_name][0] == "passed", run.reason
    return elapsed


def pytest_once(task, source: str) -> float:
    root = tempfile.mkdtemp(prefix="swe-bench-")
    try:
        t0 = time.perf_counter()
        files = {**task.files, f"{task.module}.py": source, "test_hidden.py": task.hidden_tests}
        for name, text in files.items():
            Path(root, name).write_text(text)
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", root,
             "test_visible.py", "test_target.py", "test_hidden.py"],
            cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root},
        )  # fmt: skip
        elapsed = time.perf_counter() - t0
        assert out.returncode == 0, out.stdout[-500:]
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def stats(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(pct(ms, 0.5), 1), "p99_ms": round(pct(ms, 0.99), 1),
            "mean_ms": round(statistics.fmean(ms), 1), "n": len(ms)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=40, help="tasks per environment")
    parser.add_argument("--out", default="benchmarks/results/swe_speed.json")
    args = parser.parse_args()
    ids = [  # the single-turn environments: one task, one patch
        e.id for e in trace_gym.load_registry()
        if e.id.startswith("trace/swe-") and "composite" not in e.tags
    ]  # fmt: skip
    unisolated = Sandbox(swe_common.SANDBOX_LIMITS, isolation="none")
    methods = {"compute (none)": (compute_once, unisolated)}
    if sandbox_available("bwrap") is None:
        isolated = Sandbox(swe_common.SANDBOX_LIMITS, isolation="bwrap")
        methods = {"compute (bwrap)": (compute_once, isolated), **methods,
                   "previous runner (bwrap)": (previous_runner_once, isolated)}  # fmt: skip
    else:
        print(f"no bubblewrap here ({sandbox_available('bwrap')}): measuring without it")
    resets: list[float] = []
    verify: dict[str, list[float]] = {m: [] for m in [*methods, "pytest subprocess"]}
    load_before = os.getloadavg()
    for env_id in ids:
        env = gym.make(env_id, disable_env_checker=True)
        for seed in range(args.tasks):
            t0 = time.perf_counter()
            env.reset(seed=seed, options={"difficulty": (seed % 5) / 4})
            resets.append(time.perf_counter() - t0)
            task = env.unwrapped.task
            source = patched_source(task)
            for name, (once, sandbox) in methods.items():  # interleaved: the same load
                verify[name].append(once(task, source, sandbox))
            verify["pytest subprocess"].append(pytest_once(task, source))
        env.close()
    first = next(iter(verify))
    base = stats(verify[first])["p50_ms"]
    result = {
        "environments": ids,
        "tasks_per_environment": args.tasks,
        "reset": stats(resets),
        "verification": {k: stats(v) for k, v in verify.items()},
        "p50_ratio_to": first,
        "p50_ratios": {k: round(stats(v)["p50_ms"] / base, 2) for k, v in verify.items()},
        "sandbox_guarantees": methods[first][1].guarantees(),
        "cpu_count": os.cpu_count(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "python": sys.version.split()[0],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"| what | p50 ms | p99 ms | n | p50 / {first} |\n|---|---|---|---|---|")
    print(
        f"| reset | {result['reset']['p50_ms']} | {result['reset']['p99_ms']} | {len(resets)} | |"
    )
    for name, s in result["verification"].items():
        ratio = result["p50_ratios"][name]
        print(f"| verification: {name} | {s['p50_ms']} | {s['p99_ms']} | {s['n']} | {ratio} |")
    print(f"load average before/after: {result['load_average_before_after']}")


if __name__ == "__main__":
    main()
