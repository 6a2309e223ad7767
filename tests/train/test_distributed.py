"""GRPO under ``accelerate launch``: two CPU processes (gloo) against one process.

The same GRPO step (one group of 4, two hinted rollouts playing the oracle, greedy decoding)
runs once in one process and once split over two processes by TRL's sampler. The two
processes must end with identical adapters, and those must equal the single process's: DDP
averages the two halves' gradients into the gradient of the whole group. Tolerance: the
all-reduce adds the two processes' gradients in another order than one process accumulates
them, so float32 round-off (relative ~1e-7 per addition) may differ. Adam divides each
gradient by its own magnitude, so for a weight whose gradient is near Adam's epsilon (1e-8)
that round-off becomes a visible share of its step: ``atol=1e-6`` (1e-4 of the learning
rate) leaves room for that and nothing else (the step moves LoRA B weights by up to the
learning rate, 1e-2, so a wrong group split or hint assignment shows at once). Then the two
processes resume from the written checkpoint to a second step without repeating the first.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.train.envtiny import build_env_tiny

REPO = Path(__file__).resolve().parents[2]
ACCELERATE = shutil.which("accelerate", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.skipif(ACCELERATE is None, reason="accelerate's launcher is missing")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(processes: int, *module: str) -> None:
    """``python -m MODULE ...`` alone, or in ``processes`` processes through
    ``accelerate launch`` (torchrun, gloo)."""
    if processes == 1:
        cmd = [sys.executable, "-m", *module]
    else:
        # --multi_gpu is accelerate's torchrun launcher; on a machine without GPUs the
        # processes train on the CPU and accelerate picks the gloo backend.
        cmd = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(free_port()), "-m", *module]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def launch(model: str, out: Path, processes: int, steps: int = 1) -> None:
    """One GRPO run of ``tests.train.ddp_worker`` in ``processes`` processes."""
    out.mkdir(parents=True, exist_ok=True)
    run_processes(processes, "tests.train.ddp_worker", model, str(out), "--steps", str(steps))


def log_steps(out: Path) -> list[dict]:
    lines = (out / "run" / "training_log.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if "event" not in json.loads(x)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ddp")
    model = build_env_tiny(root)
    launch(model, root / "one", processes=1)
    launch(model, root / "two", processes=2)
    return {"model": Path(model), "one": root / "one", "two": root / "two"}


def test_the_update_is_not_zero(runs):
    one = torch.load(runs["one"] / "rank0.pt")
    assert any(
        not torch.equal(t, torch.zeros_like(t)) for n, t in one["lora"].items() if "lora_B" in n
    )


def test_two_processes_make_the_single_process_update(runs):
    one = torch.load(runs["one"] / "rank0.pt")
    rank0, rank1 = (torch.load(runs["two"] / f"rank{r}.pt") for r in (0, 1))
    assert rank0["world"] == rank1["world"] == 2 and one["world"] == 1
    # TRL split the group: each process played two of its four rollouts, and the hint went
    # to the group's first two (by global position), as in the single process.
    assert len(rank0["played"]) == len(rank1["played"]) == 2
    assert rank0["played"] + rank1["played"] == one["played"]
    assert [hint for _, hint in one["played"]] == [True, True, False, False]
    # The ranks end identical (DDP), and equal to the single process's update.
    assert rank0["lora"].keys() == one["lora"].keys()
    for name, tensor in one["lora"].items():
        assert torch.equal(rank0["lora"][name], rank1["lora"][name]), name
        torch.testing.assert_close(rank0["lora"][name], tensor, rtol=1e-5, atol=1e-6)
    # One log, written by the main process, counting every process's rollouts.
    (single,), (double,) = log_steps(runs["one"]), log_steps(runs["two"])
    assert double["rollouts/step"] == 4 and double["group/reward_variance"] > 0
    for key in ("tokens/model", "tokens/env", "reward/mean", "env/success_hint"):
        assert double[key] == single[key], key
    assert double["train/grad_norm"] == pytest.approx(single["train/grad_norm"], rel=1e-5)
    assert double["train/loss"] == pytest.approx(single["train/loss"], rel=1e-5)


def test_two_processes_write_one_checkpoint_and_resume(runs):
    run = runs["two"] / "run"
    assert sorted(p.name for p in (run / "checkpoints").glob("checkpoint-*")) == ["checkpoint-1"]
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    # Every process saves its own RNG state (the sampler and dropout resume per process).
    assert {p.name for p in (run / "checkpoints" / "checkpoint-1").glob("rng_state*")} == {
        "rng_state_0.pth",
        "rng_state_1.pth",
    }
    first = torch.load(runs["two"] / "rank0.pt")["played"]
    launch(str(runs["model"]), runs["two"], processes=2, steps=2)  # resumes from checkpoint-1
    again = [torch.load(runs["two"] / f"rank{r}.pt")["played"] for r in (0, 1)]
    keys = {key for played in again for key, _ in played}
    assert len(keys) == 1 and keys != {first[0][0]}, "the resumed run repeated step 1"
    assert [x["step"] for x in log_steps(runs["two"])] == [1, 2]


def test_trace_run_trains_across_two_processes(tmp_path):
    """``trace run`` launched twice over: the main process runs every stage, the helper waits
    for the stages before training, trains with it, and stops."""
    model = build_env_tiny(tmp_path)
    run = tmp_path / "run"
    run_processes(2, "tests.train.ddp_pipeline_worker", model, str(run))
    main, helper = (json.loads((run / f"process{r}.json").read_text()) for r in (0, 1))
    # The warm start (off here) and train run everywhere; everything else on the main process.
    assert helper == {"ran": ["warmstart", "train"], "report": None}
    assert main["ran"][main["ran"].index("diagnose") :][:5] == [
        "diagnose", "select", "map-envs", "synthesize", "train",
    ]  # fmt: skip
    assert main["report"] and main["ran"][-1] == "report"
    state = json.loads((run / "stages.json").read_text())
    assert all(entry["status"] == "done" for entry in state.values())
    adapter = run / "train" / "precondition_verification"
    assert (adapter / "adapter" / "adapter_model.safetensors").is_file()
    (line,) = [json.loads(x) for x in (adapter / "training_log.jsonl").read_text().splitlines()
               if "event" not in json.loads(x)]  # fmt: skip
    assert line["rollouts/step"] == 2  # one rollout per process, logged once
