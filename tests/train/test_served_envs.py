"""Training and evaluation on environments served by ``trace-gym serve`` (OpenEnv, 127.0.0.1).

A GRPO step played on a served environment must be the step played in process (same tokens,
rewards and loss); endpoints are taken round-robin and a dead one is skipped; an endpoint lost
mid-episode makes a harness fault that is masked, not a zero reward; a server beyond localhost
needs a token.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.train.envtiny import ENV_ID, build_env_tiny
from tests.train.oracle_hints import train_with_oracle_hints
from trace_train import grpo
from trace_train.config import ConfigError, GRPORunConfig
from trace_train.rollout import ENDPOINT_LOST, ChatFormat, EpisodeSpec, ServedEnvs, play_episodes

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openenv") is None, reason="needs openenv-core (the serve extra)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(env_id: str = ENV_ID, *extra: str, token: str | None = None):
    """``trace-gym serve`` in a subprocess on 127.0.0.1; returns (process, base URL)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACE_GYM_SERVE_TOKEN", None)
    if token:
        env["TRACE_GYM_SERVE_TOKEN"] = token
    cmd = [sys.executable, "-m", "trace_gym.cli", "serve", env_id, "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode()
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail("server did not start within 60 s")


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def env_tiny(tmp_path_factory) -> str:
    return build_env_tiny(tmp_path_factory.getbasetemp())


@pytest.fixture()
def server():
    proc, url = start_server()
    yield url
    stop(proc)


def one_step(model: str, out: Path, env_urls: list[str]) -> dict:
    cfg = GRPORunConfig(
        model=model, output_dir=str(out), group_size=4, groups_per_step=1, steps=1,
        micro_batch_size=1, max_turns=4, max_new_tokens=96, max_completion_tokens=1024,
        temperature=0.0, learning_rate=1e-2, lora_rank=4, lora_alpha=8,
        lora_targets=["q_proj", "v_proj"], hint_ratio=0.5, difficulty=0.0, seed=0,
        env_urls=env_urls,
    )  # fmt: skip
    result = train_with_oracle_hints(cfg, [])
    (line,) = [json.loads(x) for x in result.log_path.read_text().splitlines()][:1]
    return line


def test_a_grpo_step_on_a_served_env_is_the_in_process_step(env_tiny, server, tmp_path):
    served = one_step(env_tiny, tmp_path / "served", [server])
    local = one_step(env_tiny, tmp_path / "local", [])
    assert served["group/reward_variance"] > 0 and served["env/success_hint"] == 1.0
    for key in ("tokens/model", "tokens/env", "tokens/prompt", "reward/mean", "env/turns"):
        assert served[key] == local[key], key
    assert served["env/harness_faults"] == 0
    assert served["train/loss"] == pytest.approx(local["train/loss"], rel=1e-6)
    assert served["train/grad_norm"] == pytest.approx(local["train/grad_norm"], rel=1e-6)


def scripted_generate(tokenizer, texts: list[str], after_first=None):
    """A ``Generate`` that writes ``texts[turn]`` for every row (then calls ``after_first``)."""
    calls = {"n": 0}

    def generate(batch, max_new_tokens):
        text = texts[min(calls["n"], len(texts) - 1)]
        calls["n"] += 1
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if after_first is not None and calls["n"] == 1:
            after_first()
        return [(ids[:max_new_tokens], None) for _ in batch]

    return generate


def test_round_robin_skips_a_dead_endpoint_and_names_it_when_none_answers():
    (p1, u1), (p2, u2) = start_server(), start_server()
    served = ServedEnvs([u1, u2], reconnect_s=2.0)
    opened = []
    try:
        for seed in range(4):
            env, (_, info) = served.open(ENV_ID, {"tool_prompt": "compact"}, seed, {})
            opened.append(env.base_url)
            assert info["task_seed"] == seed and "<tool_call>" in info["system_prompt"]
            env.close()
        assert opened == [u2, u1, u2, u1]  # alternating
        stop(p1)
        survivors = [served.open(ENV_ID, {}, s, {})[0] for s in range(3)]
        assert {e.base_url for e in survivors} == {u2}  # the dead one is skipped
        for e in survivors:
            e.close()
        stop(p2)
        from trace_gym.serving.protocol import ServeError

        with pytest.raises(ServeError, match=f"no endpoint serving {ENV_ID} answered within 2 s"):
            served.open(ENV_ID, {}, 0, {})
        # An endpoint serving another environment is an error naming what each serves.
        p3, u3 = start_server("trace/clarify-v0")
        try:
            with pytest.raises(ValueError, match="none of the endpoints serves"):
                ServedEnvs([u3]).open(ENV_ID, {}, 0, {})
        finally:
            stop(p3)
    finally:
        stop(p1)
        stop(p2)


def test_an_endpoint_lost_mid_episode_is_a_harness_fault(env_tiny):
    from transformers import AutoTokenizer

    from trace_train.evaluate import summarize

    proc, url = start_server()
    tok = AutoTokenizer.from_pretrained(env_tiny)
    try:
        generate = scripted_generate(tok, ["Let me check."], after_first=lambda: stop(proc))
        specs = [EpisodeSpec(ENV_ID, s, 0.0) for s in (0, 1)]
        rollouts = play_episodes(
            generate, ChatFormat(tok), specs, max_turns=4, max_new_tokens=16,
            max_completion_tokens=256, served=ServedEnvs([url], reconnect_s=1.0),
        )  # fmt: skip
    finally:
        stop(proc)
    for r in rollouts:
        assert r.fault == ENDPOINT_LOST and r.record["end_reason"] == ENDPOINT_LOST
        assert url in r.record["harness_error"] and r.record["final_reward"] is None
    summary = summarize([r.record for r in rollouts])
    assert summary["episodes"] == 2 and summary["harness_faults"] == 2
    assert summary["success_ci95"] == [0.0, 1.0]  # nothing scored: no information, not 0 %


def test_harness_faults_are_masked_out_of_the_update():
    from trace_train.rollout import Rollout

    spec = EpisodeSpec(ENV_ID, 0, 0.0)
    rollouts = [
        Rollout(spec, [1, 2], [1, 2], [5, 6], [1, 1], reward=1.0),
        Rollout(spec, [1, 2], [1, 2], [5, 7], [1, 1], reward=0.0),
        Rollout(spec, [1, 2], [1, 2], [5, 8, 9], [1, 0, 1], reward=0.0, fault=ENDPOINT_LOST),
    ]
    trainer = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1))
    grpo.mask_harness_faults(trainer, rollouts)
    faulted = rollouts[2]
    assert faulted.reward == 0.5  # the group's mean: advantage 0, baseline unchanged
    assert faulted.env_mask == [0, 0, 0]  # no token of it carries loss
    assert [r.reward for r in rollouts[:2]] == [1.0, 0.0] and rollouts[0].env_mask == [1, 1]


