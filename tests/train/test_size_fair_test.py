"""The rule that sizes the pre-registered comparison from its pilot, fixed before the pilot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _sizing():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "size_fair_test.py"
    spec = importlib.util.spec_from_file_location("size_fair_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_discordance_counts_the_tasks_where_the_two_policies_differ():
    record = {"per_task": {"outcomes": {"plain-grpo": [1, 0, 0, 1], "moe": [1, 1, 0, 0]}}}
    assert _sizing().discordance(record) == 0.5
    with pytest.raises(SystemExit, match="no per-task outcomes for moe"):
        _sizing().discordance({"per_task": {"outcomes": {"plain-grpo": [1]}}})


def test_more_discordance_needs_more_tasks_within_the_floor_and_the_cap():
    sizing = _sizing()
    low, mid, high = sizing.size(0.02), sizing.size(0.2), sizing.size(0.5)
    assert low["tasks"] == sizing.MIN_TASKS and low["discordance_used"] == sizing.FLOOR_DISCORDANCE
    assert sizing.MIN_TASKS < mid["tasks"] < sizing.MAX_TASKS and mid["power"] >= 0.8
    assert high["tasks"] == sizing.MAX_TASKS and high["power"] < 0.8  # capped: says its power
    assert all(n % 8 == 0 for n in high["power_by_tasks"])


def test_an_assumed_discordance_sizes_by_the_same_rule(capsys):
    sizing = _sizing()
    sized = sizing.main(["--discordance", "0.2"])
    assert sized == {**sizing.size(0.2), "discordance_from": "assumed (--discordance)"}
    for argv in ([], ["--discordance", "1.5"]):
        with pytest.raises(SystemExit):
            sizing.main(argv)
    assert "--discordance 1.5: a share of tasks" in capsys.readouterr().err
