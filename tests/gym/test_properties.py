"""The property suite over every registered environment id (trace_gym.testing)."""

import pytest

import trace_gym
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


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_property(env_id, check):
    check(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_cross_process_determinism(env_id):
    testing.check_cross_process_determinism(env_id, n_seeds=3)