def test_a_served_session_refuses_keys_a_client_may_not_set(server):
    from trace_gym.serving.client import RemoteEnv
    from trace_gym.serving.protocol import ServeError

    env = RemoteEnv(server, env_kwargs={"allow_unisolated": True})
    try:
        with pytest.raises(ServeError, match="cannot be set by a client"):
            env.reset(seed=0)
    finally:
        env.close()


def test_env_urls_must_be_http_urls():
    with pytest.raises(ConfigError, match="http:// or https://"):
        GRPORunConfig(env_urls=["127.0.0.1:8000"])
    cfg = GRPORunConfig(env_urls="http://a:1, http://b:2/")
    assert cfg.env_urls == ["http://a:1", "http://b:2"]


def test_serving_beyond_localhost_needs_a_token(tmp_path):
    from trace_gym.serving.client import RemoteEnv
    from trace_gym.serving.protocol import ServeError

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACE_GYM_SERVE_TOKEN", None)
    cmd = [sys.executable, "-m", "trace_gym.cli", "serve", ENV_ID, "--host", "0.0.0.0"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs a shared token" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr

    proc, url = start_server(ENV_ID, "--token", "s3cret")
    try:
        with pytest.raises(ServeError, match="needs the shared token"):
            RemoteEnv(url, env_id=ENV_ID, token="")
        with pytest.raises(ServeError, match="wrong token"):
            RemoteEnv(url, env_id=ENV_ID, token="guess")
        with pytest.raises(ServeError):  # the WebSocket handshake is refused too
            RemoteEnv(url, token="guess").reset(seed=0)
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            assert response.status == 200  # readiness probes need no token
        remote = RemoteEnv(url, env_id=ENV_ID, token="s3cret")
        try:
            assert remote.reset(seed=3)[1]["task_seed"] == 3
        finally:
            remote.close()
    finally:
        stop(proc)
