"""The tiny offline model and tokenizer: build, save, reload, chat template, tool tokens."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trace_train.tiny import (
    TOOL_TOKENS,
    TinyModelConfig,
    build_tiny_model,
    build_tiny_model_and_tokenizer,
    build_tiny_tokenizer,
)

TOOL_CALL = '<tool_call>\n{"name": "lookup", "arguments": {"id": 7}}\n</tool_call>'


def test_saved_folder_reloads_with_identical_logits(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    rebuilt, _ = build_tiny_model_and_tokenizer(seed=0)
    ids = tok("Check the order status", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, rebuilt(ids).logits)
    assert model.config.model_type == "qwen2"
    assert tok.padding_side == "left"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<pad>"


def test_seed_changes_weights_and_same_seed_repeats():
    a, _ = build_tiny_model_and_tokenizer(seed=1)
    b, _ = build_tiny_model_and_tokenizer(seed=1)
    c, _ = build_tiny_model_and_tokenizer(seed=2)
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


def test_tokenizer_round_trips_any_text_and_keeps_tool_tokens_whole():
    tok = build_tiny_tokenizer()
    text = "Ünïcode ✓ never seen before\t" + TOOL_CALL
    assert tok.decode(tok(text).input_ids, skip_special_tokens=True) == text
    for marker in TOOL_TOKENS:
        assert len(tok(marker).input_ids) == 1, marker
    assert len(tok) <= 512


def test_chat_template_and_generation_stop_at_im_end(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(prompt, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert out.shape[1] <= ids.shape[1] + 6 and out.shape[1] > ids.shape[1]
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_qwen3_template_is_recognised_by_trl_response_parser(tiny_qwen3_model_dir):
    from trl.chat_template_utils import add_response_schema

    tok = add_response_schema(AutoTokenizer.from_pretrained(tiny_qwen3_model_dir))
    prefix = tok.apply_chat_template(
        [{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=False
    )
    parsed = tok.parse_response(TOOL_CALL + "<|im_end|>", prefix=prefix)
    assert parsed["tool_calls"][0]["function"] == {"name": "lookup", "arguments": {"id": 7}}
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3_model_dir)
    assert model.config.model_type == "qwen3"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"vocab_size": 100}, "vocab_size"),
        ({"hidden_size": 66}, "hidden_size"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"architecture": "llama"}, "architecture"),
    ],
)
def test_config_rejects_bad_fields_naming_them(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TinyModelConfig(**kwargs)


def test_custom_size():
    tok = build_tiny_tokenizer(["abc abd abe"] * 5, vocab_size=320)
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=3))
    assert len(model.model.layers) == 3 and model.config.hidden_size == 32
    assert model.config.vocab_size == len(tok)
