"""trace/desk-lite-v0 and -v1: two or three capabilities per task (v1: always tool-call and
recover-communicate), only their tools, and a verifier that names the capability a failed
task failed on."""

from __future__ import annotations

import gymnasium as gym
import pytest

import trace_gym  # noqa: F401  (registers the ids)
from trace_gym.agents import OracleAgent
from trace_gym.agents.deficit import DeficitAgent
from trace_gym.core.actions import parse_action
from trace_gym.envs import desk_lite, desk_lite_v1
from trace_gym.envs.desk_lite import POOL, DeskLiteConfig
from trace_gym.envs.service_desk import ServiceDeskConfig
from trace_gym.episodes import run_episode
from trace_gym.errors import ConfigError

VERSIONS = [desk_lite, desk_lite_v1]


def _env(module: object = desk_lite, **kwargs: object) -> gym.Env:
    return gym.make(module.ENV_ID, disable_env_checker=True, **kwargs)


@pytest.mark.parametrize(
    ("module", "difficulty", "sizes"),
    [
        (desk_lite, 0.0, {2}),
        (desk_lite, 1.0, {2, 3}),
        (desk_lite_v1, 0.0, {2}),
        (desk_lite_v1, 1.0, {2}),
    ],
)
def test_tasks_need_two_or_three_capabilities_and_the_oracle_solves_them(
    module: object, difficulty: float, sizes: set[int]
) -> None:
    env, seen = _env(module), set()
    for seed in range(30):
        record = run_episode(env, OracleAgent(), seed=seed, options={"difficulty": difficulty})
        v = record["verification"]
        required = v["required_capabilities"]
        seen.add(len(required))
        assert len(set(required)) == len(required) and set(required) <= set(module.POOL)
        assert record["final_reward"] == 1.0 and v["lacking_capabilities"] == []
        assert {c["capability"] for c in v["checks"]} == set(required)
    assert seen == sizes


def test_every_v1_task_pairs_a_tool_call_and_a_recover_request_in_either_order() -> None:
    env, firsts = _env(desk_lite_v1), set()
    for seed in range(30):
        env.reset(seed=seed, options={"difficulty": 0.0})
        caps = env.unwrapped.task.capabilities
        assert sorted(caps) == sorted(desk_lite_v1.POOL)
        firsts.add(caps[0])
    assert firsts == set(desk_lite_v1.POOL)


@pytest.mark.parametrize("module", VERSIONS)
def test_the_tools_are_exactly_those_the_oracles_call(module: object) -> None:
    """The prompt lists no tool that no task of the id needs (a small model reads every line)."""
    env, called = _env(module), set()
    for difficulty in (0.0, 1.0):
        for seed in range(60):
            env.reset(seed=seed, options={"difficulty": difficulty})
            for action in env.unwrapped.oracle(env.unwrapped.task):
                called.update(c.name for c in parse_action(action).calls)
    assert called == set(module.TOOLS) == set(env.unwrapped.tools.names)


@pytest.mark.parametrize("module", VERSIONS)
def test_the_compact_prompt_lists_only_those_tools(module: object) -> None:
    _, info = _env(module, tool_prompt="compact").reset(seed=0, options={"difficulty": 0.0})
    listed = info["system_prompt"].split("# Tools\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split("(", 1)[0] for line in listed] == list(module.TOOLS)


@pytest.mark.parametrize("module", VERSIONS)
def test_a_failed_request_is_named_by_its_capability(module: object) -> None:
    """An agent lacking one capability fails only on that capability's request, and the
    verifier's ``lacking_capabilities`` says so (what a diagnosis is checked against)."""
    env = _env(module)
    for target in module.POOL:
        agent, failures = DeficitAgent({target: 1.0}, seed=0), 0
        for seed in range(24):
            record = run_episode(env, agent, seed=seed, options={"difficulty": 0.0})
            v = record["verification"]
            if target not in v["required_capabilities"]:
                assert v["lacking_capabilities"] == [] and record["final_reward"] == 1.0
                continue
            assert v["lacking_capabilities"] in ([], [target]), (target, seed, v)
            failures += v["lacking_capabilities"] == [target]
        assert failures > 0, target


def test_config_checks_name_the_field() -> None:
    with pytest.raises(ConfigError, match="min_requests=3 exceeds max_requests=2"):
        DeskLiteConfig(min_requests=3, max_requests=2).desk_config()
    with pytest.raises(ConfigError, match="capabilities"):
        DeskLiteConfig(capabilities=("precondition_verification",))
    with pytest.raises(ConfigError, match="pool has 1 capabilities"):
        _env().reset(seed=0, options={"config": {"capabilities": [POOL[0]]}})
    with pytest.raises(ConfigError, match="not installed"):
        ServiceDeskConfig(member_config=(("no_such_capability", "requests", ()),))
    with pytest.raises(ConfigError, match="capabilities"):  # v1 has no clarify member
        _env(desk_lite_v1).reset(seed=0, options={"config": {"capabilities": list(POOL)}})
