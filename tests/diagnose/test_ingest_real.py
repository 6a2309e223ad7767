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
