"""The single-turn SWE environments: patch action, tasks, reward, gates and trivial patches."""

import ast
import re

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.envs.helpers import swe_common
from trace_gym.envs.helpers.swe_common import PatchError, apply_patch, parse_patch, run_suite
from trace_gym.errors import ConfigError
from trace_gym.sandbox import Limits, Sandbox

SWE_IDS = [  # the single-turn capability environments (not the composite)
    e.id
    for e in trace_gym.load_registry()
    if e.id.startswith("trace/swe-") and "composite" not in e.tags
]
SEEDS = range(6)
DIFFICULTIES = (0.0, 1.0)


def test_all_five_capabilities_are_registered():
    assert len(SWE_IDS) >= 5
    assert {trace_gym.registration.entry(i).capability for i in SWE_IDS} >= {
        "semantic_logic_precision", "deep_call_graph_traversal", "diff_context_precision",
        "multi_site_consistency", "structural_refactor_awareness",
    }  # fmt: skip


# -- patch parsing ---------------------------------------------------------------------------
def test_parse_patch_variants():
    canonical = "m.py\n<<<<<<< SEARCH\na = 1\n=======\na = 2\n>>>>>>> REPLACE"
    assert parse_patch(canonical) == [swe_common.Edit("m.py", "a = 1\n", "a = 2\n")]
    fenced = (
        "Fix:\n```python\n### src/m.py\n<<<<<<<< ORIGINAL\nx\n========\ny\n>>>>>>>> UPDATED\n```"
    )
    assert parse_patch(fenced)[0].path == "src/m.py"
    crlf = "<<<<<<< SEARCH\r\nx\r\n=======\r\ny\r\n>>>>>>> REPLACE\r\n"
    assert parse_patch(crlf) == [swe_common.Edit(None, "x\n", "y\n")]
    two = canonical + "\n\nFile: t.py\n<<<<<<< SEARCH\nb\n=======\n>>>>>>> REPLACE"
    assert [e.path for e in parse_patch(two)] == ["m.py", "t.py"]
    assert parse_patch(two)[1].replace == ""
    for bad in ("", "just text", "<<<<<<< SEARCH\nx\n>>>>>>> REPLACE", None):
        with pytest.raises(PatchError):
            parse_patch(bad)


def test_apply_patch_first_occurrence_and_whitespace():
    files = {"m.py": "a = 1\nb = 1\na = 1\n"}
    out = apply_patch(
        files, parse_patch("<<<<<<< SEARCH\na = 1\n=======\na = 9\n>>>>>>> REPLACE"), "m.py"
    )
    assert out["m.py"] == "a = 9\nb = 1\na = 1\n"
    spaced = {"m.py": "a = 1  \nb = 1\n"}
    out = apply_patch(
        spaced, parse_patch("<<<<<<< SEARCH\na = 1\nb = 1\n=======\nc = 3\n>>>>>>> REPLACE"), "m.py"
    )
    assert out["m.py"] == "c = 3\n"
    with pytest.raises(PatchError, match="does not occur"):
        apply_patch(files, parse_patch("<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE"), "m.py")
    with pytest.raises(PatchError, match="no file"):
        apply_patch(
            files, parse_patch("x.py\n<<<<<<< SEARCH\na\n=======\nd\n>>>>>>> REPLACE"), "m.py"
        )


# -- tasks ---------------------------------------------------------------------------------------
def _task(env_id, seed, difficulty):
    env = gym.make(env_id)
    env.reset(seed=seed, options={"difficulty": difficulty})
    return env, env.unwrapped.task


@pytest.mark.parametrize("env_id", SWE_IDS)
def test_tasks_have_the_promised_shape(env_id):
    lines = []
    for seed in SEEDS:
        for d in DIFFICULTIES:
            _, task = _task(env_id, seed, d)
            lines.append(task.source.count("\n") + 1)
            assert task.visible_tests.count("\ndef test_") >= 10
            assert len(task.hidden_fail_to_pass) >= 2
            assert "test_hidden" not in "".join(task.files)
            ast.parse(task.source)
    assert 280 <= min(lines) and max(lines) <= 600, lines
    domains = {_task(env_id, s, 0.5)[1].domain for s in range(12)}
    assert len(domains) >= 4, domains


