"""``EnvPropertySuite``: every property and soundness check as one pytest class to subclass.

Subclass it in a ``Test*`` class and set ``env_id`` (or ``make_env``); pytest then runs each
check of :mod:`trace_gym.testing.properties` and :mod:`trace_gym.testing.soundness` as a
test method. ``ALL_CHECKS`` and ``SOUNDNESS_CHECKS`` list the checks for callers that loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from trace_gym.testing.properties import (
    check_baselines_fail,
    check_determinism,
    check_garbage_actions,
    check_gymnasium_env_checker,
    check_mutations,
    check_oracle,
    check_pickle_roundtrip,
    check_replay,
    check_split_disjointness,
    check_verifier_purity,
)
from trace_gym.testing.soundness import (
    DECISION_SEEDS,
    DEFAULT_SEEDS,
    RATE_SEEDS,
    check_decision_balance,
    check_information_free,
    check_knob_rates,
    check_template_diversity,
)
from trace_gym.testing.sources import EnvSource, Verifier, make_env

ALL_CHECKS = (
    check_determinism,
    check_oracle,
    check_baselines_fail,
    check_mutations,
    check_garbage_actions,
    check_verifier_purity,
    check_replay,
    check_split_disjointness,
    check_gymnasium_env_checker,
    check_pickle_roundtrip,
)


SOUNDNESS_CHECKS = (
    check_information_free,
    check_knob_rates,
    check_template_diversity,
    check_decision_balance,
)


class EnvPropertySuite:
    """Subclass in a ``Test*`` class and set ``env_id`` (or ``make_env``) to run every property.

    Set ``verifier`` to a ``(task, episode) -> Verification`` function to test a verifier of
    your own against the environment's tasks, oracle and baselines. ``information_free_seeds``
    (episodes per policy and difficulty), ``decision_seeds`` (episodes per decision-blind
    policy and difficulty) and ``rate_seeds`` (resets for knob rates, template counts and
    decision shares) size the soundness checks; lower them for a quicker, coarser run.
    """

    env_id: str | None = None
    make_env: Callable[[], gym.Env] | None = None
    verifier: Verifier | None = None
    information_free_seeds: int = DEFAULT_SEEDS
    decision_seeds: int = DECISION_SEEDS
    rate_seeds: int = RATE_SEEDS

    def _source(self) -> EnvSource:
        source = self.env_id or type(self).make_env
        if source is None:
            raise TypeError("set env_id or make_env on your EnvPropertySuite subclass")
        return source

    def _verifier(self) -> Verifier | None:
        return type(self).verifier

    def test_determinism(self) -> None:
        check_determinism(self._source(), self._verifier())

    def test_oracle_passes(self) -> None:
        check_oracle(self._source(), self._verifier())

    def test_baselines_fail(self) -> None:
        check_baselines_fail(self._source(), self._verifier())

    def test_oracle_mutations_fail(self) -> None:
        check_mutations(self._source(), self._verifier())

    def test_garbage_actions(self) -> None:
        check_garbage_actions(self._source(), self._verifier())

    def test_verifier_purity(self) -> None:
        check_verifier_purity(self._source(), self._verifier())

    def test_replay_equals_online(self) -> None:
        source = self._source()
        if isinstance(source, str):
            check_replay(source, self._verifier())

    def test_split_disjointness(self) -> None:
        check_split_disjointness(self._source(), n=50)

    def test_gymnasium_env_checker(self) -> None:
        check_gymnasium_env_checker(self._source())

    def test_pickle_roundtrip(self) -> None:
        check_pickle_roundtrip(self._source(), self._verifier())

    def test_information_free_policies_lose(self) -> None:
        check_information_free(
            self._source(), n_seeds=self.information_free_seeds, verifier=self._verifier()
        )

    def _declared(self, attribute: str) -> Any:
        env = make_env(self._source())
        try:
            return getattr(type(env.unwrapped), attribute, None)
        finally:
            env.close()

    def test_knob_rates(self) -> None:
        if not self._declared("knob_rates"):
            _skip("declares no knob_rates (documented difficulty-knob rates) to check")
        check_knob_rates(self._source(), n_seeds=self.rate_seeds)

    def test_template_diversity(self) -> None:
        if self._declared("template_floor") is None:
            _skip("declares no template_floor (distinct masked templates per 1,000 seeds)")
        check_template_diversity(self._source(), n_seeds=self.rate_seeds)

    def test_decision_balance(self) -> None:
        if not self._declared("decisions"):
            _skip("declares no decisions (its verifier judges no categorical decision)")
        check_decision_balance(
            self._source(),
            n_seeds=self.decision_seeds,
            share_seeds=self.rate_seeds,
            verifier=self._verifier(),
        )


def _skip(reason: str) -> None:
    import pytest  # only the suite's test methods need it, and only under pytest

    pytest.skip(reason)
