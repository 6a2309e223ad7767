"""``trace run`` on the SWE domain (trace_train/configs/swe_cpu.yaml) on a tiny random model:
the deficit repairer's planted gaps are diagnosed from the verifier's ground truth, matched
to the single-turn SWE environments, an adapter is trained there and evaluated on the
target's held-out split, and the report is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_train.pipeline import PipelineConfig, run_pipeline

pytestmark = pytest.mark.train

CONFIG = Path(__file__).resolve().parents[2] / "trace_train" / "configs" / "swe_cpu.yaml"
PLANTED = {"deep_call_graph_traversal", "multi_site_consistency"}
SWE_ENVS = {
    "deep_call_graph_traversal": "trace/swe-call-graph-v0",
    "multi_site_consistency": "trace/swe-multi-site-v0",
}


def test_swe_cpu_config_runs_the_loop_on_a_tiny_model(tmp_path, tiny_model_dir):
    shipped = PipelineConfig.load(CONFIG)
    assert shipped.target == "trace/swe-repair-v0" and shipped.llm is None
    assert shipped.grpo["env_kwargs"] == {"config": {"n_fillers": 8}}
    cfg = PipelineConfig.load(
        CONFIG,
        {
            "run_dir": str(tmp_path / "run"),
            "model": tiny_model_dir,
            "preset": "cpu_tiny",
            "warmstart.demonstrations": 0,
            "diagnose.episodes": 40,
            # the shipped config's smallest modules, the smallest real update
            "grpo": {"steps": 1, "group_size": 2, "max_new_tokens": 8},
            "max_adapters": 1,
            "compose": {"kinds": [], "routing_check_tasks": 0},
            "evaluate.episodes": 2,
            "generation": {"max_turns": 2, "max_new_tokens": 8, "batch_size": 2},
        },
    )
    log: list[str] = []
    html = run_pipeline(cfg, say=log.append)
    run = tmp_path / "run"
    report = json.loads((run / "report.json").read_text())

    assert report["diagnosis_method"] == "ground_truth" and report["target"] == cfg.target
    assert set(report["core"]) == PLANTED
    plan = json.loads((run / "map-envs.json").read_text())
    first = report["core"][0]  # max_adapters=1 keeps the strongest gap
    assert {p["capability"]: p["env_id"] for p in plan} == {first: SWE_ENVS[first]}

    (adapter,) = report["adapters"]
    assert adapter["capability"] == first and adapter["steps"] == 1
    assert (run / "train" / adapter["capability"] / "adapter" / "adapter_config.json").exists()
    names = [p["name"] for p in report["policies"]]
    assert names == ["base", f"adapter:{adapter['capability']}"]
    assert report["eval_split"] == "test"
    for p in report["policies"]:
        assert p["episodes"] == 2 and 0.0 <= p["success"] <= 1.0
    assert html.exists() and "deep_call_graph_traversal" in html.read_text()
    assert any(line.startswith("train: GRPO on trace/swe-") for line in log)
