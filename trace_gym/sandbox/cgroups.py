"""Memory and process caps across every process of a run, with a control group per run.

Per-process limits (``RLIMIT_AS``) do not bound a run that starts many processes, and
``RLIMIT_NPROC`` is not enforced for processes of root (nor inside a user namespace created
by root). A control group is: each run gets its own child group under the harness's own,
with ``memory`` (all its processes and its tmpfs pages together) and ``pids`` (processes and
threads) limits; the run's first process joins it before it executes anything, so every
descendant is inside, and at the end every process left in it is killed.

Both cgroup v2 (one unified hierarchy, controllers delegated to the harness's group) and
cgroup v1 (one hierarchy per controller) are supported. Where neither is writable (an
unprivileged user without delegation, a read-only ``/sys/fs/cgroup``) :func:`probe` says
so and the sandbox falls back to per-process limits and reports it: never silently.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass

from trace_gym.sandbox.trust import _trusted_section

CONTROLLERS = ("memory", "pids")
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Hierarchy:
    """Where this process may create child groups for one controller."""

    controller: str
    base: str
    """The harness's own group's directory (children are made inside it)."""
    version: int


def _own_groups() -> dict[str, str]:
    """Controller (or ``""`` for cgroup v2) -> this process's group path."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                out[name] = path
    return out


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """``(fstype, mount point, root inside the hierarchy, super options)`` of cgroup mounts."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
                continue
            point = fields[4].replace("\\040", " ")
            out.append((tail[0], point, fields[3], set(tail[2].split(","))))
    return out


def _join(point: str, root: str, path: str) -> str | None:
    if root != "/" and not (path == root or path.startswith(root + "/")):
        return None
    rel = path[len(root) :] if root != "/" else path
    return os.path.join(point, rel.lstrip("/"))


def find_hierarchies() -> dict[str, Hierarchy]:
    """The hierarchies of :data:`CONTROLLERS` this process is in (not yet tried for writing)."""
    try:
        groups, mounts = _own_groups(), _mounts()
    except OSError:
        return {}
    found: dict[str, Hierarchy] = {}
    for fstype, point, root, options in mounts:
        if fstype == "cgroup":
            for name in CONTROLLERS:
                if name in options and name in groups and name not in found:
                    base = _join(point, root, groups[name])
                    if base:
                        found[name] = Hierarchy(name, base, 1)
        elif "" in groups:
            base = _join(point, root, groups[""])
            try:
                with open(os.path.join(base or "", "cgroup.subtree_control")) as fh:
                    enabled = set(fh.read().split())
            except OSError:
                continue
            for name in CONTROLLERS:
                if name in enabled and name not in found and base:
                    found[name] = Hierarchy(name, base, 2)
    return found


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


class RunGroup:
    """One run's control groups (one per controller; cgroup v2 shares one directory)."""

    def __init__(self, hierarchies: dict[str, Hierarchy], memory_bytes: int, processes: int):
        name = f"trace-sbx-{os.getpid()}-{next(_COUNTER)}"
        self.key = (tuple(sorted(hierarchies.items())), memory_bytes, processes)
        self.ooms = 0
        self.dirs: dict[str, str] = {}
        try:
            for controller, h in hierarchies.items():
                path = os.path.join(h.base, name)
                if path not in self.dirs.values():
                    os.mkdir(path)
                self.dirs[controller] = path
                if controller == "memory":
                    files = ("memory.max",) if h.version == 2 else ("memory.limit_in_bytes",)
                    for f in files:
                        _write(os.path.join(path, f), str(memory_bytes))
                    for swap in ("memory.swap.max", "memory.memsw.limit_in_bytes"):
                        with contextlib.suppress(OSError):  # swap accounting may be off
                            _write(
                                os.path.join(path, swap),
                                "0" if h.version == 2 else str(memory_bytes),
                            )
                else:
                    _write(os.path.join(path, "pids.max"), str(processes))
        except OSError:
            self.remove()
            raise

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a new process writes its pid into to join."""
        return sorted({os.path.join(d, "cgroup.procs") for d in self.dirs.values()})

    def oom_count(self) -> int:
        """Processes the memory limit has killed in this group so far."""
        path = self.dirs.get("memory")
        if path is None:
            return 0
        for name in ("memory.events", "memory.oom_control"):
            try:
                with open(os.path.join(path, name), encoding="ascii") as fh:
                    for line in fh:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except (OSError, ValueError):
                continue
        return 0

    def oom_killed(self) -> bool:
        """Whether the memory limit killed a process of the current run."""
        return self.oom_count() > self.ooms

    def kill_all(self) -> None:
        """SIGKILL every process still in the run's groups (a few rounds: a fork may race)."""
        for _ in range(20):
            pids: set[int] = set()
            for procs in self.procs_files():
                try:
                    with open(procs, encoding="ascii") as fh:
                        pids |= {int(p) for p in fh.read().split()}
                except (OSError, ValueError):
                    continue
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def remove(self) -> None:
        """Kill what is left and remove the groups."""
        self.kill_all()
        for path in sorted(set(self.dirs.values()), reverse=True):
            for _ in range(50):  # the kernel frees a group a moment after its last process
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002)
        self.dirs = {}


_POOL: list[RunGroup] = []
_POOL_LOCK = threading.Lock()


def acquire(hierarchies: dict[str, Hierarchy], memory_bytes: int, processes: int) -> RunGroup:
    """An empty group with these limits for one run: a released one when there is one
    (moving the first process into a fresh memory group costs ~20 ms; a used one, ~0.1)."""
    key = (tuple(sorted(hierarchies.items())), memory_bytes, processes)
    with _POOL_LOCK:
        for i, group in enumerate(_POOL):
            if group.key == key:
                group = _POOL.pop(i)
                group.ooms = group.oom_count()
                return group
    return RunGroup(hierarchies, memory_bytes, processes)


def release(group: RunGroup) -> None:
    """Kill what is left of the run and keep the group for the next run."""
    group.kill_all()
    with _POOL_LOCK:
        _POOL.append(group)


@atexit.register
def _remove_pool() -> None:
    with _POOL_LOCK, _trusted_section():
        while _POOL:
            with contextlib.suppress(OSError):
                _POOL.pop().remove()


def _remove_stale(hierarchies: dict[str, Hierarchy]) -> None:
    """Groups a process that died without cleaning up left behind (empty by then)."""
    for h in hierarchies.values():
        try:
            names = os.listdir(h.base)
        except OSError:
            continue
        for name in names:
            parts = name.split("-")
            if len(parts) != 4 or parts[:2] != ["trace", "sbx"] or not parts[2].isdigit():
                continue
            if not os.path.exists(f"/proc/{parts[2]}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(h.base, name))


@functools.lru_cache(maxsize=1)
def probe() -> tuple[dict[str, Hierarchy], str]:
    """The usable hierarchies and a sentence saying what is capped how (tried once)."""
    found = find_hierarchies()
    _remove_stale(found)
    usable: dict[str, Hierarchy] = {}
    for name, h in found.items():
        try:
            RunGroup({name: h}, 1 << 30, 64).remove()
            usable[name] = h
        except OSError:
            continue
    if not usable:
        where = "no cgroup hierarchy found" if not found else "the cgroup hierarchy is not writable"
        return {}, f"no control group ({where})"
    shown = ", ".join(f"{n} (cgroup v{h.version})" for n, h in sorted(usable.items()))
    return usable, shown
