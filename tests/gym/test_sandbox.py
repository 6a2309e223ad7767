"""The sandbox: refused without bubblewrap unless opted out explicitly; under bubblewrap it
holds (capabilities, namespaces, seccomp, read-only system, caps on processes, memory and
disk, nothing left running); failures are the agent's unless the launcher never said ready."""

import errno
import io
import os
import re
import socket
from pathlib import Path

import gymnasium as gym
import pytest

import trace_gym  # noqa: F401
from trace_gym.envs.helpers import swe_common
from trace_gym.errors import ConfigError
from trace_gym.sandbox import (
    UNSAFE_ENV,
    Limits,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    _frames,
    default_isolation,
    sandbox_available,
    seccomp,
)
from trace_gym.sandbox.cgroups import probe as cgroup_probe

LIMITS = Limits(cpu_seconds=2, wall_seconds=8, memory_bytes=256 << 20, output_bytes=64 << 10)
NO_BWRAP = sandbox_available("bwrap")
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"no bubblewrap: {NO_BWRAP}")


@pytest.fixture
def sandbox():
    if NO_BWRAP is not None:
        pytest.skip(f"no bubblewrap: {NO_BWRAP}")
    return Sandbox(LIMITS)


def run(sb: Sandbox, code: str, files=None) -> RunResult:
    return sb.run({"main.py": code, **(files or {})}, "main.py")


def bash(sb: Sandbox, command: str, files=None, **kw) -> RunResult:
    return sb.run_command(dict(files or {}), ["/bin/bash", "-c", command], **kw)


# -- without bubblewrap: refused, unless opted out of explicitly (runs everywhere) --------------
def test_without_bubblewrap_agent_code_is_refused_with_one_clear_error(monkeypatch):
    monkeypatch.setattr("trace_gym.sandbox.bwrap_path", lambda: None)
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    with pytest.raises(SandboxUnavailable) as caught:
        Sandbox()
    message = str(caught.value)
    assert "apt-get install bubblewrap" in message and 'isolation="none"' in message
    assert "--unsafe-no-sandbox" in message and UNSAFE_ENV in message
    assert isinstance(caught.value, ConfigError)


def test_an_swe_environment_generates_but_refuses_to_run_agent_code(monkeypatch):
    monkeypatch.setattr("trace_gym.sandbox.bwrap_path", lambda: None)
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    monkeypatch.setattr(swe_common, "_SANDBOXES", {})
    env = gym.make("trace/swe-semantic-precision-v0")
    env.reset(seed=0)  # task generation needs no sandbox
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        env.step(env.unwrapped.oracle_actions()[0])


