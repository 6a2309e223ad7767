"""``trace-gym serve``: a real OpenEnv server in a subprocess, played through OpenEnv's clients.

Every served episode is compared with the same seed played in process: observations, rewards,
termination flags and ``info`` must be identical. Skipped when openenv-core (the ``serve``
extra) is not installed, except the check that its absence is reported in one line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest

import trace_gym
from trace_gym.cli import main

REPO = Path(__file__).resolve().parents[2]
ENV_ID = "trace/precondition-v0"
MAX_SESSIONS = 8

needs_openenv = pytest.mark.skipif(
    importlib.util.find_spec("openenv") is None,
    reason="openenv-core is not installed (pip install 'trace-rl[serve]')",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def subprocess_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture(scope="module")
def server():
    port = free_port()
    cmd = [sys.executable, "-m", "trace_gym.cli", "serve", ENV_ID, "--port", str(port)]
    cmd += ["--max-sessions", str(MAX_SESSIONS)]
    proc = subprocess.Popen(
        cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}: {proc.stdout.read()}")
            try:
                if get_json(f"{url}/health")["status"] == "healthy":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("server did not become healthy within 60 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    # Sessions that closed normally leave nothing in the server log but the banner.
    assert "Traceback" not in out, out


def local_episode(seed: int, options: dict | None = None) -> tuple[list, list]:
    """The oracle's actions and every (reset, step...) result played in process."""
    env = gym.make(ENV_ID)
    results = [env.reset(seed=seed, options=options)]
    actions = env.unwrapped.oracle_actions()
    results += [env.step(a) for a in actions]
    return actions, results


def remote_episode(env, seed: int, actions: list, options: dict | None = None) -> list:
    results = [env.reset(seed=seed, options=options)]
    results += [env.step(a) for a in actions]
    return results


@needs_openenv
def test_oracle_episode_through_the_openenv_client_equals_in_process(server):
    from trace_gym.serving.client import RemoteEnv, TraceEnvClient

    env = RemoteEnv(server, env_id=ENV_ID)
    try:
        assert isinstance(env._client.async_client, TraceEnvClient)
        for seed, options in ((3, None), (4, {"difficulty": 1.0, "split": "eval"})):
            actions, local = local_episode(seed, options)
            remote = remote_episode(env, seed, actions, options)
            assert remote == local  # observations, rewards, flags and info, turn by turn
            rewards = [r[1] for r in remote[1:]]
            assert rewards == [r[1] for r in local[1:]] and remote[-1][2] is True
            assert remote[-1][4]["is_success"] and remote[-1][4]["verification"]["score"] == 1.0
        state = env.state()
        assert state.task_id == f"{ENV_ID}:eval:d1.00:s4" and state.ended
        assert state.step_count == len(actions)
    finally:
        env.close()


@needs_openenv
def test_garbage_and_dict_actions_get_the_same_errors_as_in_process(server):
    from trace_gym.serving.client import RemoteEnv

    actions = ["", {"name": "no_such_tool", "arguments": {}}, 7, None, "[1, 2]", "<tool_call>{"]
    local = gym.make(ENV_ID)
    env = RemoteEnv(server)
    try:
        assert env.reset(seed=9) == local.reset(seed=9)
        for action in actions:
            got, want = env.step(action), local.step(action)
            assert got == want
            assert got[4]["error"] is not None, action
    finally:
        env.close()


@needs_openenv
def test_concurrent_sessions_do_not_interfere(server):
    from trace_gym.serving.client import RemoteEnv

    seeds = list(range(20, 20 + MAX_SESSIONS))
    expected = {s: local_episode(s, {"split": "eval" if s % 2 else "train"}) for s in seeds}
    barrier = threading.Barrier(len(seeds))
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def play(seed: int) -> None:
        try:
            env = RemoteEnv(server)
            try:
                options = {"split": "eval" if seed % 2 else "train"}
                actions = expected[seed][0]
                got = [env.reset(seed=seed, options=options)]
                barrier.wait(timeout=60)  # every session has reset before anyone steps
                for action in actions:
                    got.append(env.step(action))
                results[seed] = got
            finally:
                env.close()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=play, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == seeds
    for seed in seeds:
        assert results[seed] == expected[seed][1], f"session of seed {seed} differs"
    hashes = {results[s][0][1]["task_hash"] for s in seeds}
    assert len(hashes) == len(seeds)  # each session kept its own task


