"""trace_train's layout: compose/ and pipeline/ packages (the old flat module paths are gone),
and the stage table is the one order of ``trace run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MOVED = {
    "trace_train.moe": "trace_train.compose.moe",
    "trace_train.routing": "trace_train.compose.routing",
    "trace_train.router_training": "trace_train.compose.router_training",
    "trace_train.export": "trace_train.compose.export",
    "trace_train.compose_cli": "trace_train.compose.cli",
    "trace_train.pipeline_report": "trace_train.pipeline.report",
    "trace_train.pipeline_compose": "trace_train.pipeline.compositions",
    "trace_train.pipeline.compose": "trace_train.pipeline.compositions",
    "trace_train.pipeline_cli": "trace_train.pipeline.cli",
}
"""The flat module paths removed after their release of re-exports, and where each moved
(CHANGELOG.md says the same to users)."""


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_moved_modules_live_only_at_their_new_path(old, new):
    import importlib

    importlib.import_module(new)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_changelog_says_where_each_moved_module_went():
    changelog = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text()
    for old, new in MOVED.items():
        assert f"`{old}` -> `{new}`" in changelog, old


def test_each_routing_accuracy_has_its_own_name():
    from trace_train.compose.router_training import token_routing_accuracy
    from trace_train.compose.routing import task_routing_accuracy

    assert task_routing_accuracy is not token_routing_accuracy


def test_stage_table_is_the_order_of_a_run():
    from trace_train.pipeline import STAGES

    names = [s.name for s in STAGES]
    assert names == [
        "warmstart", "rollout-base", "diagnose", "select", "map-envs", "synthesize", "train",
        "compose", "evaluate", "rediagnose", "report",
    ]  # fmt: skip
    assert [s.name for s in STAGES if s.trains] == ["train", "compose", "evaluate", "rediagnose"]


def test_package_entry_points_stay_light():
    code = (
        "import sys, trace_train.compose, trace_train.pipeline, trace_train.pipeline.cli\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trace_gym') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_trace_train_cli_has_the_composition_commands():
    """They are registered from trace_train.compose.cli (once reached through a removed path,
    where a failed import dropped them silently)."""
    from trace_train.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert {"grpo", "warmstart", "eval", "embedded", "route", "merge", "train-router",
            "export"} <= set(sub.choices)  # fmt: skip
