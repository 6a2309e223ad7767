"""The sandbox's launcher: the first program of every run, trusted, standard library only.

It runs as ``python -I -S -B -c <this file's text> REQUEST_FD STATUS_FD GO_FD`` (isolated mode: no
user site, no ``PYTHON*`` variables, no current directory on ``sys.path``, no ``site``, so
no ``.pth`` file or ``sitecustomize`` is read), inside bubblewrap as the sandbox's PID 1
(``--as-pid-1``: a signal from a process of the run cannot kill it).

1. It reads the request (a ``marshal`` dump the harness wrote to a memory file), sets the
   run's resource limits on itself (its children inherit them), writes the task files into
   the task folder, waits until the harness has moved it into the run's control group (a
   byte on ``GO_FD``, when there is one), and checks what it is asked to start.
2. It writes one byte, ``R``, on the status pipe: *ready*. Nothing of the agent's has run
   before that byte, so the harness knows that any failure before it is its own (an
   ``infra_error``) and any outcome after it is the agent's.
3. It runs the agent's code in a child process, which never holds the status pipe, and
   reports on the status pipe in frames ``b"<kind> <index> <length>\\n" + payload``.

The frames carry only what the agent's code decides anyway: its exit status, the files it
left, or the plain values its functions returned; never a verdict, never an expected value
(those stay with the harness). Whatever a process of the run manages to write into the pipe
is therefore no more than it could have returned or written itself.

Modes:

* ``exec``: ``execve`` a program (bash) in the task folder; frame ``E`` with its wait
  status; with ``collect``, frames ``F`` (path, then content) of the files it left.
* ``script``: run a Python file of the task as ``__main__`` (a forked copy of the launcher,
  no second interpreter start), with the audit policy; frames as for ``exec``.
* ``compute``: import a module of the task and evaluate calls on it (``M.f(1, 2)``): a child
  imports the module and sends ``V i`` (the value's ``repr`` when it is plain data) or
  ``X i`` (the error) per call; the launcher forwards them, times each call out (``T i``),
  and when the child dies (``os._exit``, a crash, a stack overflow) reports ``C i`` and starts
  a fresh child for the calls after it. ``I`` says the module could not be imported.
"""

from __future__ import annotations

import marshal
import os
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                "os.utime", "shutil.rmtree", "os.link", "os.symlink"}  # fmt: skip
_PROC_EVENTS = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                "subprocess.Popen", "pty.spawn", "os.startfile"}  # fmt: skip
MAX_HUNG_CALLS = 2
MAX_DEAD_CALLS = 10
EXIT_BLOCKED, EXIT_MEMORY, EXIT_NPROC, EXIT_FSIZE, EXIT_NOFILE = 90, 91, 92, 93, 94


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def frame(fd: int, kind: bytes, index: int, payload: bytes = b"") -> None:
    write_all(fd, b"%s %d %d\n" % (kind, index, len(payload)) + payload)


def read_request(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return marshal.loads(b"".join(chunks))


def write_files(root: str, files: dict) -> None:
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            write_all(fd, data.encode("utf-8") if isinstance(data, str) else data)
        finally:
            os.close(fd)


def child_setup(root: str, quiet: bool, keep: int = -1) -> None:
    """In a child, before any agent code: none of the launcher's descriptors (but ``keep``),
    no stdin, the task folder."""
    if keep >= 3:
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
    else:
        os.closerange(3, 1 << 16)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    if quiet:  # compute: what the agent's code prints goes nowhere
        os.dup2(null, 1)
        os.dup2(null, 2)
    os.close(null)
    os.chdir(root)
    try:  # let the memory cap's OOM killer pick the agent's processes before the launcher
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"1000")
        os.close(fd)
    except OSError:
        pass


