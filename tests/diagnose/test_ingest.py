"""ingest: every format, detection, exclusions, redaction, clear errors."""

from __future__ import annotations

import pytest

from trace_diagnose.errors import IngestError, UnknownFormatError
from trace_diagnose.ingest import detect_format, ingest

from .paths import FIXTURES, TAU2_REAL, need


def by_id(trajs):
    return {t.traj_id: t for t in trajs}


def test_tau2_single_file_outcomes_exclusions_and_steps():
    t = by_id(ingest(FIXTURES / "tau2_single.json"))
    assert set(t) == {"airline:0#0", "airline:0#1", "airline:1"}
    assert t["airline:0#0"].outcome.status == "success"
    assert t["airline:0#1"].outcome.status == "failure"
    assert t["airline:1"].outcome.status == "excluded"
    assert t["airline:1"].outcome.exclusion_reason == "termination_reason=infrastructure_error"
    fail = t["airline:0#1"]
    assert fail.task_id == "airline:0" and fail.trial == 1
    assert fail.steps[2].tool_calls[0].name == "cancel_reservation"
    assert fail.steps[2].tool_calls[0].arguments == {"reservation_id": "EHGLP3"}
    assert fail.steps[3].is_error and fail.steps[3].source == "tool"
    assert fail.task.policy.startswith("Basic economy")
    assert fail.task.tools == ["get_reservation_details", "cancel_reservation"]


def test_tau2_directory_layout():
    t = by_id(ingest(FIXTURES / "tau2_dir"))
    assert {k: v.outcome.status for k, v in t.items()} == {
        "retail:5": "success",
        "retail:6": "failure",
    }
    assert t["retail:6"].steps[1].message == "I returned #W2. Anything else?"


def test_tau2_directory_missing_simulation_names_the_file(tmp_path):
    (tmp_path / "simulations").mkdir()
    (tmp_path / "results.json").write_text('{"simulation_index": [{"id": "zz", "task_id": "1"}]}')
    with pytest.raises(IngestError, match="zz.json is missing"):
        ingest(tmp_path)


def test_real_tau2_file_counts():
    trajs = ingest(need(TAU2_REAL))
    assert len(trajs) == 50
    assert sum(t.outcome.status == "success" for t in trajs) == 28
    assert sum(t.outcome.status == "failure" for t in trajs) == 22
    failed = sorted(int(t.task_id.split(":")[1]) for t in trajs if t.outcome.status == "failure")
    assert failed == [
        0,
        2,
        7,
        8,
        10,
        11,
        14,
        16,
        17,
        18,
        20,
        23,
        24,
        25,
        29,
        33,
        35,
        39,
        41,
        42,
        44,
        48,
    ]
    assert sum(len(t.steps) for t in trajs) == 1191
    assert sum(len(s.tool_calls) for t in trajs for s in t.steps) == 265


def test_openai_jsonl_parts_legacy_function_call_and_unknown_outcome():
    t = by_id(ingest(FIXTURES / "openai_chat.jsonl"))
    assert t["oa-1"].outcome.status == "success" and t["oa-1"].steps[1].message == "What is 2+2?"
    assert t["oa-1"].steps[2].tool_calls[0].arguments == {"expr": "2+2"}
    assert t["oa-2"].outcome.status == "failure"
    assert t["oa-2"].steps[1].tool_calls[0].name == "calc"
    assert t["oa-2"].steps[2].source == "tool" and t["oa-2"].steps[2].is_error
    assert t["oa-3"].outcome.status == "unknown" and not t["oa-3"].usable


def test_swe_formats_join_the_report():
    t = by_id(ingest(FIXTURES / "swe"))
    assert t["astropy__astropy-1"].source_format == "mini_swe_agent"
    assert t["astropy__astropy-1"].outcome.status == "success"
    assert t["astropy__astropy-1"].steps[2].tool_calls[0].arguments == {
        "command": "cat separable.py"
    }
    dj = t["django__django-2"]
    assert dj.outcome.status == "failure"
    assert dj.steps[2].tool_calls[0].arguments == {
        "command": "grep -rn ordering django/contrib/admin"
    }
    assert dj.steps[3].source == "environment"
    sy = t["sympy__sympy-3"]
    assert sy.source_format == "swe_agent"
    assert (
        sy.outcome.status == "excluded" and sy.outcome.exclusion_reason == "SWE-bench harness error"
    )
    assert sy.steps[0].message == "Fix sympy simplify on trig expressions."
    assert [s.source for s in sy.steps] == ["user", "agent", "environment", "agent", "environment"]


