"""``trace run`` as one of the processes ``accelerate launch`` starts (``test_distributed.py``).

    accelerate launch --multi_gpu --num_processes 2 -m tests.train.ddp_pipeline_worker MODEL RUN

The stages before and after ``train`` are stand-ins that record which process ran them (the
real ones are tested in ``test_pipeline.py``); the map-envs stand-in plans one capability.
``train`` is the real stage: GRPO across the processes. Each process writes
``RUN/process<R>.json``: the stages it ran and what ``run_pipeline`` returned.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from trace_train import distributed
from trace_train.pipeline import PipelineConfig, run_pipeline, stages


def main(argv: list[str] | None = None) -> int:
    model, run_dir = (argv or sys.argv[1:])[:2]
    torch.set_num_threads(1)
    ran: list[str] = []

    def stand_in(name: str):
        def fn(run, say):
            time.sleep(0.5 if name == "diagnose" else 0)  # the helper process must wait for it
            ran.append(name)
            if name == "map-envs":
                return {"plan": [{"capability": "precondition_verification",
                                  "env_id": "trace/precondition-v0"}]}  # fmt: skip
            if name == "report":
                return {"html": str(Path(run_dir) / "report.html")}
            return {}

        return fn

    def train(run, say):
        ran.append("train")
        return stages.stage_train(run, say)

    stages.STAGES = tuple(
        dataclasses.replace(s, fn=train if s.name == "train" else stand_in(s.name))
        for s in stages.STAGES
    )
    config = PipelineConfig(
        run_dir=run_dir, target="trace/precondition-v0", model=model, preset="cpu_tiny",
        grpo={"steps": 1, "group_size": 2, "max_new_tokens": 8, "max_turns": 2,
              "micro_batch_size": 1},  # one rollout per process and pass
        tool_prompt="compact",
    )  # fmt: skip
    report = run_pipeline(config, say=lambda _: None)
    out = {"ran": ran, "report": None if report is None else str(report)}
    Path(run_dir, f"process{distributed.rank()}.json").write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
