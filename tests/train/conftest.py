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
