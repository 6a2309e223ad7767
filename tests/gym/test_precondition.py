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


def _tasks(n, difficulty, split="train"):
    env = gym.make(ENV_ID)
    for seed in range(n):
        env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
        yield env.unwrapped.task


def test_the_papers_balance_two_in_five_requests_allowed_at_every_difficulty():
    for d in (0.0, 0.5, 1.0):
        allowed = sum(t.violated is None for t in _tasks(400, d)) / 400
        # 0.4 +- three standard errors of 400 draws (0.024 each)
        assert abs(allowed - precondition.DECISIONS["grant"]) < 0.074, (d, allowed)
    assert precondition.DECISIONS == {"grant": 0.4, "refuse": 0.6}


def _violations_read_from_the_data(task) -> dict[str, bool]:
    """Whether each rule fails, read straight from the raw records, not through policy.py."""
    tables = task.world["tables"]
    target = tables["orders" if "order" in task.request else "reservations"][task.target_id]
    customer = tables["customers"][task.customer_id]
    now = parse_day(task.world["now"])

    def days_since(day):
        return (now - parse_day(day)).days

    delivered = target.get("delivered_on")
    return {
        "return_window": delivered is not None and days_since(delivered) > 30,
        "cancel_window": "placed_on" in target and days_since(target["placed_on"]) > 14,
        "final_sale": any(item["final_sale"] for item in target.get("items", [])),
        "payment_method_active": (
            tables["payment_methods"][customer["refund_method_id"]]["status"] != "active"
        ),
        "account_hold": customer["account_hold"] is True,
        "identity_verified": customer["identity_verified"] is False,
        "refund_limit": customer["refunds_last_30_days"] >= 3,
        "account_age": days_since(customer["member_since"]) < 30,
        "open_dispute": target["dispute_open"] is True,
        "fraud_review": customer["fraud_review"] is True,
        "email_verified": customer["email_verified"] is False,
        "address_verified": customer["address_verified"] is False,
        "terms_accepted": customer["terms_accepted"] is False,
        "chargeback_limit": customer["chargebacks_last_year"] >= 2,
        "failed_logins": customer["failed_logins_today"] >= 5,
        "balance_due": customer["balance_due"] > 0,
        "supported_country": customer["country"] not in ("US", "CA", "GB"),
        "minimum_age": _age(parse_day(customer["date_of_birth"]), now) < 18,
        "discount_limit": target["discount_percent"] >= 50,
        "partner_sale": target["sold_by_partner"] is True,
        "price_adjusted": target["price_adjusted"] is True,
    }


def _age(born, today) -> int:
    """Whole years from ``born`` to ``today`` (a birthday not yet reached this year counts
    one less)."""
    return today.year - born.year - ((today.month, today.day) < (born.month, born.day))


def test_planted_violation_is_recomputed_independently():
    for task in _tasks(200, 1.0):
        for code, violated in _violations_read_from_the_data(task).items():
            if code in task.rule_codes:
                assert violated == (task.violated == code), (code, task)
        world = World.from_dict(task.world)
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
            for k in ("n_rules", "n_near_miss", "n_distractors", "n_inactive_violations")
        }

    easy, mid, hard = mean_features(0.0), mean_features(0.5), mean_features(1.0)
    for key in easy:
        assert easy[key] <= mid[key] <= hard[key], key
    assert easy["n_rules"] == hard["n_rules"] == 20  # many rules in force at every difficulty
    assert hard["n_near_miss"] > 0.5 and hard["n_inactive_violations"] > 0.3


def test_config_is_checked():
    with pytest.raises(ConfigError, match="n_rules"):
        precondition.PreconditionConfig(n_rules=precondition.MAX_RULES + 1)
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
    assert not record["is_success"] and record["final_reward"] == 0.0  # the reads count for nothing
    assert record["verification"]["lacking_capabilities"] == ["precondition_verification"]


def test_granting_with_the_requests_own_arguments_fails():
    # the refund goes to the profile's refund method, which the customer never states
    seed, task = _seed_where(
        lambda t: (
            t.violated is None
            and t.reference_arguments["refund_to"]
            != t.world["tables"]["customers"][t.customer_id]["payment_method_ids"][0]
        )
    )
    env = gym.make(ENV_ID)
    env.reset(seed=seed, options={"difficulty": 0.5})
    copied = env.unwrapped.requested_call(task)
    assert "refund_to" not in copied["arguments"]
    reads = precondition.oracle(task, World.from_dict(task.world))[:-2]
    record = _episode(seed, [*reads, copied, "Done."])
    assert record["final_reward"] == 0.0 and record["verification"]["gated"]
    fixed = dict(copied, arguments=dict(task.reference_arguments))
    assert _episode(seed, [*reads, fixed, "Done."])["is_success"]


def test_reading_then_stalling_is_undecided_and_scores_zero():
    for allowed in (True, False):
        seed, task = _seed_where(lambda t, a=allowed: (t.violated is None) == a)
        reads = precondition.oracle(task, World.from_dict(task.world))[:-2]
        record = _episode(seed, [*reads, "Let me look into that.", "Anything else?"] * 1)
        assert not record["verification"]["decided"] and record["final_reward"] == 0.0


def test_information_free_hooks_show_only_what_the_agent_sees():
    env = gym.make(ENV_ID)
    for seed in range(30):
        _, info = env.reset(seed=seed, options={"difficulty": 0.5})
        task = env.unwrapped.task
        listed = env.unwrapped.listed_rules(task)
        assert listed == task.rule_codes and all(f"[{c}]" in info["system_prompt"] for c in listed)
        call = env.unwrapped.requested_call(task)
        opening = info["messages"][1]["content"]
        for name, value in call["arguments"].items():
            values = value if isinstance(value, list) else [value]
            if name == "reason":  # the enum member of the sentence the customer says
                assert precondition.REASON_SENTENCES[value] in opening
            else:
                assert all(str(v) in opening for v in values), (name, value)


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
    # reading earns nothing until the decision is made (then it counts in full)
    decision = next(i for i, a in enumerate(plan) if isinstance(a, dict) and "name" in a
                    and a["name"] == precondition.REQUESTS[task.request].write_tool)  # fmt: skip
    assert all(r == 0.0 for r in rewards["shaped"][:decision])


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
    # the ignored rules only matter on refused requests: make every request one, so that the
    # suite's few examples all exercise the broken path
    def refusals_only():
        return gym.make(ENV_ID, disable_env_checker=True, config={"allowed_share": 0.0})

    with pytest.raises(AssertionError, match="oracle failed"):
        testing.check_oracle(refusals_only, verifier=verifier_ignoring_all_but_the_status_rule)


def test_suite_catches_a_verifier_that_ignores_the_reason_code():
    testing.check_oracle(ENV_ID, verifier=verifier_accepting_any_reason_code)  # still sound
    with pytest.raises(AssertionError, match="mutation 'change refuse.reason_code"):
        testing.check_mutations(ENV_ID, verifier=verifier_accepting_any_reason_code)


class TestPreconditionThroughThePublicSuite(testing.EnvPropertySuite):
    """The class users subclass for their own environments, run here on ours."""

    env_id = ENV_ID
    rate_seeds = 300

    # a minute at 30 seeds, and test_refusal_information_free runs 100 anyway: long run only
    @pytest.mark.long
    def test_information_free_policies_lose(self) -> None:
        super().test_information_free_policies_lose()


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
