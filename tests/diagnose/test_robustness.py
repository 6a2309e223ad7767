"""A dead or refusing model, bad options and the command-wide budget: loud, one line, no loss."""

from __future__ import annotations

import json
import time

import pytest

import trace_diagnose as td
from trace_diagnose.cli import main
from trace_diagnose.errors import BudgetExceeded, IncompleteDiagnosis, LLMUnavailable
from trace_diagnose.run import stage_ingest, stage_label

from .planted import CAPABILITIES, write_planted
from .test_cli import stub_args
from .test_pipeline import llm


@pytest.fixture(autouse=True)
def _stub_key(monkeypatch):
    monkeypatch.setenv("STUB_KEY", "stub")


def _closed_port() -> str:
    import socket

    with socket.socket() as s:  # bind then close: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _ready(tmp_path, n_tasks=10):
    rd = tmp_path / "run"
    stage_ingest(rd, [write_planted(tmp_path / "p.jsonl", n_tasks=n_tasks)])
    td.run.write_json(rd / "capabilities.json", {"capabilities": CAPABILITIES})
    return rd


@pytest.mark.parametrize(
    ("status", "cause", "setting"),
    [(401, "authentication refused", "--api-key-env"), (404, "unknown model", "--model")],
)
def test_auth_and_unknown_model_stop_at_once(make_stub, tmp_path, status, cause, setting):
    stub = make_stub(http_status=status)
    rd = _ready(tmp_path)
    td.llm._litellm()  # its import takes seconds on a busy machine; time the calls only
    start = time.monotonic()
    with pytest.raises(LLMUnavailable) as info:
        stage_label(rd, llm(stub, backoff=1.0, retries=3), n_runs=2, show_progress=False)
    message = str(info.value)
    assert cause in message and setting in message and "\n" not in message
    assert len(message) < 300 and info.value.exit_code == 3
    # no retry: a few requests in flight at most, not retries x trajectories, and no backoff
    assert stub.total_requests <= 8 and time.monotonic() - start < 5


def test_unreachable_endpoint_stops_with_the_setting_to_change(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "stub")
    data = write_planted(tmp_path / "p.jsonl", n_tasks=5)
    dead = _closed_port()
    td.llm._litellm()
    args = ["--model", "openai/stub", "--api-base", dead, "--api-key-env", "STUB_KEY"]
    start = time.monotonic()
    code = main(["run", str(data), "-o", str(tmp_path / "r"), *args, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.count("\n") == 1 and "cannot reach" in err and "--api-base" in err
    assert time.monotonic() - start < 10
    assert not (tmp_path / "r" / "report.html").exists()


def test_transient_errors_are_retried_not_fatal(make_stub, tmp_path):
    stub = make_stub(http_status=503)
    rd = _ready(tmp_path, n_tasks=2)
    with pytest.raises(IncompleteDiagnosis, match="4 of 4 passed"):
        stage_label(rd, llm(stub, retries=2), n_runs=1, show_progress=False)
    assert stub.total_requests == 4 * 3  # each request tried 1 + 2 retries


def test_classify_error_kinds():
    import openai
    from httpx import Request, Response

    from trace_diagnose.llm import classify_error

    req = Request("POST", "http://x")

    def status(code):
        return openai.APIStatusError("m", response=Response(code, request=req), body=None)

    assert classify_error(status(401)) == "auth"
    assert classify_error(status(403)) == "auth"
    assert classify_error(status(404)) == "model"
    assert classify_error(status(429)) == "transient"
    assert classify_error(status(502)) == "transient"
    assert classify_error(status(400)) == "request"
    conn = openai.APIConnectionError(request=req)
    assert classify_error(conn) == "unreachable"
    assert classify_error(conn, reached_before=True) == "connection"
    assert classify_error(TimeoutError()) == "connection"


def test_all_unlabelled_is_an_error_with_a_report_banner(make_stub, tmp_path, capsys):
    # a model that answers, but never validly: nothing can be labelled
    stub = make_stub(fault_rate=1.0)
    rd = _ready(tmp_path, n_tasks=3)
    cfg = llm(stub, retries=0, repair_retries=0, timeout=0.5)
    with pytest.raises(
        IncompleteDiagnosis, match=r"2 of 2 failed \(100%\) and 4 of 4 passed \(100%\)"
    ):
        stage_label(rd, cfg, n_runs=1, show_progress=False)
    assert (rd / "labels" / "run_01.json").exists()  # the work is kept


def test_too_many_unlabelled_fails_run_and_report_says_so(make_stub, tmp_path, capsys):
    stub = make_stub(fault_rate=0.35, stall_s=0.6)
    data = write_planted(tmp_path / "p.jsonl", n_tasks=15)
    rd = tmp_path / "run"
    cfg = llm(stub, retries=0, repair_retries=0, timeout=0.4)
    with pytest.raises(IncompleteDiagnosis):
        td.run_diagnosis(
            [data], rd, llm=cfg, n_runs=2, show_progress=False, capabilities=_caps(tmp_path)
        )
    md = (rd / "report.md").read_text()
    assert md.split("\n## ")[0].count("INCOMPLETE DIAGNOSIS") == 1
    assert "INCOMPLETE DIAGNOSIS" in (rd / "report.html").read_text()
    # the same data with a tolerant limit passes, and the banner goes away
    td.run_diagnosis([data], rd, llm=cfg, n_runs=2, show_progress=False, max_unlabelled=1.0)
    assert "INCOMPLETE" not in (rd / "report.md").read_text()


def _caps(tmp_path):
    path = tmp_path / "caps.json"
    path.write_text(json.dumps({"capabilities": CAPABILITIES}))
    return path


def test_label_cli_with_dead_model_exits_non_zero(make_stub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "stub")
    stub = make_stub(fault_rate=1.0)
    rd = _ready(tmp_path, n_tasks=3)
    code = main(
        ["label", str(rd), *stub_args(stub, "--n-runs", "1", "--retries", "0", "--timeout", "1")]
    )
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1 and "could not be labelled" in err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--n-runs", "0"),
        ("--n-runs", "-3"),
        ("--max-tokens-per-trajectory", "10"),
        ("--concurrency", "0"),
        ("--max-concurrency", "0"),
        ("--rpm", "0"),
        ("--max-connection-failures", "0"),
        ("--dead-after", "-1"),
        ("--max-cost", "-1"),
        ("--n-runs", "two"),
        ("--max-unlabelled", "1.5"),
    ],
)
def test_invalid_numbers_are_one_line_errors_and_delete_nothing(
    stub, tmp_path, capsys, option, value
):
    rd = _ready(tmp_path, n_tasks=2)
    assert main(["label", str(rd), *stub_args(stub, "--n-runs", "1")]) == 0
    before = sorted(p.name for p in (rd / "labels").iterdir())
    capsys.readouterr()
    code = main(["label", str(rd), *stub_args(stub), option, value])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and option in err and "Traceback" not in err
    assert sorted(p.name for p in (rd / "labels").iterdir()) == before == ["run_01.json"]