@pytest.mark.parametrize("env_id", SWE_IDS)
def test_in_process_outcomes_match_the_sandbox(env_id):
    """What generation computed in-process (which tests the defect breaks) holds in the
    sandbox on the defective module."""
    _, task = _task(env_id, 3, 0.5)
    suite = run_suite(task, task.source)
    passed = {k for k, (outcome, _) in suite.results.items() if outcome == "passed"}
    assert task.target_name not in passed
    assert set(task.passing_before) <= passed
    assert not set(task.hidden_fail_to_pass) & passed


@pytest.mark.parametrize("env_id", SWE_IDS)
def test_bad_config_is_rejected(env_id):
    env = gym.make(env_id)
    with pytest.raises(ConfigError):
        env.reset(seed=0, options={"config": {"no_such_knob": 1}})
    with pytest.raises(ConfigError):
        env.reset(seed=0, options={"config": {"n_fillers": 1000}})


# -- reward and trivial patches ------------------------------------------------------------------
def _defective_function(task) -> ast.FunctionDef:
    search = task.oracle_edits[0][1]
    at = task.source.index(search) + len(search.split("\n")[0])
    line = task.source[:at].count("\n") + 1
    tree = ast.parse(task.source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.lineno <= line <= node.end_lineno:
            return node
    raise AssertionError("no enclosing function")


def _replace_body(task, body: str) -> str:
    fn = _defective_function(task)
    lines = task.source.split("\n")
    header = lines[fn.lineno - 1]
    old = "\n".join(lines[fn.lineno - 1 : fn.end_lineno])
    return f"<<<<<<< SEARCH\n{old}\n=======\n{header}\n    {body}\n>>>>>>> REPLACE"


def trivial_patches(task) -> dict:
    target_line = next(
        ln for ln in task.target_test.splitlines() if ln.strip().startswith("assert")
    )
    expected = target_line.split(" == ", 1)[1]
    first_line = task.source.split("\n")[0]
    return {
        "delete_body": _replace_body(task, "pass"),
        "return_constant": _replace_body(task, f"return {expected}"),
        "edit_test": f"test_target.py\n<<<<<<< SEARCH\n{target_line}\n=======\n    assert True\n>>>>>>> REPLACE",
        "no_op": f"<<<<<<< SEARCH\n{first_line}\n=======\n{first_line}\n>>>>>>> REPLACE",
    }


def _score(env, seed, d, patch):
    env.reset(seed=seed, options={"difficulty": d})
    _, reward, term, trunc, info = env.step(patch)
    assert term or trunc
    return reward, info


@pytest.mark.parametrize("env_id", SWE_IDS)
def test_trivial_patches_stay_under_the_information_free_bound(env_id):
    env = gym.make(env_id)
    results: dict[str, list] = {}
    for seed in SEEDS:
        for d in DIFFICULTIES:
            env.reset(seed=seed, options={"difficulty": d})
            for name, patch in trivial_patches(env.unwrapped.task).items():
                reward, info = _score(env, seed, d, patch)
                results.setdefault(name, []).append((reward, info["is_success"]))
    for name, rows in results.items():
        mean = sum(r for r, _ in rows) / len(rows)
        wins = sum(s for _, s in rows) / len(rows)
        assert wins <= 0.10 and mean <= 0.15, (name, mean, wins)


@pytest.mark.parametrize("env_id", SWE_IDS)
def test_oracle_scores_one_and_reports_the_sandbox(env_id):
    env = gym.make(env_id)
    env.reset(seed=11)
    _, reward, term, _, info = env.step(env.unwrapped.oracle_actions()[0])
    assert term and reward == 1.0 and info["is_success"]
    assert info["sandbox"]["status"] == "ok"
    assert info["sandbox"]["isolation"] == "bwrap"
    assert "tmpfs" in info["sandbox"]["guarantees"]["disk"]
    as_text = env.unwrapped.oracle_actions()[0]["arguments"]["patch"]
    env.reset(seed=11)
    assert env.step(as_text)[1] == 1.0


def test_edit_test_gate_and_partial_credit():
    env = gym.make("trace/swe-multi-site-v0")
    env.reset(seed=2, options={"difficulty": 1.0})
    task = env.unwrapped.task
    one_site = swe_common.render_patch([tuple(task.oracle_edits[0])])
    _, reward, _, _, info = env.step(one_site)
    checks = {c["name"]: c for c in info["verification"]["checks"]}
    assert not checks["target_test"]["passed"] and reward == pytest.approx(0.1)


def test_wrong_place_edit_in_diff_context_fails():
    env = gym.make("trace/swe-diff-context-v0")
    fails = 0
    for seed in SEEDS:
        env.reset(seed=seed, options={"difficulty": 1.0})
        _, search, replace = env.unwrapped.task.oracle_edits[0]
        short = swe_common.render_patch([("", search.split("\n")[-2], replace.split("\n")[-2])])
        _, reward, _, _, info = env.step(short.replace("```\n\n<<<", "```\n<<<"))
        fails += not info["is_success"]
    assert fails == len(SEEDS)


def test_symptom_patch_in_call_graph_is_gated():
    """Special-casing the public function passes the issue's test but not the hidden ones."""
    env = gym.make("trace/swe-call-graph-v0")
    env.reset(seed=4, options={"difficulty": 1.0})
    task = env.unwrapped.task
    call = re.search(r"assert (M\.(\w+)\(.*\)) == (.*)", task.target_test)
    fn, expected = call.group(2), call.group(3)
    src = task.source
    start = src.index(f"def {fn}(")
    body_end = src.index("\n\n", start)
    old = src[start:body_end]
    header = old.split("\n")[0]
    new = header + f"\n    return {expected}"
    _, reward, _, _, info = env.step(f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE")
    assert reward == 0.0 and info["verification"]["gated"]


def test_tampering_gate():
    env = gym.make("trace/swe-semantic-precision-v0")
    env.reset(seed=0)
    first = env.unwrapped.task.source.split("\n")[0]
    patch = f"<<<<<<< SEARCH\n{first}\n=======\n{first}\nimport sys; sys.modules.clear()\n>>>>>>> REPLACE"
    _, reward, _, _, info = env.step(patch)
    assert reward == 0.0
    assert not info["verification"]["checks"][-2]["passed"]  # no_harness_tampering


def test_sandbox_failure_ends_the_episode_as_infra_error(monkeypatch):
    broken = Sandbox(Limits(), isolation="none", python="/nonexistent/python")
    monkeypatch.setitem(swe_common._SANDBOXES, "none", broken)
    env = gym.make("trace/swe-semantic-precision-v0", isolation="none")
    env.reset(seed=123)
    _, reward, term, _, info = env.step(env.unwrapped.oracle_actions()[0])
    assert term and reward == 0.0
    assert info["end_reason"] == "infra_error" and "cannot start" in info["infra_error"]
    assert env.unwrapped.episode.end_reason == "infra_error"


def test_oversized_patches_are_refused_quickly():
    with pytest.raises(PatchError, match="longer"):
        parse_patch("<<<<<<< SEARCH\n" + "x" * 200_000)
    with pytest.raises(PatchError, match="more than"):
        parse_patch("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n" * 50)


def test_tests_are_parsed_into_calls_and_expected_values_the_fast_way_and_the_ast_way_agree():
    for env_id in SWE_IDS:
        for seed in range(4):
            _, task = _task(env_id, seed, seed / 3)
            for source, stem in ((task.visible_tests, "test_visible"),
                                 (task.target_test, "test_target"),
                                 (task.hidden_tests, "test_hidden")):  # fmt: skip
                fast = swe_common._parse_rendered(source, stem)
                assert fast == swe_common._parse_any(source, stem) and fast
    odd = "def test_a():\n    x = 1\n    assert M.f(x) == 2\n"
    with pytest.raises(ValueError, match="assert CALL == VALUE"):
        swe_common.parse_tests(odd, "t")
    assert swe_common.parse_tests("def test_a():\n    assert M.f('a == b') == 'x == y'\n", "t") == (
        swe_common.TestCase("t::test_a", (("M.f('a == b')", "x == y"),)),
    )


def test_hidden_tests_and_expected_values_never_enter_the_sandbox(monkeypatch):
    env = gym.make("trace/swe-call-graph-v0")
    env.reset(seed=5)
    task = env.unwrapped.task
    sent = []
    real = Sandbox.compute

    def spy(self, files, module, calls, **kw):
        sent.append((dict(files), list(calls)))
        return real(self, files, module, calls, **kw)

    monkeypatch.setattr(Sandbox, "compute", spy)
    swe_common._RUN_CACHE.clear()
    _, reward, *_ = env.step(env.unwrapped.oracle_actions()[0])
    assert reward == 1.0 and len(sent) == 1
    files, calls = sent[0]
    assert set(files) == {f"{task.module}.py"}
    hidden = swe_common.parse_tests(task.hidden_tests, "test_hidden")
    assert {c for t in hidden for c, _ in t.calls} <= set(calls)  # the inputs go in
    blob = repr(sent)
    assert "test_hidden" not in blob and "assert" not in blob  # the tests do not
