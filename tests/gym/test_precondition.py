"""trace/precondition-v0: generator, verifier, oracle, reward modes, and the suite catching
deliberately broken verifiers."""

import dataclasses
import json

import gymnasium as gym
import pytest

import trace_gym
from trace_gym import testing
from trace_gym.agents import OracleAgent, PlanAgent
from trace_gym.envs import precondition
from trace_gym.errors import ConfigError
from trace_gym.world.model import World, parse_day
from trace_gym.world.policy import violated_rules

ENV_ID = "trace/precondition-v0"

# Golden task hashes (first 16 hex digits) of seeds 0, 1, 2 on the train split. A change here
# changes what a seed means: release it as trace/precondition-v1 instead.
GOLDEN = {
    0.0: ["85524f6c70ac2cc6", "d212fe7e515c1bad", "71c8bd5d98615c0e"],
    0.5: ["cd53494542f09676", "3f069734296f3d93", "356f93a0fbe6fb5f"],
    1.0: ["054f34f7c44ccfb8", "f3490909039936fb", "8f5c691f94ed0485"],
}


@pytest.mark.parametrize("difficulty", sorted(GOLDEN))
def test_golden_task_hashes(difficulty):
    hashes = testing.task_hashes(ENV_ID, [0, 1, 2], difficulty)
    assert [h[:16] for h in hashes] == GOLDEN[difficulty]


def _tasks(n, difficulty, split="train"):
    env = gym.make(ENV_ID)
    for seed in range(n):
        env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
        yield env.unwrapped.task


def test_about_forty_percent_of_requests_are_allowed():
    allowed = sum(t.violated is None for t in _tasks(400, 0.5))
    assert 0.33 < allowed / 400 < 0.47


def test_planted_violation_is_recomputed_independently():
    # An independent reading of three rules straight from the data, not through policy.py.
    for task in _tasks(150, 1.0):
        world = World.from_dict(task.world)
        target = world.tables["orders" if "order" in task.request else "reservations"][
            task.target_id
        ]
        now = parse_day(world.now)
        if task.violated == "return_window":
            assert (now - parse_day(target["delivered_on"])).days > 30
        if task.violated == "cancel_window":
            assert (now - parse_day(target["placed_on"])).days > 14
        if task.violated == "final_sale":
            assert any(item["final_sale"] for item in target["items"])
        got = violated_rules(world, task.request, task.target_id, task.rule_codes)
        assert got == ([task.violated] if task.violated else [])


def test_difficulty_raises_what_tasks_contain():
    def mean_features(d):
        env = gym.make(ENV_ID)
        feats = [
            env.reset(seed=s, options={"difficulty": d})[1]["difficulty_features"]
            for s in range(80)
        ]
        return {
            k: sum(f[k] for f in feats) / len(feats)
            for k in ("n_rules", "n_near_miss", "n_distractors", "n_nested_records")
        }

    easy, mid, hard = mean_features(0.0), mean_features(0.5), mean_features(1.0)
    for key in easy:
        assert easy[key] <= mid[key] <= hard[key], key
    assert easy["n_rules"] == 1 and hard["n_rules"] > 3.5 and hard["n_near_miss"] > 0.5


def test_config_is_checked():
    with pytest.raises(ConfigError, match="n_rules"):
        precondition.PreconditionConfig(n_rules=9)
    with pytest.raises(ConfigError, match="requests"):
        precondition.PreconditionConfig(requests=("teleport",))
    env = gym.make(ENV_ID)
    _, info = env.reset(
        seed=0, options={"config": {"requests": ["cancel_reservation"], "n_rules": 5}}
    )
    assert info["difficulty_features"]["request"] == "cancel_reservation"
    assert info["difficulty_features"]["n_rules"] == 5


def _episode(seed, plan, difficulty=0.5, **kwargs):
    env = gym.make(ENV_ID, **kwargs)
    return trace_gym.run_episode(
        env, PlanAgent(plan), seed=seed, options={"difficulty": difficulty}
    )


def _seed_where(pred, difficulty=0.5):
    for seed, task in enumerate(_tasks(300, difficulty)):
        if pred(task):
            return seed, task
    raise AssertionError("no such task in 300 seeds")


def test_writing_without_reading_fails_even_when_allowed():
    seed, task = _seed_where(lambda t: t.violated is None)
    write = {
        "name": precondition.REQUESTS[task.request].write_tool,
        "arguments": task.reference_arguments,
    }
    record = _episode(seed, [write, "Done."])
    checks = {c["name"]: c for c in record["verification"]["checks"]}
    assert checks["granted_write"]["passed"] and not checks["read_before_acting"]["passed"]
    assert not record["is_success"] and 0 < record["final_reward"] < 1


def test_forbidden_write_zeroes_the_score():
    seed, task = _seed_where(lambda t: t.violated is not None and t.request != "return_order")
    world = World.from_dict(task.world)
    plan = precondition.oracle(task, world)[:-2]  # all the reads
    plan += [
        {
            "name": precondition.REQUESTS[task.request].write_tool,
            "arguments": task.reference_arguments,
        },
        "Done.",
    ]
    record = _episode(seed, plan)
    assert record["verification"]["gated"] and record["final_reward"] == 0.0


