"""mini-swe-agent drives trace/swe-repair-v0: the real package, its DeterministicModel (no
LLM), bash in our sandbox, our verifier's verdict in the .traj.json, read by trace_diagnose."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
pytest.importorskip("minisweagent")

from minisweagent.models.test_models import DeterministicModel, make_output  # noqa: E402

import trace_gym  # noqa: E402
from trace_diagnose.ingest import ingest  # noqa: E402
from trace_gym.errors import ConfigError  # noqa: E402
from trace_gym.integrations.mini_swe_agent import (  # noqa: E402
    SUBMIT_COMMAND,
    TraceSweEnvironment,
    export_episode,
    run_mini_swe_agent,
)

ENV_ID = "trace/swe-repair-v0"
SEED = 0
SUBMIT = make_output("Done.", [{"command": f"echo {SUBMIT_COMMAND}"}])


def _task(seed=SEED):
    env = trace_gym.make(ENV_ID).unwrapped
    env.reset(seed=seed)
    return env.task


def _fix_command(problems) -> str:
    """A bash command applying the reference fix of each problem (a Python heredoc)."""
    lines = ["import pathlib"]
    for t in problems:
        for path, search, replace in t.oracle_edits:
            lines.append(
                f"p = pathlib.Path({path!r}); "
                f"p.write_text(p.read_text().replace({search!r}, {replace!r}, 1))"
            )
    return "python - <<'EOF'\n" + "\n".join(lines) + "\nEOF"


def _run(outputs, tmp_path, **kw):
    return run_mini_swe_agent(
        ENV_ID, SEED, DeterministicModel(outputs=outputs), output=tmp_path, **kw
    )


def test_scripted_oracle_fix_succeeds_and_loads_in_trace_diagnose(tmp_path):
    task = _task()
    issue = task.problems[0].module
    outputs = [
        make_output("Look around.", [{"command": "ls && grep -c 'def ' *.py | head -3"}]),
        make_output("Apply the fix.", [{"command": _fix_command(task.problems)}]),
        make_output(
            "Reproduce.",
            [
                {
                    "command": f"python -c 'import test_{issue}_issue as t; "
                    '[getattr(t, n)() for n in dir(t) if n.startswith("test_")]; '
                    'print("issue fixed")\''
                }
            ],  # fmt: skip
        ),
        SUBMIT,
    ]
    result = _run(outputs, tmp_path)
    assert result["exit_status"] == "Submitted" and result["submitted"]
    assert result["final_reward"] == 1.0 and result["is_success"] is True
    assert result["commands"] == 4 and result["command_statuses"] == {"ok": 4}
    assert result["isolation"] == "bwrap" and "tmpfs" in result["sandbox"]["disk"]

    data = json.loads(open(result["path"]).read())
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    assert data["instance_id"] == result["instance_id"]
    tg = data["info"]["trace_gym"]
    assert tg["is_success"] and tg["final_reward"] == 1.0
    assert set(tg["verification"]["required_capabilities"]) == set(task.capabilities)
    names = {c["name"] for c in tg["verification"]["checks"]}
    assert {f"target:{t.module}" for t in task.problems} <= names
    # the observation of the reproduction ran the fixed module in the sandbox
    observations = [m["content"] for m in data["messages"] if m["role"] == "user"]
    assert "issue fixed" in observations[-1]
    # the submission is the repository diff, touching exactly the defective modules
    submission = data["info"]["submission"]
    assert {f"diff --git a/{t.module}.py b/{t.module}.py" for t in task.problems} == {
        ln for ln in submission.splitlines() if ln.startswith("diff --git")
    }

    [traj] = ingest(result["path"])
    assert traj.source_format == "mini_swe_agent"
    assert traj.outcome.status == "success" and traj.outcome.reward == 1.0
    assert traj.ground_truth.lacking == [] and traj.task.domain == ENV_ID
    assert [c.name for s in traj.steps for c in s.tool_calls][:1] == ["bash"]


def test_doing_nothing_fails_and_trace_diagnose_names_the_lacking_capabilities(tmp_path):
    task = _task()
    result = _run([make_output("Looks fine.", [{"command": "ls"}]), SUBMIT], tmp_path)
    assert result["submitted"] and result["final_reward"] == 0.0
    assert result["is_success"] is False
    [traj] = ingest(result["path"])
    assert traj.outcome.status == "failure" and traj.outcome.success is False
    assert set(task.capabilities) <= set(traj.ground_truth.lacking)


def test_a_run_that_never_submits_scores_zero(tmp_path):
    outputs = [make_output("Fix.", [{"command": _fix_command(_task().problems)}])] * 3
    result = _run(outputs, tmp_path / "limit.traj.json", step_limit=2)
    assert result["path"].endswith("limit.traj.json")
    assert result["exit_status"] == "LimitsExceeded" and not result["submitted"]
    assert result["end_reason"] == "not_submitted" and result["final_reward"] == 0.0
    [traj] = ingest(result["path"])
    assert traj.outcome.status == "failure"


def test_bash_changes_persist_between_commands_and_limits_are_reported():
    env = TraceSweEnvironment(env_id=ENV_ID, seed=SEED, timeout=3)
    module = env.env.task.problems[0].module
    out = env.execute({"command": f"echo '# note' >> {module}.py && touch new.txt && rm units.py"})
    assert out["returncode"] == 0 and out["exception_info"] == ""
    files = env.files()
    assert files[f"{module}.py"].endswith("# note\n") and "new.txt" in files
    assert "units.py" not in files
    assert env.execute({"command": "ls"})["output"].split() == sorted(files)
    assert env.execute({"command": "exit 3"})["returncode"] == 3
    missing = env.execute({"command": "rg pattern ."})  # not installed: the agent's result
    assert missing["returncode"] == 127 and "command not found" in missing["output"]
    assert env.infra_errors == [] and env.statuses["infra_error"] == 0
    slow = env.execute({"command": "sleep 30"})
    assert slow["returncode"] != 0 and "3 s" in slow["exception_info"]
    assert env.statuses["timeout"] == 1
    # the deletion and the stray edit are graded by our verifier: the deleted clean module
    # fails its tests, nothing is fixed
    env.finish()
    assert env.record()["final_reward"] == 0.0 and env.record()["end_reason"] == "not_submitted"


@pytest.mark.skipif(
    __import__("trace_gym.sandbox").sandbox.bwrap_path() is None, reason="needs bubblewrap"
)
def test_under_bubblewrap_commands_cannot_write_outside_the_repository():
    env = TraceSweEnvironment(env_id=ENV_ID, seed=SEED, isolation="bwrap")
    out = env.execute({"command": "touch /usr/trace_probe; touch ../trace_probe; echo done"})
    assert env.record()["isolation"] == "bwrap" and "done" in out["output"]
    assert not os.path.exists("/usr/trace_probe") and not os.path.exists("/tmp/trace_probe")
    # the host's files outside the system directories and the interpreter are not there (the
    # repository's folder may exist as an empty mount point when the venv lives inside it)
    repo_file = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert repo_file.exists()
    assert env.execute({"command": f"cat {repo_file}"})["returncode"] != 0


def test_episode_played_with_our_tools_exports_to_the_same_format(tmp_path):
    env = trace_gym.make(ENV_ID)
    env.reset(seed=SEED)
    plan = env.unwrapped.oracle_actions()
    for turn in plan:
        env.step(turn)
    path = export_episode(env, tmp_path, agent="oracle")
    data = json.loads(path.read_text())
    assert data["info"]["trace_gym"]["played_with"] == "trace_gym tools"
    assert data["messages"][-1]["role"] == "exit"
    assert data["messages"][-1]["extra"]["exit_status"] == "Submitted"
    [traj] = ingest(path)
    assert traj.outcome.status == "success" and traj.agent == "oracle"
    assert {c.name for s in traj.steps for c in s.tool_calls} == {"edit", "submit"}

    # a partial fix (the last problem's edits skipped) fails and names that capability
    env.reset(seed=SEED)
    last = f"{env.unwrapped.task.problems[-1].module}.py"
    for turn in [t for t in plan if t["arguments"].get("path") != last]:
        env.step(turn)
    [traj] = ingest(export_episode(env, tmp_path / "partial.traj.json"))
    assert traj.outcome.status == "failure"
    assert traj.ground_truth.lacking == [env.unwrapped.task.capabilities[-1]]


def test_needs_a_repository_environment_and_an_unfinished_export_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="repository environment"):
        TraceSweEnvironment(env_id="trace/swe-call-graph-v0")
    env = trace_gym.make(ENV_ID)
    env.reset(seed=SEED)
    with pytest.raises(trace_gym.errors.TraceGymError, match="finished episode"):
        export_episode(env, tmp_path)


def test_import_trace_gym_does_not_import_mini_swe_agent():
    code = (
        "import sys, trace_gym, trace_gym.integrations.mini_swe_agent\n"
        "assert 'minisweagent' not in sys.modules, 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