@needs_openenv
def test_served_reset_honours_seed_split_and_difficulty(server):
    from openenv.core.generic_client import GenericEnvClient

    from trace_gym.serving.client import RemoteEnv
    from trace_gym.serving.protocol import ServeError

    local = gym.make(ENV_ID)
    env = RemoteEnv(server)
    try:
        seen = set()
        for seed in (0, 1):
            for split in trace_gym.SPLITS:
                options = {"split": split, "difficulty": 0.25}
                obs, info = env.reset(seed=seed, options=options)
                want_obs, want_info = local.reset(seed=seed, options=options)
                assert (obs, info) == (want_obs, want_info)
                assert info["split"] == split and info["task_seed"] == seed
                assert info["difficulty"] == 0.25
                seen.add(info["task_hash"])
        assert len(seen) == 2 * len(trace_gym.SPLITS)  # seed and split both change the task
        # The same seed twice gives the same task: a GRPO group shares one task.
        assert env.reset(seed=1)[1]["task_hash"] == env.reset(seed=1)[1]["task_hash"]
        # A misspelt option is an error, never silently replaced by a default.
        with pytest.raises(ServeError, match="splt"):
            env.reset(seed=1, options={"splt": "eval"})
    finally:
        env.close()

    # OpenEnv's own generic client passes reset options as keyword arguments.
    with GenericEnvClient(base_url=server).sync() as client:
        result = client.reset(seed=5, split="test", difficulty=0.75)
        info = result.observation["info"]
        want = local.reset(seed=5, options={"split": "test", "difficulty": 0.75})[1]
        assert info == want and info["task_id"] == f"{ENV_ID}:test:d0.75:s5"
        with pytest.raises(RuntimeError, match="unknown reset argument"):
            client.reset(seed=5, spilt="test")


@needs_openenv
def test_health_schema_metadata_and_capacity(server):
    from trace_gym.serving.client import RemoteEnv
    from trace_gym.serving.protocol import ServeError

    assert get_json(f"{server}/health")["status"] == "healthy"
    schema = get_json(f"{server}/schema")
    assert "turn" in schema["action"]["required"]
    assert {"text", "terminated", "truncated", "info"} <= set(schema["observation"]["properties"])
    assert get_json(f"{server}/metadata")["name"] == ENV_ID
    with pytest.raises(ServeError, match="serves 'trace/precondition-v0', not 'trace/clarify-v0'"):
        RemoteEnv(server, env_id="trace/clarify-v0")

    envs = [RemoteEnv(server) for _ in range(MAX_SESSIONS)]
    try:
        for i, env in enumerate(envs):
            env.reset(seed=i)
        extra = RemoteEnv(server)
        try:
            with pytest.raises(ServeError, match="CAPACITY_REACHED"):
                extra.reset(seed=0)
        finally:
            extra.close()
    finally:
        for env in envs:
            env.close()


@needs_openenv
@pytest.mark.parametrize("env_id", trace_gym.registered_ids())
def test_every_environment_is_servable(env_id):
    """The real OpenEnv app in process (Starlette's test client) for every registered id."""
    from fastapi.testclient import TestClient

    from trace_gym.serving.server import create_app

    env = gym.make(env_id)
    with TestClient(create_app(env_id, max_sessions=2)) as http:
        with http.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"seed": 11, "options": {"difficulty": 0.7}}})
            first = ws.receive_json()["data"]
            obs, info = env.reset(seed=11, options={"difficulty": 0.7})
            assert first["observation"]["text"] == obs and first["observation"]["info"] == info
            for action in env.unwrapped.oracle_actions():
                ws.send_json({"type": "step", "data": {"turn": action}})
                got = ws.receive_json()["data"]
                want = env.step(action)
                assert (got["observation"]["text"], got["reward"]) == want[:2]
                assert got["observation"]["info"] == want[4]
            assert got["done"] and got["observation"]["info"]["is_success"]
            ws.send_json({"type": "close"})


@needs_openenv
def test_serve_command_rejects_bad_input_in_one_line(capsys):
    assert main(["serve", "trace/precondtion-v0"]) == 2
    assert "Did you mean trace/precondition-v0" in capsys.readouterr().err
    assert main(["serve", ENV_ID, "--max-sessions", "0"]) == 2
    err = capsys.readouterr().err
    assert "--max-sessions must be at least 1" in err and "Traceback" not in err


def test_serve_without_openenv_says_which_extra_to_install():
    code = (
        "import sys; sys.modules['openenv'] = None\n"
        "from trace_gym.cli import main\n"
        f"sys.exit(main(['serve', {ENV_ID!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'trace-rl[serve]'" in proc.stderr and "Traceback" not in proc.stderr


@needs_openenv
def test_app_factory_reads_the_environment_variables(monkeypatch):
    from fastapi.testclient import TestClient

    from trace_gym.errors import ConfigError
    from trace_gym.serving.server import app_from_env

    monkeypatch.delenv("TRACE_GYM_ENV_ID", raising=False)
    with pytest.raises(ConfigError, match="TRACE_GYM_ENV_ID"):
        app_from_env()
    monkeypatch.setenv("TRACE_GYM_ENV_ID", "trace/clarify-v0")
    monkeypatch.setenv("TRACE_GYM_MAX_SESSIONS", "many")
    with pytest.raises(ConfigError, match="'many'"):
        app_from_env()
    monkeypatch.setenv("TRACE_GYM_MAX_SESSIONS", "3")
    with TestClient(app_from_env()) as http:
        assert http.get("/metadata").json()["name"] == "trace/clarify-v0"
