"""A sandbox for untrusted code: agent patches, agents' shell commands, synthesised environments.

Three ways to run something, each in a fresh task folder holding the files it is given:

* :meth:`Sandbox.compute`: import a module of the task and evaluate calls on it; the values
  come back as plain data (``repr`` of builtin literals, parsed here with
  :func:`ast.literal_eval`). This is how the SWE environments grade: *compute inside, judge
  outside*. The expected values stay in the harness, which compares; nothing inside the
  sandbox decides or even sees a verdict.
* :meth:`Sandbox.run_command`: ``execve`` a program (an agent's ``bash -c``), optionally
  collecting the files it leaves.
* :meth:`Sandbox.run`: run a Python file of the task as ``__main__`` (a test runner whose
  output is feedback for the agent, never a verdict: :attr:`RunResult.report` is whatever the
  code printed).

**Isolation** (``isolation=``):

* ``"bwrap"`` (the default; ``"auto"`` means the same): bubblewrap. A user namespace with an
  unprivileged uid and every capability dropped, no further user namespaces
  (``--disable-userns``), its own PID, network, IPC, UTS and cgroup namespaces, a new
  session, killed with its parent, ``no_new_privs`` plus the seccomp filter of
  :mod:`trace_gym.sandbox.seccomp`; a read-only view of the system directories and the
  interpreter (this project's packages masked), the root read-only, and the task folder a
  size-capped tmpfs, the only writable place. A control group per run caps memory (all
  processes and the tmpfs together) and processes (:mod:`trace_gym.sandbox.cgroups`); where
  none is writable, per-process limits remain and :meth:`Sandbox.guarantees` says so.
  Without a working bubblewrap, constructing the sandbox raises :class:`SandboxUnavailable`.
* ``"none"``: **no isolation**, the explicit opt-in for machines without bubblewrap
  (``TRACE_GYM_UNSAFE_NO_SANDBOX=1``, ``trace-gym --unsafe-no-sandbox``). The code runs as
  the harness's user, with resource limits, a scrubbed environment and an audit hook that is
  not a boundary: it can read and write whatever that user can, use the network, leave
  processes behind and read the harness's memory. Use it only for code you would run
  yourself.

Every run also has CPU, address-space, file-size and open-file limits, a wall clock that
kills the run's processes, and a cap on its output.

**Who failed.** The launcher (:mod:`trace_gym.sandbox.launcher`) writes one byte on a pipe
of its own before any of the agent's code runs. A run without that byte is the harness's
failure (``infra_error``: bubblewrap could not set up, the interpreter did not start, no
memory for the task files); a run with it is the agent's, whatever happens next: a command
that is not found, fails, times out or exhausts a limit is its result, never an
``infra_error``. No exit code or output is interpreted as a harness failure.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import marshal
import os
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

from trace_gym.errors import ConfigError
from trace_gym.sandbox import cgroups, seccomp
from trace_gym.sandbox.trust import _trusted_section, audit_allows

ISOLATION_MODES = ("bwrap", "none")
UNSAFE_ENV = "TRACE_GYM_UNSAFE_NO_SANDBOX"
"""Set to ``1`` to run agent code without isolation where no isolation is named (the CLI's
``--unsafe-no-sandbox`` sets it)."""
STATUSES = (
    "ok",  # exited 0
    "error",  # exited non-zero, or killed by a signal it caused
    "timeout",  # wall clock
    "cpu_limit",
    "memory_limit",
    "file_size_limit",
    "open_files_limit",
    "process_limit",
    "output_limit",
    "blocked",  # the audit policy stopped an operation
    "infra_error",  # the harness, not the code: only before the launcher's ready byte
)
REPORT_MARKER = "@@TRACE_SANDBOX_REPORT@@"
"""Prefix of the stdout line a script may print a structured report on (agent feedback)."""
TASK_DIR = "/task"
SANDBOX_UID = 65534
NOBODY = 65534
LAUNCHER = (Path(__file__).with_name("launcher.py")).read_text(encoding="utf-8")
COLLECT_MAX_FILES = 2000
COLLECT_MAX_FILE_BYTES = 1 << 20
COLLECT_MAX_TOTAL_BYTES = 32 << 20
MAX_VALUE_CHARS = 1 << 20
"""Longest ``repr`` of one computed value (longer values are an error of that call)."""
_OWN_PACKAGES = ("trace_gym", "trace_diagnose", "trace_train")
_EXIT_CODES = {90: "blocked", 91: "memory_limit", 92: "process_limit", 93: "file_size_limit",
               94: "open_files_limit"}  # fmt: skip


class SandboxUnavailable(ConfigError):
    """Agent code cannot run isolated here and no one opted in to running it without."""


def unavailable_message(problem: str) -> str:
    return (
        f"{problem}. Agent code is not run without isolation unless you opt in. Install "
        "bubblewrap (apt-get install bubblewrap; it needs unprivileged user namespaces), or "
        f'opt in explicitly with isolation="none" ({UNSAFE_ENV}=1, or trace-gym '
        "--unsafe-no-sandbox): the agent's code then runs as your user and can read and write "
        "your files, use the network and leave processes running."
    )


def bwrap_path() -> str | None:
    """The ``bwrap`` executable, or None."""
    return shutil.which("bwrap")


def default_isolation() -> str:
    """``none`` when :data:`UNSAFE_ENV` is ``1``, else ``bwrap``."""
    return "none" if os.environ.get(UNSAFE_ENV) == "1" else "bwrap"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run (defaults suit unit tests of a small module)."""

    cpu_seconds: int = 10
    """CPU seconds of each process."""
    wall_seconds: float = 10.0
    memory_bytes: int = 1 << 30
    """Address space of each process, and (with a control group) the memory of all of the
    run's processes together (plus its task folder's ``disk_bytes``)."""
    file_size_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 256
    """Processes and threads of the run (control group), or of its user (``RLIMIT_NPROC``)."""
    output_bytes: int = 256 << 10
    """stdout plus stderr; a run that writes more is killed (``output_limit``)."""
    disk_bytes: int = 256 << 20
    """Size of the task folder (a tmpfs) under bubblewrap."""

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_bytes", "file_size_bytes", "open_files", "disk_bytes"):
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
    """The JSON (or Python literal) after the last :data:`REPORT_MARKER` line of stdout:
    printed by the run's code, so feedback only, never a verdict."""
    duration_s: float = field(default=0.0, compare=False)
    files: dict[str, str] | None = field(default=None, compare=False)
    """With ``collect``: the task folder's text files as the run left them (regular UTF-8
    files up to :data:`COLLECT_MAX_FILE_BYTES`, no links, no ``__pycache__``)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    def summary(self) -> dict[str, Any]:
        """Deterministic fields for an environment's ``info`` (no timings, no raw output)."""
        return {"status": self.status, "reason": self.reason, "isolation": self.isolation}