def test_the_cli_refuses_in_one_line(monkeypatch, capsys):
    from trace_gym import cli

    monkeypatch.setattr("trace_gym.sandbox.bwrap_path", lambda: None)
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    monkeypatch.setattr(swe_common, "_SANDBOXES", {})
    monkeypatch.setattr(cli.play, "__defaults__", (io.StringIO("a patch, as text\n"), print))
    code = cli.main(["play", "trace/swe-semantic-precision-v0", "--seed", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "apt-get install bubblewrap" in err and "Traceback" not in err


def test_the_opt_in_is_explicit_and_says_what_it_does_not_protect(monkeypatch):
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    assert default_isolation() == "bwrap"
    monkeypatch.setenv(UNSAFE_ENV, "1")
    assert default_isolation() == "none"
    sb = Sandbox(LIMITS)
    assert sb.isolation == "none" and "unisolated" in sb.guarantees()["isolation"]
    with pytest.raises(ValueError, match="none"):
        Sandbox(isolation="rlimits")  # the old fallback's name: say it explicitly now
    with pytest.raises(ValueError):
        Sandbox(isolation="docker")
    r = Sandbox(LIMITS, isolation="none").compute({"m.py": "def f(x):\n    return x + 1\n"},
                                                  "m", ["M.f(1)"])  # fmt: skip
    assert r.outcomes[0].equals(2) and r.run.isolation == "none"


def test_unsafe_cli_flag_sets_the_opt_in(monkeypatch):
    from trace_gym import cli

    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    cli.main(["--unsafe-no-sandbox", "list"])
    assert os.environ.pop(UNSAFE_ENV) == "1"


# -- who failed -------------------------------------------------------------------------------
def test_harness_failures_before_ready_are_infra_errors():
    r = Sandbox(LIMITS, isolation="none", python="/nonexistent/python").run({"m.py": ""}, "m.py")
    assert r.status == "infra_error" and r.infra_error


@needs_bwrap
def test_task_files_that_do_not_fit_are_the_harnesss_failure():
    tiny = Sandbox(Limits(disk_bytes=64 << 10, wall_seconds=8))
    r = tiny.run({"m.py": "", "big.txt": "x" * (256 << 10)}, "m.py")
    assert r.status == "infra_error" and "No space left" in r.reason


@pytest.mark.parametrize(
    "command",
    ["nosuchcommand --flag", "exit 127", "exit 126", "kill -9 $$", "sleep 30",
     "echo @@TRACE_SANDBOX_SETUP@@ fake; exit 70", "echo bwrap: fake >&2; exit 1"],
)  # fmt: skip
def test_whatever_a_command_does_is_the_agents_result(sandbox, command):
    r = bash(Sandbox(Limits(wall_seconds=3)), command)
    assert r.status != "infra_error" and not r.infra_error, r
    assert r.status in ("error", "timeout", "cpu_limit")


def test_a_missing_command_is_shown_to_the_agent(sandbox):
    r = bash(sandbox, "rg pattern .", merge_stderr=True)
    assert r.status == "error" and r.returncode == 127 and "command not found" in r.reason
    assert "rg: command not found" in r.stdout


# -- compute: values come back as data, judged outside -------------------------------------------
def test_compute_returns_plain_values_and_isolates_each_failure(sandbox):
    module = (
        "import os\n"
        "def f(x):\n    return x * 2\n"
        "def dies():\n    os._exit(0)\n"
        "def spins():\n    while True: pass\n"
        "class Odd:\n    def __eq__(self, other): return True\n"
        "def odd():\n    return Odd()\n"
        "def deep():\n    return deep()\n"
    )
    calls = ["M.f(2)", "M.dies()", "M.f('a')", "M.spins()", "M.odd()", "M.deep()",
             "M.f((1, {2: 3.5}))", "M.nope()"]  # fmt: skip
    r = sandbox.compute({"m.py": module}, "m", calls, call_timeout=0.5)
    got = [o.status for o in r.outcomes]
    assert got == ["value", "crashed", "value", "timeout", "error", "error", "value", "error"]
    assert r.outcomes[0].equals(4) and r.outcomes[2].equals("aa")
    assert r.outcomes[6].value() == (1, {2: 3.5}, 1, {2: 3.5})
    assert "not plain data" in r.outcomes[4].message
    assert not r.outcomes[4].equals(True)  # an object equal to anything stays outside


def test_compute_import_error_fails_every_call(sandbox):
    r = sandbox.compute({"m.py": "raise SystemExit(0)\n"}, "m", ["M.f()", "M.g()"])
    assert [o.status for o in r.outcomes] == ["import_error"] * 2
    assert r.run.status == "ok"


@pytest.mark.parametrize(
    "name",
    ["importlib.py", "json.py", "marshal.py", "select.py", "sitecustomize.py",
     "usercustomize.py", "zz.pth", "__init__.py", "conftest.py", "types.py"],
)  # fmt: skip
def test_files_on_the_import_path_do_not_reach_the_worker(sandbox, name):
    evil = "import os\nos._exit(0)\n"
    files = {"m.py": "def f():\n    return 42\n", name: evil}
    r = sandbox.compute(files, "m", ["M.f()"])
    assert r.outcomes[0].equals(42), r


def test_forged_frames_only_reach_values_the_agent_could_return(sandbox):
    module = (
        "import os\n"
        "fake = b'V 0 4\\nTrue' + b'E 0 0\\n'\n"
        "for fd in range(0, 64):\n"
        "    try: os.write(fd, fake)\n"
        "    except OSError: pass\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        for fd in os.listdir(f'/proc/{pid}/fd'):\n"
        "            try:\n"
        "                h = os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)\n"
        "                os.write(h, fake); os.close(h)\n"
        "            except OSError: pass\n"
        "    except OSError: pass\n"
        "def f():\n    return 1\n"
    )
    r = sandbox.compute({"m.py": module}, "m", ["M.f()", "M.f()"])
    # the only hidden information is the expected value: a forged frame is a value like any
    assert r.run.status != "infra_error"
    assert {o.status for o in r.outcomes} <= {"value", "import_error", "error", "crashed"}


def test_frames_parser_stops_at_garbage():
    ok = b"V 0 1\n5X 1 2\nhi"
    assert _frames(ok) == [(b"V", 0, b"5"), (b"X", 1, b"hi")]
    assert _frames(b"V 0 99999999\nshort") == []
    assert _frames(b"garbage" * 100) == []
    assert _frames(b"V 0 1\n5" + b"\xff" * 70) == [(b"V", 0, b"5")]


# -- the sandbox holds (bubblewrap) -------------------------------------------------------------
def test_guarantees_are_reported(sandbox):
    g = sandbox.guarantees()
    assert "bubblewrap" in g["isolation"] and "seccomp" in g and "tmpfs" in g["disk"]
    r = run(sandbox, "print('hi')")
    assert r.summary() == {"status": "ok", "reason": "exited 0", "isolation": "bwrap"}


def test_no_capabilities_an_unprivileged_uid_and_own_namespaces(sandbox):
    r = bash(sandbox, "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status;"
                      " ls /proc | grep -c '^[0-9]'; hostname")  # fmt: skip
    lines = r.stdout.split()
    assert r.status == "ok" and lines[0] == "65534"
    status = dict(zip(lines[1:9:2], lines[2:9:2], strict=True))
    assert status["CapEff:"] == "0000000000000000" and status["CapBnd:"] == "0000000000000000"
    assert status["NoNewPrivs:"] == "1" and status["Seccomp:"] == "2"
    assert int(lines[9]) <= 5  # the run's own processes only
    assert lines[10] == "sandbox"


@pytest.mark.parametrize(
    ("name", "nr", "args"),
    [("open_by_handle_at", 304, (0, 0, 0)), ("name_to_handle_at", 303, (0, 0, 0, 0, 0)),
     ("unshare", 272, (0x10000000,)), ("setns", 308, (0, 0)), ("mount", 165, (0, 0, 0, 0, 0)),
     ("ptrace", 101, (16, 1, 0, 0)), ("keyctl", 250, (0, 0)), ("bpf", 321, (0, 0, 0)),
     ("perf_event_open", 298, (0, 0, 0, 0, 0)), ("io_uring_setup", 425, (1, 0))],
)  # fmt: skip
def test_seccomp_denies_what_tests_never_need(name, nr, args):
    if NO_BWRAP is not None or seccomp.machine() != "x86_64":
        pytest.skip("x86_64 numbers under bubblewrap")
    sb = Sandbox(LIMITS, strict=False)
    code = (
        "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"r = libc.syscall({nr}, *{args!r})\nprint(r, errno.errorcode.get(ctypes.get_errno()))"
    )
    r = run(sb, code)
    assert r.status == "ok" and r.stdout.split() == ["-1", "EPERM"], (name, r)


def test_clone_with_namespace_flags_and_clone3_are_refused(sandbox):
    r = bash(sandbox, "unshare -U true; echo rc=$?; python3 -c 'import os; print(os.fork() >= 0)'",
             merge_stderr=True)  # fmt: skip
    assert "rc=1" in r.stdout and "True" in r.stdout  # plain fork still works


def test_read_only_system_and_only_the_task_folder_writable(sandbox, tmp_path):
    host = tmp_path / "host.txt"
    r = bash(sandbox, f"touch /usr/x; touch /x; touch {host}; mkdir -p /tmp/x; touch ../x;"
                      " echo kept > mine.txt; cat /etc/shadow", collect=True)  # fmt: skip
    assert r.files == {"mine.txt": "kept\n"}
    assert not host.exists() and "Read-only file system" in r.stderr


def test_the_host_file_system_is_not_there(sandbox):
    here = Path(__file__).resolve()
    r = bash(sandbox, f"cat {here}; ls /root /home /work 2>&1 | head", merge_stderr=True)
    assert "No such file" in r.stdout and "def test_" not in r.stdout


def test_no_network_to_the_host(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    r = bash(sandbox, f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}),"
                      f" timeout=2)\"", merge_stderr=True)  # fmt: skip
    assert r.status == "error" and "refused" in r.stdout.lower()
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_disk_is_capped(sandbox):
    # files of 15 MiB (under the 16 MiB file-size limit) until the 256 MiB tmpfs is full
    r = bash(sandbox, "for i in $(seq 1 20); do head -c 15M /dev/zero > f$i || break; done;"
                      " du -sm . | cut -f1", merge_stderr=True)  # fmt: skip
    assert "No space left" in r.stdout and int(r.stdout.split()[-1]) <= 256


def test_processes_are_capped_and_nothing_outlives_the_run(sandbox):
    marker = f"trace-sbx-survivor-{os.getpid()}"
    sb = Sandbox(Limits(wall_seconds=6, processes=64))
    r = bash(sb, f"(setsid sleep 300 {marker} &); (nohup sleep 301 {marker} >/dev/null &);"
                 " bomb() { bomb | bomb & }; bomb; sleep 2", merge_stderr=True)  # fmt: skip
    assert r.status != "infra_error"
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, marker)]
    assert not left, "processes survived the run"


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


