"""A stage's time over every invocation that ran it (``trace_train.pipeline.clock``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from trace_train.pipeline.clock import StageClock, cpu_seconds, forget

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "gave up waiting"
        time.sleep(0.05)


def test_a_killed_invocation_s_time_is_added_to_the_one_that_finishes(tmp_path):
    path = tmp_path / "stage-clock.json"
    code = (
        "from trace_train.pipeline.clock import StageClock\n"
        f"with StageClock({str(path)!r}, 'evaluate', beat_s=0.05):\n"
        "    while True: pass\n"
    )
    killed = subprocess.Popen([sys.executable, "-c", code])

    def recorded_cpu() -> float:
        try:
            return json.loads(path.read_text())["evaluate"]["current"]["cpu_seconds"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return 0.0

    _wait_for(lambda: recorded_cpu() >= 0.5)
    killed.send_signal(signal.SIGKILL)  # no cleanup: only its heartbeats remain
    killed.wait()
    killed_seconds = json.loads(path.read_text())["evaluate"]["current"]["seconds"]
    with StageClock(path, "evaluate") as clock:
        exec(BURN.format(s=0.2))
    spent = clock.total()
    assert spent["invocations"] == 2
    assert spent["cpu_seconds"] >= 0.5 + 0.2
    # wall time is not bounded by CPU time: the heartbeat is a second thread on another core
    assert spent["seconds"] > killed_seconds > 0
    forget(path, ["evaluate"])
    with StageClock(path, "evaluate") as clock:
        pass
    assert clock.total()["invocations"] == 1  # a forgotten stage starts from nothing
    assert clock.total()["cpu_seconds"] < 0.5


def test_cpu_seconds_count_a_worker_that_is_still_running():
    """An evaluation killed mid-run never waits for its workers: their CPU time would be lost
    from ``RUSAGE_CHILDREN``, which counts only children that ended."""
    before = cpu_seconds()
    worker = subprocess.Popen(
        [sys.executable, "-c", BURN.format(s=0.5) + "open(0).read()"], stdin=subprocess.PIPE
    )
    try:
        _wait_for(lambda: cpu_seconds() - before >= 0.5)  # hangs if live workers are not counted
        assert worker.poll() is None  # still running when its time was counted
    finally:
        worker.communicate(b"")
