"""SWE lapses for the deficit agents: the zero profile is the oracle, a lapse fails the task
and is attributed to exactly its capability, also inside trace/swe-repair-v0."""

import gymnasium as gym
import pytest

import trace_gym  # noqa: F401
from trace_gym.agents.deficit import LAPSES, DeficitAgent
from trace_gym.episodes import run_episode

SWE = {
    "trace/swe-semantic-precision-v0": "semantic_logic_precision",
    "trace/swe-call-graph-v0": "deep_call_graph_traversal",
    "trace/swe-diff-context-v0": "diff_context_precision",
    "trace/swe-multi-site-v0": "multi_site_consistency",
    "trace/swe-refactor-awareness-v0": "structural_refactor_awareness",
}


@pytest.mark.parametrize("env_id", sorted(SWE))
def test_lapse_fails_and_names_its_capability(env_id):
    cap = SWE[env_id]
    env = gym.make(env_id, disable_env_checker=True)
    assert LAPSES[cap] is env.unwrapped.capability_spec.lapse  # the spec's own lapse
    perfect = [run_episode(env, DeficitAgent({cap: 0.0}), seed=s) for s in range(3)]
    assert all(r["final_reward"] == 1.0 for r in perfect)
    records = [
        run_episode(env, DeficitAgent({cap: 1.0}, seed=3), seed=s, options={"difficulty": d})
        for s in range(5)
        for d in (0.5, 1.0)
    ]
    assert all(not r["is_success"] for r in records), env_id
    assert all(r["verification"]["lacking_capabilities"] == [cap] for r in records)


def test_lapses_inside_the_repair_composite_are_attributed():
    env = gym.make("trace/swe-repair-v0", disable_env_checker=True)
    for seed in range(4):
        env.reset(seed=seed, options={"difficulty": 1.0})
        caps = list(env.unwrapped.task.capabilities)
        lapse = caps[seed % len(caps)]
        record = run_episode(
            env, DeficitAgent({lapse: 1.0}), seed=seed, options={"difficulty": 1.0}
        )
        assert not record["is_success"]
        assert record["verification"]["lacking_capabilities"] == [lapse], (seed, caps)
        clean = run_episode(env, DeficitAgent({lapse: 0.0}), seed=seed, options={"difficulty": 1.0})
        assert clean["final_reward"] == 1.0