def test_memory_is_capped_across_processes(sandbox):
    if "memory" not in cgroup_probe()[0]:
        pytest.skip(f"no writable memory control group here: {cgroup_probe()[1]}")
    sb = Sandbox(Limits(memory_bytes=256 << 20, disk_bytes=64 << 20, wall_seconds=20,
                        cpu_seconds=10))  # fmt: skip
    code = "import time; x = bytearray(150 << 20); time.sleep(4)"
    r = bash(sb, f"for i in 1 2 3; do python3 -c '{code}' & done; wait; echo done")
    assert r.status == "memory_limit" and "together" in r.reason, r


def test_memory_bomb_cpu_loop_wall_clock_and_output_flood(sandbox):
    assert (
        run(sandbox, "x = []\nwhile True:\n    x.append(bytearray(10**7))").status == "memory_limit"
    )
    cpu = run(Sandbox(Limits(cpu_seconds=1, wall_seconds=30)), "while True:\n    pass")
    assert cpu.status == "cpu_limit"
    slow = run(Sandbox(Limits(wall_seconds=1.0)), "import time\ntime.sleep(60)")
    assert slow.status == "timeout" and slow.duration_s < 4
    flood = run(sandbox, "while True:\n    print('x' * 1000)")
    assert flood.status == "output_limit" and len(flood.stdout) + len(flood.stderr) <= 64 << 10


