"""``benchmarks/gpu_smoke.sh --dry-run``: the GPU smoke run's whole configuration, checked on
the CPU (CI has no GPU); and its one-line errors for a bad model folder or environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_smoke.sh"


def smoke(*args: str) -> subprocess.CompletedProcess:
    import sys

    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_dry_run_validates_the_gpu_configuration_on_the_cpu(tiny_model_dir):
    done = smoke("--dry-run", "--model", tiny_model_dir, "--backend", "transformers")
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout[done.stdout.index("{") :])
    assert plan["dry_run"] and plan["generation"] == "transformers"
    assert plan["model"] == tiny_model_dir and plan["env_id"] == "trace/tool-call-v0"
    # 2 steps of 2 groups of 8, one group per pass on the GPU: TRL's batch shape follows.
    assert plan["grpo"] == {
        "steps": 2, "rollouts_per_step": 16, "per_device_batch": 8,
        "gradient_accumulation": 2, "use_vllm": False,
    }  # fmt: skip
    assert plan["eval_tasks"] == 20 and plan["budget_s"] == 480


def test_dry_run_names_a_bad_model_or_environment(tmp_path):
    done = smoke("--dry-run", "--model", str(tmp_path))
    assert done.returncode != 0 and "no config.json there" in done.stderr
    assert "Traceback" not in done.stderr
    done = smoke("--dry-run", "--env", "trace/no-such-v0", "--model", str(tmp_path))
    assert done.returncode != 0 and "unknown env 'trace/no-such-v0'" in done.stderr
    done = smoke("--wheels", str(tmp_path / "missing"), "--dry-run")
    assert done.returncode == 2 and "is not a folder" in done.stderr
