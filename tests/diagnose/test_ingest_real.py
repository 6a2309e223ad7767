"""Ingest on real-world files: skip what is bad (unless --strict), today's formats, attempts."""

from __future__ import annotations

import json
import shutil

import pytest

from trace_diagnose.cli import main
from trace_diagnose.errors import IngestError
from trace_diagnose.ingest import ingest
from trace_diagnose.run import stage_ingest

from .paths import FIXTURES


def _line(task, reward, text="hello", **extra):
    return json.dumps(
        {
            "task_id": task,
            "reward": reward,
            "messages": [{"role": "user", "content": text}],
            **extra,
        }
    )


def test_bad_line_and_bad_file_are_skipped_with_warning_and_counted(tmp_path, capsys):
    good = tmp_path / "a.jsonl"
    good.write_text(
        "\n".join(
            [
                _line("t1", 1.0),
                "{not json",
                json.dumps({"task_id": "t2", "reward": 0.0, "messages": [{"role": "robot"}]}),
                _line("t3", 0.0),
            ]
        )
        + "\n"
    )
    broken = FIXTURES / "broken.json"
    rd = tmp_path / "run"
    assert main(["ingest", str(good), str(broken), "-o", str(rd)]) == 0
    out = capsys.readouterr()
    warnings = [line for line in out.err.splitlines() if "warning: skipped" in line]
    assert len(warnings) == 3
    assert any("a.jsonl:2: broken JSON line" in w for w in warnings)
    assert any("a.jsonl:3:" in w and "unknown role 'robot'" in w for w in warnings)
    assert any("broken.json: broken JSON at line 2" in w for w in warnings)
    summary = json.loads((rd / "ingest_summary.json").read_text())
    assert summary["n"] == 2 and summary["n_skipped"] == 3
    assert "skipped as unreadable: 3" in out.out
    # --strict restores abort-on-first-error
    assert main(["ingest", str(good), "-o", str(tmp_path / "r2"), "--strict"]) == 1
    assert "a.jsonl:2: broken JSON line" in capsys.readouterr().err


def test_skipped_inputs_are_listed_in_the_report(tmp_path):
    from trace_diagnose.report import write_report

    data = tmp_path / "a.jsonl"
    data.write_text(_line("t1", 1.0) + "\n" + "[1, 2]\n")
    trajs = stage_ingest(tmp_path / "run", [data])
    summary = json.loads((tmp_path / "run" / "ingest_summary.json").read_text())
    analysis = {
        "capabilities": [],
        "core": [],
        "consensus": {},
        "params": {"n_runs": 1, "rho": 0.1, "delta": 0.2, "k_consistency": 1},
        "totals": {"failed": 0, "passed": 1, "unlabelled": 0},
        "coverage_curve": [],
    }
    write_report(tmp_path / "out", analysis, [], [], [], trajs, summary)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Skipped as unreadable (1)" in md and "a.jsonl:2: expected a JSON object" in md
    assert "a.jsonl:2" in (tmp_path / "out" / "report.html").read_text()


def test_repeated_task_ids_get_an_attempt_index(tmp_path):
    data = tmp_path / "attempts.jsonl"
    data.write_text(
        "\n".join([_line("t1", 1.0), _line("t1", 0.0), _line("t2", 0.0), _line("t1", 0.0)]) + "\n"
    )
    trajs = ingest(data)
    assert [t.traj_id for t in trajs] == ["t1#0", "t1#1", "t2", "t1#2"]
    assert [t.trial for t in trajs] == [0, 1, None, 2]
    assert {t.task_id for t in trajs} == {"t1", "t2"}


def test_tau2_directory_without_simulation_index(tmp_path):
    folder = tmp_path / "tau2"
    shutil.copytree(FIXTURES / "tau2_dir", folder)
    results = json.loads((folder / "results.json").read_text())
    del results["simulation_index"]
    (folder / "results.json").write_text(json.dumps(results))
    trajs = ingest(folder)
    assert sorted(t.traj_id for t in trajs) == ["retail:5", "retail:6"]
    # the results file alone, given by name, is read as the directory layout too
    assert sorted(t.traj_id for t in ingest(folder / "results.json")) == ["retail:5", "retail:6"]


