"""``trace run``: the TRACE loop end to end, resumable stage by stage.

* ``stages``: the run configuration, the run folder, every stage and the ordered stage table;
* ``compose``: the compose stage's builders (per-task routed policy, token-level mixture);
* ``report``: the run's HTML and JSON report;
* ``cli``: the ``trace`` command.
"""

from trace_train.pipeline.stages import (
    COMPOSITIONS,
    MODEL_POLICY_KINDS,
    STAGES,
    PipelineConfig,
    PipelineError,
    Run,
    Stage,
    policies,
    resolve_model,
    run_pipeline,
    status,
)

__all__ = [
    "COMPOSITIONS",
    "MODEL_POLICY_KINDS",
    "STAGES",
    "PipelineConfig",
    "PipelineError",
    "Run",
    "Stage",
    "policies",
    "resolve_model",
    "run_pipeline",
    "status",
]