def audit_policy(root: str, strict: bool) -> None:
    """Stop sockets, writes outside the task folder and (strict) new processes and native
    code, naming the reason. Not a boundary (bubblewrap is): it says early why."""
    exit_, write = os._exit, os.write
    realpath, join, sep = os.path.realpath, os.path.join, os.sep

    def stop(reason: str) -> None:
        write(2, ("\n@@TRACE_SANDBOX_BLOCKED@@ " + reason + "\n").encode("utf-8", "replace"))
        exit_(EXIT_BLOCKED)

    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True
        try:
            p = realpath(join(root, os.fsdecode(path)))
        except Exception:
            return False
        return p == root or p.startswith(root + sep)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing and path is not None and not inside(path):
                stop("write outside the task directory: " + repr(path))
        elif event in _PATH_EVENTS:
            if args and not inside(args[0]):
                stop(event + " outside the task directory: " + repr(args[0]))
        elif event in ("os.rename", "os.replace"):
            if not (inside(args[0]) and inside(args[1])):
                stop(event + " outside the task directory")
        elif event.startswith("socket."):
            stop("network access (" + event + ")")
        elif strict and (event in _PROC_EVENTS or event.startswith("ctypes.dl")):
            stop("process or native-code access (" + event + ")")

    sys.addaudithook(hook)


