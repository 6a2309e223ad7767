"""trace-gym command line: every command runs and bad input gives one clear line."""

import io
import json

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.agents import OracleAgent
from trace_gym.cli import main, play


def test_list_shows_every_registered_id(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for env_id in trace_gym.registered_ids():
        assert env_id in out


def test_sample_prints_the_task_and_its_oracle(capsys):
    assert main(["sample", "trace/precondition-v0", "--seed", "3", "--difficulty", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "trace/precondition-v0:train:d0.80:s3" in out and "oracle solution" in out
    assert main(["sample", "trace/precondition-v0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["info"]["task_seed"] == 0


def test_unknown_id_is_one_line_with_a_suggestion(capsys):
    assert main(["show", "trace/precondtion-v0"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean trace/precondition-v0" in err and "Traceback" not in err


@pytest.mark.parametrize("env_id", trace_gym.registered_ids())
def test_play_an_episode_from_typed_lines(env_id):
    env = gym.make(env_id)
    env.reset(seed=5)
    actions = env.unwrapped.oracle_actions()
    lines = [json.dumps(a) if not isinstance(a, str) else a.replace("\n", " ") for a in actions]
    out = []
    verdict = play(
        env_id,
        5,
        stdin=io.StringIO("\n".join(lines) + "\n"),
        out=lambda *a, **k: out.append(a[0]),
    )
    assert verdict["passed"] and verdict["score"] == 1.0
    assert any("episode over" in line for line in out)


def test_score_replays_a_log(tmp_path, capsys):
    env = gym.make("trace/precondition-v0")
    path = tmp_path / "log.jsonl"
    trace_gym.write_episodes(
        path, [trace_gym.run_episode(env, OracleAgent(), seed=s) for s in range(3)]
    )
    assert main(["score", "trace/precondition-v0", "--episodes", str(path)]) == 0
    assert "success 3/3, 0 differ" in capsys.readouterr().out
    path.write_text("not json\n")
    assert main(["score", "trace/precondition-v0", "--episodes", str(path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
