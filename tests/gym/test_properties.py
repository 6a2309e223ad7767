"""The property suite over every registered environment id (trace_gym.testing)."""

import pytest

import trace_gym
from tests.selection import is_swe, swe_kept_in_make_test
from trace_gym import testing

ENV_IDS = trace_gym.registered_ids()
CHECKS = [
    testing.check_determinism,
    testing.check_oracle,
    testing.check_baselines_fail,
    testing.check_mutations,
    testing.check_garbage_actions,
    testing.check_verifier_purity,
    testing.check_replay,
    testing.check_split_disjointness,
    testing.check_gymnasium_env_checker,
]


SLOW_ON_SWE = {testing.check_split_disjointness}
"""5-25 s on an SWE environment (hundreds of generated modules): one SWE id in ``make test``."""


def _property_params() -> list:
    keep = swe_kept_in_make_test(ENV_IDS)
    params = []
    for env_id in ENV_IDS:
        for check in CHECKS:
            long = check in SLOW_ON_SWE and is_swe(env_id) and env_id != keep
            name = f"{env_id}-{check.__name__.removeprefix('check_')}"
            params.append(
                pytest.param(env_id, check, id=name, marks=[pytest.mark.long] if long else [])
            )
    return params


@pytest.mark.parametrize(("env_id", "check"), _property_params())
def test_property(env_id, check):
    check(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_cross_process_determinism(env_id):
    testing.check_cross_process_determinism(env_id, n_seeds=3)


# -- soundness, through the public suite -------------------------------------------------------
# Each registered id runs EnvPropertySuite's own soundness tests, sized down: 10 episodes per
# information-free policy and difficulty (one lucky win is the whole 10 % allowance, so no
# fewer), and fewer resets for the knob rates (tolerances widen by the sampling error) and
# template counts (floors scale down). SWE resets build whole modules: fewer seeds there.
SLOW_INFORMATION_FREE = {
    "trace/swe-repair-v0": "over 40 s even at 10 seeds",
    "trace/service-desk-v0": "over 30 s at 10 seeds; its requests are the smaller envs' checks",
    # dozens of refusal policies, each winning about 2 % by design: at 10 seeds two lucky
    # tasks of one code breach the bound, and 30 seeds take a minute each; the default run
    # covers both at 100 seeds in test_refusal_information_free.py
    "trace/precondition-v0": "needs 30 seeds",
    "trace/policy-pressure-v0": "needs 30 seeds",
}
"""Run with the suite's default 30 seeds, and only in ``make test-long`` (marked ``long``)."""


def _suite(env_id: str) -> testing.EnvPropertySuite:
    attributes = {
        "env_id": env_id,
        "information_free_seeds": testing.DEFAULT_SEEDS if env_id in SLOW_INFORMATION_FREE else 10,
        "rate_seeds": 20 if is_swe(env_id) else 150,
    }
    return type("Suite", (testing.EnvPropertySuite,), attributes)()


def _information_free_params() -> list:
    """Every id; the slow ones, and every SWE id but one (5 s each), only in make test-long."""
    keep = swe_kept_in_make_test([e for e in ENV_IDS if e not in SLOW_INFORMATION_FREE])
    params = []
    for env_id in ENV_IDS:
        long = env_id in SLOW_INFORMATION_FREE or (is_swe(env_id) and env_id != keep)
        params.append(pytest.param(env_id, marks=[pytest.mark.long] if long else []))
    return params


@pytest.mark.parametrize("env_id", _information_free_params())
def test_information_free_policies_lose(env_id):
    _suite(env_id).test_information_free_policies_lose()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_knob_rates(env_id):
    _suite(env_id).test_knob_rates()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_template_diversity(env_id):
    _suite(env_id).test_template_diversity()


def test_the_suite_skips_undeclared_knobs_and_templates():
    from trace_gym.examples.loyalty_points import SPEC

    class Plain(testing.EnvPropertySuite):
        make_env = staticmethod(SPEC)

    env = SPEC()
    if (
        getattr(type(env.unwrapped), "knob_rates", None)
        or getattr(type(env.unwrapped), "template_floor", None) is not None
    ):
        pytest.skip("the example declares knob rates or a template floor")
    for name in ("test_knob_rates", "test_template_diversity"):
        with pytest.raises(pytest.skip.Exception, match="declares no"):
            getattr(Plain(), name)()


def test_the_suite_catches_a_verifier_that_pays_stalling():
    """The information-free test is real: a verifier that passes every episode that wrote
    nothing (as if holding back were always right) lets stalling win, and the suite says so."""
    from trace_gym.core.verify import Check, Verification
    from trace_gym.envs import clarify

    def pays_holding_back(task, episode):
        if not any(c.ok and c.kind == "write" for c in episode.calls):
            return Verification((Check("held_back", "information_gathering", 1.0),))
        return clarify.verify(task, episode)

    class Lenient(testing.EnvPropertySuite):
        env_id = "trace/clarify-v0"
        verifier = staticmethod(pays_holding_back)
        information_free_seeds = 10

    with pytest.raises(
        AssertionError, match="policy=read_then_stall difficulty=0.0: success=1.000"
    ):
        Lenient().test_information_free_policies_lose()


def test_soundness_api_is_reexported():
    from trace_gym.testing import soundness

    for name in ("KnobRate", "check_information_free", "check_knob_rates",
                 "check_template_diversity", "information_free_table", "mask_template"):  # fmt: skip
        assert getattr(testing, name) is getattr(soundness, name)
