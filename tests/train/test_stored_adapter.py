"""Stored adapters: a warm start kept in the repository as bfloat16, checked on every load,
and used by ``trace run`` instead of training one (tiny random model, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.train.envtiny import ENV_ID, build_env_tiny
from trace_train import stored_adapter
from trace_train.cli import main as trace_train_main
from trace_train.config import WarmstartConfig
from trace_train.pipeline import PipelineConfig, PipelineError, stages
from trace_train.warmstart import train

REBUILD = "trace-train warmstart --config cpu_tiny --demonstrations 2"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stored")
    base = build_env_tiny(root)
    cfg = WarmstartConfig(
        model=base, env_id=ENV_ID, output_dir=str(root / "ws"), demonstrations=2, epochs=1,
        batch_size=2, learning_rate=1e-2, lora_rank=2, lora_alpha=4,
        lora_targets=["q_proj", "v_proj"], eval_episodes=0, max_turns=6,
    )  # fmt: skip
    return {"base": Path(base), "adapter": train(cfg).adapter_dir, "root": root}


def test_a_stored_adapter_is_bfloat16_with_its_hash_and_training_record(trained, tmp_path):
    dest = tmp_path / "kept"
    assert trace_train_main(["store-adapter", str(trained["adapter"]), str(dest),
                             "--rebuild", REBUILD]) == 0  # fmt: skip
    record = json.loads((dest / stored_adapter.RECORD).read_text())
    weights, source = (
        load_file(str(dest / "adapter_model.safetensors")),
        load_file(str(trained["adapter"] / "adapter_model.safetensors")),
    )
    assert weights.keys() == source.keys()
    for name, tensor in weights.items():
        assert tensor.dtype == torch.bfloat16
        assert torch.equal(tensor, source[name].to(torch.bfloat16))
    assert record["rebuild"] == REBUILD and record["dtype"] == "bfloat16"
    trained_record = json.loads((trained["adapter"] / "trace_train.json").read_text())
    assert record["training"] == trained_record
    assert stored_adapter.load(dest, trained["base"])["sha256"] == record["sha256"]


def test_an_altered_or_misplaced_stored_adapter_is_refused(trained, tmp_path, tiny_model_dir):
    dest = tmp_path / "kept"
    stored_adapter.store(trained["adapter"], dest, rebuild=REBUILD)
    with pytest.raises(stored_adapter.StoredAdapterError, match="trained on base weights"):
        stored_adapter.load(dest, tiny_model_dir)  # another model's weights
    weights = dest / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(stored_adapter.StoredAdapterError, match=f"changed after.*{REBUILD}"):
        stored_adapter.load(dest, trained["base"])
    with pytest.raises(stored_adapter.StoredAdapterError, match="provenance.json is missing"):
        stored_adapter.load(trained["adapter"], trained["base"])  # a training folder


def test_trace_run_merges_a_stored_warm_start_and_records_it(trained, tmp_path):
    dest = tmp_path / "kept"
    record = stored_adapter.store(trained["adapter"], dest, rebuild=REBUILD)
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model=str(trained["base"]),
                         target=ENV_ID, preset="cpu_tiny", warm_start_adapter=str(dest))  # fmt: skip
    run = stages.Run(cfg)
    output = stages.stage_warmstart(run, say=lambda _: None)
    run.mark("warmstart", "done", output)
    assert output["stored"] and output["sha256"] == record["sha256"]
    merged = Path(output["base_model"])
    assert (merged / "model.safetensors").is_file() and run.base_model == str(merged)
    provenance = json.loads(stages.write_provenance(run).read_text())
    warm = provenance["phases"]["warmstart"]
    assert warm["sha256"] == record["sha256"] and warm["stored"]["rebuild"] == REBUILD
    assert warm["seeds"] == record["training"]["provenance"]["seeds"]
    assert provenance["warm_started_base"]["sha256"] not in (
        None,
        provenance["base_model"]["sha256"],
    )


def test_a_stored_and_a_trained_warm_start_together_are_a_config_error(trained, tmp_path):
    with pytest.raises(PipelineError, match="use the stored adapter or train one"):
        PipelineConfig(run_dir=str(tmp_path), model=str(trained["base"]), preset="cpu_tiny",
                       warm_start_adapter=str(tmp_path), warmstart={"demonstrations": 2})  # fmt: skip
    with pytest.raises(PipelineError, match="no such folder"):
        PipelineConfig(run_dir=str(tmp_path), model="m", warm_start_adapter="nowhere")
