"""The sandbox contains hostile code and says why it stopped it, with and without bubblewrap."""

import os
import sys

import pytest

from trace_gym.sandbox import Limits, RunResult, Sandbox, bwrap_path

LIMITS = Limits(cpu_seconds=2, wall_seconds=4, memory_bytes=256 << 20, output_bytes=64 << 10)
MODES = ["rlimits"] + (["bwrap"] if bwrap_path() else [])


@pytest.fixture(params=MODES)
def sandbox(request):
    return Sandbox(LIMITS, isolation=request.param)


def run(sb: Sandbox, code: str, files=None) -> RunResult:
    return sb.run({"main.py": code, **(files or {})}, "main.py")


def test_clean_run_reports_isolation(sandbox):
    r = run(sandbox, "import json; print(json.dumps([1, 2]))")
    assert r.status == "ok" and r.stdout.strip() == "[1, 2]"
    assert r.isolation == sandbox.isolation
    assert r.summary() == {"status": "ok", "reason": "exited 0", "isolation": sandbox.isolation}


def test_fork_bomb_is_blocked(sandbox):
    r = run(sandbox, "import os\nwhile True:\n    os.fork()")
    assert r.status == "blocked" and "os.fork" in r.reason


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_without_the_strict_policy_hits_the_process_limit(mode):
    sb = Sandbox(LIMITS, isolation=mode, strict=False)
    marker = f"trace-sbx-forkbomb-{os.getpid()}"
    r = run(sb, f"import os\n_ = {marker!r}\nwhile True:\n    os.fork()")
    assert r.status in ("process_limit", "timeout"), r
    assert r.duration_s < LIMITS.wall_seconds + 3
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
    assert not left, "fork bomb processes survived the run"


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


def test_memory_bomb(sandbox):
    r = run(sandbox, "x = []\nwhile True:\n    x.append(bytearray(10**7))")
    assert r.status == "memory_limit" and "256 MiB" in r.reason


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_hits_the_cpu_limit(mode):
    # a generous wall clock: on a loaded machine one CPU second takes several wall seconds
    sb = Sandbox(Limits(cpu_seconds=1, wall_seconds=30), isolation=mode)
    r = run(sb, "while True:\n    pass")
    assert r.status == "cpu_limit" and "1 s of CPU" in r.reason, r


def test_sleeping_forever_hits_the_wall_clock():
    sb = Sandbox(Limits(wall_seconds=1.0), isolation="rlimits")
    r = run(sb, "import time\ntime.sleep(60)")
    assert r.status == "timeout" and "1 s" in r.reason and r.duration_s < 3


def test_output_flood(sandbox):
    r = run(sandbox, "while True:\n    print('x' * 1000)")
    assert r.status == "output_limit"
    assert len(r.stdout) + len(r.stderr) <= LIMITS.output_bytes


@pytest.mark.parametrize(
    "code",
    [
        "open('/tmp/trace-sbx-escape.txt', 'w').write('x')",
        "import os\nos.open('/tmp/trace-sbx-escape.txt', os.O_WRONLY | os.O_CREAT)",
        "open('../trace-sbx-escape.txt', 'w').write('x')",
        "import os\nos.remove('/etc/hostname')",
    ],
)
def test_writing_outside_the_task_directory(sandbox, code):
    r = run(sandbox, code)
    assert r.status == "blocked" and "outside the task directory" in r.reason
    assert not os.path.exists("/tmp/trace-sbx-escape.txt")


def test_writing_inside_the_task_directory_is_allowed(sandbox):
    r = run(sandbox, "open('out.txt', 'w').write('kept')\nprint(open('out.txt').read())")
    assert r.status == "ok" and r.stdout.strip() == "kept"


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.socket().connect(('127.0.0.1', 9))",
        "import socket\nsocket.create_connection(('example.com', 80), timeout=1)",
    ],
)
def test_opening_a_socket(sandbox, code):
    r = run(sandbox, code)
    assert r.status == "blocked" and "network" in r.reason


def test_file_size_and_open_files(sandbox):
    big = run(sandbox, "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 10**6)")
    assert big.status == "file_size_limit"
    many = run(sandbox, "fs = [open(f'f{i}', 'w') for i in range(1000)]")
    assert many.status == "open_files_limit"


def test_a_crash_is_an_agent_failure_not_infra(sandbox):
    r = run(sandbox, "raise ValueError('boom')")
    assert r.status == "error" and not r.infra_error and "ValueError: boom" in r.stderr


def test_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("TRACE_SECRET_TOKEN", "hunter2")
    r = run(sandbox, "import os, sys\nprint(sorted(os.environ), sys.flags.isolated)")
    assert r.status == "ok" and "TRACE_SECRET_TOKEN" not in r.stdout
    assert r.stdout.strip().endswith("1")


def test_report_line_is_parsed(sandbox):
    r = run(sandbox, "print('noise')\nprint('@@TRACE_SANDBOX_REPORT@@' + '{\"a\": 1}')")
    assert r.report == {"a": 1}


def test_harness_failures_are_infra_errors():
    r = Sandbox(LIMITS, isolation="rlimits", python="/nonexistent/python").run({"m.py": ""}, "m.py")
    assert r.status == "infra_error" and r.infra_error


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap not installed")
def test_bwrap_hides_the_host_file_system():
    here = os.path.abspath(__file__)
    r = run(Sandbox(LIMITS, isolation="bwrap"), f"print(open({here!r}).read()[:10])")
    assert r.status == "error" and "FileNotFoundError" in r.stderr


def test_required_bwrap_missing_is_infra(monkeypatch):
    monkeypatch.setattr("trace_gym.sandbox.bwrap_path", lambda: None)
    r = Sandbox(LIMITS, isolation="bwrap").run({"m.py": ""}, "m.py")
    assert r.status == "infra_error" and "bwrap" in r.reason


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        Sandbox(isolation="docker")
    with pytest.raises(ValueError):
        Limits(cpu_seconds=0)
    with pytest.raises(ValueError):
        Sandbox(LIMITS, isolation="rlimits").run({"../x.py": ""}, "x.py")


def test_interpreter_is_the_running_one():
    assert Sandbox().python == sys.executable