@dataclass(frozen=True)
class CallOutcome:
    """One call of :meth:`Sandbox.compute`: ``status`` is ``value`` (``literal`` holds the
    value's ``repr``), ``error`` (it raised), ``timeout``, ``crashed`` (the worker died
    during it), ``import_error`` or ``missing`` (the run ended first)."""

    status: str
    literal: str = ""
    message: str = ""

    def value(self) -> Any:
        """The returned value as plain data; ValueError when there is none or it does not
        parse (it came from the agent's process: treat it as data, nothing more)."""
        if self.status != "value":
            raise ValueError(f"no value: {self.status} {self.message}".strip())
        try:
            return ast.literal_eval(self.literal)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ValueError(f"not a plain value: {type(exc).__name__}") from None

    def equals(self, expected: Any) -> bool:
        """Whether the call returned ``expected`` (``==`` between plain builtin values)."""
        if self.status != "value":
            return False
        if self.literal == repr(expected):
            return True
        try:
            return bool(self.value() == expected)
        except ValueError:
            return False


@dataclass(frozen=True)
class ComputeResult:
    run: RunResult
    outcomes: tuple[CallOutcome, ...]


class Sandbox:
    """Runs untrusted code, one fresh task folder and process tree per run.

    Args:
        limits: resource limits (:class:`Limits`).
        isolation: ``bwrap`` (default from :func:`default_isolation`; ``auto`` is a synonym)
            or ``none`` (no isolation: see the module docstring for what that leaves open).
        strict: in Python runs, the audit policy also stops new processes and ``ctypes``.
        python: the interpreter (default: the running one).

    Raises :class:`SandboxUnavailable` when bubblewrap is missing or cannot set up here.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        isolation: str | None = None,
        strict: bool = True,
        python: str | None = None,
    ) -> None:
        isolation = default_isolation() if isolation is None else isolation
        if isolation == "auto":
            isolation = "bwrap"
        if isolation == "rlimits":
            raise ValueError(
                "isolation='rlimits' is now isolation='none' (no isolation at all: see "
                "trace_gym.sandbox); say so explicitly"
            )
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        self.limits = limits or Limits()
        self.strict = strict
        self.python = python or sys.executable
        self.isolation = isolation
        with _trusted_section():
            self._cgroups, cgroup_note = cgroups.probe()
        self._bwrap: str | None = None
        self._bwrap_features: tuple[str, ...] = ()
        if isolation == "bwrap":
            self._bwrap, self._bwrap_features = _working_bwrap(self.python)
        self._drop_to_nobody = (
            isolation == "none" and os.geteuid() == 0 and _world_executable(self.python)
        )
        self._guarantees = self._describe(cgroup_note)

    # -- what it guarantees ---------------------------------------------------------------
    def _describe(self, cgroup_note: str) -> dict[str, str]:
        lim = self.limits
        if "pids" in self._cgroups:
            procs = f"{lim.processes} across the run (control group)"
        elif os.geteuid() != 0 or self._drop_to_nobody:
            procs = f"{lim.processes} (RLIMIT_NPROC of the run's user)"
        else:
            procs = "not capped (root without a writable control group)"
        if "memory" in self._cgroups:
            memory = (
                f"{(lim.memory_bytes + lim.disk_bytes) >> 20} MiB across the run (control group)"
            )
        else:
            memory = f"{lim.memory_bytes >> 20} MiB per process (RLIMIT_AS; {cgroup_note})"
        if self.isolation == "none":
            return {
                "isolation": "none: the code runs as the harness's user, unisolated",
                "processes": procs,
                "memory": memory,
                "disk": f"not capped (files up to {lim.file_size_bytes >> 20} MiB each)",
            }
        disk = "size" in self._bwrap_features
        return {
            "isolation": "bubblewrap: user namespace, no capabilities, own pid/net/ipc/uts "
            "namespaces, read-only system, only the task folder writable"
            + (
                ""
                if "disable-userns" in self._bwrap_features
                else " (nested user namespaces "
                "refused by seccomp only: this bwrap lacks --disable-userns)"
            ),  # fmt: skip
            "seccomp": f"{seccomp.machine()} filter ({len(seccomp.DENIED)} syscalls denied)",
            "processes": procs,
            "memory": memory,
            "disk": f"task folder tmpfs of {lim.disk_bytes >> 20} MiB"
            if disk
            else "task folder tmpfs not size-capped (bwrap lacks --size)",
        }

    def guarantees(self) -> dict[str, str]:
        """What this sandbox enforces on this machine, in words (for ``info`` and docs)."""
        return dict(self._guarantees)

    # -- public ---------------------------------------------------------------------------
    def run(
        self,
        files: dict[str, str],
        entry: str,
        args: list[str] | tuple[str, ...] = (),
        *,
        collect: bool = False,
    ) -> RunResult:
        """Write ``files`` (relative path -> text) into a fresh task folder and run the
        Python file ``entry`` as ``__main__`` with ``args``."""
        request = {"mode": "script", "entry": entry, "args": list(args), "strict": self.strict}
        return self._launch(files, request, collect=collect)[0]

    def run_command(
        self,
        files: dict[str, str],
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        collect: bool = False,
        merge_stderr: bool = False,
    ) -> RunResult:
        """Run ``argv`` (``argv[0]`` an absolute path inside the sandbox, e.g. ``/bin/bash``)
        in a fresh task folder holding ``files``; with ``collect``, bring the files back;
        with ``merge_stderr``, its stderr goes to stdout (one stream, as a terminal shows)."""
        full_env = {**self._base_env(), "PATH": self._path(), **(env or {})}
        request = {"mode": "exec", "argv": list(argv), "env": full_env,
                   "merge_stderr": merge_stderr}  # fmt: skip
        return self._launch(files, request, collect=collect)[0]

    def compute(
        self,
        files: dict[str, str],
        module: str,
        calls: list[str],
        *,
        call_timeout: float = 2.0,
        import_timeout: float = 5.0,
    ) -> ComputeResult:
        """Import ``module`` from ``files`` and evaluate each call expression (written with
        the module as ``M``, e.g. ``M.total([1, 2])``) in order, in one worker, each with
        ``call_timeout`` seconds; a call that kills the worker costs only itself."""
        request = {
            "mode": "compute",
            "module": module,
            "calls": list(calls),
            "call_timeout": float(call_timeout),
            "import_timeout": float(import_timeout),
            "max_value_chars": MAX_VALUE_CHARS,
        }
        run, frames = self._launch(files, request, collect=False)
        outcomes: list[CallOutcome | None] = [None] * len(calls)
        for kind, index, payload in frames:
            text = payload.decode("utf-8", "replace")
            if not 0 <= index < len(calls) or outcomes[index] is not None:
                continue
            if kind == b"V":
                outcomes[index] = CallOutcome("value", literal=text)
            elif kind == b"X":
                status = "timeout" if text.startswith("timeout:") else "error"
                outcomes[index] = CallOutcome(status, message=text)
            elif kind == b"T":
                outcomes[index] = CallOutcome("timeout", message=text)
            elif kind == b"C":
                outcomes[index] = CallOutcome("crashed", message=text)
            elif kind == b"I":
                for i in range(index, len(calls)):
                    outcomes[i] = outcomes[i] or CallOutcome("import_error", message=text)
        why = "" if run.status == "ok" else f"the run ended first ({run.status}: {run.reason})"
        final = tuple(o or CallOutcome("missing", message=why) for o in outcomes)
        return ComputeResult(run, final)

    # -- internals ------------------------------------------------------------------------
    def _base_env(self) -> dict[str, str]:
        home = TASK_DIR if self._bwrap else "."
        return {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home, "USER": "sandbox",
                "LOGNAME": "sandbox", "TMPDIR": home, "PATH": "/usr/bin:/bin"}  # fmt: skip

    def _path(self) -> str:
        """PATH for commands: the interpreter's folder first (``python`` runs the tests)."""
        return os.path.dirname(os.path.abspath(self.python)) + ":/usr/local/bin:/usr/bin:/bin"

    def _launch(
        self, files: dict[str, str], request: dict[str, Any], *, collect: bool
    ) -> tuple[RunResult, list[tuple[bytes, int, bytes]]]:
        _check_paths(files)
        host_root = None
        if not self._bwrap:
            try:
                with _trusted_section():
                    host_root = tempfile.mkdtemp(prefix="trace-sbx-")
            except OSError as exc:
                return self._infra(f"cannot create the task folder: {exc}"), []
        try:
            root = TASK_DIR if self._bwrap else str(host_root)
            if request["mode"] == "exec" and not self._bwrap:  # the launcher's cwd is the root
                request["env"] = {
                    **request["env"],
                    **{k: root for k in ("HOME", "TMPDIR") if request["env"].get(k) == "."},
                }
            request = {
                **request,
                "root": root,
                "files": files,
                "private_pids": bool(self._bwrap),
                "collect": (COLLECT_MAX_FILES, COLLECT_MAX_FILE_BYTES, COLLECT_MAX_TOTAL_BYTES)
                if collect
                else None,
            }
            return self._execute(request, host_root)
        finally:
            if host_root is not None:
                with _trusted_section():
                    shutil.rmtree(host_root, ignore_errors=True)

    def _infra(self, reason: str) -> RunResult:
        return RunResult("infra_error", reason, None, "", "", self.isolation)

    def _command(self, fds: dict[str, int]) -> list[str]:
        python = os.path.realpath(self.python)
        py = [python, "-I", "-S", "-B", "-c", LAUNCHER]
        py += [str(fds["request"]), str(fds["status_w"]), str(fds.get("go_r", -1))]
        if not self._bwrap:
            return py
        cmd = [self._bwrap, *_bwrap_args(self.python, self.limits, self._bwrap_features)]
        if "info_w" in fds:  # bubblewrap says the sandbox's first process's pid there
            cmd += ["--info-fd", str(fds["info_w"])]
        return [*cmd, "--seccomp", str(fds["seccomp"]), "--", *py]

    def _rlimits(self) -> list[tuple[str, int]]:
        """Limits the launcher sets on itself (and so on every process of the run)."""
        lim = self.limits
        out = [("RLIMIT_CPU", lim.cpu_seconds), ("RLIMIT_FSIZE", lim.file_size_bytes),
               ("RLIMIT_NOFILE", lim.open_files), ("RLIMIT_CORE", 0),
               ("RLIMIT_AS", lim.memory_bytes)]  # fmt: skip
        if os.geteuid() != 0 or self._drop_to_nobody:  # RLIMIT_NPROC counts the whole user
            others = 0 if self._drop_to_nobody else _user_process_count()
            out.append(("RLIMIT_NPROC", lim.processes + others))
        return out

    def _execute(
        self, request: dict[str, Any], host_root: str | None
    ) -> tuple[RunResult, list[tuple[bytes, int, bytes]]]:
        lim = self.limits
        fds: dict[str, int] = {}
        group = None
        request["rlimits"] = self._rlimits()
        try:
            with _trusted_section():
                fds["request"] = os.memfd_create("trace-sbx-request", 0)
                os.write(fds["request"], marshal.dumps(request))
                if self._bwrap:
                    fds["seccomp"] = seccomp.filter_fd(_seccomp_program())
                    os.set_inheritable(fds["seccomp"], True)
                fds["status_r"], fds["status_w"] = os.pipe()
                if self._cgroups:
                    group = cgroups.acquire(
                        self._cgroups, lim.memory_bytes + lim.disk_bytes, lim.processes
                    )
                    fds["go_r"], fds["go_w"] = os.pipe()
                    if self._bwrap:
                        fds["info_r"], fds["info_w"] = os.pipe()
        except OSError as exc:
            _close(list(fds.values()))
            if group is not None:
                group.remove()
            return self._infra(f"cannot prepare the run: {exc}"), []
        cmd = self._command(fds)
        child_fds = [
            fds[k] for k in ("request", "seccomp", "status_w", "go_r", "info_w") if k in fds
        ]
        nobody = (
            {"user": NOBODY, "group": NOBODY, "extra_groups": []} if self._drop_to_nobody else {}
        )
        start = time.monotonic()
        try:
            with _trusted_section():
                proc = subprocess.Popen(
                    cmd,
                    cwd=host_root or "/",
                    env=self._base_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=child_fds,
                    start_new_session=True,  # the run's process group, killed at the end
                    close_fds=True,
                    **nobody,  # type: ignore[arg-type]
                )
        except (OSError, subprocess.SubprocessError) as exc:
            _close(list(fds.values()))
            if group is not None:
                cgroups.release(group)
            return self._infra(f"cannot start the sandboxed process: {exc}"), []
        _close(child_fds)
        try:
            if group is not None:
                with _trusted_section():
                    _place_in_group(proc.pid, fds.get("info_r"), fds["go_w"], group, start + 10)
            out, err, status, flooded, timed_out = self._collect(proc, fds["status_r"], start)
        finally:
            _close([fds[k] for k in ("status_r", "go_w", "info_r") if k in fds])
            with _trusted_section():
                _kill(proc)
                oom = group.oom_killed() if group is not None else False
                if group is not None:
                    cgroups.release(group)
        duration = time.monotonic() - start
        stdout = out.decode("utf-8", "replace")
        stderr = err.decode("utf-8", "replace")
        if not status.startswith(b"R"):  # the launcher never said ready: the harness failed
            if timed_out:
                reason = f"the sandbox did not start within {lim.wall_seconds:g} s"
            else:
                what = "bubblewrap could not set up" if self._bwrap else "the launcher failed"
                reason = f"{what}: {stderr.strip()[-400:] or f'exit status {proc.returncode}'}"
            return RunResult("infra_error", reason, proc.returncode, "", stderr, self.isolation,
                             duration_s=duration), []  # fmt: skip
        frames = _frames(status[1:])
        end = next((i for k, i, _ in frames if k == b"E"), None)
        files = None
        if request.get("collect") and end is not None and not (flooded or timed_out):
            files = _files_from(frames)
        code, state, reason = self._classify(request["mode"], end, stderr, flooded, timed_out, oom)
        return RunResult(state, reason, code, stdout, stderr, self.isolation,
                         _report(stdout), duration, files), frames  # fmt: skip

    def _collect(
        self, proc: subprocess.Popen, status_r: int, start: float
    ) -> tuple[bytes, bytes, bytes, bool, bool]:
        lim = self.limits
        status_cap = COLLECT_MAX_TOTAL_BYTES + (8 << 20)
        chunks: dict[int, list[bytes]] = {1: [], 2: [], 3: []}
        sizes = {1: 0, 2: 0, 3: 0}
        flooded = timed_out = False
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        sel.register(status_r, selectors.EVENT_READ, 3)
        try:
            status_open = True
            while status_open:
                left = lim.wall_seconds - (time.monotonic() - start)
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=min(left, 0.5)):
                    fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                    data = os.read(fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fileobj)
                        status_open &= key.data != 3
                        continue
                    chunks[key.data].append(data)
                    sizes[key.data] += len(data)
                    if sizes[1] + sizes[2] > lim.output_bytes or sizes[3] > status_cap:
                        flooded = True
                if flooded:
                    break
            # the launcher is done: what is left in the pipes, without waiting for strays
            if not (flooded or timed_out):
                for key in list(sel.get_map().values()):
                    if key.data == 3:
                        continue
                    fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                    os.set_blocking(fd, False)
                    with contextlib.suppress(BlockingIOError, OSError):
                        while data := os.read(fd, 1 << 16):
                            chunks[key.data].append(data)
                            sizes[key.data] += len(data)
                            if sizes[1] + sizes[2] > lim.output_bytes:
                                break
        finally:
            sel.close()
        out, err = b"".join(chunks[1]), b"".join(chunks[2])
        cap = lim.output_bytes
        if len(out) + len(err) > cap:
            flooded = flooded or True
            out, err = out[:cap], err[: max(0, cap - len(out))]
        return out, err, b"".join(chunks[3]), flooded, timed_out

    def _classify(
        self,
        mode: str,
        end: int | None,
        stderr: str,
        flooded: bool,
        timed_out: bool,
        oom: bool,
    ) -> tuple[int | None, str, str]:
        lim = self.limits
        if flooded:
            return None, "output_limit", f"wrote more than {lim.output_bytes} bytes of output"
        if timed_out:
            return None, "timeout", f"still running after {lim.wall_seconds:g} s (wall clock)"
        if oom:
            mib = (lim.memory_bytes + lim.disk_bytes) >> 20
            return None, "memory_limit", f"its processes used more than {mib} MiB together"
        if end is None:
            return None, "error", "the run ended without reporting (its launcher was killed)"
        if mode == "compute":
            return 0, "ok", "computed"
        if end < 0:
            return None, "error", "its process vanished"
        if os.WIFSIGNALED(end):
            sig = os.WTERMSIG(end)
            code = -sig
            if sig == signal.SIGXCPU:
                return code, "cpu_limit", f"used more than {lim.cpu_seconds} s of CPU"
            if sig == signal.SIGSEGV:
                return code, "memory_limit", "crashed with SIGSEGV (often memory exhaustion)"
            if sig == signal.SIGKILL:
                return (
                    code,
                    "cpu_limit",
                    f"killed (SIGKILL; CPU hard limit {lim.cpu_seconds + 1} s)",
                )
            return code, "error", f"killed by signal {signal.Signals(sig).name}"
        code = os.WEXITSTATUS(end)
        if code == 0:
            return 0, "ok", "exited 0"
        if mode == "script" and code in _EXIT_CODES:
            state = _EXIT_CODES[code]
            if state == "blocked":
                marker = "@@TRACE_SANDBOX_BLOCKED@@ "
                line = stderr[stderr.rfind(marker) + len(marker) :].splitlines()
                return code, "blocked", "blocked: " + (line[0] if line else "policy violation")
            reasons = {
                "memory_limit": f"ran out of its {lim.memory_bytes >> 20} MiB address space",
                "process_limit": f"hit the limit of {lim.processes} processes",
                "file_size_limit": f"wrote a file over {lim.file_size_bytes} bytes",
                "open_files_limit": f"opened more than {lim.open_files} files",
            }
            return code, state, reasons[state]
        if mode == "script" and "MemoryError" in stderr[-2000:]:
            return (
                code,
                "memory_limit",
                f"ran out of its {lim.memory_bytes >> 20} MiB address space",
            )
        if mode == "exec" and code == 127:
            return code, "error", "exited with status 127 (command not found)"
        return code, "error", f"exited with status {code}"