def test_refusing_with_the_wrong_rule_fails():
    seed, task = _seed_where(lambda t: t.violated is not None)
    plan = precondition.oracle(task, World.from_dict(task.world))
    wrong = "other" if task.violated != "other" else "final_sale"
    plan[-2] = {"name": "refuse", "arguments": {"reason_code": wrong, "explanation": "no"}}
    record = _episode(seed, plan)
    assert not record["is_success"]
    assert record["verification"]["lacking_capabilities"] == ["precondition_verification"]


def test_reward_modes_agree_on_the_final_score():
    seed, task = _seed_where(lambda t: t.violated is None)
    plan = precondition.oracle(task, World.from_dict(task.world))
    rewards = {}
    for mode in ("binary", "partial", "shaped"):
        env = gym.make(ENV_ID, reward_mode=mode)
        env.reset(seed=seed, options={"difficulty": 0.5})
        steps = [env.step(a)[1] for a in plan]
        rewards[mode] = steps
    assert rewards["binary"][-1] == rewards["partial"][-1] == 1.0
    assert sum(rewards["shaped"]) == pytest.approx(1.0)
    assert any(0 < r < 1 for r in rewards["shaped"][:-1])  # the reads earned progress


def test_hint_is_abstract_and_the_hint_free_prompt_is_returned():
    env = gym.make(ENV_ID)
    _, info = env.reset(seed=4, options={"hint": True})
    assert "<expert_guidance>" in info["system_prompt"]
    assert "<expert_guidance>" not in info["system_prompt_no_hint"]
    assert info["system_prompt"].startswith(info["system_prompt_no_hint"])
    task = env.unwrapped.task
    assert task.target_id not in info["hint"] and task.customer_id not in info["hint"]


def test_info_has_the_contract_keys_and_is_json():
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=1)
    for key in (
        "env_id",
        "capability",
        "task_id",
        "task_seed",
        "split",
        "difficulty",
        "task_hash",
        "difficulty_features",
        "system_prompt",
        "tools",
        "messages",
        "parsed_calls",
        "error",
    ):
        assert key in info, key
    assert info["messages"][1]["content"] in obs
    _, _, _, _, info = env.step('{"name": "get_order", "arguments": {"order_id": 7}}')
    assert info["error"]["code"] == "tool.schema"
    json.dumps(info)


def test_episode_log_round_trip_and_rescore(tmp_path):
    env = gym.make(ENV_ID)
    records = [trace_gym.run_episode(env, OracleAgent(), seed=s) for s in range(3)]
    path = tmp_path / "episodes.jsonl"
    trace_gym.write_episodes(path, records)
    back = list(trace_gym.read_episodes(path))
    assert back == json.loads(json.dumps(records))
    assert all(trace_gym.rescore(r).matches and trace_gym.rescore(r).passed for r in back)
    tampered = dict(back[0], actions=back[0]["actions"][:-2] + ["bye", "bye", "bye"])
    assert not trace_gym.rescore(tampered).passed


# -- the suite catches broken verifiers -------------------------------------------------------


def verifier_ignoring_all_but_the_status_rule(task, episode):
    return precondition.verify(dataclasses.replace(task, rule_codes=task.rule_codes[:1]), episode)


def verifier_accepting_any_reason_code(task, episode):
    result = precondition.verify(task, episode)
    checks = tuple(
        dataclasses.replace(c, score=1.0)
        if c.name == "refusal_names_rule" and result.check("explicit_refusal").passed
        else c
        for c in result.checks
    )
    return dataclasses.replace(result, checks=checks)


def test_suite_catches_a_verifier_that_ignores_a_rule():
    with pytest.raises(AssertionError, match="oracle failed"):
        testing.check_oracle(ENV_ID, verifier=verifier_ignoring_all_but_the_status_rule)


def test_suite_catches_a_verifier_that_ignores_the_reason_code():
    testing.check_oracle(ENV_ID, verifier=verifier_accepting_any_reason_code)  # still sound
    with pytest.raises(AssertionError, match="mutation 'change refuse.reason_code"):
        testing.check_mutations(ENV_ID, verifier=verifier_accepting_any_reason_code)


class TestPreconditionThroughThePublicSuite(testing.EnvPropertySuite):
    """The class users subclass for their own environments, run here on ours."""

    env_id = ENV_ID


def test_generator_plants_exactly_what_it_intends_over_many_seeds():
    # generate_into raises when the planted violations differ from the intended one; the
    # money invariant (item prices add up to the order total) is checked here as well.
    from trace_gym.world.model import cents

    env = gym.make(ENV_ID, disable_env_checker=True)
    for d in (0.0, 0.5, 1.0):
        for seed in range(700):
            env.reset(seed=seed, options={"difficulty": d})
            task = env.unwrapped.task
            order = task.world["tables"]["orders"].get(task.target_id)
            if order is not None:
                assert cents(sum(i["price"] for i in order["items"])) == cents(order["total"])
