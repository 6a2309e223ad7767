"""KV-cache reuse is switched off where a stored cache would be wrong."""

from types import SimpleNamespace

from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig

from trace_train.rollout import supports_cache_reuse


def test_sliding_window_models_do_not_reuse_caches():
    assert not supports_cache_reuse(SimpleNamespace(config=Gemma3TextConfig()))
    assert not supports_cache_reuse(SimpleNamespace(config=MistralConfig(sliding_window=4096)))
    assert supports_cache_reuse(SimpleNamespace(config=MistralConfig(sliding_window=None)))
    assert supports_cache_reuse(SimpleNamespace(config=LlamaConfig()))


def test_token_level_mixtures_do_not_reuse_caches(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert supports_cache_reuse(model)
    model.trace_moe = object()  # what attach_experts sets
    assert not supports_cache_reuse(model)
