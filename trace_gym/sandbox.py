"""A sandbox for untrusted Python: agent patches, tests, synthesised environments.

Every :meth:`Sandbox.run` gets a fresh temporary directory holding the files it is given and
runs one Python entry point there, in a new process with:

* resource limits (``resource``): CPU seconds, address space, file size, open files and
  processes (``RLIMIT_NPROC`` is per user and not enforced for root, so a root harness drops
  the child to ``nobody`` first);
* a wall-clock timeout that kills the whole process group, and stdout/stderr capped (a
  flood beyond the cap kills the run);
* a scrubbed environment and ``python -I -S -B`` (isolated mode: no user site, no
  ``PYTHON*`` variables, no bytecode written);
* an audit hook (:pep:`578`), installed by the launcher before any untrusted code runs,
  that ends the run on a socket, a new process, a ``ctypes`` library load, or a write,
  delete or rename outside the task directory. Audit hooks are not a security boundary (the
  CPython docs say so), they name the reason early and alike in both modes;
* where ``bwrap`` (bubblewrap) exists, all of that runs inside it: no network
  (``--unshare-net``), its own PID namespace (everything dies with the run), a read-only
  view of the system directories and the interpreter, nothing else of the host file system,
  and only the task directory writable. This is the boundary; without ``bwrap`` the run
  falls back to limits plus the audit hook, and :attr:`RunResult.isolation` says which.

Outcomes are split by who caused them. The agent's code looping, crashing, blowing memory,
flooding output or touching what it must not is a *failure* (a ``status`` such as
``timeout``, ``memory_limit``, ``blocked``). The harness failing (no interpreter, no disk
for the temporary directory, bubblewrap unable to set up) is ``infra_error``: an
environment ends that episode as ``infra_error`` so a trainer masks it instead of learning
from a fake zero.
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ISOLATION_MODES = ("auto", "bwrap", "rlimits")
STATUSES = (
    "ok",  # exited 0
    "error",  # exited non-zero (an exception, a failed assertion in a script)
    "timeout",  # wall clock
    "cpu_limit",
    "memory_limit",
    "file_size_limit",
    "open_files_limit",
    "process_limit",
    "output_limit",
    "blocked",  # the audit policy stopped an operation
    "infra_error",  # the harness, not the code
)
REPORT_MARKER = "@@TRACE_SANDBOX_REPORT@@"
"""Prefix of the line in stdout that carries a structured report (the last one counts)."""
NOBODY = 65534
LIVE_GROUPS: set[int] = set()
"""Process groups of runs in progress (a caller's audit policy may let exactly these be
killed: ``trace-gym validate`` does)."""

# Exit codes the launcher uses for failures it recognises (the run's own codes stay < 64).
_EXIT_BLOCKED, _EXIT_MEMORY, _EXIT_NPROC, _EXIT_FSIZE, _EXIT_NOFILE = 90, 91, 92, 93, 94
_EXIT_STATUS = {
    _EXIT_BLOCKED: "blocked",
    _EXIT_MEMORY: "memory_limit",
    _EXIT_NPROC: "process_limit",
    _EXIT_FSIZE: "file_size_limit",
    _EXIT_NOFILE: "open_files_limit",
}

# Runs as `python -I -S -B -c LAUNCHER ROOT ENTRY ARGS...` in the task directory. It installs
# the audit policy, then runs ENTRY as __main__ and maps resource exhaustion to exit codes.
LAUNCHER = r"""
import os, sys
ROOT = os.path.realpath(sys.argv[1])
STRICT = sys.argv[2] == "1"
FORKS = [int(sys.argv[3])]
ENTRY = sys.argv[4]
sys.argv = [ENTRY] + sys.argv[5:]
_exit, _write = os._exit, os.write
def _stop(reason):
    _write(2, ("\n@@TRACE_SANDBOX_BLOCKED@@ " + reason + "\n").encode("utf-8", "replace"))
    _exit(90)
def _inside(path):
    try:
        p = os.fsdecode(path) if not isinstance(path, int) else None
    except Exception:
        return False
    if p is None:
        return True
    p = os.path.realpath(os.path.join(ROOT, p))
    return p == ROOT or p.startswith(ROOT + os.sep)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                "os.utime", "shutil.rmtree", "os.link", "os.symlink"}
_PROC_EVENTS = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                "subprocess.Popen", "pty.spawn", "os.startfile"}
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and path is not None and not _inside(path):
            _stop("write outside the task directory: " + repr(path))
    elif event in _PATH_EVENTS:
        if args and not _inside(args[0]):
            _stop(event + " outside the task directory: " + repr(args[0]))
    elif event in ("os.rename", "os.replace"):
        if not (_inside(args[0]) and _inside(args[1])):
            _stop(event + " outside the task directory")
    elif event.startswith("socket."):
        _stop("network access (" + event + ")")
    elif STRICT and (event in _PROC_EVENTS or event.startswith("ctypes.dl")):
        _stop("process or native-code access (" + event + ")")
    elif event in _PROC_EVENTS and FORKS[0] >= 0:
        FORKS[0] -= 1
        if FORKS[0] < 0:
            _write(2, b"\nBlockingIOError: fork budget spent\n")
            _exit(92)
