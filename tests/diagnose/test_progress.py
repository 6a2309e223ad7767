"""Progress output: plain lines when piped, a bar on a terminal, and the final summary line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from trace_diagnose import llm
from trace_diagnose.llm import Budget, Progress

from .planted import write_planted
from .test_cli import ENV, stub_args

LINE = re.compile(
    r"^trace-diagnose: (?P<stage>[a-z-]+(?: \(\d+ runs\))?): (?P<done>\d+)/(?P<total>\d+) "
    r"\((?P<pct>\d+)%\), \d+s elapsed(?:, ~\d+s left)?, spent (?P<spent>\d+\.\d{4}) USD$"
)
SUMMARY = re.compile(
    r"^LLM calls: (?P<calls>\d+) made, (?P<hits>\d+) from cache, (?P<cost>\d+\.\d{4}) USD; "
    r"unlabelled: (?P<unlabelled>\d+) of (?P<usable>\d+) trajectories$"
)


def _run_piped(stub, data, rd):
    args = [a for a in stub_args(stub, "--n-runs", "2") if a != "--no-progress"]
    cmd = [sys.executable, "-m", "trace_diagnose.cli", "run", str(data), "-o", str(rd), *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)


def test_piped_run_prints_progress_lines_and_a_summary(stub, tmp_path):
    data = write_planted(tmp_path / "p.jsonl", n_tasks=10)  # 20 trajectories
    rd = tmp_path / "run"
    res = _run_piped(stub, data, rd)
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr and "\x1b" not in res.stderr  # no terminal control codes
    lines = [m for m in map(LINE.match, res.stderr.splitlines()) if m]
    by_stage: dict[str, list[re.Match]] = {}
    for m in lines:
        by_stage.setdefault(m["stage"], []).append(m)
    assert set(by_stage) == {"propose", "label (2 runs)", "label-agent-only"}, res.stderr
    label = by_stage["label (2 runs)"]
    # 40 calls: one line per 10 %, the last at 100 %, spend never decreasing
    assert [int(m["pct"]) for m in label] == list(range(10, 101, 10))
    assert label[-1]["done"] == label[-1]["total"] == "40"
    spent = [float(m["spent"]) for m in label]
    assert spent == sorted(spent) and spent[-1] > 0
    assert all("left" in m.group(0) for m in label[:-1])
    # one agent-only answer per trajectory with an NA verdict, shared by both runs
    checked = int(by_stage["label-agent-only"][-1]["total"])
    assert 0 < checked <= 20
    summary = SUMMARY.match(res.stdout.splitlines()[-1])
    assert summary, res.stdout
    assert int(summary["calls"]) == stub.total_requests > 40
    assert summary["hits"] == "0" and float(summary["cost"]) >= spent[-1]
    assert (summary["unlabelled"], summary["usable"]) == ("0", "20")

    n_before = stub.total_requests
    again = _run_piped(stub, data, rd)  # resumed: everything from the cache, nothing spent
    assert again.returncode == 0, again.stderr
    summary = SUMMARY.match(again.stdout.splitlines()[-1])
    assert summary and summary["calls"] == "0" and summary["cost"] == "0.0000"
    assert int(summary["hits"]) == 40 + checked and stub.total_requests == n_before


def test_no_progress_keeps_only_the_summary(stub, tmp_path, capsys, monkeypatch):
    from trace_diagnose.cli import main

    monkeypatch.setenv("STUB_KEY", "stub")
    data = write_planted(tmp_path / "p.jsonl", n_tasks=3)
    code = main(["run", str(data), "-o", str(tmp_path / "r"), *stub_args(stub, "--n-runs", "1")])
    out, err = capsys.readouterr()
    assert code == 0 and not any(LINE.match(line) for line in err.splitlines())
    assert SUMMARY.match(out.splitlines()[-1]), out


def test_piped_lines_every_tenth_and_after_a_quiet_interval(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(llm.time, "monotonic", lambda: clock[0])
    progress = Progress("label", 1000, "lines", Budget(priced=False))
    for _ in range(99):
        progress.advance()
    assert capsys.readouterr().err == ""  # below 10 % and no time passed: silent
    progress.advance()
    assert "label: 100/1000 (10%)" in capsys.readouterr().err
    clock[0] = llm.PROGRESS_LINE_EVERY_S + 1  # a slow stage still shows life
    progress.advance()
    err = capsys.readouterr().err
    assert "label: 101/1000 (10%), 31s elapsed, ~" in err and "spend unknown" in err


def test_terminal_gets_a_bar_with_time_left_and_spend(monkeypatch):
    from rich.progress import TimeRemainingColumn

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats stderr as a terminal
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    budget = Budget()
    progress = Progress.start("propose", 4, True, budget)
    try:
        assert progress.mode == "bar"
        assert any(isinstance(c, TimeRemainingColumn) for c in progress.bar.columns)
        budget.spent = 0.25
        progress.advance()
        task = progress.bar.tasks[0]
        assert task.completed == 1 and task.fields["spent"] == "spent 0.2500 USD"
    finally:
        progress.close()


@pytest.mark.parametrize("show", [False, True])
def test_nothing_to_do_shows_nothing(show, capsys):
    progress = Progress.start("label", 0, show)
    progress.close()
    assert progress.mode == "off" and capsys.readouterr().err == ""
