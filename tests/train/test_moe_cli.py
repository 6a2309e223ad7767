"""compose_cli commands, called through argparse as the trace-train CLI will call them."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from trace_train.compose.cli import register
from trace_train.compose.moe import load_moe, moe_state


def run(argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_merge_train_router_export(tiny_model_dir, random_adapters, tmp_path):
    a, b = random_adapters["alpha"], random_adapters["beta"]
    moe = str(tmp_path / "moe")
    assert (
        run(["merge", "--base", tiny_model_dir, "--adapters", f"a={a}", f"b={b}", "--out", moe])
        == 0
    )
    model, tok = load_moe(moe)
    assert moe_state(model).config.slot_names == ["base", "a", "b"]
    rows = [{"input_ids": [5 + i, 40, 41, 42, 60 + i], "slot": "a"} for i in range(6)]
    rows += [{"input_ids": [200 + i, 300, 301, 302, 250 + i], "slot": "b"} for i in range(6)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    assert run(["train-router", "--moe", moe, "--data", str(data), "--steps", "50"]) == 0
    trained, _ = load_moe(moe)
    stats = moe_state(trained).config.stats["train_routing"]
    assert stats["mean"] >= 0.9  # token-distinct families are easy to separate
    out = tmp_path / "a_only"
    assert run(["export", "--moe", moe, "--expert", "a", "--out", str(out)]) == 0
    assert (out / "adapter_model.safetensors").read_bytes() == (
        tmp_path / "moe" / "experts" / "a" / "adapter_model.safetensors"
    ).read_bytes()
    ids = torch.tensor([[5, 40, 41]])
    with torch.no_grad():
        assert not torch.equal(trained(ids).logits, model(ids).logits)  # router changed


def test_route_writes_a_loadable_policy(tiny_model_dir, random_adapters, tmp_path):
    a = random_adapters["alpha"]
    check = tmp_path / "check.jsonl"
    check.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}], "expected": None})
    )
    argv = [
        "route",
        "--base",
        tiny_model_dir,
        "--adapter",
        f"pre={a}",
        "--description",
        "pre=Check preconditions",
        "--out",
        str(tmp_path / "r"),
        "--check",
        str(check),
    ]
    assert run(argv) == 0
    assert (tmp_path / "r" / "experts" / "pre" / "adapter_config.json").is_file()


def test_router_data_keeps_a_record_whose_text_holds_a_line_separator(tmp_path):
    from trace_train.compose.cli import _jsonl

    data = tmp_path / "data.jsonl"
    rows = [{"text": "a\u2028b", "slot": "a"}, {"text": "c", "slot": "b"}]
    # ensure_ascii=False writes U+2028 raw, as the episode logs do; str.splitlines split it
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    assert "\u2028" in data.read_text(encoding="utf-8")
    assert _jsonl(str(data)) == rows


def test_a_broken_jsonl_line_is_named(tmp_path):
    from trace_train.compose.cli import _jsonl

    data = tmp_path / "data.jsonl"
    data.write_text('{"slot": "a"}\n\n{"slot": \n')
    with pytest.raises(ValueError, match=r"data\.jsonl:3: not valid JSON"):
        _jsonl(str(data))
