"""benchmarks/warmstart_memory.py and grpo_memory.py on a tiny model: every variant runs in
its own process and is reported against the first. A minute each: only in make test-long."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.train.envtiny import ENV_ID, build_env_tiny

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.long


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"benchmarks/{name}.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_warmstart_memory_benchmark_measures_every_variant(tmp_path, tmp_path_factory):
    bench = load_benchmark("warmstart_memory")
    model = build_env_tiny(tmp_path_factory.getbasetemp())
    out = tmp_path / "memory.json"
    report = bench.main(["--model", model, "--demos", "4", "--threads", "1", "--out", str(out)])

    assert json.loads(out.read_text()) == report
    rows = report["variants"]
    assert [r["config"] for r in rows] == list(bench.VARIANTS.values())
    assert rows[0]["config"]["micro_batch_size"] == 0  # the baseline really is whole batches
    for row in rows:
        assert row["steps"] == 1 and row["peak_rss_gb"] > 0 and row["tokens_per_second"] > 0
    assert rows[0]["memory_vs_old_default"] == 1.0 and rows[0]["speed_vs_old_default"] == 1.0
    assert "--demos 4" in report["command"]


def test_grpo_memory_benchmark_measures_every_variant(tmp_path, tmp_path_factory):
    bench = load_benchmark("grpo_memory")
    model = build_env_tiny(tmp_path_factory.getbasetemp())
    out = tmp_path / "grpo_memory.json"
    argv = ["--model", model, "--env", ENV_ID, "--group", "4", "--steps", "1",
            "--completion-tokens", "64", "--threads", "1", "--out", str(out)]  # fmt: skip
    report = bench.main(argv)

    assert json.loads(out.read_text()) == report
    rows = report["variants"]
    assert [r["config"]["micro_batch_size"] for r in rows] == [4, 2, 1]  # whole group first
    for row in rows:
        assert row["steps"] == 1 and row["peak_rss_gb"] > 0 and row["backward_seconds"] > 0
        assert row["step_seconds"] >= row["backward_seconds"] + row["decode_seconds"]
    assert report["same_rollouts"]  # seeded sampling: every variant trained on the same data
    assert rows[0]["memory_vs_old_default"] == 1.0
    assert rows[0]["backward_speed_vs_old_default"] == 1.0
    assert "--group 4" in report["command"]
