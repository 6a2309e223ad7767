"""Every shipped config loads into its dataclass, and ids in it are registered."""

from pathlib import Path

import pytest

import trace_gym
from trace_train.config import ConfigError, GRPORunConfig, WarmstartConfig, load_config
from trace_train.pipeline import PipelineConfig

CONFIGS = Path(__file__).resolve().parents[2] / "trace_train" / "configs"
PIPELINES = [
    "compare_cpu.yaml",
    "demo_cpu.yaml",
    "fair_cpu.yaml",
    "gpu_qwen3.yaml",
    "tau2_diagnose.yaml",
    "swe_cpu.yaml",
    "swe_gpu.yaml",
]


@pytest.mark.parametrize("name", PIPELINES)
def test_pipeline_configs_load_with_registered_targets(name):
    cfg = PipelineConfig.load(CONFIGS / name)
    assert not cfg.target or cfg.target in trace_gym.registered_ids()


@pytest.mark.parametrize("preset", ["cpu_tiny", "cpu_smollm2", "gpu_paper"])
def test_presets_load_for_grpo_and_warmstart(preset):
    grpo = load_config(GRPORunConfig, preset)
    assert grpo.env_id in trace_gym.registered_ids()
    load_config(WarmstartConfig, preset)


@pytest.mark.parametrize("name", PIPELINES)
def test_pipeline_config_inputs_are_inside_the_repository(name):
    repo = CONFIGS.parents[1]
    for path in PipelineConfig.load(CONFIGS / name).trajectories:
        resolved = (repo / path).resolve()
        assert resolved.is_relative_to(repo) and resolved.is_file(), path


def test_a_rate_written_without_a_dot_is_a_number(tmp_path):
    # YAML 1.1 reads 1e-4 as the string "1e-4"; GRPO would have handed TRL a string
    config = tmp_path / "run.yaml"
    config.write_text("target: trace/tool-call-v0\ngrpo:\n  learning_rate: 1e-4\n")
    cfg = PipelineConfig.load(config)
    grpo = cfg.grpo_config(model="embedded", env_id=cfg.target, out=tmp_path)
    assert grpo.learning_rate == 1e-4 and isinstance(grpo.learning_rate, float)
    with pytest.raises(ConfigError, match="learning_rate='fast': expected a number"):
        GRPORunConfig(learning_rate="fast")
