"""``trace run``'s synthesize stage: a selected capability that no environment trains gets one
written by an LLM (a stub on 127.0.0.1 answering with the loyalty-points spec), validated,
registered under the run folder and trained like the others; without an LLM the stage writes
the synthesis request instead."""

from __future__ import annotations

import inspect
import json

import gymnasium as gym
import pytest

from tests.diagnose.stub_llm import StubLLM
from trace_gym.examples import loyalty_points
from trace_gym.registration import USER_PATH_VARIABLE
from trace_train.pipeline import PipelineConfig, Run, run_pipeline
from trace_train.pipeline.stages import stage_map_envs, stage_synthesize

CAPABILITY = "loyalty_points_calculation"
ENV_ID = "trace/loyalty-points-calculation-v0"
DEFINITION = "Compute loyalty points owed under a written earning policy and credit them."
SPEC_MODULE = inspect.getsource(loyalty_points).replace(
    'id="trace/loyalty-points-v0"', f'id="{ENV_ID}"'
)


class SpecWriter(StubLLM):
    """Answers every request with the loyalty-points spec and counts the requests."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[dict]] = []

    def _content(self, req: dict, fault: str | None) -> str:
        self.requests.append(req["messages"])
        return f"```python\n{SPEC_MODULE}```\n"


def diagnosed_run(tmp_path, **overrides) -> PipelineConfig:
    """A run folder whose (ground-truth) diagnosis selected ``CAPABILITY``: the stages before
    map-envs are recorded as finished, so the run resumes at map-envs."""
    run_dir = tmp_path / "run"
    (run_dir / "diagnose").mkdir(parents=True)
    analysis = {
        "core": [CAPABILITY],
        "capabilities": [
            {"name": CAPABILITY, "mean_cov": 0.5, "mean_delta": 0.6, "verdict": "selected"}
        ],
        "totals": {"failed": 10, "passed": 10},
    }
    (run_dir / "diagnose" / "analysis.json").write_text(json.dumps(analysis))
    caps = [{"name": CAPABILITY, "definition": DEFINITION}]
    (run_dir / "diagnose" / "capabilities.json").write_text(json.dumps(caps))
    no_match = {"capability": CAPABILITY, "env_ids": [], "method": "none",
                "needs_new_environment": True}  # fmt: skip
    (run_dir / "diagnose" / "env_matches.json").write_text(json.dumps([no_match]))
    done = {"status": "done"}
    state = {
        "warmstart": {**done, "output": {"skipped": "warm start off"}},
        "rollout-base": {**done, "output": {"trajectories": [], "policy": "given"}},
        "diagnose": {**done, "output": {"method": "ground_truth", "core": [CAPABILITY]}},
        "select": {**done, "output": {"selected": [CAPABILITY]}},
    }
    (run_dir / "stages.json").write_text(json.dumps(state))
    values = {"run_dir": str(run_dir), "target": "trace/service-desk-v0", **overrides}
    return PipelineConfig(**values)


@pytest.fixture(scope="module")
def synthesized_run(tmp_path_factory, tiny_model_dir):
    """map-envs finds no environment; the stub writes one; GRPO trains on it; evaluation."""
    tmp = tmp_path_factory.mktemp("synth")
    mp = pytest.MonkeyPatch()
    mp.setenv(USER_PATH_VARIABLE, "")
    mp.setenv("OPENAI_API_KEY", "stub")
    llm = SpecWriter().start()
    try:
        cfg = diagnosed_run(
            tmp,
            model=tiny_model_dir,
            synthesize={"llm": "openai/stub", "attempts": 2},
            llm_api_base=llm.api_base,
            preset="cpu_tiny",
            grpo={"steps": 1, "group_size": 2, "max_new_tokens": 8},
            compose={"kinds": []},
            evaluate={"episodes": 2},
            generation={"max_turns": 2, "max_new_tokens": 8, "batch_size": 2},
            tool_prompt="compact",
        )
        log: list[str] = []
        report = run_pipeline(cfg, say=log.append)
        yield {"dir": tmp / "run", "report": report, "log": log, "llm": llm}
    finally:
        llm.stop()
        mp.undo()


def test_missing_capability_is_synthesised_accepted_and_registered(synthesized_run):
    run_dir = synthesized_run["dir"]
    state = json.loads((run_dir / "stages.json").read_text())
    (plan,) = state["map-envs"]["output"]["plan"]
    assert plan["capability"] == CAPABILITY and plan["env_id"] is None
    env = state["synthesize"]["output"]["environments"][CAPABILITY]
    assert env["status"] == "accepted" and env["env_id"] == ENV_ID and env["attempts"] == 1
    gates = {g["name"]: g["status"] for g in env["gates"]}
    assert gates["static"] == gates["oracle"] == gates["contract"] == "pass"
    assert len(synthesized_run["llm"].requests) == 1
    assert DEFINITION in synthesized_run["llm"].requests[0][1]["content"]
    assert ENV_ID in (run_dir / "environments" / "registry.yaml").read_text()
    assert ENV_ID in gym.registry


def test_synthesised_environment_is_trained_like_the_others(synthesized_run):
    run_dir = synthesized_run["dir"]
    state = json.loads((run_dir / "stages.json").read_text())
    adapters = state["train"]["output"]["adapters"]
    assert adapters[CAPABILITY]["env_id"] == ENV_ID
    assert (run_dir / "train" / CAPABILITY / "adapter" / "adapter_config.json").exists()
    assert f"adapter:{CAPABILITY}" in state["evaluate"]["output"]["summaries"]


def test_report_shows_the_gates_of_the_synthesised_environment(synthesized_run):
    report = json.loads((synthesized_run["dir"] / "report.json").read_text())
    (row,) = report["synthesized"]
    assert row["capability"] == CAPABILITY and row["status"] == "accepted"
    assert any(m["env_id"] == ENV_ID for m in report["env_plan"])
    html = (synthesized_run["dir"] / "report.html").read_text()
    assert "Synthesised environments" in html and "information_free" in html and ENV_ID in html


def test_without_an_llm_the_stage_writes_the_synthesis_request(tmp_path, monkeypatch):
    monkeypatch.setenv(USER_PATH_VARIABLE, "")
    run = Run(diagnosed_run(tmp_path))
    log: list[str] = []
    run.mark("map-envs", "done", stage_map_envs(run, log.append))
    output = stage_synthesize(run, log.append)
    info = output["environments"][CAPABILITY]
    assert info["status"] == "requested"
    request = json.loads(
        (tmp_path / "run" / "synthesize" / "requests" / f"{CAPABILITY}.json").read_text()
    )
    assert request["capability"] == CAPABILITY and request["definition"] == DEFINITION
    assert "evidence" in request and "trace-gym synthesize --capability" in request["command"]
    assert any("no LLM is configured" in line for line in log)
    assert output["plan"][0]["env_id"] is None
    assert not (tmp_path / "run" / "environments").exists()