sys.addaudithook(_hook)
sys.path.insert(0, ROOT)
import errno
try:
    # runpy would import pkgutil and typing (~30 ms); a plain exec is all a script needs
    with open(ENTRY, "rb") as fh:
        _code = compile(fh.read(), ENTRY, "exec")
    exec(_code, {"__name__": "__main__", "__file__": ENTRY, "__builtins__": __builtins__})
except MemoryError:
    _write(2, b"\nMemoryError\n"); _exit(91)
except SystemExit:
    raise
except BaseException as exc:
    code = getattr(exc, "errno", None)
    import traceback
    traceback.print_exc()
    sys.stderr.flush()
    _exit({errno.EAGAIN: 92, errno.EFBIG: 93, errno.EMFILE: 94}.get(code, 1))
"""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run (defaults suit unit tests of a small module)."""

    cpu_seconds: int = 10
    wall_seconds: float = 10.0
    memory_bytes: int = 1 << 30
    """Address space; Python itself needs roughly 30 MB."""
    file_size_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 64
    """Processes of the run's user; the strict audit policy already forbids new ones."""
    output_bytes: int = 256 << 10
    """stdout plus stderr; a run that writes more is killed (``output_limit``)."""

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_bytes", "file_size_bytes", "open_files"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.wall_seconds <= 0 or self.processes <= 0 or self.output_bytes <= 0:
            raise ValueError("Limits.wall_seconds, processes and output_bytes must be > 0")


@dataclass(frozen=True)
class RunResult:
    """What happened to one run. ``duration_s`` is wall time: keep it out of ``info``."""

    status: str
    reason: str
    returncode: int | None
    stdout: str
    stderr: str
    isolation: str
    report: Any = None
    """The JSON after the last :data:`REPORT_MARKER` line of stdout, if any."""
    duration_s: float = field(default=0.0, compare=False)
    files: dict[str, str] | None = field(default=None, compare=False)
    """The task directory's text files after the run, when :meth:`Sandbox.run` was asked to
    ``collect`` them (see :func:`collect_files` for what is left out)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    def summary(self) -> dict[str, Any]:
        """Deterministic fields for an environment's ``info`` (no timings, no raw output)."""
        return {"status": self.status, "reason": self.reason, "isolation": self.isolation}


def bwrap_path() -> str | None:
    """The ``bwrap`` executable, or None."""
    return shutil.which("bwrap")