def test_swe_without_report_is_unknown():
    t = ingest(FIXTURES / "swe" / "astropy__astropy-1.traj.json")
    assert t[0].outcome.status == "unknown"
    assert "--swebench-report" in t[0].outcome.exclusion_reason


def test_trace_gym_episode_log_ground_truth():
    t = ingest(FIXTURES / "episodes.jsonl")
    assert [x.traj_id for x in t] == [
        "trace/precondition-v0:eval:d0.50:s17#0",
        "trace/precondition-v0:eval:d0.50:s17#1",
    ]
    assert t[0].outcome.status == "success" and t[1].outcome.status == "failure"
    assert t[1].ground_truth.lacking == ["precondition_verification"]
    assert t[1].ground_truth.required == ["precondition_verification", "tool_call_precision"]
    assert t[1].steps[3].is_error


def test_detection_names_each_format():
    kinds = {}
    for name in ["tau2_single.json", "tau2_dir", "openai_chat.jsonl", "episodes.jsonl", "swe"]:
        kinds.update({p.name: k for p, k in detect_format(FIXTURES / name)})
    assert kinds["tau2_dir"] == "tau2"
    assert kinds["tau2_single.json"] == "tau2"
    assert kinds["openai_chat.jsonl"] == "openai_jsonl"
    assert kinds["episodes.jsonl"] == "trace_gym"
    assert kinds["astropy__astropy-1.traj.json"] == "mini_swe_agent"
    assert kinds["sympy__sympy-3.traj"] == "swe_agent"
    assert kinds["history_only.traj"] == "swe_agent"
    assert kinds["report.json"] == "swebench_report"
    assert len(kinds) == 9


def test_unknown_and_broken_files_raise_clear_errors(tmp_path):
    with pytest.raises(UnknownFormatError, match=r"unknown\.json: unrecognised trajectory format"):
        ingest(FIXTURES / "unknown.json", strict=True)
    # without --strict, nothing readable at all is still an error naming the first problem
    with pytest.raises(IngestError, match=r"no trajectory could be read: .*unknown\.json"):
        ingest(FIXTURES / "unknown.json")
    with pytest.raises(IngestError, match=r"broken\.json: broken JSON at line 2"):
        ingest(FIXTURES / "broken.json")
    with pytest.raises(IngestError, match="no such file"):
        ingest(tmp_path / "nope.json")
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"messages": []}\n{not json\n')
    with pytest.raises(IngestError, match=r"x\.jsonl:2: broken JSON line"):
        ingest(bad, strict=True)


def test_redaction_happens_before_anything_else():
    t = by_id(ingest(FIXTURES / "tau2_single.json", redact=[r"EHGLP\d", r"emma_\d"]))
    dumped = t["airline:0#1"].model_dump_json()
    assert "EHGLP3" not in dumped and "emma_1" not in dumped
    assert "[REDACTED]" in t["airline:0#1"].steps[1].message
    assert t["airline:0#1"].steps[2].tool_calls[0].arguments == {"reservation_id": "[REDACTED]"}


def test_invalid_redact_regex_is_an_ingest_error():
    with pytest.raises(IngestError, match="invalid regular expression"):
        ingest(FIXTURES / "tau2_single.json", redact=["("])


def test_same_ids_from_two_inputs_are_disambiguated(tmp_path):
    other = tmp_path / "copy.jsonl"
    other.write_text((FIXTURES / "openai_chat.jsonl").read_text())
    ids = [t.traj_id for t in ingest([FIXTURES / "openai_chat.jsonl", other])]
    assert len(ids) == len(set(ids)) == 6
    assert all("@" in i for i in ids)
