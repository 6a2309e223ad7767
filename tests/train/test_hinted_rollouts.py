"""Hinted rollouts in the GRPO update: dropped (the default) or importance-weighted.

The hinted rollouts play the oracle (``oracle_hints``), so they succeed where the random model's
hint-free rollouts fail. Each loss call holds one rollout (the CPU default), so the gradient
each rollout contributes is measured on its own.
"""

from __future__ import annotations

import json

import pytest
import torch
from trl import GRPOTrainer

from tests.train.envtiny import build_env_tiny
from tests.train.oracle_hints import train_with_oracle_hints
from trace_train.config import ConfigError, GRPORunConfig
from trace_train.provenance import sha256_file


def run(tmp_path_factory, mode: str) -> dict:
    """One GRPO step in ``mode``; per loss call: its hinted flags, its inputs, the norm of the
    gradient it gives the LoRA weights."""
    model = build_env_tiny(tmp_path_factory.getbasetemp())
    out = tmp_path_factory.mktemp(f"hinted_{mode}")
    cfg = GRPORunConfig(
        model=model, output_dir=str(out), group_size=4, groups_per_step=1, steps=1,
        max_turns=4, max_new_tokens=96, max_completion_tokens=1024, learning_rate=1e-2,
        lora_rank=4, lora_alpha=8, lora_targets=["q_proj", "v_proj"], hint_ratio=0.5,
        difficulty=0.0, save_steps=10, seed=0, hinted_rollouts=mode,
    )  # fmt: skip
    calls: list[dict] = []
    patched = GRPOTrainer._compute_loss  # train_with_oracle_hints patches it again, inside

    def measuring(self, model, inputs):
        loss = patched(self, model, inputs)
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        norm = sum(float(g.pow(2).sum()) for g in grads if g is not None) ** 0.5
        calls.append({"grad_norm": norm, **{k: v.detach().clone() for k, v in inputs.items()
                                            if torch.is_tensor(v)}})  # fmt: skip
        return loss

    mp = pytest.MonkeyPatch()
    mp.setattr(GRPOTrainer, "_compute_loss", measuring)
    try:
        result = train_with_oracle_hints(cfg, [])
    finally:
        mp.undo()
    return {"calls": calls, "result": result, "cfg": cfg}


@pytest.fixture(scope="module")
def dropped(tmp_path_factory):
    return run(tmp_path_factory, "drop")


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    return run(tmp_path_factory, "importance_weighted")


def test_drop_is_the_default_and_is_recorded(dropped):
    assert GRPORunConfig().hinted_rollouts == "drop"
    meta = json.loads((dropped["result"].adapter_dir / "trace_train.json").read_text())
    assert meta["hinted_rollouts"] == "drop"
    assert meta["provenance"]["config"]["hinted_rollouts"] == "drop"


def test_dropped_hinted_rollouts_give_no_gradient(dropped):
    calls = dropped["calls"]
    assert len(calls) == 4 and sum(int(c["hinted"].sum()) for c in calls) == 2
    for call in calls:
        if call["hinted"].all():
            assert float((call["completion_mask"] * call["tool_mask"]).sum()) == 0
            assert float(call["advantages"].abs().sum()) == 0
            assert call["grad_norm"] == 0.0
    # the hinted rollouts succeeded, yet left the group's statistics: the hint-free ones all
    # failed alike, so nothing trains in this step
    line = json.loads(dropped["result"].log_path.read_text().splitlines()[0])
    assert line["env/success_hint"] == 1.0 and line["env/success_no_hint"] == 0.0
    assert line["group/informative_share"] == 1.0
    assert line["group/informative_share_no_hint"] == 0.0
    assert all(c["grad_norm"] == 0.0 for c in calls)


def test_importance_weighted_hinted_rollouts_train_with_a_truncated_ratio(weighted):
    calls = weighted["calls"]
    hinted = [c for c in calls if c["hinted"].all()]
    plain = [c for c in calls if not c["hinted"].any()]
    assert len(hinted) == 2 and len(plain) == 2
    cap = weighted["cfg"].hint_weight_cap
    for call in hinted:
        mask = (call["completion_mask"] * call["tool_mask"]).bool()
        weights = call["hint_weights"][mask]
        assert weights.numel() > 0
        # pi_theta(token | hint-free) / pi_oracle(token) = pi_theta(token) < 1 for a random model
        assert bool((weights != 1.0).all()) and bool((weights > 0).all())
        assert bool((weights <= cap).all())
        assert call["advantages"].dim() == 2  # the weight is folded in per token
        assert call["grad_norm"] > 0
    for call in plain:
        assert bool((call["hint_weights"] == 1.0).all())  # sampled from the trained policy
    line = json.loads(weighted["result"].log_path.read_text().splitlines()[0])
    assert 0 < line["hints/weight_mean"] <= cap and "hints/weight_capped_share" in line


def test_dropping_every_rollout_of_a_group_is_refused():
    with pytest.raises(ConfigError, match="nothing would train"):
        GRPORunConfig(group_size=4, hint_ratio=1.0, hinted_rollouts="drop")
    with pytest.raises(ConfigError, match="hinted_rollouts="):
        GRPORunConfig(hinted_rollouts="ignore")


def test_record_hashes_the_adapter_and_names_its_tasks(weighted):
    adapter = weighted["result"].adapter_dir
    record = json.loads((adapter / "trace_train.json").read_text())["provenance"]
    assert record["adapters"]["adapter"]["sha256"] == sha256_file(
        adapter / "adapter_model.safetensors"
    )
    assert len(record["base_model"]["sha256"]) == 64 and record["base_model"]["files"]
    assert record["seeds"]["run_seed"] == 0
    tasks = record["seeds"]["tasks"]
    assert tasks["phase"] == "grpo" and tasks["count"] == 1 and tasks["first"] == 500_000
    assert record["config"]["hint_weight_cap"] == weighted["cfg"].hint_weight_cap
    assert set(record["dtypes"]) == {"weights", "update", "rollout_prefill", "rollout_decode"}
    assert record["git"]["commit"] is None or len(record["git"]["commit"]) == 40
    cpu = record["machine"]["cpu"]
    assert cpu["logical_cores"] >= 1 and isinstance(cpu["flags"], list)
    assert "torch" in record["machine"]["versions"] and "trl" in record["machine"]["versions"]