# -- bubblewrap ----------------------------------------------------------------------------------
_OPTIONAL_FEATURES = ("disable-userns", "size")


def _bwrap_args(python: str, limits: Limits, features: tuple[str, ...]) -> list[str]:
    args = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if "disable-userns" in features:
        args.append("--disable-userns")
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent",
             "--new-session", "--as-pid-1"]  # fmt: skip
    binds, links = _read_only_paths(python)
    for path in binds:
        args += ["--ro-bind", path, path]
    for target, link in links:
        args += ["--symlink", target, link]
    for pkg in _own_package_dirs():  # the project's code (its generators) stays out
        if any(pkg == b or pkg.startswith(b.rstrip("/") + "/") for b in binds):
            args += ["--tmpfs", pkg, "--remount-ro", pkg]
    args += ["--dev", "/dev", "--proc", "/proc"]
    if "size" in features:
        args += ["--size", str(limits.disk_bytes)]
    args += ["--tmpfs", TASK_DIR, "--chdir", TASK_DIR, "--remount-ro", "/"]
    return args


@functools.lru_cache(maxsize=4)
def _read_only_paths(python: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Folders bound read-only, and ``(target, link)`` symbolic links to recreate (``/bin``
    -> ``usr/bin`` on merged-/usr systems)."""
    wanted = {"/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", "/etc/alternatives",
              "/etc/ld.so.cache"}  # fmt: skip
    exe = Path(os.path.realpath(python))
    wanted |= {sys.base_prefix, sys.prefix, str(exe.parent.parent)}
    if os.path.realpath(python) != os.path.abspath(python):  # a venv's symlinked interpreter
        wanted.add(os.path.dirname(os.path.abspath(python)))
    links, real = [], set()
    for p in sorted(wanted):
        if not os.path.lexists(p):
            continue
        if os.path.islink(p) and os.path.dirname(p) == "/":
            links.append((os.readlink(p), p))
        real.add(os.path.realpath(p))
    keep = sorted(p for p in real if os.path.exists(p))
    # a path inside another bound one is already there
    binds = tuple(p for p in keep if not any(p != q and p.startswith(q.rstrip("/") + "/")
                                             for q in keep))  # fmt: skip
    return binds, tuple(links)


@functools.lru_cache(maxsize=1)
def _own_package_dirs() -> tuple[str, ...]:
    import importlib.util

    out = []
    for name in _OWN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            out += [os.path.realpath(loc) for loc in spec.submodule_search_locations]
    return tuple(sorted(set(out)))


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes:
    return seccomp.assemble()


def _working_bwrap(python: str) -> tuple[str, tuple[str, ...]]:
    """bubblewrap's path and the optional features that work here; raises
    :class:`SandboxUnavailable` (saying why) when it is missing or cannot set up."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(unavailable_message("bubblewrap (bwrap) is not installed"))
    features, error = _probe_bwrap(path, python)
    if error is not None:
        raise SandboxUnavailable(unavailable_message(error))
    return path, features


@functools.lru_cache(maxsize=8)
def _probe_bwrap(path: str, python: str) -> tuple[tuple[str, ...], str | None]:
    """Try bubblewrap once per process: the optional features that work, or why none does."""
    try:
        program = _seccomp_program()
    except seccomp.UnsupportedArchitecture as exc:
        return (), f"the sandbox cannot run here: {exc}"
    error = ""
    for features in (_OPTIONAL_FEATURES, ("size",), ()):
        fd = seccomp.filter_fd(program)
        try:
            os.set_inheritable(fd, True)
            cmd = [path, *_bwrap_args(python, Limits(), features), "--seccomp", str(fd), "--",
                   os.path.realpath(python), "-I", "-S", "-c", "pass"]  # fmt: skip
            with _trusted_section():
                out = subprocess.run(
                    cmd, capture_output=True, text=True, pass_fds=(fd,), timeout=60,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            error = str(exc)
            continue
        finally:
            os.close(fd)
        if out.returncode == 0:
            return features, None
        error = out.stderr.strip()[-300:] or f"exit status {out.returncode}"
    return (), f"bubblewrap is installed but cannot create a sandbox here ({error})"


def sandbox_available(isolation: str | None = None) -> str | None:
    """None when a sandbox of ``isolation`` can run here, else the reason it cannot."""
    try:
        Sandbox(isolation=isolation)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


# -- helpers -------------------------------------------------------------------------------------
def _check_paths(files: dict[str, str]) -> None:
    """Task file paths must be relative, normalised and inside the folder (the caller's bug
    otherwise: it raises)."""
    dirs: set[str] = set()
    for rel in files:
        parts = rel.split("/")
        if (
            not rel
            or rel.startswith("/")
            or "\0" in rel
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ValueError(f"sandbox file path {rel!r} leaves the task directory")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = dirs & set(files)
    if clash:
        raise ValueError(f"sandbox file path {sorted(clash)[0]!r} is both a file and a folder")


def _frames(data: bytes) -> list[tuple[bytes, int, bytes]]:
    """The launcher's frames (``b"<kind> <index> <length>\\n" + payload``); stops at the first
    malformed one (a process of the run may have written into the pipe: its data, nothing
    more)."""
    out, at = [], 0
    while at < len(data):
        nl = data.find(b"\n", at, at + 64)
        if nl < 0:
            break
        parts = data[at:nl].split(b" ")
        try:
            kind, index, size = parts[0], int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            break
        if len(parts) != 3 or size < 0 or nl + 1 + size > len(data):
            break
        out.append((kind, index, data[nl + 1 : nl + 1 + size]))
        at = nl + 1 + size
    return out


def _files_from(frames: list[tuple[bytes, int, bytes]]) -> dict[str, str]:
    files: dict[str, str] = {}
    path = None
    for kind, _, payload in frames:
        if kind == b"F":
            path = payload.decode("utf-8", "replace")
        elif kind == b"D" and path is not None:
            try:
                files[path] = payload.decode("utf-8")
            except UnicodeDecodeError:
                pass
            path = None
    return files


def _place_in_group(
    pid: int, info_r: int | None, go_w: int, group: cgroups.RunGroup, deadline: float
) -> None:
    """Move the run's first process into its control group, then let it go on (it waits
    for the byte on ``go_w`` before it starts anything). Under bubblewrap that process is the
    sandbox's PID 1, whose host pid bubblewrap writes on ``info_r``. Any failure here leaves
    the launcher without its byte: the run ends as the harness's failure."""
    if info_r is not None:
        data = b""
        sel = selectors.DefaultSelector()
        sel.register(info_r, selectors.EVENT_READ)
        try:
            while b"}" not in data and sel.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(info_r, 4096)
                if not chunk:
                    break
                data += chunk
        finally:
            sel.close()
        try:
            pid = int(json.loads(data.decode()).get("child-pid"))
        except (ValueError, TypeError, AttributeError):
            return  # bubblewrap failed to set up: its stderr says why
    try:
        for procs in group.procs_files():
            with open(procs, "w", encoding="ascii") as fh:
                fh.write(str(pid))
        os.write(go_w, b"g")
    except OSError:
        return


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (bubblewrap takes its namespace down with it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
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
    """The JSON, or Python literal, after the last :data:`REPORT_MARKER` (feedback only)."""
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
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


__all__ = [
    "COLLECT_MAX_FILES",
    "ISOLATION_MODES",
    "REPORT_MARKER",
    "STATUSES",
    "UNSAFE_ENV",
    "CallOutcome",
    "ComputeResult",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxUnavailable",
    "audit_allows",
    "bwrap_path",
    "default_isolation",
    "sandbox_available",
]
