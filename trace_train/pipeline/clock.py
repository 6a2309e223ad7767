"""How long a stage of ``trace run`` worked, over every invocation that ran it.

Long stages are stopped and resumed: a session ends during hours of GRPO, a machine is handed
back halfway through an evaluation. The invocation that finishes such a stage saw only its own
part of it, so its time alone would understate what the stage cost, which a comparison at
equal budgets reports. While a stage runs, a heartbeat thread writes its time so far to
``RUN_DIR/stage-clock.json`` every ``beat_s`` seconds; a killed invocation loses at most one
beat, and the next invocation of the stage starts from what it had recorded.

CPU seconds count this process, its children that ended (``RUSAGE_CHILDREN``) and those still
running (the evaluation's workers, which a kill takes down before they are waited for).
"""

from __future__ import annotations

import json
import resource
import threading
import time
from pathlib import Path
from typing import Any

import psutil


def cpu_seconds() -> float:
    """CPU seconds so far of this process and of every process it started, ended or not."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # it ended since the listing: counted by RUSAGE_CHILDREN later
            continue
        live += times.user + times.system
    return time.process_time() + ended.ru_utime + ended.ru_stime + live


class StageClock:
    """``with StageClock(path, stage) as clock: ...`` then ``clock.total()``: the stage's wall
    and CPU seconds and how many invocations ran it, this one included."""

    def __init__(self, path: Path, stage: str, beat_s: float = 30.0) -> None:
        self.path, self.stage, self.beat_s = Path(path), stage, beat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._earlier = {"seconds": 0.0, "cpu_seconds": 0.0, "invocations": 0}

    def __enter__(self) -> StageClock:
        entry = _read(self.path).get(self.stage, {})
        self._earlier = dict(entry.get("earlier", self._earlier))
        if "current" in entry:  # an invocation that stopped before the stage finished
            for key in ("seconds", "cpu_seconds"):
                self._earlier[key] += entry["current"][key]
            self._earlier["invocations"] += 1
        self._started, self._cpu_started = time.time(), cpu_seconds()
        self._beat()
        self._thread = threading.Thread(target=self._run, name=f"clock:{self.stage}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._beat()  # a stage that raised leaves its time for the rerun to add

    def total(self) -> dict[str, Any]:
        """Seconds and CPU seconds of every invocation of the stage, and how many there were."""
        return {
            "seconds": self._earlier["seconds"] + self._now["seconds"],
            "cpu_seconds": self._earlier["cpu_seconds"] + self._now["cpu_seconds"],
            "invocations": self._earlier["invocations"] + 1,
        }

    def _run(self) -> None:
        while not self._stop.wait(self.beat_s):
            self._beat()

    def _beat(self) -> None:
        # never concurrent: __enter__ beats before the thread starts, __exit__ after it ends
        self._now = {
            "seconds": time.time() - self._started,
            "cpu_seconds": cpu_seconds() - self._cpu_started,
        }
        clocks = _read(self.path)
        clocks[self.stage] = {"earlier": self._earlier, "current": self._now}
        _write(self.path, clocks)


def forget(path: Path, stages: list[str]) -> None:
    """Drop the clocks of ``stages``: a finished stage's time is in ``stages.json``, and a
    redone stage starts from nothing."""
    clocks = _read(Path(path))
    if any(stage in clocks for stage in stages):
        _write(Path(path), {k: v for k, v in clocks.items() if k not in stages})


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _write(path: Path, clocks: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")  # a kill mid-write leaves the old file whole
    tmp.write_text(json.dumps(clocks, indent=2))
    tmp.replace(path)
