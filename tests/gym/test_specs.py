"""The shipped environments (customer-service and SWE) are CapabilitySpecs that agree with the
registry."""

from __future__ import annotations

import importlib
import pickle

import gymnasium as gym
import pytest

from trace_gym.core.spec import AGENT_PREAMBLE, CapabilitySpec, SpecConfig, SpecEnv
from trace_gym.errors import ConfigError
from trace_gym.registration import PACKAGE_REGISTRY, load_registry

SPEC_ENTRIES = [e for e in load_registry() if e.entry_point.endswith(":SPEC")]
ALIASES = {
    "precondition": "PreconditionEnv",
    "clarify": "ClarifyEnv",
    "service_desk": "ServiceDeskEnv",
    "recover_communicate": "RecoverCommunicateEnv",
    "policy_pressure": "PolicyPressureEnv",
    "structured_data": "StructuredDataEnv",
    "tool_call": "ToolCallEnv",
    "payment_calc": "PaymentCalcEnv",
    "multistep": "MultistepEnv",
    "swe_semantic_precision": "SwePrecisionEnv",
    "swe_call_graph": "SweCallGraphEnv",
    "swe_diff_context": "SweDiffContextEnv",
    "swe_multi_site": "SweMultiSiteEnv",
    "swe_refactor_awareness": "SweRefactorEnv",
    "swe_repair": "SweRepairEnv",
}


def test_every_shipped_environment_is_a_spec() -> None:
    shorts = {e.load_spec().short for e in SPEC_ENTRIES}
    assert set(ALIASES) <= shorts
    assert len(SPEC_ENTRIES) == len(load_registry(PACKAGE_REGISTRY))


@pytest.mark.parametrize("entry", SPEC_ENTRIES, ids=lambda e: e.id)
def test_registry_row_is_its_spec_and_gym_builds_it(entry) -> None:
    module, _, name = entry.entry_point.partition(":")
    spec = getattr(importlib.import_module(module), name)
    assert isinstance(spec, CapabilitySpec) and entry.load_spec() is spec
    assert (entry.capability, entry.max_turns, entry.description, entry.tags) == (
        spec.capability,
        spec.max_turns,
        spec.description,
        spec.tags,
    )
    assert issubclass(spec.config, SpecConfig)
    env_class = entry.load_class()
    assert env_class is spec.env_class and issubclass(env_class, SpecEnv)
    assert env_class.knob_rates == tuple(spec.knob_rates)
    assert env_class.template_floor == spec.template_floor
    # registration passes no constructor arguments: gym.make gets the spec's own defaults
    env = gym.make(entry.id)
    try:
        assert type(env.unwrapped) is env_class and env.unwrapped.max_turns == spec.max_turns
        assert (env.unwrapped.difficulty, env.unwrapped.reward_mode) == (0.5, "partial")
    finally:
        env.close()


@pytest.mark.parametrize("short", sorted(ALIASES))
def test_old_class_names_still_import_and_pickle(short: str) -> None:
    module = importlib.import_module(f"trace_gym.envs.{short}")
    env_class = getattr(module, ALIASES[short])
    assert env_class is module.SPEC.env_class and env_class.__name__ == ALIASES[short]
    env = env_class()
    env.reset(seed=1)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.task == env.task and type(copy) is env_class
    assert pickle.loads(pickle.dumps(module.SPEC)) is module.SPEC


CUSTOMER_SERVICE = {k for k in ALIASES if not k.startswith("swe_")}


@pytest.mark.parametrize("short", sorted(CUSTOMER_SERVICE - {"service_desk"}))
def test_member_prompt_has_one_preamble_and_bounds_name_the_field(short: str) -> None:
    spec = importlib.import_module(f"trace_gym.envs.{short}").SPEC
    env = spec()
    _, info = env.reset(seed=0)
    assert info["system_prompt"].count("You are a customer-service agent for Tracewell") == 1
    assert spec.preamble.startswith(AGENT_PREAMBLE.split(",")[0])
    bounded = next(
        f for f in spec.config.__dataclass_fields__.values() if f.metadata.get("high") is not None
    )
    with pytest.raises(ConfigError, match=bounded.name):
        env.reset(seed=0, options={"config": {bounded.name: bounded.metadata["high"] + 1}})
