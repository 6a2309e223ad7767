"""The vLLM path without vLLM: TRL's current ``GRPOConfig`` arguments and the turn-by-turn
generator over a stand-in for TRL's ``VLLMGeneration`` (no GPU, no vllm package here)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from trace_train import grpo
from trace_train.config import ConfigError, GRPORunConfig
from trace_train.rollout import vllm_generate


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_trl_accepts_the_vllm_arguments(mode, tmp_path):
    cfg = GRPORunConfig(
        use_vllm=True, vllm_mode=mode, vllm_server_base_url="http://10.0.0.7:8000",
        vllm_gpu_memory_utilization=0.45, vllm_max_model_length=4096, group_size=4,
        groups_per_step=1, micro_batch_size=4,
    )  # fmt: skip
    args = grpo.trl_config(cfg, tmp_path, stop_ids=[2, 7])
    assert args.use_vllm and args.vllm_mode == mode
    assert args.generation_kwargs == {"stop_token_ids": [2, 7]}  # a turn ends at its stop token
    if mode == "server":
        assert args.vllm_server_base_url == "http://10.0.0.7:8000"
    else:
        assert args.vllm_gpu_memory_utilization == 0.45 and args.vllm_max_model_length == 4096
        assert args.vllm_server_base_url is None


def test_use_vllm_without_the_package_is_one_clear_error():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ConfigError, match="needs the vllm package"):
        grpo.check_vllm(GRPORunConfig(use_vllm=True))
    grpo.check_vllm(GRPORunConfig(use_vllm=False))  # the default never needs it


class FakeVLLMGeneration:
    """TRL's ``VLLMGeneration.generate`` contract: token ids in, ``(prompt_ids, completion_ids,
    logprobs [per token, per candidate], logprob_token_ids)`` out, at most
    ``max_completion_length`` tokens."""

    mode = "colocate"

    def __init__(self) -> None:
        self.max_completion_length = 1536
        self.limits_seen: list[int] = []

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        n = self.max_completion_length
        self.limits_seen.append(n)
        completions = [[p[-1] + 1 + k for k in range(n)] for p in prompts]
        logprobs = [[[-0.5 - k] for k in range(n)] for _ in prompts]
        return prompts, completions, logprobs, None


def test_each_turn_asks_vllm_for_the_turn_limit_and_flattens_logprobs():
    backend = FakeVLLMGeneration()
    trainer = SimpleNamespace(vllm_generation=backend, accelerator=SimpleNamespace(num_processes=1))
    generate = vllm_generate(trainer)
    out = generate([[10, 11], [20]], 3)
    assert out == [([12, 13, 14], [-0.5, -1.5, -2.5]), ([21, 22, 23], [-0.5, -1.5, -2.5])]
    assert backend.limits_seen == [3]  # not the episode budget: vLLM stops at the turn limit
    assert backend.max_completion_length == 1536  # restored for TRL's own use
    assert not hasattr(generate, "keep_going")  # colocated: each process runs on its own
