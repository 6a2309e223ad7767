"""``trace run`` on existing trajectories (no trace_gym target): diagnosis with an LLM (the
local stub) and environment matching, no training."""

from __future__ import annotations

import json

import pytest

from trace_train.pipeline import PipelineConfig, PipelineError, run_pipeline

from .paths import TAU2_REAL, need
from .planted import PLANTED


@pytest.fixture(autouse=True)
def _stub_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")  # litellm's openai provider wants one


def external(tmp_path, stub, files, **extra):
    return PipelineConfig(
        run_dir=str(tmp_path / "run"),
        target="",
        trajectories=[str(f) for f in files],
        train=False,
        llm="openai/stub",
        llm_api_base=stub.api_base,
        diagnose={"label_runs": 2},
        **extra,
    )


def test_planted_trajectories_are_diagnosed_and_matched(tmp_path, stub, planted):
    report_path = run_pipeline(external(tmp_path, stub, [planted]), say=lambda _: None)
    report = json.loads(report_path.with_suffix(".json").read_text())
    assert report["diagnosis_method"] == "llm:openai/stub"
    assert report["core"][0] == PLANTED
    (match,) = [m for m in report["env_plan"] if m["capability"] == PLANTED]
    assert match["env_id"] is None or match["env_id"].startswith("trace/")
    assert report["policies"] == [] and report["adapters"] == []
    state = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert "train" not in state and state["report"]["status"] == "done"
    assert (tmp_path / "run" / "diagnose" / "report.html").exists()


def test_real_tau2_file_runs_to_a_report(tmp_path, stub):
    tau2 = need(TAU2_REAL)
    report_path = run_pipeline(external(tmp_path, stub, [tau2]), say=lambda _: None)
    report = json.loads(report_path.with_suffix(".json").read_text())
    assert report["totals"]["failed"] == 22 and report["totals"]["passed"] == 28


def test_external_trajectories_without_ground_truth_need_an_llm(tmp_path, planted):
    cfg = PipelineConfig(
        run_dir=str(tmp_path / "run"), target="", trajectories=[str(planted)], train=False
    )
    with pytest.raises(PipelineError, match="--llm"):
        run_pipeline(cfg, say=lambda _: None)
