"""The command line: reference analysis, one-line errors, status, SIGKILL and resume."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from trace_diagnose.cli import main

from .paths import FIXTURES, REPO, TRACE_SELECTION, need
from .planted import PLANTED, write_planted

ENV = {
    **os.environ,
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "STUB_KEY": "stub",
    "PYTHONPATH": str(REPO),
}


def stub_args(stub, *extra):
    return [
        "--model",
        "openai/stub",
        "--api-base",
        stub.api_base,
        "--api-key-env",
        "STUB_KEY",
        "--no-progress",
        "--price-in",
        "1",
        "--price-out",
        "2",
        *extra,
    ]


def test_analyze_reference_runs_via_cli(tmp_path, capsys):
    ref = need(TRACE_SELECTION)
    out = tmp_path / "analysis.json"
    assert main(["analyze", "--runs", str(ref / "run_*.json"), "--json", str(out)]) == 0
    got = json.loads(out.read_text())["selected_capabilities"]
    expected = json.loads((ref / "selected_capabilities.json").read_text())
    assert [g["skill"] for g in got] == [e["skill"] for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert g["n_runs_passed"] == e["n_runs_passed"] and g["description"] == e["description"]
        for key in ("mean_cov", "std_cov", "mean_delta", "std_delta"):
            assert math.isclose(g[key], e[key], abs_tol=1e-12)
    assert "core: multi_step_transaction_completion" in capsys.readouterr().out


def test_errors_are_one_line_without_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRACE_DEBUG", raising=False)
    assert main(["ingest", str(FIXTURES / "unknown.json"), "-o", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "unknown.json: unrecognised trajectory format" in err
        and "Traceback" not in err
    )
    assert main(["report", str(tmp_path / "nothing")]) == 1
    assert "run `trace-diagnose analyze" in capsys.readouterr().err
    monkeypatch.setenv("TRACE_DEBUG", "1")
    assert main(["ingest", str(FIXTURES / "broken.json"), "-o", str(tmp_path / "r")]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_dry_run_budget_stop_and_status(stub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "stub")
    data = write_planted(tmp_path / "p.jsonl")
    rd = tmp_path / "run"
    assert (
        main(["run", str(data), "-o", str(rd), *stub_args(stub, "--dry-run", "--n-runs", "2")]) == 0
    )
    out = capsys.readouterr().out
    assert f"{'label':16s} {80:6d} calls" in out and stub.total_requests == 0
    assert f"{'label-agent-only':16s} {40:6d} calls" in out  # an upper bound: one each
    assert (
        main(
            [
                "run",
                str(data),
                "-o",
                str(rd),
                *stub_args(stub, "--n-runs", "2", "--max-cost", "0.005"),
            ]
        )
        == 2
    )
    assert "--max-cost 0.0050 USD reached" in capsys.readouterr().err
    assert main(["status", str(rd)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert 0 < sum(s["cost_usd"] for s in status["cache"]["stages"].values()) <= 0.005


def _cache_rows(path):
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("concurrency", [4, 32])
def test_sigkill_then_rerun_asks_nothing_twice(make_stub, tmp_path, concurrency):
    stub = make_stub(block_after=40)
    data = write_planted(tmp_path / "p.jsonl")
    rd = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "trace_diagnose.cli",
        "run",
        str(data),
        "-o",
        str(rd),
        *stub_args(stub, "--n-runs", "3", "--max-concurrency", str(concurrency)),
    ]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # generous: the wait ends as soon as 40 labels are cached, and 60 s was too short on a
    # 2-core machine also running two evaluation workers and another job
    deadline = time.time() + 600
    while _cache_rows(rd / "cache.sqlite") < 40 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert _cache_rows(rd / "cache.sqlite") == 40, (
        proc.stderr.read() if proc.poll() is not None else "stub never reached 40"
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = set(stub.completed)
    assert len(done_before) == 40
    n_before = len(stub.log)
    stub.config.block_after = None
    stub.release.set()
    second = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    asked_again = [k for k in stub.log[n_before:] if k in done_before]
    assert asked_again == []
    assert len(stub.log) > n_before  # the rest was asked
    analysis = json.loads((rd / "analysis.json").read_text())
    assert analysis["core"][0] == PLANTED and analysis["totals"]["unlabelled"] == 0


def test_no_torch_and_lazy_litellm():
    code = (
        "import sys, pkgutil, importlib, trace_diagnose\n"
        "for m in pkgutil.walk_packages(trace_diagnose.__path__, 'trace_diagnose.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('torch' in sys.modules, 'litellm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_analyze_works_without_litellm_installed(tmp_path):
    ref = need(TRACE_SELECTION)
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('litellm', 'openai'):\n"
        "            raise ImportError('blocked for the test: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from trace_diagnose.cli import main\n"
        f"sys.exit(main(['analyze', '--runs', {str(ref / 'run_*.json')!r}, '--json', {str(tmp_path / 'a.json')!r}]))\n"
    )
    res = subprocess.run([sys.executable, "-c", blocker], env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert len(json.loads((tmp_path / "a.json").read_text())["selected_capabilities"]) == 6
