"""trace/service-desk-v0: the composite's ground truth, its user, and how calls are attributed."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest

import trace_gym  # noqa: F401  (registers the ids)
from trace_gym.agents import OracleAgent
from trace_gym.agents.baselines import PlanAgent
from trace_gym.agents.deficit import DeficitAgent
from trace_gym.core.env import CallRecord
from trace_gym.envs.service_desk import ENV_ID, members, request_views, verify
from trace_gym.episodes import run_episode
from trace_gym.errors import ConfigError
from trace_gym.world.tools import ID_ARGUMENTS

POOL = [m.capability for m in members()]
SHORT = {m.capability: m.short for m in members()}
GOLDEN = {
    0.0: ["47eb2aee83d4a261f7b61d6983df38ae0570bc0319c34bed1f70bc64426046c1",
          "fae6639389167ebf7945254ff714a98dbe4ed347940a08cb221a3f0d5b0dd126",
          "a38bbd71dfb524e4b3244ed290921627358b882494f2f1c62b1ae3851b83543a"],
    0.5: ["2016d3e9e26465c746b2a5423395cb31a3744f4bd9588ef0a5ecf874bcb5e6fb",
          "ccf238742dd86f6bc4e5c76775911cf3cbfae754d351ddbddd6f7b1951ea41bb",
          "f4050caca0026ed9bb426f17e807c580c19a35daba5f4eeda61e4221908dea9c"],
    1.0: ["cac4c4732c9594f84e4f77c8eb8e34ae1dfb20396bbc888e2e105c26973afcf7",
          "daa9a58650c4e105e52a6f95ab06720c052520b06ccc37c6c2226f655f4d1e38",
          "33539f28b316e93eb83209a07618f91c0c1035bebd133858e9c5438fdcae6233"],
}  # fmt: skip
"""Task hashes of seeds 0-2 with the eight members installed (renewed when precondition,
policy-pressure and clarify took their decision balance)."""


def _env() -> gym.Env:
    return gym.make(ENV_ID, disable_env_checker=True)


def test_pool_is_the_installed_capability_environments() -> None:
    assert "precondition_verification" in POOL
    registered = {e.capability for e in trace_gym.load_registry()}
    assert set(POOL) <= registered and "service_desk" not in POOL


def test_golden_task_hashes() -> None:
    if len(POOL) != 8:
        pytest.skip("the golden hashes assume all eight member environments")
    env = _env()
    for d, hashes in GOLDEN.items():
        got = [env.reset(seed=s, options={"difficulty": d})[1]["task_hash"] for s in range(3)]
        assert got == hashes, d


def test_members_are_specs_and_the_prompt_states_the_preamble_once() -> None:
    from trace_gym.core.spec import AGENT_PREAMBLE, CapabilitySpec

    assert all(isinstance(m, CapabilitySpec) and m.composable for m in members())
    env, sizes = _env(), set()
    for seed in range(8):
        _, info = env.reset(seed=seed, options={"difficulty": 1.0, "config": {"max_requests": 4}})
        prompt, n = info["system_prompt"], len(info["difficulty_features"]["capabilities"])
        sizes.add(n)
        assert prompt.startswith(AGENT_PREAMBLE) and prompt.count("Tracewell") == 1
        assert prompt.count("The current time is") == 1 and f"## Request {n}\n" in prompt
    assert max(sizes) > 1


@pytest.mark.parametrize("difficulty", [0.0, 0.5, 1.0])
def test_tasks_need_one_to_four_capabilities_and_checks_carry_them(difficulty: float) -> None:
    env, sizes = _env(), set()
    for seed in range(25):
        record = run_episode(env, OracleAgent(), seed=seed, options={"difficulty": difficulty})
        v = record["verification"]
        required = v["required_capabilities"]
        sizes.add(len(required))
        assert 1 <= len(required) <= 4 and len(set(required)) == len(required)
        assert set(required) <= set(POOL)
        assert record["final_reward"] == 1.0 and v["lacking_capabilities"] == []
        for check in v["checks"]:
            assert check["capability"] in required
            if check["name"] != "no_unrequested_write":
                assert SHORT[check["capability"]] == check["name"].split(".")[0]
        per_request = {}
        for check in v["checks"]:
            per_request.setdefault(check["capability"], 0.0)
            per_request[check["capability"]] += check["weight"]
        assert all(w == pytest.approx(1.0) for w in per_request.values())  # equal weight
    if difficulty == 0.0:
        assert sizes == {1}
    if difficulty == 1.0:
        assert max(sizes) == min(4, len(POOL))


def test_a_lapse_is_attributed_to_its_capability_only() -> None:
    if len(POOL) < 2:
        pytest.skip("needs two capability environments in the pool")
    target, other = POOL[0], POOL[1]
    env = _env()
    agent = DeficitAgent({target: 1.0}, seed=0)
    options = {"difficulty": 1.0, "config": {"capabilities": [target, other], "max_requests": 2}}
    seen_failure = False
    for seed in range(30):
        record = run_episode(env, agent, seed=seed, options=options)
        lacking = record["verification"]["lacking_capabilities"]
        assert lacking in ([], [target]), lacking
        seen_failure |= lacking == [target]
    assert seen_failure


def test_requests_come_one_after_another() -> None:
    env = _env()
    options = {"difficulty": 1.0, "config": {"together_probability": 0.0, "max_requests": 4}}
    for seed in range(40):
        obs, _ = env.reset(seed=seed, options=options)
        task = env.unwrapped.task
        if len(task.capabilities) >= 2:
            break
    users = env.unwrapped._user.users
    assert obs.endswith(users[0].opening) and users[1].opening not in obs
    plan = env.unwrapped.oracle_segments(task)
    texts = []
    for turn in plan[0].actions:
        obs, *_ = env.step(turn)
        texts.append(obs)
    assert users[1].opening in texts[-1]  # raised once the first request is done


def test_together_opening_raises_every_request() -> None:
    env = _env()
    options = {"difficulty": 1.0, "config": {"together_probability": 1.0, "max_requests": 4}}
    for seed in range(40):
        obs, _ = env.reset(seed=seed, options=options)
        if len(env.unwrapped.task.capabilities) >= 2:
            break
    assert env.unwrapped.task.together
    assert all(u.opening in obs for u in env.unwrapped._user.users)
    assert run_episode(env, OracleAgent(), seed=seed, options=options)["final_reward"] == 1.0


def test_id_less_calls_belong_to_the_request_touched_last_and_stray_writes_gate() -> None:
    env = _env()
    env.reset(seed=0, options={"difficulty": 1.0, "config": {"max_requests": 2}})
    task, ep = env.unwrapped.task, env.unwrapped.episode
    owned = [t.owned for t in task.subtasks]
    table, key = owned[-1][0]
    argument = {"customers": "customer_id", "orders": "order_id"}[table]
    read = CallRecord(1, 0, "c1", "get_customer" if table == "customers" else "get_order",
                      {argument: key}, "read", True)  # fmt: skip
    refusal = CallRecord(1, 1, "c2", "refuse", {"reason_code": "other", "explanation": ""},
                         "control", True)  # fmt: skip
    views = request_views(task, dataclasses.replace(ep, calls=[read, refusal]))
    assert [c.name for c in views[-1].calls] == [
        "get_customer" if table == "customers" else "get_order",
        "refuse",
    ]
    assert views[-1].calls[1].arguments[argument] == key
    assert all(not v.calls for v in views[:-1])
    stray = CallRecord(2, 2, "c3", "cancel_order", {"order_id": "O-99999", "reason": "other"},
                       "write", True, changed_world=True)  # fmt: skip
    result = verify(task, dataclasses.replace(ep, calls=[stray]))
    gate = result.check("no_unrequested_write")
    assert not gate.passed and result.score == 0.0 and gate.capability in task.capabilities


def test_null_agent_scores_zero_and_bad_config_is_rejected() -> None:
    env = _env()
    from trace_gym.agents import NullAgent

    for seed in range(10):
        assert run_episode(env, NullAgent(), seed=seed)["final_reward"] == 0.0
    with pytest.raises(ConfigError):
        env.reset(seed=0, options={"config": {"capabilities": ["telepathy"]}})
    with pytest.raises(ConfigError):
        env.reset(seed=0, options={"config": {"max_requests": 5}})


def test_a_shared_search_does_not_move_where_a_request_ends() -> None:
    env = _env()
    for seed in range(40):
        env.reset(seed=seed, options={"difficulty": 1.0, "config": {"max_requests": 2}})
        if len(env.unwrapped.task.capabilities) == 2:
            break
    task, ep = env.unwrapped.task, env.unwrapped.episode
    first, second = (t.owned[0] for t in task.subtasks)
    argument_of = {table: argument for argument, table in ID_ARGUMENTS.items()}

    def read(turn: int, index: int, record: list[str]) -> CallRecord:
        table, key = record
        return CallRecord(turn, index, f"c{index}", "get_record", {argument_of[table]: key},
                          "read", True)  # fmt: skip

    search = CallRecord(3, 1, "c1", "search_products", {"category": "hoodie"}, "read", True)
    # request 0 is read and closed by a message; then a search and request 1 follow
    texts = [(2, "first request closed"), (5, "second request closed")]
    calls = [read(1, 0, first), search, read(4, 2, second)]
    views = request_views(task, dataclasses.replace(ep, calls=calls, agent_texts=texts))
    assert search in views[0].calls and search in views[1].calls  # every request may rely on it
    # request 1 became current after the message that closed request 0: its view starts there
    assert views[0].agent_texts == texts[:1] and views[1].agent_texts == texts[1:]


def test_reads_after_a_members_write_do_not_count_as_before_it() -> None:
    # a member's scoped view holds a subset of the calls: "before the write" must go by the
    # calls' indices, not by positions in the view (payment_calc once sliced the view)
    env, caps = _env(), ["precondition_verification", "payment_calculation"]
    options = {"difficulty": 1.0, "config": {"capabilities": caps, "max_requests": 2}}
    scores = []
    for seed in range(40):
        env.reset(seed=seed, options=options)
        if env.unwrapped.task.capabilities != caps:
            continue
        first, pay = env.unwrapped.oracle_segments(env.unwrapped.task)
        reads, write, told = pay.actions
        late = PlanAgent([*first.actions, write, reads, told], name="reads-late")
        record = run_episode(env, late, seed=seed, options=options)
        scores.append(record["verification"]["checks"])
        if len(scores) == 3:
            break
    assert len(scores) == 3
    for checks in scores:
        (read,) = [c for c in checks if c["name"] == "payment_calc.records_read"]
        assert read["score"] == 0.0, read
