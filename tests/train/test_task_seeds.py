"""GRPO never trains on a task the warm start demonstrated (``trace_train.task_seeds``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from trace_train import cli, grpo, task_seeds, warmstart
from trace_train.config import ConfigError, GRPORunConfig, WarmstartConfig
from trace_train.pipeline import PipelineConfig
from trace_train.rollout import EpisodeSpec


def grpo_seeds(cfg: GRPORunConfig) -> set[int]:
    return {EpisodeSpec.from_key(k).task_seed for k in grpo.task_keys(cfg)}


def warmstart_seeds(cfg: WarmstartConfig) -> set[int]:
    return {s.task_seed for s in warmstart.demonstration_specs(cfg)}


def test_the_parts_are_disjoint_for_any_run_seeds():
    warm = {s for seed in range(-2, 4) for s in task_seeds.phase_seeds("warmstart", seed, 1000)}
    rl = {s for seed in range(-2, 4) for s in task_seeds.phase_seeds("grpo", seed, 1000)}
    assert len(warm) == len(rl) == 6000 and not warm & rl
    assert {task_seeds.phase_of(s) for s in warm} == {"warmstart"}
    assert {task_seeds.phase_of(s) for s in rl} == {"grpo"}
    with pytest.raises(ValueError, match="at most"):
        task_seeds.phase_seeds("grpo", 0, task_seeds.PART_SIZE + 1)
    with pytest.raises(ConfigError, match="GRPO's part"):
        GRPORunConfig(steps=task_seeds.PART_SIZE, groups_per_step=2)
    with pytest.raises(ConfigError, match="warm start's part"):
        WarmstartConfig(demonstrations=task_seeds.PART_SIZE + 1)


def test_standalone_clis_with_the_same_seed_share_no_task(monkeypatch):
    """``trace-train warmstart`` then ``trace-train grpo`` with one --seed, as the README runs
    them: the configs the commands build draw disjoint seeds."""
    built = {}

    def recording(name: str):
        def train(cfg):
            built[name] = cfg
            return SimpleNamespace(
                adapter_dir="a", log_path="l", global_step=0, before={}, after={}
            )

        return train

    monkeypatch.setattr(warmstart, "train", recording("warm"))
    monkeypatch.setattr(grpo, "train", recording("grpo"))
    common = ["--config", "cpu_smollm2", "--seed", "7"]
    assert cli.main(["warmstart", *common, "--demonstrations", "256"]) == 0
    assert cli.main(["grpo", *common, "--steps", "50"]) == 0
    warm, rl = warmstart_seeds(built["warm"]), grpo_seeds(built["grpo"])
    assert len(warm) == 256 and len(rl) == 50 * built["grpo"].groups_per_step
    assert not warm & rl


def test_trace_run_warm_start_and_grpo_share_no_task(tmp_path):
    cfg = PipelineConfig(
        run_dir=str(tmp_path / "run"), target="trace/tool-call-v0", model="embedded",
        preset="cpu_smollm2", warmstart={"demonstrations": 128}, grpo={"steps": 40},
        plain_grpo=True,
    )  # fmt: skip
    warm = warmstart_seeds(cfg.warmstart_config(model="m", out=Path(tmp_path / "w")))
    # plain GRPO on the target spends the adapters' steps summed (trace run's baseline)
    plain = cfg.grpo_config("m", cfg.target, tmp_path / "p", steps=40 * cfg.max_adapters)
    assert len(warm) == 128 and grpo_seeds(plain) and not warm & grpo_seeds(plain)
