"""benchmarks/warmstart_memory.py on a tiny model: every variant runs in its own process."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.train.envtiny import build_env_tiny

ROOT = Path(__file__).resolve().parents[2]


def test_warmstart_memory_benchmark_measures_every_variant(tmp_path, tmp_path_factory):
    spec = importlib.util.spec_from_file_location(
        "warmstart_memory", ROOT / "benchmarks/warmstart_memory.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
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
