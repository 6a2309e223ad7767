"""Shared fixtures for trace_train tests: tiny random models built in process, nothing downloaded.

``tiny_model_dir`` is reused by other test modules (GRPO, rollouts, evaluation): keep its name.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # two threads on the busy 2-core machine ran up to 40x slower


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A saved tiny Qwen2 model + tokenizer (ChatML template, tool tokens), loadable by path."""
    from trace_train.tiny import build_tiny_model_and_tokenizer

    out = tmp_path_factory.mktemp("tiny_model")
    build_tiny_model_and_tokenizer(out, seed=0)
    return str(out)


@pytest.fixture(scope="session")
def tiny_qwen3_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A saved tiny Qwen3 model whose tokenizer has TRL's bundled qwen3 chat template."""
    from trace_train.tiny import build_tiny_model_and_tokenizer

    out = tmp_path_factory.mktemp("tiny_qwen3_model")
    build_tiny_model_and_tokenizer(out, seed=0, architecture="qwen3", chat_template="qwen3")
    return str(out)


def make_random_adapter(base_dir: str, out_dir, *, seed: int, r: int, targets: list[str]) -> str:
    """Save a PEFT LoRA adapter with random non-zero A and B (so its delta is visible)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir)
    torch.manual_seed(seed)
    cfg = LoraConfig(
        r=r, lora_alpha=2 * r, target_modules=targets, init_lora_weights=False, lora_dropout=0.0
    )
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():  # peft's random init is small; scale B up so experts differ clearly
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(5.0)
    peft_model.save_pretrained(out_dir)
    return str(out_dir)


@pytest.fixture(scope="session")
def random_adapters(tiny_model_dir, tmp_path_factory) -> dict[str, str]:
    """Three random adapters with different ranks and target modules on the tiny model."""
    root = tmp_path_factory.mktemp("adapters")
    specs = {
        "alpha": (4, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        "beta": (8, ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]),
        "gamma": (2, ["o_proj", "down_proj"]),
    }
    return {
        name: make_random_adapter(tiny_model_dir, root / name, seed=i, r=r, targets=t)
        for i, (name, (r, t)) in enumerate(specs.items())
    }
