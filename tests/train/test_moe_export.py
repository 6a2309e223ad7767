"""Exports: a single expert as a plain PEFT adapter, and static merges through peft."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from tests.train.conftest import make_random_adapter
from trace_train.compose.export import export_expert, static_merge
from trace_train.compose.moe import ExpertSpec, MoEConfig, RouterSpec, attach_experts, save_moe


def _logits(base_dir, adapter_dir, ids):
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir)
    with torch.no_grad():
        return model.eval()(ids).logits


@pytest.fixture(scope="module")
def same_rank_adapters(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("same_rank")
    targets = ["q_proj", "v_proj", "down_proj"]
    return {
        n: make_random_adapter(tiny_model_dir, root / n, seed=10 + i, r=4, targets=targets)
        for i, n in enumerate(["x", "y"])
    }


def test_export_expert_is_a_plain_peft_adapter(tiny_model_dir, random_adapters, tmp_path):
    experts = [ExpertSpec(n, d) for n, d in random_adapters.items()]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    save_moe(
        attach_experts(model, MoEConfig(tiny_model_dir, experts, RouterSpec())), tmp_path / "m"
    )
    out = export_expert(tmp_path / "m", "beta", tmp_path / "beta")
    ids = torch.tensor([[5, 9, 30, 41, 7]])
    assert torch.equal(
        _logits(tiny_model_dir, out, ids), _logits(tiny_model_dir, random_adapters["beta"], ids)
    )
    with pytest.raises(ValueError, match="alpha"):
        export_expert(tmp_path / "m", "delta", tmp_path / "delta")


@pytest.mark.parametrize("kind", ["linear", "cat"])
def test_static_merge_with_one_hot_weights_reproduces_that_adapter(
    tiny_model_dir, same_rank_adapters, tmp_path, kind
):
    ids = torch.tensor([[5, 9, 30, 41, 7, 8]])
    out = static_merge(
        tiny_model_dir,
        same_rank_adapters,
        tmp_path / kind,
        combination_type=kind,
        weights=[1.0, 0.0],
        density=1.0,
    )
    merged = _logits(tiny_model_dir, out, ids)
    torch.testing.assert_close(
        merged, _logits(tiny_model_dir, same_rank_adapters["x"], ids), atol=1e-5, rtol=0
    )
    half = static_merge(
        tiny_model_dir,
        same_rank_adapters,
        tmp_path / f"{kind}_half",
        combination_type=kind,
        density=1.0,
    )
    assert (_logits(tiny_model_dir, half, ids) - merged).abs().max() > 1e-3


def test_ties_merge_loads_and_changes_the_base(tiny_model_dir, same_rank_adapters, tmp_path):
    ids = torch.tensor([[5, 9, 30, 41, 7, 8]])
    out = static_merge(
        tiny_model_dir, same_rank_adapters, tmp_path / "ties", combination_type="ties"
    )
    merged, base = _logits(tiny_model_dir, out, ids), _logits(tiny_model_dir, None, ids)
    assert torch.isfinite(merged).all() and (merged - base).abs().max() > 1e-3


def test_static_merge_rejects_unknown_combination(tiny_model_dir, same_rank_adapters, tmp_path):
    with pytest.raises(ValueError, match="combination_type"):
        static_merge(tiny_model_dir, same_rank_adapters, tmp_path / "o", combination_type="avg")
