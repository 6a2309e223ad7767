"""The shipped environments (customer-service and SWE) are CapabilitySpecs that agree with the
registry."""

from __future__ import annotations

import importlib
import pickle

import gymnasium as gym
import pytest

from trace_gym.core.spec import AGENT_PREAMBLE, CapabilitySpec, SpecConfig, SpecEnv
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG
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


# -- hooks the spec derives from what the module wrote once ------------------------------------
def _fields(spec: CapabilitySpec, **changes) -> dict:
    own = {k: v for k, v in spec.__dict__.items() if k != "env_class"}
    return {**own, "id": "test/derived-v0", **changes}


def test_generate_is_derived_from_generate_into_in_a_fresh_world() -> None:
    from trace_gym.envs import precondition
    from trace_gym.world.generate import draw_now
    from trace_gym.world.model import World

    spec = precondition.SPEC
    cfg = spec.config.from_difficulty(0.5, {})
    rng_by_hand, rng_derived = StableRNG(7), StableRNG(7)
    world = World(draw_now(rng_by_hand))  # the wiring every module used to write itself
    by_hand = precondition.generate_into(world, rng_by_hand, cfg)
    task = spec.generate(rng_derived, cfg)
    assert task.world == world.to_dict() and task.owned == by_hand.owned
    assert by_hand.world == {}  # generate_into leaves the world to its caller


def test_oracle_is_derived_from_world_oracle_over_a_fresh_world() -> None:
    from trace_gym.envs import precondition
    from trace_gym.world.model import World

    env = precondition.SPEC()
    env.reset(seed=3)
    task = env.unwrapped.task
    seen: list[World] = []

    def recording_oracle(t, world):
        seen.append(world)
        world.tables["customers"].clear()  # an oracle that writes must not change the task
        return precondition.oracle(t, World.from_dict(t.world))

    spec = CapabilitySpec(**_fields(precondition.SPEC, oracle=None, world_oracle=recording_oracle))
    before = pickle.dumps(task.world)
    assert spec.oracle(task) == precondition.oracle(task, World.from_dict(task.world))
    assert seen and pickle.dumps(task.world) == before


def test_verify_scoped_is_derived_only_from_a_verify_that_takes_scoped() -> None:
    from trace_gym.envs import precondition

    assert precondition.SPEC.verify_scoped is not None
    assert precondition.SPEC.verify_scoped.keywords == {"scoped": True}
    assert precondition.SPEC.verify_scoped.func is precondition.verify

    def unscoped_verify(task, episode):
        return precondition.verify(task, episode)

    with pytest.raises(ConfigError, match="generate_into and verify_scoped go together"):
        CapabilitySpec(**_fields(precondition.SPEC, verify=unscoped_verify, verify_scoped=None))


def test_a_copy_derives_its_hooks_from_its_own_fields() -> None:
    from trace_gym.envs import precondition, tool_call

    copy = CapabilitySpec(**_fields(precondition.SPEC, generate_into=tool_call.generate_into))
    rng_a, rng_b = StableRNG(5), StableRNG(5)
    cfg = tool_call.SPEC.config.from_difficulty(0.0, {})
    assert copy.generate(rng_a, cfg) == tool_call.SPEC.generate(rng_b, cfg)
    assert copy.module == "trace_gym.envs.tool_call"


def test_a_spec_without_either_form_of_a_hook_is_refused() -> None:
    from trace_gym.envs import precondition

    with pytest.raises(ConfigError, match="generate_into"):
        CapabilitySpec(**_fields(precondition.SPEC, generate=None, generate_into=None))
    with pytest.raises(ConfigError, match="world_oracle"):
        CapabilitySpec(**_fields(precondition.SPEC, oracle=None, world_oracle=None))


def test_the_authoring_surface_is_public_and_light() -> None:
    """``from trace_gym import CapabilitySpec, ...`` in a fresh interpreter, without torch or
    litellm (a module author's environment must not need the training stack)."""
    import subprocess
    import sys

    import trace_gym

    authoring = {"CapabilitySpec", "SpecConfig", "knob", "KnobRate", "task_world", "World"}
    assert authoring <= set(trace_gym.__all__)
    assert trace_gym.CapabilitySpec is CapabilitySpec
    code = (
        "import sys; from trace_gym import CapabilitySpec, SpecConfig, knob, KnobRate; "
        "print(sorted(m for m in ('torch', 'litellm', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_envs_holds_one_capability_per_module_and_helpers_apart() -> None:
    """Every module directly in ``trace_gym/envs/`` is one environment with one ``SPEC``;
    code shared between environments lives in ``trace_gym/envs/helpers/``."""
    import pkgutil

    import trace_gym.envs
    import trace_gym.envs.helpers

    modules = [m for m in pkgutil.iter_modules(trace_gym.envs.__path__) if not m.ispkg]
    without_spec = [
        m.name
        for m in modules
        if not isinstance(
            getattr(importlib.import_module(f"trace_gym.envs.{m.name}"), "SPEC", None),
            CapabilitySpec,
        )
    ]
    assert without_spec == [] and len(modules) >= len(ALIASES)
    helpers = {m.name for m in pkgutil.iter_modules(trace_gym.envs.helpers.__path__)}
    assert {"commerce_common", "swe_common"} <= helpers
    for name in helpers:
        assert not hasattr(importlib.import_module(f"trace_gym.envs.helpers.{name}"), "SPEC")
