"""trace_train's layout: compose/ and pipeline/ packages, the old flat module paths still
re-export them (for one release), and the stage table is the one order of ``trace run``."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("trace_train.moe", "trace_train.compose.moe", ["attach_experts", "load_moe", "MoEState"]),
        ("trace_train.routing", "trace_train.compose.routing", ["load_routed", "RoutedExpert"]),
        ("trace_train.router_training", "trace_train.compose.router_training", ["train_routers"]),
        ("trace_train.export", "trace_train.compose.export", ["export_expert", "static_merge"]),
        ("trace_train.compose_cli", "trace_train.compose.cli", ["register"]),
        ("trace_train.pipeline_report", "trace_train.pipeline.report", ["write_run_report"]),
        ("trace_train.pipeline_compose", "trace_train.pipeline.compose", ["build_moe"]),
        ("trace_train.pipeline_cli", "trace_train.pipeline.cli", ["main"]),
    ],
)
def test_old_module_paths_re_export_the_new_ones(old, new, names):
    import importlib

    old_mod, new_mod = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(old_mod, name) is getattr(new_mod, name), name


def test_each_routing_accuracy_has_its_own_name():
    from trace_train import router_training, routing
    from trace_train.compose.router_training import token_routing_accuracy
    from trace_train.compose.routing import task_routing_accuracy

    assert task_routing_accuracy is not token_routing_accuracy
    assert routing.routing_accuracy is task_routing_accuracy  # the old names, kept one release
    assert router_training.routing_accuracy is token_routing_accuracy


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