def test_tau2_voice_simulations_are_skipped_as_unsupported(tmp_path):
    data = json.loads((FIXTURES / "tau2_single.json").read_text())
    n = len(data["simulations"])
    voice = dict(data["simulations"][0], id="voice-1", mode="full_duplex", messages=None)
    voice["ticks"] = [{"tick_id": 0, "agent_chunk": None, "user_chunk": None}]
    data["simulations"].append(voice)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(data))
    skipped: list[str] = []
    trajs = ingest(path, skipped=skipped)
    assert len(trajs) == n
    assert len(skipped) == 1 and "voice / tick-based simulation" in skipped[0]
    assert f"simulation {n}" in skipped[0]
    with pytest.raises(IngestError, match="not supported"):
        ingest(path, strict=True)


MINI = FIXTURES / "mini_swe"


def test_mini_swe_agent_current_release_with_exit_message():
    # made by fixtures/mini_swe/make_fixtures.py with mini-swe-agent's own agent and models
    trajs = {t.traj_id: t for t in ingest([MINI])}
    assert set(trajs) == {"calc__calc-1", "calc__calc-2"}
    text, tool = trajs["calc__calc-1"], trajs["calc__calc-2"]
    assert text.outcome.status == "success" and tool.outcome.status == "failure"
    assert text.steps[-1].source == "environment"
    assert text.steps[-1].message.startswith("[run ended: Submitted]")
    assert tool.steps[-1].message.startswith("[run ended: LimitsExceeded]")
    commands = [c.arguments["command"] for s in text.steps for c in s.tool_calls]
    assert commands[0] == "cat calc.py" and "sed -i" in commands[1]
    assert [s.source for s in text.steps[:4]] == ["system", "user", "agent", "environment"]
    assert [s.source for s in tool.steps[2:4]] == ["agent", "tool"]
    assert tool.steps[3].result_of == "call_0"
    assert text.metrics["exit_status"] == "Submitted"


def test_mini_swe_agent_fixtures_match_the_installed_package(tmp_path):
    """Regenerating the fixtures with the installed mini-swe-agent gives the same files, so a
    format change in a new release shows up here."""
    pytest.importorskip("minisweagent")
    import subprocess
    import sys

    work = tmp_path / "mini"
    shutil.copytree(MINI, work)
    subprocess.run(
        [sys.executable, str(work / "make_fixtures.py")], check=True, capture_output=True
    )
    for name in ("calc__calc-1.traj.json", "calc__calc-2.traj.json"):
        fresh = json.loads((work / name).read_text())
        kept = json.loads((MINI / name).read_text())
        fresh["info"].pop("mini_version"), kept["info"].pop("mini_version")
        assert fresh["messages"] == kept["messages"], name


def test_swe_agent_history_only_traj_loads():
    (t,) = ingest(FIXTURES / "swe" / "history_only.traj")
    assert t.traj_id == "history_only" and t.outcome.status == "unknown"
    assert [s.source for s in t.steps] == [
        "system",
        "user",
        "agent",
        "tool",
        "agent",
        "environment",
    ]
    assert t.steps[1].message == "<issue>calc.add subtracts</issue>"
    assert t.steps[2].tool_calls[0].arguments == {"command": "cat calc.py"}
    assert t.steps[4].tool_calls[0].arguments == {"command": "submit"}
    assert t.task.instruction == "<issue>calc.add subtracts</issue>"


def test_empty_trajectory_is_excluded_with_a_reason(tmp_path):
    data = tmp_path / "e.jsonl"
    data.write_text(
        json.dumps({"task_id": "empty", "reward": 0.0, "messages": []}) + "\n" + _line("t", 0.0)
    )
    trajs = {t.traj_id: t for t in ingest(data)}
    assert trajs["empty"].outcome.status == "excluded"
    assert trajs["empty"].outcome.exclusion_reason == "empty trajectory: no messages"
    assert trajs["t"].outcome.status == "failure"


def test_report_numbers_print_rounding_noise_as_zero_and_markdown_keeps_ge():
    from trace_diagnose.report import _fmt, _md_escape

    assert _fmt(1.1e-16) == "0" and _fmt(0.89) == "0.89" and _fmt(0.004) == "4.0e-03"
    assert _md_escape("coverage >= 0.1 <b>") == "coverage >= 0.1 &lt;b>"
