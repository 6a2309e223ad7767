"""A run's finished phases are kept in the repository and restored on a fresh machine."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import yaml


def _snapshot():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "run_snapshot.py"
    spec = importlib.util.spec_from_file_location("run_snapshot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _touch(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_save_keeps_what_a_resume_needs_and_restore_puts_it_back(tmp_path):
    run = tmp_path / "runs" / "pilot"
    _touch(run / "config.yaml", yaml.safe_dump({"run_dir": str(run)}))
    _touch(run / "stages.json", "{}")
    _touch(run / "base_model" / "model.safetensors")  # restored from the stored warm start
    _touch(run / "train" / "done" / "adapter" / "adapter_config.json")
    _touch(run / "train" / "done" / "adapter" / "tokenizer.json")  # the base model's, again
    for n in (1, 2):  # a finished run needs no checkpoint
        _touch(run / "train" / "done" / "checkpoints" / f"checkpoint-{n}" / "optimizer.pt")
    for n in (2, 10):  # nor an unfinished one: its optimizer state is too large to commit
        _touch(run / "train" / "going" / "checkpoints" / f"checkpoint-{n}" / "optimizer.pt")
    _touch(run / "train" / "going" / "training_log.jsonl")
    for n in (8, 9):  # plain GRPO's run sits at the run folder's top level
        _touch(run / "plain-grpo" / "checkpoints" / f"checkpoint-{n}" / "optimizer.pt")
    snapshot = _snapshot()
    dest = tmp_path / "phases" / "pilot"
    snapshot.save(run, dest)
    kept = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert kept == {
        "config.yaml",
        "stages.json",
        "train/done/adapter/adapter_config.json",
        "train/going/training_log.jsonl",
    }
    with pytest.raises(SystemExit, match="exists"):
        snapshot.restore(dest)  # never over a run folder that is there
    (tmp_path / "runs").rename(tmp_path / "elsewhere")
    assert snapshot.restore(dest) == run
    assert (run / "train" / "done" / "adapter" / "adapter_config.json").is_file()


def test_save_refuses_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(SystemExit, match="not a run folder"):
        _snapshot().save(tmp_path, tmp_path / "out")


def test_a_resume_point_keeps_the_newest_checkpoint_of_an_unfinished_run_only(tmp_path):
    run = tmp_path / "run"
    _touch(run / "stages.json", "{}")
    _touch(run / "train" / "done" / "adapter" / "adapter_model.safetensors")
    for n in (9, 10):  # checkpoint-10 is newer than checkpoint-9, though it sorts first
        _touch(run / "train" / "done" / "checkpoints" / f"checkpoint-{n}" / "optimizer.pt")
        _touch(run / "plain-grpo" / "checkpoints" / f"checkpoint-{n}" / "optimizer.pt")
        _touch(run / "plain-grpo" / "checkpoints" / f"checkpoint-{n}" / "tokenizer.json")
    dest = tmp_path / "snapshot"
    _snapshot().save(run, dest, resume_point=True)
    kept = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert kept == {
        "stages.json",
        "train/done/adapter/adapter_model.safetensors",
        "plain-grpo/checkpoints/checkpoint-10/optimizer.pt",
    }


def test_a_large_episode_log_is_stored_gzipped_and_restored_byte_for_byte(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "r1"
    _touch(run / "config.yaml", yaml.safe_dump({"run_dir": str(run)}))
    _touch(run / "stages.json", "{}")
    snapshot = _snapshot()
    episodes = run / "evaluate" / "base" / "episodes.jsonl"
    text = '{"reward": 1.0, "actions": ["a long transcript"]}\n' * (snapshot.GZIP_OVER_BYTES // 40)
    _touch(episodes, text)
    dest = tmp_path / "phases" / "r1"
    snapshot.save(run, dest)
    packed = dest / "evaluate" / "base" / "episodes.jsonl.gz"
    assert packed.is_file() and not (dest / "evaluate" / "base" / "episodes.jsonl").exists()
    assert packed.stat().st_size < snapshot.GZIP_OVER_BYTES
    first_bytes = packed.read_bytes()
    later = time.time() + 3600  # a later save of the unchanged log packs the same bytes
    monkeypatch.setattr(time, "time", lambda: later)
    snapshot.save(run, dest)
    assert packed.read_bytes() == first_bytes
    (tmp_path / "runs").rename(tmp_path / "elsewhere")
    snapshot.restore(dest)
    assert episodes.read_text() == text and not episodes.with_name("episodes.jsonl.gz").exists()
