"""trace_diagnose: from agent trajectories to a capability diagnosis (TRACE stage 1).

Stages, each a function and a `trace-diagnose` subcommand, all writing into one run
directory (see `trace_diagnose.run`)::

    ingest -> render -> propose -> label -> analyze -> map-envs -> report

Public API (every name below is importable from `trace_diagnose`)::

    ingest(paths, redact=None, *, fmt="auto", swebench_report=None) -> list[Trajectory]
    render(trajectory, config=None) -> Rendered                  # outcome-blind transcript
    run_diagnosis(inputs, run_dir, model, *, n_runs=10, llm=None, ...) -> dict   # all stages
    load_label_runs("DIR/run_*.json") -> list[LabelRun]          # ours or the paper's format
    labels_from_ground_truth(trajectories, capabilities) -> list[LabelRun]   # no LLM
    lacking_rates(runs) -> {capability: {rate, lacking, judged, runs}}   # before/after training
    analyze(runs, descriptions=None, *, rho=RHO, delta=DELTA, k_consistency=None,
            trajectories=None) -> dict                           # paper rule + statistics
    map_envs(capabilities, registry=None, llm=None, cache=None, min_score=0.3) -> list[dict]
    write_report(out_dir, analysis, capabilities, env_matches, runs, trajectories) -> paths

Labelling from trace_gym ground truth without an LLM, for the end-to-end loop::

    trajs = ingest(["episodes.jsonl"])
    runs = labels_from_ground_truth(trajs, ["precondition_verification", ...])
    result = analyze(runs, trajectories=trajs)
    write_report("out/", result, [], map_envs(result["core"]), runs, trajs)

Nothing here imports torch; litellm is imported only inside `trace_diagnose.llm`, when a
stage first calls a model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from .analyze import analyze, lacking_rates, load_label_runs
from .errors import (
    BudgetExceeded,
    CacheMiss,
    ConfigError,
    DiagnoseError,
    IncompleteDiagnosis,
    IngestError,
    LLMError,
    LLMUnavailable,
    UnknownFormatError,
)
from .ingest import detect_format, ingest
from .label import labels_from_ground_truth
from .llm import Cache, LLMClient, LLMConfig
from .render import RenderConfig, Rendered, render
from .report import write_report
from .run import diagnose_from_ground_truth, run_diagnosis, status
from .schema import Capability, LabelRun, Outcome, Step, Trajectory

__all__ = [
    "BudgetExceeded",
    "CacheMiss",
    "Capability",
    "ConfigError",
    "DiagnoseError",
    "IncompleteDiagnosis",
    "IngestError",
    "LLMConfig",
    "LLMError",
    "LLMUnavailable",
    "LabelRun",
    "Outcome",
    "RenderConfig",
    "Rendered",
    "Step",
    "Trajectory",
    "UnknownFormatError",
    "analyze",
    "detect_format",
    "diagnose_from_ground_truth",
    "ingest",
    "labels_from_ground_truth",
    "lacking_rates",
    "load_label_runs",
    "map_envs",
    "render",
    "run_diagnosis",
    "status",
    "write_report",
]


def map_envs(
    capabilities: list[str | Capability],
    registry: str | Path | None = None,
    llm: LLMConfig | None = None,
    cache: str | Path | None = None,
    min_score: float = 0.3,
) -> list[dict[str, Any]]:
    """Match capabilities to environment ids: declared tags first, then the LLM if given,
    else lexical similarity to the registry's texts (below `min_score`: needs a new
    environment). Rows list the runner-up `candidates` with their scores.

    `cache` is the SQLite file for LLM calls (default: `map_envs_cache.sqlite` in the
    current directory, used only when `llm` is given).
    """
    from .map_envs import map_envs as _map_envs

    caps = [
        c if isinstance(c, Capability) else Capability(name=c, definition=c.replace("_", " "))
        for c in capabilities
    ]
    client = LLMClient(llm, Cache(cache or "map_envs_cache.sqlite")) if llm else None
    return asyncio.run(_map_envs(caps, registry, client, show_progress=False, min_score=min_score))