def test_stage_label_api_rejects_zero_runs(stub, tmp_path):
    rd = _ready(tmp_path, n_tasks=2)
    stage_label(rd, llm(stub), n_runs=1, show_progress=False)
    with pytest.raises(td.ConfigError, match="--n-runs=0"):
        stage_label(rd, llm(stub), n_runs=0, show_progress=False)
    assert (rd / "labels" / "run_01.json").exists()


def test_max_cost_caps_the_whole_command(stub, tmp_path):
    data = write_planted(tmp_path / "p.jsonl", n_tasks=20)
    rd = tmp_path / "run"
    cap = 0.02
    with pytest.raises(BudgetExceeded, match="in this command"):
        td.run_diagnosis(
            [data], rd, llm=llm(stub, max_cost=cap, concurrency=2), n_runs=3, show_progress=False
        )
    cache = td.llm.Cache(rd / "cache.sqlite")
    stages = cache.stats()["stages"]
    assert set(stages) >= {"propose", "label"}  # both stages spent from the one budget
    assert sum(s["cost_usd"] for s in stages.values()) <= cap


def test_cuts_are_reported_in_the_report_and_on_the_console(stub, tmp_path, capsys):
    data = write_planted(tmp_path / "p.jsonl", n_tasks=6)
    lines = [json.loads(line) for line in data.read_text().splitlines()]
    for row in lines:  # long conversations: 40 filler turns before the closing one
        filler = [{"role": "user", "content": f"Filler turn {i}. " * 10} for i in range(40)]
        row["messages"][-1:-1] = filler
    data.write_text("".join(json.dumps(row) + "\n" for row in lines))
    rd = tmp_path / "run"
    args = stub_args(stub, "--n-runs", "1", "--max-tokens-per-trajectory", "1000")
    assert main(["run", str(data), "-o", str(rd), *args]) == 0
    out = capsys.readouterr().out
    assert "abridged for the labeller: 12 of 12 transcripts" in out
    md = (rd / "report.md").read_text()
    assert "## What the labeller saw" in md and "12 transcripts were abridged" in md
    assert "steps summarised" in md.split("## What the labeller saw")[1]
    rendered = [json.loads(line) for line in (rd / "rendered.jsonl").read_text().splitlines()]
    assert all(r["cuts"]["steps_summarised"] > 0 for r in rendered)


