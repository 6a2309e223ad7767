"""End to end against the stub LLM: planted signal, faults, injection, cache, budget."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

import trace_diagnose as td
from trace_diagnose.errors import BudgetExceeded, CacheMiss
from trace_diagnose.label import label_messages
from trace_diagnose.llm import Cache, LLMClient, LLMConfig
from trace_diagnose.render import render
from trace_diagnose.run import estimate, stage_ingest, stage_label
from trace_diagnose.schema import Capability, LabelResponse

from .paths import FIXTURES
from .planted import CAPABILITIES, MARKERS, PLANTED, write_planted
from .stub_llm import StubConfig, StubLLM


def llm(stub, **kw):
    base = {
        "model": "openai/stub",
        "api_base": stub.api_base,
        "api_key": "stub",
        "price_in": 1.0,
        "price_out": 2.0,
        "backoff": 0.01,
        "timeout": 5.0,
    }
    return LLMConfig(**{**base, **kw})


def test_planted_capability_is_selected_first_and_report_written(stub, planted, tmp_path):
    result = td.run_diagnosis(
        [planted], tmp_path / "run", llm=llm(stub), n_runs=3, show_progress=False
    )
    assert result["core"][0] == PLANTED
    assert result["selected_capabilities"][0]["skill"] == PLANTED
    row = next(r for r in result["capabilities"] if r["name"] == PLANTED)
    assert row["n_runs_passed"] == 3 and row["pooled"]["bh_q"] < 0.01
    caps = json.loads((tmp_path / "run" / "capabilities.json").read_text())
    assert [c["name"] for c in caps["capabilities"]] == [c["name"] for c in CAPABILITIES]
    assert (
        caps["rejected"][0]["name"] == "task_success" and "outcome" in caps["rejected"][0]["reason"]
    )
    matches = json.loads((tmp_path / "run" / "env_matches.json").read_text())
    assert matches[0]["env_ids"] == ["trace/precondition-v0"] and matches[0]["method"] == "tag"
    md = (tmp_path / "run" / "report.md").read_text()
    assert f"| 1 | {PLANTED} |" in md and "[S" in md
    assert "Runner-up environments (lexical score): trace/policy-pressure-v0" in md
    first = stub.total_requests
    # Rerunning the same command resumes: every call comes from the cache.
    again = td.run_diagnosis(
        [planted], tmp_path / "run", llm=llm(stub), n_runs=3, show_progress=False
    )
    assert stub.total_requests == first and again["core"] == result["core"]


def test_label_prompt_is_outcome_blind(planted):
    trajs = td.ingest(planted)
    caps = [Capability(**c) for c in CAPABILITIES]
    for t in trajs[:6]:
        marked = t.model_copy(
            update={
                "outcome": td.Outcome(
                    reward=0.123457,
                    success=False,
                    status="failure",
                    exclusion_reason="SENTINEL_WHY",
                ),
                "ground_truth": {"required": ["SENTINEL_REQ"], "lacking": ["SENTINEL_LACK"]},
                "metrics": {"termination_reason": "SENTINEL_TERM", "cost_usd": 0.987654},
            }
        )
        flipped = marked.model_copy(
            update={"outcome": td.Outcome(reward=1.0, success=True, status="success")}
        )
        prompt = json.dumps(label_messages(render(marked), caps))
        for leak in ("0.123457", "SENTINEL", "0.987654"):
            assert leak not in prompt
        assert not re.search(r"reward|outcome|succe|fail", prompt, re.I), t.traj_id
        assert prompt == json.dumps(label_messages(render(flipped), caps))
        assert t.traj_id in prompt


def test_fault_injection_completes_records_unlabelled_and_excludes_them(make_stub, tmp_path):
    stub = make_stub(fault_rate=0.3, stall_s=1.5)
    data = write_planted(tmp_path / "p.jsonl", n_tasks=15, trials=2, seed=1)
    rd = tmp_path / "run"
    stage_ingest(rd, [data])
    td.run.write_json(rd / "capabilities.json", {"capabilities": CAPABILITIES})
    cfg = llm(stub, timeout=0.5, retries=2, repair_retries=1, concurrency=8)
    runs = stage_label(rd, cfg, n_runs=3, show_progress=False, max_unlabelled=1.0)
    assert set(stub.faults) == {"http500", "timeout", "malformed", "schema", "bad_step"}
    unlabelled = {(r.attempt, t) for r in runs for t in r.unlabelled}
    assert unlabelled, "with 30% faults and few retries some trajectories must stay unlabelled"
    for r in runs:
        assert len(r.failed) + len(r.passed) + len(r.unlabelled) == 30
        for tid, reason in r.unlabelled.items():
            assert tid not in r.failed and tid not in r.passed
            assert all(tid not in v for v in r.labels.values())
            assert re.search(r"gave up|invalid after", reason)
    result = td.analyze(runs)
    assert result["totals"]["unlabelled"] == len({t for _, t in unlabelled})
    assert result["core"][0] == PLANTED
    stats = Cache(rd / "cache.sqlite").stats()
    assert stats["errors"]["label"] >= 1


def test_cache_only_replays_and_misses_are_errors(stub, planted, tmp_path):
    rd = tmp_path / "run"
    stage_ingest(rd, [planted])
    td.run.write_json(rd / "capabilities.json", {"capabilities": CAPABILITIES})
    runs = stage_label(rd, llm(stub), n_runs=1, show_progress=False)
    n = stub.total_requests
    replay = stage_label(rd, llm(stub, cache_only=True), n_runs=1, show_progress=False)
    assert stub.total_requests == n
    assert replay[0].labels == runs[0].labels
    with pytest.raises(CacheMiss, match="--cache-only"):
        stage_label(rd, llm(stub, cache_only=True), n_runs=2, show_progress=False)


def test_max_cost_is_a_hard_cap(stub, planted, tmp_path):
    rd = tmp_path / "run"
    stage_ingest(rd, [planted])
    td.run.write_json(rd / "capabilities.json", {"capabilities": CAPABILITIES})
    cap = 0.01  # USD; at 1 USD / M input tokens each label call costs ~0.0005-0.001
    with pytest.raises(BudgetExceeded, match="--max-cost"):
        stage_label(rd, llm(stub, max_cost=cap, concurrency=2), n_runs=2, show_progress=False)
    spent = sum(s["cost_usd"] for s in Cache(rd / "cache.sqlite").stats()["stages"].values())
    assert 0 < spent <= cap
    assert stub.total_requests < 80


def test_dry_run_estimates_without_calling(stub, planted, tmp_path):
    rd = tmp_path / "run"
    stage_ingest(rd, [planted])
    est = estimate(rd, llm(stub), n_runs=2)
    assert stub.total_requests == 0
    assert est["stages"]["label"]["calls"] == 80 and est["stages"]["propose"]["calls"] >= 2
    assert est["total_cost_usd"] > 0


def test_prompt_injection_and_markup_are_inert_in_the_report(stub, tmp_path):
    data = write_planted(tmp_path / "p.jsonl", inject=True)
    # every trajectory holds the injection: over --max-flagged, so exit code 4, report written
    with pytest.raises(td.IncompleteDiagnosis, match="--max-flagged"):
        td.run_diagnosis([data], tmp_path / "run", llm=llm(stub), n_runs=2, show_progress=False)
    result = td.run_diagnosis(
        [data], tmp_path / "run", llm=llm(stub), n_runs=2, show_progress=False, max_flagged=1.0
    )
    html = (tmp_path / "run" / "report.html").read_text()
    assert "<script" not in html.lower() and "</div> ignore" not in html
    assert "40 trajectories hold text addressed to the labeller" in html  # at the top
    assert "default-src 'none'" in html and "http://" not in html and "https://" not in html
    md = (tmp_path / "run" / "report.md").read_text()
    assert "<script" not in md
    for run_file in (tmp_path / "run" / "labels").glob("run_*.json"):
        run = json.loads(run_file.read_text())
        for caps in run["evidence"].values():
            LabelResponse.model_validate(
                {"labels": [{"capability": c, **v} for c, v in caps.items()]}
            )
    # Labels follow the evidence, not the injected order to say PRESENT everywhere.
    assert result["core"][0] == PLANTED
    assert "LACKING" in result["consensus"][PLANTED].values()


def test_ground_truth_agreement_in_report(stub, tmp_path):
    result = td.run_diagnosis(
        [FIXTURES / "episodes.jsonl"],
        tmp_path / "run",
        llm=llm(stub),
        n_runs=1,
        capabilities=None,
        show_progress=False,
        k_consistency=1,
    )
    assert (
        "precondition_verification" not in result["ground_truth"]
    )  # the stub proposed other names
    trajs = td.ingest(FIXTURES / "episodes.jsonl")
    runs = td.labels_from_ground_truth(trajs, ["precondition_verification"])
    gt = td.analyze(runs, trajectories=trajs)
    paths = td.write_report(tmp_path / "gt", gt, [], td.map_envs(gt["core"]), runs, trajs)
    html = paths["html"].read_text()
    assert "Agreement with trace_gym ground truth" in html and "precondition_verification" in html


def test_schema_repair_counts_calls(make_stub, tmp_path):
    stub = make_stub()
    client = LLMClient(llm(stub), Cache(tmp_path / "c.sqlite"))
    trajs = td.ingest(write_planted(tmp_path / "p.jsonl", n_tasks=1, trials=1))
    caps = [Capability(**c) for c in CAPABILITIES]
    msgs = label_messages(render(trajs[0]), caps)
    calls = []

    def reject_first(resp):
        calls.append(1)
        return "try again" if len(calls) == 1 else None

    result = asyncio.run(client.structured("label", msgs, LabelResponse, validate=reject_first))
    assert result.value is not None and result.calls == 2 and stub.total_requests == 2


def test_markup_in_an_accepted_evidence_quote_is_escaped_in_the_report(tmp_path):
    """Markup the agent really wrote (not an injection: it is quoted as evidence) reaches the
    report as text: escaped in HTML and Markdown, never as a live element."""
    payload = "<script>alert('x')</script>"
    sentence = f"I will skip the eligibility check {payload} and proceed."
    markers = {**MARKERS, PLANTED: {**MARKERS[PLANTED], "lacking": [sentence]}}
    data = write_planted(tmp_path / "p.jsonl", n_tasks=8)
    original = MARKERS[PLANTED]["lacking"][0]
    data.write_text(data.read_text().replace(original, sentence))
    server = StubLLM(StubConfig(markers=markers, propose=CAPABILITIES)).start()
    try:
        td.run_diagnosis([data], tmp_path / "run", llm=llm(server), n_runs=1, show_progress=False)
    finally:
        server.stop()
    rd = tmp_path / "run"
    quotes = [
        e["quote"]
        for f in (rd / "labels").glob("run_*.json")
        for caps in json.loads(f.read_text())["evidence"].values()
        for e in caps.get(PLANTED, {}).get("evidence", [])
    ]
    assert sentence in quotes  # the payload is part of accepted evidence
    html = (rd / "report.html").read_text()
    assert "skip the eligibility check &lt;script&gt;alert(" in html
    assert "<script" not in html.lower()
    md = (rd / "report.md").read_text()
    assert "skip the eligibility check &lt;script>alert(" in md and "<script" not in md
