"""KV-cache reuse is switched off where a stored cache would be wrong (token-level mixtures\nreuse theirs: tests/train/test_moe.py proves them exact)."""

from types import SimpleNamespace

from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig

from trace_train.rollout import supports_cache_reuse


def test_sliding_window_models_do_not_reuse_caches():
    assert not supports_cache_reuse(SimpleNamespace(config=Gemma3TextConfig()))
    assert not supports_cache_reuse(SimpleNamespace(config=MistralConfig(sliding_window=4096)))
    assert supports_cache_reuse(SimpleNamespace(config=MistralConfig(sliding_window=None)))
    assert supports_cache_reuse(SimpleNamespace(config=LlamaConfig()))
