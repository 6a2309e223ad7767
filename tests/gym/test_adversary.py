"""The adversary set against every shipped SWE environment (none may win), and against an
environment that trusts what the agent's code prints (the gate must reject it).

``make test`` attacks one SWE environment, ``make test-long`` all (tests/selection.py)."""

import dataclasses

import gymnasium as gym
import pytest

import trace_gym
from tests.selection import is_swe, one_swe_env_in_make_test
from trace_gym.envs import swe_semantic_precision
from trace_gym.envs.helpers import swe_common
from trace_gym.validation.adversary import ATTACKS, CODE_ATTACKS, run_adversary, run_attack
from trace_gym.validation.validate import _Gates

SWE_IDS = [e.id for e in trace_gym.load_registry() if is_swe(e.id)]


@pytest.mark.parametrize("env_id", one_swe_env_in_make_test(SWE_IDS))
def test_no_attack_wins_on_a_shipped_environment(env_id):
    results = run_adversary(lambda: gym.make(env_id, disable_env_checker=True), seeds=(0,))
    kinds = {r.attack for r in results}
    expected = {a.name for a in ATTACKS if a.kind == "code" or "repair" in env_id}
    assert kinds == expected
    won = [(r.attack, r.why) for r in results if r.won]
    assert not won
    assert all(r.end_reason != "infra_error" for r in results)


# -- an environment that trusts the agent's output: the gate has to catch it -------------------
def _trusting_verify(task, episode):
    """Runs every test file, hidden ones included, inside the sandbox and believes the report
    the runner prints (what the SWE environments did before issue 25)."""
    from trace_gym.core.verify import Check, Verification

    edits = swe_common.parse_patch(swe_common._patch_text(episode))
    source = swe_common.apply_patch(task.files, edits, f"{task.module}.py")[f"{task.module}.py"]
    files = {**task.files, f"{task.module}.py": source, "test_hidden.py": task.hidden_tests}
    run = swe_common.run_feedback_tests(files, ["test_visible", "test_target", "test_hidden"])
    report = run.report if isinstance(run.report, dict) else {}
    ok = all(report.get(t, [""])[0] == "passed" for t in [task.target_name,
                                                          *task.hidden_fail_to_pass])  # fmt: skip
    cap = swe_semantic_precision.CAPABILITY
    return Verification((Check("tests", cap, float(ok), 1.0),), required_capabilities=(cap,))


TRUSTING = dataclasses.replace(
    swe_semantic_precision.SPEC,
    id="trace/swe-trusting-v0",
    verify=_trusting_verify,
    env_name="TrustingEnv",
)


def test_the_attacks_win_against_an_environment_that_trusts_printed_reports():
    stdout_rewrite = next(a for a in CODE_ATTACKS if a.name == "stdout_rewrite")
    result = run_attack(TRUSTING, stdout_rewrite, seed=0)
    assert result is not None and result.won and result.success


def test_validate_gate_rejects_the_trusting_environment_and_skips_non_swe_ones():
    gates = _Gates("tests.gym.test_adversary:TRUSTING", quick=True, policy=None)
    with pytest.raises(AssertionError, match="stdout_rewrite"):
        gates.adversary()
    other = _Gates("trace/precondition-v0", quick=True, policy=None)
    with pytest.raises(Exception, match="not an SWE environment"):
        other.adversary()