def wait_for(pid: int) -> int | None:
    """Wait for ``pid`` (reaping any orphan: the launcher may be PID 1); its wait status."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if got == pid:
            return status


def end_others(private_pids: bool) -> None:
    """Kill every other process of the run (only in the sandbox's own PID namespace, where
    that is exactly the run) and reap them."""
    if private_pids and os.getpid() == 1:
        try:
            os.kill(-1, 9)
        except OSError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue


def collect(root: str, status_fd: int, max_files: int, max_file_bytes: int, max_total: int) -> None:
    """Frames ``F`` of the regular files under ``root`` (no links, no ``__pycache__``)."""
    import stat

    total = files = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_size > max_file_bytes:
                    continue
                if files >= max_files or total + st.st_size > max_total:
                    return
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    data = os.read(fd, max_file_bytes + 1)
                finally:
                    os.close(fd)
            except OSError:
                continue
            if len(data) > max_file_bytes:
                continue
            total += len(data)
            files += 1
            frame(
                status_fd, b"F", 0, os.path.relpath(path, root).encode("utf-8", "surrogateescape")
            )
            frame(status_fd, b"D", 0, data)


def finish(req: dict, root: str, status_fd: int, status: int | None) -> None:
    end_others(req["private_pids"])
    if req.get("collect"):
        collect(root, status_fd, *req["collect"])
    frame(status_fd, b"E", -1 if status is None else status)


def run_exec(req: dict, root: str, status_fd: int) -> None:
    argv, env = req["argv"], req["env"]
    pid = os.fork()
    if pid == 0:
        try:
            child_setup(root, quiet=False)
            if req.get("merge_stderr"):  # as a terminal shows it
                os.dup2(1, 2)
            os.execve(argv[0], argv, env)
        except BaseException as exc:  # reported as the command's failure, after ready
            os.write(2, f"cannot run {argv[0]}: {exc!r}\n".encode())
        os._exit(127)
    finish(req, root, status_fd, wait_for(pid))


def run_script(req: dict, root: str, status_fd: int) -> None:
    entry = req["entry"]
    pid = os.fork()
    if pid == 0:
        child_setup(root, quiet=False)
        sys.path.insert(0, root)
        sys.argv = [entry, *req["args"]]
        audit_policy(root, req["strict"])
        code = EXIT_MEMORY
        try:
            with open(entry, "rb") as fh:
                compiled = compile(fh.read(), entry, "exec")
            exec(
                compiled, {"__name__": "__main__", "__file__": entry, "__builtins__": __builtins__}
            )
            code = 0
        except MemoryError:
            os.write(2, b"\nMemoryError\n")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:
            import errno
            import traceback

            traceback.print_exc()
            errors = {errno.EAGAIN: EXIT_NPROC, errno.EFBIG: EXIT_FSIZE, errno.EMFILE: EXIT_NOFILE}
            code = errors.get(getattr(exc, "errno", None), 1)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code & 0xFF)
    finish(req, root, status_fd, wait_for(pid))


# -- compute ------------------------------------------------------------------------------
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def plain(value: object, depth: int, budget: list) -> object:
    """``value`` as builtin literal types (what ``repr`` and ``ast.literal_eval`` round-trip);
    TypeError for anything else. Subclasses of the builtin types become the builtin type."""
    budget[0] -= 1
    if budget[0] < 0:
        raise TypeError("the value is too large")
    kind = type(value)
    if kind in _PLAIN:
        return value
    if depth > 40:
        raise TypeError("the value is nested too deeply")
    if isinstance(value, bool):
        return bool(value)
    for base in (int, float, str, bytes):
        if isinstance(value, base):
            return base(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [plain(v, depth + 1, budget) for v in value]
        base = next(b for b in (list, tuple, set, frozenset) if isinstance(value, b))
        return base(items)
    if isinstance(value, dict):
        return {plain(k, depth + 1, budget): plain(v, depth + 1, budget) for k, v in value.items()}
    raise TypeError(f"returned a {kind.__name__}, not plain data")


def compute_child(req: dict, root: str, codes: list, start: int, out_fd: int) -> None:
    """Import the module and evaluate calls ``start..`` (never returns)."""
    import _signal

    try:
        child_setup(root, quiet=True, keep=out_fd)
        sys.path.append(root)  # last: a task file never shadows the standard library
        audit_policy(root, True)
    except BaseException as exc:
        frame(out_fd, b"I", 0, f"the worker could not start: {exc!r}".encode())
        os._exit(0)

    class CallTimeout(BaseException):
        pass

    def alarm(signum: int, frame_: object) -> None:
        raise CallTimeout()

    limit = req["call_timeout"]
    try:
        import importlib

        module = importlib.import_module(req["module"])
    except BaseException as exc:
        frame(out_fd, b"I", 0, f"cannot import {req['module']}: {_describe(exc)}".encode())
        os._exit(0)
    frame(out_fd, b"M", 0)
    for i in range(start, len(codes)):
        try:
            _signal.signal(_signal.SIGALRM, alarm)
            _signal.setitimer(_signal.ITIMER_REAL, limit)
            try:
                value = eval(codes[i], {"M": module})
            finally:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
            text = repr(plain(value, 0, [100_000]))
            if len(text) > req["max_value_chars"]:
                raise TypeError(
                    f"the value's repr is longer than {req['max_value_chars']} characters"
                )
            frame(out_fd, b"V", i, text.encode("utf-8", "surrogatepass"))
        except CallTimeout:
            frame(out_fd, b"X", i, b"timeout: the call ran longer than %g s" % limit)
        except BaseException as exc:
            frame(out_fd, b"X", i, _describe(exc).encode("utf-8", "replace"))
    os._exit(0)


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:500]
    except BaseException:
        return "an exception whose message cannot be shown"


def run_compute(req: dict, root: str, status_fd: int, codes: list) -> None:
    import select
    import time

    limit = req["call_timeout"] + 0.5  # the child's own alarm fires first; this is for one
    start = 0  # that blocks or cancels it
    hung = dead = 0  # calls in a row that had to be killed / that killed their worker
    while start < len(codes):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            compute_child(req, root, codes, start, w)
        os.close(w)
        buffer, imported, expected = b"", False, start
        dead_reason = None
        deadline = time.monotonic() + limit + req["import_timeout"]
        while expected < len(codes):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                dead_reason = b"T"
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                dead_reason = b"C"
                break
            buffer += chunk
            while b"\n" in buffer:
                head, _, rest = buffer.partition(b"\n")
                try:
                    kind, index, size = head.split(b" ")
                    index, size = int(index), int(size)
                except ValueError:
                    dead_reason = b"C"
                    break
                if len(rest) < size:
                    break
                payload, buffer = rest[:size], rest[size:]
                if kind == b"M":
                    imported = True
                elif kind == b"I":
                    frame(status_fd, b"I", expected, payload[:2000])
                    expected = len(codes)
                    break
                elif kind in (b"V", b"X") and index == expected:
                    frame(status_fd, kind, index, payload)
                    expected += 1
                else:
                    dead_reason = b"C"
                    break
                deadline = time.monotonic() + limit
            if dead_reason:
                break
            if len(buffer) > req["max_value_chars"] + 64:
                dead_reason = b"C"
                break
        os.close(r)
        if dead_reason is not None:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        status = wait_for(pid)
        if expected >= len(codes):
            break
        if not imported:  # it died importing: every call after it fails the same way
            frame(status_fd, b"I", expected, b"the module's import did not finish (%s)"
                  % _wait_text(status, dead_reason).encode())  # fmt: skip
            break
        frame(status_fd, dead_reason or b"C", expected, _wait_text(status, dead_reason).encode())
        # in a row: this worker gave no result before it died (it started right after the
        # call that killed the last one)
        in_a_row = expected == start
        hung = (hung + 1 if in_a_row else 1) if dead_reason == b"T" else 0
        dead = dead + 1 if in_a_row else 1
        start = expected + 1
        if hung >= MAX_HUNG_CALLS or dead >= MAX_DEAD_CALLS:
            # the module hangs or kills its worker whatever it is asked: stop paying for it
            kind = b"T" if hung >= MAX_HUNG_CALLS else b"C"
            note = b"not run: the %d calls before it killed or hung the worker" % max(hung, dead)
            for i in range(start, len(codes)):
                frame(status_fd, kind, i, note)
            break
    frame(status_fd, b"E", 0)


def _wait_text(status: int | None, reason: bytes | None) -> str:
    if reason == b"T":
        return "killed after the call's time limit"
    if status is None:
        return "the worker vanished"
    if os.WIFSIGNALED(status):
        return f"the worker died of signal {os.WTERMSIG(status)}"
    return f"the worker exited with status {os.WEXITSTATUS(status)} during the call"


def set_limits(limits: list) -> None:
    import resource

    for name, value in limits:
        resource.setrlimit(getattr(resource, name), (value, value))


def wait_for_go(fd: int) -> None:
    """Block until the harness has put this process in the run's control group."""
    if fd < 0:
        return
    got = os.read(fd, 1)
    os.close(fd)
    if got != b"g":
        raise OSError("the harness did not place the run in its control group")


def main() -> None:
    request_fd, status_fd, go_fd = (int(a) for a in sys.argv[1:4])
    try:
        req = read_request(request_fd)
        set_limits(req["rlimits"])
        root = os.path.realpath(req["root"])
        write_files(root, req["files"])
        wait_for_go(go_fd)
        mode = req["mode"]
        codes = None
        if mode == "exec" and not os.access(req["argv"][0], os.X_OK):
            raise OSError(f"cannot execute {req['argv'][0]} in the sandbox")
        if mode == "script" and req["entry"] not in req["files"]:
            raise OSError(f"no entry file {req['entry']}")
        if mode == "compute":
            codes = [compile(c, f"<call {i}>", "eval") for i, c in enumerate(req["calls"])]
    except BaseException as exc:  # before ready: the harness's failure, said on stderr
        os.write(2, f"@@TRACE_SANDBOX_SETUP@@ {type(exc).__name__}: {exc}\n".encode())
        os._exit(70)
    os.write(status_fd, b"R")
    if mode == "exec":
        run_exec(req, root, status_fd)
    elif mode == "script":
        run_script(req, root, status_fd)
    else:
        run_compute(req, root, status_fd, codes)
    os._exit(0)


if __name__ == "__main__":
    main()
