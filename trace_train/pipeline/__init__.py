"""``trace run``: the TRACE loop end to end, resumable stage by stage.

Read in this order:

* ``config``: the run's settings (``PipelineConfig``: shared fields, one section per stage);
* ``run_folder``: the run folder and ``stages.json`` (``Run``);
* ``stages``: one function per stage, in the order they run, and the stage table;
* ``driver``: ``run_pipeline``, which runs the table, resumes and redoes;
* ``compositions``: what the compose stage builds with ``trace_train.compose``;
* ``report``: the run's HTML and JSON report;
* ``cli``: the ``trace`` command.
"""

from trace_train.pipeline.config import (
    COMPOSITIONS,
    MODEL_POLICY_KINDS,
    ComposeSettings,
    DiagnoseSettings,
    EvaluateSettings,
    GenerationSettings,
    PipelineConfig,
    PipelineError,
    SynthesizeSettings,
)
from trace_train.pipeline.driver import run_pipeline
from trace_train.pipeline.run_folder import Run, resolve_model, status
from trace_train.pipeline.stages import STAGES, Stage, policies

__all__ = [
    "COMPOSITIONS",
    "MODEL_POLICY_KINDS",
    "STAGES",
    "ComposeSettings",
    "DiagnoseSettings",
    "EvaluateSettings",
    "GenerationSettings",
    "PipelineConfig",
    "PipelineError",
    "Run",
    "Stage",
    "SynthesizeSettings",
    "policies",
    "resolve_model",
    "run_pipeline",
    "status",
]