def test_an_endpoint_that_dies_mid_run_stops_the_command_fast_and_keeps_the_work(
    make_stub, tmp_path, capsys, monkeypatch
):
    """Issue 29: killed after 200 of 500 labels, `run` retried for 308 s (1,192 failed
    requests) before exit 4. Now: --max-connection-failures requests in a row, exit 3."""
    import sqlite3

    monkeypatch.setenv("STUB_KEY", "stub")
    stub = make_stub(die_after=30)
    rd = _ready(tmp_path, n_tasks=20)
    args = stub_args(stub, "--n-runs", "3", "--max-connection-failures", "8", "--concurrency", "4")
    code = main(["label", str(rd), *args])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.count("\n") == 1 and "stopped answering" in err and "rerun the same command" in err
    assert "8 requests in a row failed to connect" in err
    with sqlite3.connect(rd / "cache.sqlite") as db:
        finished = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        failed = db.execute("SELECT COUNT(*) FROM errors").fetchone()[0]
    assert finished == stub.answered >= 30  # every answer the endpoint gave is kept
    # the limit, the requests in flight when it is reached (3 besides the last), and the
    # failures recorded before the endpoint's last answer arrived (an answer resets the count:
    # under load, one sent before the death can land after up to 3 others failed); once 13
    assert failed <= 8 + 3 + 3
    # a new endpoint: the rerun asks only what had not finished
    fresh = make_stub()
    assert main(["label", str(rd), *stub_args(fresh, "--n-runs", "3")]) == 0
    with sqlite3.connect(rd / "cache.sqlite") as db:
        # the agent-only view of each trajectory with an NA verdict: one call, every run
        checked = db.execute(
            "SELECT COUNT(*) FROM calls WHERE stage = 'label-agent-only'"
        ).fetchone()[0]
    assert 0 < checked <= 40
    assert fresh.total_requests == 3 * 40 + checked - finished


def test_missing_credentials_are_one_line_exit_3_and_nothing_is_sent(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_planted(tmp_path / "p.jsonl", n_tasks=6)
    code = main(["run", str(data), "-o", str(tmp_path / "r"), "--model", "openai/gpt-4o-mini"])
    captured = capsys.readouterr()
    assert code == 3, captured.err
    assert captured.err.count("\n") == 1
    assert "no API key: set OPENAI_API_KEY, or pass --api-key-env VAR" in captured.err
    assert "propose" not in captured.err  # not blamed on a stage
    assert "LLM calls" not in captured.out  # nothing was sent, nothing retried


def test_a_missing_key_reported_by_the_provider_is_not_retried():
    import openai
    from httpx import Request, Response

    from trace_diagnose.llm import _short, classify_error

    req = Request("POST", "http://x")
    message = (
        "Missing credentials. Please pass an `api_key`, `workload_identity`, `admin_api_key`, "
        "or set the `OPENAI_API_KEY` or `OPENAI_ADMIN_KEY` environment variable."
    )
    exc = openai.InternalServerError(message, response=Response(500, request=req), body=None)
    assert classify_error(exc) == "auth"
    short = _short(exc, 60)
    assert short.endswith("…") and len(short) <= 60 and message.startswith(short[:-1])


def test_a_duplicate_id_is_skipped_with_a_warning_unless_strict(tmp_path, capsys):
    rows = [
        {"id": "a", "task_id": "t", "reward": 1.0, "messages": [{"role": "user", "content": "x"}]},
        {"id": "b", "task_id": "t", "reward": 0.0, "messages": [{"role": "user", "content": "y"}]},
        {"id": "a", "task_id": "t", "reward": 0.0, "messages": [{"role": "user", "content": "z"}]},
    ]
    data = tmp_path / "dup.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["ingest", str(data), "-o", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    assert "warning: skipped" in captured.err and "duplicate trajectory id 'a'" in captured.err
    summary = json.loads((tmp_path / "r" / "ingest_summary.json").read_text())
    assert summary["n"] == 2 and summary["n_skipped"] == 1
    kept = [
        json.loads(x) for x in (tmp_path / "r" / "trajectories.jsonl").read_text().split("\n") if x
    ]
    assert [t["traj_id"] for t in kept] == ["a", "b"] and kept[0]["outcome"]["reward"] == 1.0
    assert main(["ingest", str(data), "-o", str(tmp_path / "r2"), "--strict"]) == 1
    assert "duplicate trajectory id 'a'" in capsys.readouterr().err


def test_requests_per_minute_are_paced(make_stub, tmp_path):
    """--rpm spaces requests 60/rpm seconds apart (retries and repairs included)."""
    stub = make_stub()
    rd = _ready(tmp_path, n_tasks=3)
    stage_label(rd, llm(stub, rpm=120, concurrency=8), n_runs=1, show_progress=False)
    times = sorted(stub.arrivals)
    # 120 per minute: one every 0.5 s, so 6 labelling requests (and one agent-only request
    # per trajectory with an NA verdict) span at least 0.5 s apiece (less a little jitter
    # between sending and arriving), though 8 could be in flight at once
    assert 6 < len(times) <= 12 and times[-1] - times[0] >= 0.5 * (len(times) - 1) - 0.3
