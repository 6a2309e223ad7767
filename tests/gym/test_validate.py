"""``trace-gym validate``: the gates, the sandbox and the command line."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

from trace_gym.cli import main
from trace_gym.core.spec import SpecConfig, knob
from trace_gym.errors import ConfigError
from trace_gym.examples.loyalty_points import SPEC
from trace_gym.validation.validate import GATES, validate

SOUNDNESS = importlib.util.find_spec("trace_gym.testing.soundness") is not None
EXAMPLE = "trace_gym.examples.loyalty_points:SPEC"


def _module(tmp_path, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return f"{name}:SPEC"


@pytest.mark.skipif(not SOUNDNESS, reason="trace_gym.testing.soundness is not installed")
def test_cli_passes_the_reference_spec_and_writes_json(tmp_path, capsys):
    out = tmp_path / "verdicts.json"
    assert main(["validate", EXAMPLE, "--quick", "--novelty", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["passed"] and data["env"]["id"] == "trace/loyalty-points-v0"
    assert [g["name"] for g in data["gates"]] == [g for g in GATES if g != "calibration"]
    assert "PASSED" in capsys.readouterr().out


def test_missing_information_free_gate_is_unavailable_and_fails(tmp_path):
    if SOUNDNESS:
        pytest.skip("trace_gym.testing.soundness is installed")
    report = validate(EXAMPLE, quick=True)
    gate = next(g for g in report.gates if g.name == "information_free")
    assert gate.status == "unavailable" and not report.passed


def test_sandbox_refuses_network_at_import(tmp_path):
    target = _module(
        tmp_path,
        "phones_home",
        """
        import socket
        socket.create_connection(("127.0.0.1", 9))
        SPEC = None
        """,
    )
    report = validate(target, quick=True, search_path=tmp_path)
    loads = report.gates[0]
    assert loads.name == "loads" and loads.status == "fail"
    assert "validate sandbox: socket" in loads.reason
    assert not report.passed and all(g.status == "skipped" for g in report.gates[1:])


def test_sandbox_refuses_writing_files(tmp_path):
    target = _module(
        tmp_path,
        "writes_files",
        f"""
        open({str(tmp_path / "owned.txt")!r}, "w").write("x")
        SPEC = None
        """,
    )
    report = validate(target, quick=True, search_path=tmp_path)
    assert "writing" in report.gates[0].reason and not (tmp_path / "owned.txt").exists()


def test_wall_clock_limit_ends_a_hanging_environment(tmp_path):
    target = _module(tmp_path, "hangs", "while True:\n    pass\n")
    report = validate(target, quick=True, search_path=tmp_path, timeout_s=8)
    assert not report.passed
    assert report.gates[-1].name == "sandbox" and "limit" in report.gates[-1].reason


def test_unknown_target_fails_the_loads_gate():
    report = validate("trace/no-such-env-v0", quick=True)
    assert report.gates[0].name == "loads" and report.gates[0].status == "fail"
    assert "no-such-env" in report.gates[0].reason


def test_spec_builds_an_env_with_spec_hooks_and_bounds():
    env = SPEC(difficulty=1.0)
    obs, info = env.reset(seed=4)
    assert info["env_id"] == "trace/loyalty-points-v0" and env.max_turns == 10
    assert info["system_prompt"].startswith("You are a customer-service agent for Tracewell")
    assert type(env).information_free_exempt == dict(SPEC.information_free_exempt)
    assert env.listed_rules(env.task) == [] and env.requested_call(env.task) is None
    with pytest.raises(ConfigError, match="n_orders must be in"):
        env.reset(seed=4, options={"config": {"n_orders": 99}})


def test_knob_bounds_are_checked_in_one_place():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Cfg(SpecConfig):
        rate: float = knob(0.5, low=0.0, high=1.0)
        kinds: tuple = knob(("a",), choices=("a", "b"))

    assert Cfg.from_difficulty(0.3, {"rate": 1.0}).rate == 1.0
    with pytest.raises(ConfigError, match=r"Cfg.rate must be in \[0.0, 1.0\]"):
        Cfg(rate=2.0)
    with pytest.raises(ConfigError, match="kinds must be a non-empty tuple"):
        Cfg(kinds=("c",))
    with pytest.raises(ConfigError, match="unknown"):
        Cfg.from_difficulty(0.3, {"nope": 1})


def test_validate_sandbox_lets_the_code_sandbox_run_and_nothing_else(tmp_path):
    """The validate child forbids writes and processes; the SWE environments' code sandbox
    still starts bubblewrap and its launcher, makes its control groups and (unisolated) its
    task folders, and kills its runs' processes; only those."""
    import subprocess
    import sys

    code = textwrap.dedent(
        f"""
        import os, subprocess, sys, tempfile
        from trace_gym.validation.validate import install_sandbox
        from trace_gym.sandbox import Limits, Sandbox
        made, mkdtemp = [], tempfile.mkdtemp
        tempfile.mkdtemp = lambda **kw: made.append(mkdtemp(**kw)) or made[-1]
        install_sandbox()
        from trace_gym.sandbox import sandbox_available
        modes = ["none"] + (["bwrap"] if sandbox_available("bwrap") is None else [])
        for mode in modes:
            code = "open('out.txt', 'w').write('x'); print('ran')"
            run = Sandbox(isolation=mode).run({{"m.py": code}}, "m.py")
            assert run.status == "ok" and "ran" in run.stdout, run
        loop = Sandbox(Limits(cpu_seconds=5, wall_seconds=1.0), isolation="none")
        loop = loop.run({{"m.py": "while True: pass"}}, "m.py")
        assert loop.status in ("timeout", "cpu_limit"), loop  # its process group was killed
        assert len(made) == 2 and not any(os.path.exists(d) for d in made)  # and cleaned up
        for attempt in (
            lambda: open({str(tmp_path / "x.txt")!r}, "w"),
            lambda: subprocess.run(["/bin/true"]),
            lambda: subprocess.run([sys.executable, "-I", "-c", "print(1)"]),
            lambda: os.remove({str(tmp_path / "keep.txt")!r}),
        ):
            try:
                attempt()
            except PermissionError as exc:
                assert "validate sandbox" in str(exc)
            else:
                raise AssertionError("allowed")
        print("OK")
        """
    )
    (tmp_path / "keep.txt").write_text("keep")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().endswith("OK"), out.stderr[-2000:]
    assert (tmp_path / "keep.txt").exists() and not (tmp_path / "x.txt").exists()
