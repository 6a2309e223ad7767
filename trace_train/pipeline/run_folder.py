"""The run folder of ``trace run``: where each stage writes, and ``stages.json``, the record of
what finished, when, and what it produced (a rerun reads it to resume).

Layout::

    config.yaml  stages.json  report.html  report.json
    stage-clock.json     the unfinished stage's time so far, over every invocation (pipeline.clock)
    provenance.json      commit, config, base and adapter hashes, seeds and dtypes per phase
    base_model/          the warm-started base (merged), when warm start is on
    warmstart/           the warm start's own run (adapter/, training_log.jsonl)
    rollout-base/        episodes.jsonl, summary.json: the diagnosed agent on the target
    diagnose/            trace_diagnose run folder (analysis.json, env_matches.json, ...)
    select.json  map-envs.json
    environments/        synthesised environments (a TRACE_GYM_PATH folder: registry.yaml,
                         one module per environment, synthesis/<capability>.json records)
    synthesize/          requests/<capability>.json when no LLM writes them here
    train/<capability>/  one GRPO run each: adapter/, training_log.jsonl, checkpoints/
    plain-grpo/          with ``plain_grpo``: GRPO on the target itself, the adapters' rollouts
    compose/routed/  compose/moe/  compose/routing_check.json
    evaluate/<policy>/   episodes.jsonl, summary.json on the held-out split
    rediagnose/<policy>/ the same diagnosis of each policy's held-out episodes;
                         rediagnose/lacking.json: LACKING rate per capability, before and after
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trace_train.pipeline.config import PipelineConfig, PipelineError


class Run:
    """The run folder and ``stages.json`` (what finished, when, and what it produced)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.dir = Path(config.run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.dir / "stages.json"
        self.state: dict[str, Any] = (
            json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        )

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)

    def done(self, stage: str) -> bool:
        return self.state.get(stage, {}).get("status") == "done"

    def output(self, stage: str) -> dict[str, Any]:
        return self.state.get(stage, {}).get("output", {})

    def mark(
        self,
        stage: str,
        status: str,
        output: dict[str, Any] | None = None,
        seconds: float | None = None,
        cpu_seconds: float | None = None,
        invocations: int | None = None,
    ) -> None:
        """Record ``stage``'s ``status`` (``started``, ``done``) and when; when done, what it
        produced, its wall and CPU seconds (every thread and worker process together: what it
        cost on a shared machine, where wall time also counts the neighbours) over all the
        ``invocations`` that ran it."""
        entry = self.state.setdefault(stage, {})
        entry["status"] = status
        entry[f"{status}_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        if output is not None:
            entry["output"] = output
        if seconds is not None:
            entry["seconds"] = round(seconds, 1)
        if cpu_seconds is not None:
            entry["cpu_seconds"] = round(cpu_seconds, 1)
        if invocations is not None:
            entry["invocations"] = invocations
        self._save()

    def forget(self, names: list[str]) -> None:
        """Mark stages as never run, so that the next ``run_pipeline`` runs them again."""
        for name in names:
            self.state.pop(name, None)
        self._save()

    def _save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")  # a kill mid-write leaves the old file whole
        tmp.write_text(json.dumps(self.state, indent=2, default=str))
        tmp.replace(self.state_path)

    @property
    def base_model(self) -> str:
        """The model every later stage starts from: the warm-started one, else ``model``."""
        return self.output("warmstart").get("base_model") or resolve_model(self.config.model)

    @property
    def environments(self) -> Path:
        """The run's user environment folder (what ``trace-gym synthesize --out`` writes)."""
        return self.path("environments")

    def training_plan(self) -> list[dict[str, Any]]:
        """Capability -> environment rows to train: map-envs' matches with the environments
        the synthesize stage wrote filled in."""
        return self.output("synthesize").get("plan") or self.output("map-envs").get("plan", [])


def resolve_model(model: str) -> str:
    """A model folder for ``model`` (``embedded`` is converted once and cached)."""
    from trace_train.embedded import resolve_model as _resolve

    return _resolve(model)


def status(run_dir: str | Path) -> dict[str, Any]:
    """What finished in a run folder (for ``trace status``)."""
    path = Path(run_dir) / "stages.json"
    if not path.exists():
        raise PipelineError(f"{run_dir} is not a trace run folder (no stages.json)")
    return json.loads(path.read_text())
