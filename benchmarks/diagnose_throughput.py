"""trace_diagnose labelling throughput: labels per second at 1, 8 and 32 concurrent calls.

Labels the same planted trajectories (default 64, 3 capabilities each, one run) against the
stub LLM from tests/diagnose/stub_llm.py, which answers each request after a latency drawn
uniformly between 0.5 and 2 s (seeded by the request, so every configuration meets the same
latencies), once per configuration, each into a fresh run directory (no cache):

* `--max-concurrency` 1, 8 and 32, no rate limit;
* `--max-concurrency 32 --rpm 240`: the requests-per-minute limit holding 32 slots back.

Then, at concurrency 32, a run is killed (SIGKILL) half-way and rerun: the resumed run must
ask the endpoint for none of the labels that had finished. Results, ratios side by side:
benchmarks/results/diagnose_throughput.json and .md.

    .venv/bin/python benchmarks/diagnose_throughput.py [--n 64] [--low 0.5] [--high 2.0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.diagnose.planted import CAPABILITIES, stub_config, write_planted  # noqa: E402
from tests.diagnose.stub_llm import StubLLM  # noqa: E402
from tests.diagnose.test_cli import stub_args  # noqa: E402
from trace_diagnose.llm import LLMConfig  # noqa: E402
from trace_diagnose.run import stage_ingest, stage_label, write_json  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CONFIGS = [
    {"name": "concurrency 1", "concurrency": 1, "rpm": None},
    {"name": "concurrency 8", "concurrency": 8, "rpm": None},
    {"name": "concurrency 32", "concurrency": 32, "rpm": None},
    {"name": "concurrency 32, --rpm 240", "concurrency": 32, "rpm": 240.0},
]


def prepare(data: Path, rd: Path) -> None:
    stage_ingest(rd, [data])
    write_json(rd / "capabilities.json", {"capabilities": CAPABILITIES})


def measure(data: Path, rd: Path, stub: StubLLM, concurrency: int, rpm: float | None) -> dict:
    prepare(data, rd)
    cfg = LLMConfig(
        model="openai/stub",
        api_base=stub.api_base,
        api_key="stub",
        concurrency=concurrency,
        rpm=rpm,
        price_in=0.15,
        price_out=0.6,
    )
    before = stub.total_requests
    start = time.perf_counter()
    runs = stage_label(rd, cfg, n_runs=1, show_progress=False)
    wall = time.perf_counter() - start
    labelled = len(runs[0].failed) + len(runs[0].passed)
    return {
        "wall_s": wall,
        "labels": labelled,
        "capability_labels": labelled * len(CAPABILITIES),
        "calls": stub.total_requests - before,
        "labels_per_s": labelled / wall,
    }


def cache_rows(path: Path) -> int:
    try:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def kill_and_resume(data: Path, rd: Path, stub: StubLLM, n: int) -> dict:
    """SIGKILL a labelling run at concurrency 32 half-way, rerun it, count repeated asks."""
    prepare(data, rd)
    answered_before = len(stub.completed)
    env = {**os.environ, "STUB_KEY": "stub", "PYTHONPATH": str(REPO)}
    label = ["label", str(rd), "--n-runs", "1", "--max-concurrency", "32"]
    cmd = [sys.executable, "-m", "trace_diagnose.cli", *label, *stub_args(stub)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while cache_rows(rd / "cache.sqlite") < n // 2 and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cached = cached_requests(rd / "cache.sqlite")  # as the stub identifies them
    answered = len(stub.completed) - answered_before  # some answers die with the process
    seen = len(stub.log)
    second = subprocess.run(cmd, env=env, capture_output=True, text=True)
    asked = stub.log[seen:]
    return {
        "killed_after_cached": len(cached),
        "answered_before_kill": answered,
        "resume_exit_code": second.returncode,
        "resume_requests": len(asked),
        "resume_repeated_cached": sum(k in cached for k in asked),
        "cache_rows_after": cache_rows(rd / "cache.sqlite"),
    }


def cached_requests(path: Path) -> set[str]:
    """The stub's identity (model, seed, messages) of every request stored in the cache."""
    from tests.diagnose.stub_llm import request_hash

    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT request FROM calls").fetchall()
    out = set()
    for (text,) in rows:
        req = json.loads(text)
        body = {"model": req["model"].split("/", 1)[1], "seed": req["sample"]}
        out.add(request_hash({**body, "messages": req["messages"]}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=64, help="trajectories labelled (default 64)")
    ap.add_argument("--low", type=float, default=0.5, help="shortest latency, s (default 0.5)")
    ap.add_argument("--high", type=float, default=2.0, help="longest latency, s (default 2.0)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results folder (default: ours)")
    args = ap.parse_args()
    stub = StubLLM(stub_config(latency_range=(args.low, args.high))).start()
    import litellm  # its start-up would otherwise land in the first measurement

    litellm.suppress_debug_info = True
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_planted(Path(tmp) / "planted.jsonl", n_tasks=args.n // 2, trials=2, seed=7)
        for i, cfg in enumerate(CONFIGS):
            result = measure(data, Path(tmp) / f"run{i}", stub, cfg["concurrency"], cfg["rpm"])
            rows.append({**cfg, **result})
            print(
                f"{cfg['name']}: {result['labels_per_s']:.2f} labels/s ({result['wall_s']:.1f} s)"
            )
        resume = kill_and_resume(data, Path(tmp) / "resume", stub, args.n)
    stub.stop()
    base = rows[0]["labels_per_s"]
    for row in rows:
        row["speedup_vs_concurrency_1"] = row["labels_per_s"] / base
    mean_latency = (args.low + args.high) / 2
    out = {
        "benchmark": "diagnose_throughput",
        "command": "python benchmarks/diagnose_throughput.py",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({platform.python_version()})",
        "trajectories": args.n,
        "capabilities": len(CAPABILITIES),
        "stub_latency_s": [args.low, args.high],
        "ideal_labels_per_s_at_concurrency_1": 1 / mean_latency,
        "rows": rows,
        "kill_and_resume": resume,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "diagnose_throughput.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"Labelling {args.n} trajectories ({len(CAPABILITIES)} capabilities, one call each) "
        f"against a stub answering in {args.low}-{args.high} s (uniform, the same draws for every "
        f"row), {out['machine']}; one run, no cache.",
        "",
        "| configuration | labels/s | capability labels/s | wall (s) | calls | vs concurrency 1 |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['labels_per_s']:.2f} | "
            f"{row['labels_per_s'] * len(CAPABILITIES):.2f} | {row['wall_s']:.1f} | "
            f"{row['calls']} | {row['speedup_vs_concurrency_1']:.1f}x |"
        )
    lines += [
        "",
        f"Killed (SIGKILL) at concurrency 32 with {resume['killed_after_cached']} labels cached; "
        f"the rerun (exit {resume['resume_exit_code']}) sent {resume['resume_requests']} "
        f"requests, {resume['resume_repeated_cached']} of them for a label already cached.",
    ]
    (args.out / "diagnose_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
