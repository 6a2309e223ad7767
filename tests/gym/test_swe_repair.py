"""trace/swe-repair-v0: tools, capability-labelled checks and gates."""

import json

import gymnasium as gym

import trace_gym  # noqa: F401

ENV_ID = "trace/swe-repair-v0"


def _result(obs: str) -> dict:
    return json.loads(obs.split("] ", 1)[1])


def test_tools_explore_the_repository():
    env = gym.make(ENV_ID)
    env.reset(seed=5, options={"difficulty": 0.5})
    task = env.unwrapped.task
    listed = _result(env.step({"name": "list_files", "arguments": {}})[0])["files"]
    assert [f["path"] for f in listed] == sorted(task.files)
    module = f"{task.problems[0].module}.py"
    read = _result(
        env.step({"name": "read_file", "arguments": {"path": module, "start": 3, "end": 5}})[0]
    )
    assert (read["start"], read["end"]) == (3, 5) and read["text"].splitlines()[0].startswith(
        "    3"
    )
    hits = _result(env.step({"name": "search", "arguments": {"text": "def "}})[0])
    assert hits["total"] >= 10 and all(":" in h for h in hits["matches"])
    missing = env.step({"name": "read_file", "arguments": {"path": "nope.py"}})[4]
    assert missing["error"]["code"] == "tool.precondition"
    tests = _result(env.step({"name": "run_tests", "arguments": {"selector": "issue"}})[0])
    assert tests["summary"].startswith("0 passed") and "FAILED" in tests["failures"]


def test_oracle_passes_and_a_partial_fix_names_the_missing_capability():
    env = gym.make(ENV_ID)
    env.reset(seed=4, options={"difficulty": 1.0})
    task = env.unwrapped.task
    plan = env.unwrapped.oracle_actions()
    assert len(task.problems) == 3
    for turn in plan:
        _, reward, term, _, info = env.step(turn)
    assert term and reward == 1.0 and info["is_success"]
    assert set(info["verification"]["required_capabilities"]) == set(task.capabilities)
    # skip the edits of the last problem: exactly its capability is lacking
    last = task.problems[-1].module + ".py"
    partial = [t for t in plan if t["arguments"].get("path") != last]
    env.reset(seed=4, options={"difficulty": 1.0})
    for turn in partial:
        _, reward, _, _, info = env.step(turn)
    assert 0 < reward < 1 and not info["is_success"]
    assert info["verification"]["lacking_capabilities"] == [task.capabilities[-1]]


def test_editing_a_test_file_is_gated_and_unsubmitted_work_scores_zero():
    env = gym.make(ENV_ID)
    env.reset(seed=2)
    task = env.unwrapped.task
    issue_test = f"test_{task.problems[0].module}_issue.py"
    line = next(x for x in task.files[issue_test].splitlines() if x.strip().startswith("assert"))
    patch = f"<<<<<<< SEARCH\n{line}\n=======\n    assert True\n>>>>>>> REPLACE"
    for turn in [*env.unwrapped.oracle_actions()[:-1],
                 {"name": "edit", "arguments": {"path": issue_test, "patch": patch}},
                 {"name": "submit", "arguments": {}}]:  # fmt: skip
        _, reward, _, _, info = env.step(turn)
    assert reward == 0.0 and info["verification"]["gated"]
    env.reset(seed=2)
    for turn in env.unwrapped.oracle_actions()[:-1]:
        env.step(turn)
    done = False
    while not done:  # talk until the reporter gives up: never submitted
        _, reward, term, trunc, info = env.step("I think it is fixed.")
        done = term or trunc
    assert reward == 0.0 and not info["verification"]["decided"]


def _files_table(env):
    return env.unwrapped.episode.world.tables["files"]


def _put(env, path, text):
    _files_table(env)[path] = {"path": path, "text": text}


def test_created_and_deleted_files_are_graded():
    """A shell-driven agent (mini-swe-agent) creates and deletes files, which the tools
    cannot: the verifier judges them instead of failing on a missing key."""
    env = gym.make(ENV_ID)
    env.reset(seed=0, options={"difficulty": 0.0})
    task = env.unwrapped.task
    t = task.problems[0]
    path = f"{t.module}.py"
    fixed = t.source
    for _, search, replace in t.oracle_edits:
        fixed = fixed.replace(search, replace, 1)

    # the oracle fix plus a new reproduction script named like a test: still a full pass
    _put(env, path, fixed)
    _put(env, "test_repro.py", f"import {t.module}\n\ndef test_repro():\n    assert True\n")
    _put(env, "notes.txt", "investigated\n")
    _, reward, term, _, info = env.step({"name": "submit", "arguments": {}})
    assert term and reward == 1.0 and info["is_success"]

    # the fix moved into a new helper module that the patched module imports: still passes
    env.reset(seed=0, options={"difficulty": 0.0})
    helper = f"_fix_{t.module}.py"
    _put(env, helper, "FIXED = True\n")
    _put(env, path, fixed + f"\nimport _fix_{t.module}\nassert _fix_{t.module}.FIXED\n")
    _, reward, _, _, info = env.step({"name": "submit", "arguments": {}})
    assert reward == 1.0 and info["is_success"]
    del _files_table(env)[helper]  # without it the module cannot import: a failure
    assert not env.unwrapped.verification().passed

    # a new module that reaches into the harness trips the tampering gate
    env.reset(seed=0, options={"difficulty": 0.0})
    _put(env, helper, "import sys\nsys.modules.clear()\n")
    _put(env, path, fixed)
    _, reward, _, _, info = env.step({"name": "submit", "arguments": {}})
    gates = {c["name"]: c for c in info["verification"]["checks"] if c.get("gate")}
    assert reward == 0.0 and gates[f"no_harness_tampering:{t.module}"]["score"] == 0.0

    # the defective module deleted: its target fails and the deletion gate trips
    env.reset(seed=0, options={"difficulty": 0.0})
    del _files_table(env)[path]
    _, reward, term, _, info = env.step({"name": "submit", "arguments": {}})
    checks = {c["name"]: c for c in info["verification"]["checks"]}
    assert term and reward == 0.0 and not info["is_success"]
    assert checks[f"target:{t.module}"]["score"] == 0.0
    assert checks[f"no_code_deleted:{t.module}"]["score"] == 0.0

    # a visible test file deleted (or emptied) trips the test-edit gate
    for change in ("delete", "empty"):
        env.reset(seed=0, options={"difficulty": 0.0})
        _put(env, path, fixed)
        if change == "delete":
            del _files_table(env)[f"test_{t.module}.py"]
        else:
            _put(env, f"test_{t.module}.py", "")
        _, reward, _, _, info = env.step({"name": "submit", "arguments": {}})
        checks = {c["name"]: c for c in info["verification"]["checks"]}
        assert reward == 0.0 and checks["no_test_edit"]["actual"] == [f"test_{t.module}.py"]