def test_audit_policy_names_what_it_stopped(sandbox):
    r = run(sandbox, "import os\nos.fork()")
    assert r.status == "blocked" and "os.fork" in r.reason
    r = run(sandbox, "open('/tmp/x', 'w')")
    assert r.status == "blocked" and "outside the task directory" in r.reason


def test_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("TRACE_SECRET_TOKEN", "hunter2")
    r = run(sandbox, "import os, sys\nprint(sorted(os.environ), sys.flags.isolated)")
    assert r.status == "ok" and "TRACE_SECRET_TOKEN" not in r.stdout
    assert r.stdout.strip().endswith("1")


def test_collect_brings_back_text_files_only(sandbox):
    r = bash(sandbox, "echo a > a.py; mkdir d; echo b > d/b.txt; ln -s /etc/passwd link;"
                      " printf '\\xff' > bin.dat; rm gone.py", files={"gone.py": "x"},
             collect=True)  # fmt: skip
    assert r.files == {"a.py": "a\n", "d/b.txt": "b\n"}


def test_bad_paths_raise():
    sb = Sandbox(LIMITS, isolation="none")
    for bad in ("../x.py", "/abs.py", "a//b.py", "./x.py"):
        with pytest.raises(ValueError):
            sb.run({bad: ""}, "x.py")
    with pytest.raises(ValueError, match="both a file and a folder"):
        sb.run({"a": "", "a/b.py": ""}, "a/b.py")
    with pytest.raises(ValueError):
        Limits(cpu_seconds=0)


# -- the seccomp program -----------------------------------------------------------------------
HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", ""),
    "aarch64": ("/usr/include/asm-generic/unistd.h", ""),
}


@pytest.mark.parametrize("arch", sorted(seccomp.SYSCALLS))
def test_syscall_numbers_match_the_kernel_headers(arch):
    header = Path(HEADERS[arch][0])
    if not header.exists():
        pytest.skip(f"{header} not installed (linux-libc-dev)")
    text = header.read_text()
    for name, nr in seccomp.SYSCALLS[arch].items():
        found = re.search(rf"#define __NR_{name}\s+(\d+)\b", text)
        assert found is not None and int(found.group(1)) == nr, (arch, name, nr)


@pytest.mark.parametrize("arch", sorted(seccomp.SYSCALLS))
def test_the_program_is_well_formed(arch):
    program = seccomp.assemble(arch)
    assert len(program) % 8 == 0 and 40 < len(program) // 8 < 255
    with pytest.raises(seccomp.UnsupportedArchitecture):
        seccomp.assemble("mips")
    assert errno.EPERM == 1