class Sandbox:
    """Runs Python entry points on given files, one fresh directory and process per run.

    Args:
        limits: resource limits (:class:`Limits`).
        isolation: ``auto`` (bubblewrap when available), ``bwrap`` (required: runs fail as
            ``infra_error`` without it) or ``rlimits`` (never bubblewrap).
        strict: also forbid new processes and native libraries (``ctypes``); a test of a
            pure-Python module needs neither.
        python: the interpreter (default: the running one).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        isolation: str = "auto",
        strict: bool = True,
        python: str | None = None,
    ) -> None:
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        self.limits = limits or Limits()
        self.strict = strict
        self.python = python or sys.executable
        self._bwrap = bwrap_path() if isolation != "rlimits" else None
        self._require_bwrap = isolation == "bwrap"
        self.isolation = "bwrap" if self._bwrap else "rlimits"
        self._user_processes = 0
        self._drop_to_nobody = os.geteuid() == 0 and _world_executable(self.python)
        self.process_limit = "rlimit" if os.geteuid() != 0 or self._drop_to_nobody else "budget"
        """How the process count is bounded: ``rlimit`` (``RLIMIT_NPROC``), or ``budget``
        when the harness is root and ``nobody`` cannot run the interpreter (root ignores
        ``RLIMIT_NPROC``): the launcher's audit hook then lets each process fork at most
        log2(processes) times, which bounds a fork tree at ``processes``."""

    # -- public ---------------------------------------------------------------------------
    def run(
        self,
        files: dict[str, str],
        entry: str,
        args: list[str] | tuple[str, ...] = (),
        *,
        collect: bool = False,
    ) -> RunResult:
        """Write ``files`` (relative path -> text) into a fresh directory and run ``entry``.

        With ``collect``, the directory's text files as the run left them come back in
        :attr:`RunResult.files` (a shell command that edits, creates or deletes files).
        """
        if self._require_bwrap and not self._bwrap:
            return self._infra("isolation='bwrap' but no bwrap executable is installed")
        try:
            root = tempfile.mkdtemp(prefix="trace-sbx-")
        except OSError as exc:
            return self._infra(f"cannot create the task directory: {exc}")
        try:
            try:
                self._write_files(root, files)
            except OSError as exc:  # a bad path (ValueError) is the caller's bug: it raises
                return self._infra(f"cannot write the task files: {exc}")
            result = self._execute(root, entry, list(args))
            if collect and not result.infra_error:
                result = dataclasses.replace(result, files=collect_files(root))
            return result
        finally:
            shutil.rmtree(root, ignore_errors=True)

    # -- internals ------------------------------------------------------------------------
    def _infra(self, reason: str) -> RunResult:
        return RunResult("infra_error", reason, None, "", "", self.isolation)

    @staticmethod
    def _write_files(root: str, files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = Path(root, rel).resolve()
            if Path(root).resolve() not in path.parents:
                raise ValueError(f"sandbox file path {rel!r} leaves the task directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        os.chmod(root, 0o777)  # the child may run as nobody
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames:
                os.chmod(os.path.join(dirpath, name), 0o777)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o666)

    def _command(self, root: str, entry: str, args: list[str]) -> tuple[list[str], str]:
        """The argv, and the task directory as the child sees it."""
        inner_root = "/task" if self._bwrap else root
        py = [self.python, "-I", "-S", "-B", "-c", LAUNCHER, inner_root]
        budget = self.limits.processes.bit_length() - 1 if self.process_limit == "budget" else -1
        py += ["1" if self.strict else "0", str(budget), entry, *args]
        if not self._bwrap:
            return py, root
        cmd = [self._bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        cmd += ["--die-with-parent", "--dev", "/dev", "--proc", "/proc"]
        ro = {"/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", "/etc/alternatives"}
        exe = Path(os.path.realpath(self.python))
        ro |= {sys.base_prefix, sys.prefix, str(exe.parent.parent)}
        for path in sorted(ro):
            if os.path.exists(path):
                cmd += ["--ro-bind", path, path]
        if os.path.realpath(self.python) != self.python:  # a venv's symlinked interpreter
            cmd += ["--ro-bind", os.path.dirname(self.python), os.path.dirname(self.python)]
        cmd += ["--bind", root, "/task", "--chdir", "/task", "--setenv", "HOME", "/task"]
        return cmd + ["--", *py], inner_root

    def _preexec(self) -> None:
        # Runs in the child between fork and exec: new session (so the whole group can be
        # killed), limits, then privileges dropped so that RLIMIT_NPROC applies.
        os.setsid()
        lim = self.limits
        cpu = int(lim.cpu_seconds)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_size_bytes, lim.file_size_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim.open_files, lim.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes))
        nproc = lim.processes
        if self._drop_to_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        elif os.geteuid() != 0:  # the limit counts every process of the user
            nproc += self._user_processes
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    def _execute(self, root: str, entry: str, args: list[str]) -> RunResult:
        cmd, _ = self._command(root, entry, args)
        self._user_processes = _user_process_count() if os.geteuid() != 0 else 0
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": root}
        env["TMPDIR"] = "/task" if self._bwrap else root
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=self._preexec,
                close_fds=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return self._infra(f"cannot start the sandboxed process: {exc}")
        LIVE_GROUPS.add(proc.pid)
        try:
            out, err, flooded, timed_out = self._collect(proc, start)
        finally:
            LIVE_GROUPS.discard(proc.pid)
        duration = time.monotonic() - start
        stdout = out.decode("utf-8", "replace")
        stderr = err.decode("utf-8", "replace")
        status, reason = self._classify(proc.returncode, stderr, flooded, timed_out)
        return RunResult(
            status, reason, proc.returncode, stdout, stderr, self.isolation,
            _report(stdout), duration,
        )  # fmt: skip

    def _collect(self, proc: subprocess.Popen, start: float) -> tuple[bytes, bytes, bool, bool]:
        cap = self.limits.output_bytes
        chunks: dict[int, list[bytes]] = {1: [], 2: []}
        total, flooded, timed_out = 0, False, False
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        open_streams = 2
        try:
            while open_streams:
                left = self.limits.wall_seconds - (time.monotonic() - start)
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=min(left, 0.5)):
                    data = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        continue
                    total += len(data)
                    chunks[key.data].append(data)
                    if total > cap:
                        flooded = True
                        break
                if flooded:
                    break
            if not (flooded or timed_out):
                try:
                    proc.wait(
                        timeout=max(0.05, self.limits.wall_seconds - (time.monotonic() - start))
                    )
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            sel.close()
            _kill_group(proc)
            proc.stdout.close()
            proc.stderr.close()
        out = b"".join(chunks[1])
        err = b"".join(chunks[2])
        if flooded:  # keep what fits
            out, err = out[:cap], err[: max(0, cap - len(out))]
        return out, err, flooded, timed_out

    def _classify(
        self, code: int | None, stderr: str, flooded: bool, timed_out: bool
    ) -> tuple[str, str]:
        lim = self.limits
        if flooded:
            return "output_limit", f"wrote more than {lim.output_bytes} bytes of output"
        if timed_out:
            return "timeout", f"still running after {lim.wall_seconds:g} s (wall clock)"
        if self._bwrap and code == 1 and stderr.startswith("bwrap:"):
            return "infra_error", f"bubblewrap could not set up: {stderr.strip()[:300]}"
        if code in (126, 127):
            return "infra_error", f"could not start the interpreter: {stderr.strip()[:300]}"
        if code == 0:
            return "ok", "exited 0"
        if self._bwrap and code is not None and code > 128:  # bwrap's init reports 128 + signal
            code = 128 - code
        if code is not None and code < 0:
            sig = -code
            if sig == signal.SIGXCPU:
                return "cpu_limit", f"used more than {lim.cpu_seconds} s of CPU"
            if sig == signal.SIGKILL:
                return "cpu_limit", f"killed (CPU hard limit of {lim.cpu_seconds + 1} s)"
            if sig == signal.SIGSEGV:
                return "memory_limit", "crashed with SIGSEGV (often memory exhaustion)"
            return "error", f"killed by signal {signal.Signals(sig).name}"
        if code == _EXIT_BLOCKED:
            marker = "@@TRACE_SANDBOX_BLOCKED@@ "
            line = stderr[stderr.rfind(marker) + len(marker) :].splitlines()
            return "blocked", "blocked: " + (line[0] if line else "policy violation")
        if code in _EXIT_STATUS:
            status = _EXIT_STATUS[code]
            reasons = {
                "memory_limit": f"ran out of its {lim.memory_bytes >> 20} MiB address space",
                "process_limit": f"hit the limit of {lim.processes} processes",
                "file_size_limit": f"wrote a file over {lim.file_size_bytes} bytes",
                "open_files_limit": f"opened more than {lim.open_files} files",
            }
            return status, reasons[status]
        if "MemoryError" in stderr[-2000:]:
            return "memory_limit", f"ran out of its {lim.memory_bytes >> 20} MiB address space"
        return "error", f"exited with status {code}"


COLLECT_MAX_FILES = 2000
COLLECT_MAX_FILE_BYTES = 1 << 20
COLLECT_MAX_TOTAL_BYTES = 32 << 20


def collect_files(root: str) -> dict[str, str]:
    """Text files under ``root`` (relative POSIX path -> text), read without following links.

    Left out, because a repository of text files cannot hold them or the run made too much:
    symbolic links and other non-regular files, ``__pycache__`` folders, files that are not
    UTF-8, files over :data:`COLLECT_MAX_FILE_BYTES`, and everything beyond
    :data:`COLLECT_MAX_FILES` files or :data:`COLLECT_MAX_TOTAL_BYTES` in all.
    """
    import stat

    out: dict[str, str] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_size > COLLECT_MAX_FILE_BYTES:
                    continue
                if len(out) >= COLLECT_MAX_FILES or total + st.st_size > COLLECT_MAX_TOTAL_BYTES:
                    return out
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    data = fh.read(COLLECT_MAX_FILE_BYTES + 1)
                text = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if len(data) > COLLECT_MAX_FILE_BYTES:
                continue
            total += len(data)
            out[os.path.relpath(path, root).replace(os.sep, "/")] = text
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (the session ``_preexec`` started) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    except OSError as exc:  # pragma: no cover - platform oddities
        if exc.errno != errno.ESRCH:
            raise
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable process
        proc.kill()
        proc.wait()


def _world_executable(python: str) -> bool:
    """Whether any user may run ``python`` (every directory above it searchable by others)."""
    import stat

    for target in (os.path.realpath(python), os.path.realpath(sys.base_prefix) + "/lib"):
        path = Path(target)
        for parent in [*reversed(path.parents), path]:
            try:
                mode = parent.stat().st_mode
            except OSError:
                return False
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return False
    return True


def _user_process_count() -> int:
    """Processes of the current user (RLIMIT_NPROC counts them all); 0 if unknown."""
    uid, n = os.getuid(), 0
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    n += os.stat(f"/proc/{pid}").st_uid == uid
                except OSError:
                    continue
    except OSError:
        return 0
    return n


def _report(stdout: str) -> Any:
    """The JSON, or Python literal (a runner need not import ``json``), after the marker."""
    at = stdout.rfind(REPORT_MARKER)
    if at < 0:
        return None
    line = stdout[at + len(REPORT_MARKER) :].split("\n", 1)[0]
    try:
        return json.loads(line)
    except ValueError:
        pass
    try:
        return ast.literal_eval(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
