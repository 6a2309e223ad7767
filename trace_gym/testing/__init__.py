"""The trace_gym property suite: public API for proving environments and verifiers.

Every check takes an environment id registered with gymnasium (or a zero-argument factory
returning an environment that follows the trace_gym contract and exposes ``oracle_actions``)
and, optionally, a ``verifier(task, episode) -> Verification`` that replaces the
environment's own. Checks raise ``AssertionError`` with the failing seed when a property does
not hold. Hypothesis drives seeds, difficulties, splits and garbage actions.

Use it from your own pytest run::

    from trace_gym.testing import EnvPropertySuite

    class TestMyEnv(EnvPropertySuite):
        env_id = "myorg/refund-v0"      # or: make_env = staticmethod(lambda: MyEnv())

Properties (the environment contract every trace_gym environment keeps): determinism (also
across processes with different ``PYTHONHASHSEED``), the oracle passes with score 1.0, do-nothing / random / call-every-tool
agents fail, single-step mutations of the oracle plan fail or score lower, arbitrary actions
never crash ``step`` and keep rewards in range, verifying twice gives the same result and
does not mutate the world, offline re-scoring equals the online reward, splits are
seed-disjoint, and ``gymnasium.utils.env_checker.check_env`` passes.

Soundness (:mod:`trace_gym.testing.soundness`, its names importable from here too): no
information-free policy wins (:func:`check_information_free`: stall after reading, refuse
with each listed rule or reason code, grant by copying the request, ask one fixed question,
take the first search result, keyword stuffing; each must win at most 10 % of the tasks and
earn a mean partial reward of at most 0.15 at difficulties 0, 0.5 and 1), the difficulty
knobs an environment declares in ``knob_rates`` (:class:`KnobRate`) hold over 1,000 seeds
(:func:`check_knob_rates`), its masked task templates reach the ``template_floor`` it
declares (:func:`check_template_diversity`), and, where it declares decision classes
(``decisions``: grant / refuse / ask / decline ...), each class is its declared share and no
decision-blind policy ("read everything, then always take this decision, done well") wins a
task of another class, more than its class's share, or more than half of the tasks
(:func:`check_decision_balance`). The suite skips the knob, template and decision checks,
saying why, for an environment that declares none.

Profiles: ``trace-ci`` (derandomized, small), ``trace-long`` (at least
:data:`LONG_FUZZ_ACTIONS` fuzzed actions per environment through :func:`check_garbage_actions`)
and ``trace-dev``. Importing this package registers them and loads none: load one yourself
(``settings.load_profile("trace-ci")``, or :func:`load_profile_from_env` as our
``tests/conftest.py`` does from ``HYPOTHESIS_PROFILE``); every check runs with no deadline
and without the too-slow health check whatever the profile, since an episode takes
milliseconds. Public strategies (:func:`garbage_actions`, :func:`adversarial_actions` and the
categories they draw from) let you fuzz your own environment the same way.

The package: :mod:`~trace_gym.testing.sources` (an id or a factory, :func:`make_env`),
:mod:`~trace_gym.testing.properties` (the contract checks, profiles and strategies),
:mod:`~trace_gym.testing.soundness` (information-free policies, knob rates, templates,
decision balance) and :mod:`~trace_gym.testing.suite` (:class:`EnvPropertySuite`). Every public
name of the suite is importable from ``trace_gym.testing`` itself.
"""

from __future__ import annotations

from trace_gym.agents.information_free import (
    information_free_policies,
    skipped_information_free_policies,
)
from trace_gym.core.spec import (
    KnobRate,
)
from trace_gym.testing.properties import (
    BEYOND_RECURSION,
    GARBAGE_ACTIONS_PER_EXAMPLE,
    KNOWN_CODES,
    LONG_FUZZ_ACTIONS,
    NON_FINITE_LITERALS,
    PROFILES,
    RANDOM_AGENT_MAX_SUCCESS,
    action_formats,
    adversarial_actions,
    adversarial_calls,
    adversarial_values,
    check_baselines_fail,
    check_cross_process_determinism,
    check_determinism,
    check_garbage_actions,
    check_gymnasium_env_checker,
    check_mutations,
    check_oracle,
    check_pickle_roundtrip,
    check_replay,
    check_split_disjointness,
    check_verifier_purity,
    deep_json_texts,
    deep_objects,
    difficulties,
    foreign_tool_names,
    garbage_actions,
    huge_integer_texts,
    huge_integers,
    json_values,
    load_profile_from_env,
    non_finite_numbers,
    plan_mutations,
    seeds,
    short_repr,
    splits,
    task_hashes,
    tool_call_actions,
    wrong_type_ids,
)
from trace_gym.testing.soundness import (
    DECISION_SEEDS,
    DEFAULT_SEEDS,
    LONG_SEEDS,
    MAX_DECISION_BLIND_SUCCESS,
    MAX_MEAN_REWARD,
    MAX_SUCCESS,
    RATE_SEEDS,
    check_decision_balance,
    check_information_free,
    check_knob_rates,
    check_template_diversity,
    decision_shares,
    decision_table,
    information_free_table,
    mask_template,
    template_counts,
)
from trace_gym.testing.sources import (
    EnvSource,
    Verifier,
    make_env,
)
from trace_gym.testing.suite import (
    ALL_CHECKS,
    SOUNDNESS_CHECKS,
    EnvPropertySuite,
)

__all__ = [
    "ALL_CHECKS",
    "BEYOND_RECURSION",
    "DECISION_SEEDS",
    "DEFAULT_SEEDS",
    "EnvPropertySuite",
    "EnvSource",
    "GARBAGE_ACTIONS_PER_EXAMPLE",
    "KNOWN_CODES",
    "KnobRate",
    "LONG_FUZZ_ACTIONS",
    "LONG_SEEDS",
    "MAX_DECISION_BLIND_SUCCESS",
    "MAX_MEAN_REWARD",
    "MAX_SUCCESS",
    "NON_FINITE_LITERALS",
    "PROFILES",
    "RANDOM_AGENT_MAX_SUCCESS",
    "RATE_SEEDS",
    "SOUNDNESS_CHECKS",
    "Verifier",
    "action_formats",
    "adversarial_actions",
    "adversarial_calls",
    "adversarial_values",
    "check_baselines_fail",
    "check_cross_process_determinism",
    "check_decision_balance",
    "check_determinism",
    "check_garbage_actions",
    "check_gymnasium_env_checker",
    "check_information_free",
    "check_knob_rates",
    "check_mutations",
    "check_oracle",
    "check_pickle_roundtrip",
    "check_replay",
    "check_split_disjointness",
    "check_template_diversity",
    "check_verifier_purity",
    "decision_shares",
    "decision_table",
    "deep_json_texts",
    "deep_objects",
    "difficulties",
    "foreign_tool_names",
    "garbage_actions",
    "huge_integer_texts",
    "huge_integers",
    "information_free_policies",
    "information_free_table",
    "json_values",
    "load_profile_from_env",
    "make_env",
    "mask_template",
    "non_finite_numbers",
    "plan_mutations",
    "seeds",
    "short_repr",
    "skipped_information_free_policies",
    "splits",
    "task_hashes",
    "template_counts",
    "tool_call_actions",
    "wrong_type_ids",
]
