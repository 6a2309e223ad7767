"""The normalised data model every stage shares.

`Trajectory` is what ingest produces from any format (step names follow ATIF, the Agent
Trajectory Interchange Format, so converters map onto one vocabulary). `Capability` is one entry of the editable
`capabilities.json`. `CapabilityLabel` / `LabelResponse` are the structured output the
labeller must return; pydantic validates them before anything is stored. `LabelRun` is one
labelling pass (by the LLM labeller or from ground truth), the input of `analyze`.

Outcome fields (`Trajectory.outcome`, `Trajectory.ground_truth`) are never rendered into a
labelling prompt: `render.py` reads only `task` and `steps`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Verdict = Literal["PRESENT", "LACKING", "NA"]
VERDICTS: tuple[str, ...] = ("PRESENT", "LACKING", "NA")
Status = Literal["success", "failure", "excluded", "unknown"]
Source = Literal["system", "user", "agent", "tool", "environment"]

_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


class ToolCall(BaseModel):
    """One tool call made in a step (arguments kept as given: dict or JSON string)."""

    id: str | None = None
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class Step(BaseModel):
    """One message of the trajectory; `index` is what the labeller cites as `[S<index>]`."""

    index: int
    source: Source
    message: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    result_of: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    meta: dict[str, Any] = Field(default_factory=dict)


class Outcome(BaseModel):
    """How the run ended. Never shown to the labeller."""

    reward: float | None = None
    success: bool | None = None
    status: Status = "unknown"
    exclusion_reason: str | None = None


class TaskContext(BaseModel):
    """What the agent was asked and the rules it worked under (shown to the labeller)."""

    instruction: str | None = None
    policy: str | None = None
    tools: list[str] = Field(default_factory=list)
    domain: str | None = None


class GroundTruth(BaseModel):
    """Capability ground truth from a trace_gym verifier (`verification` of an episode)."""

    required: list[str] = Field(default_factory=list)
    lacking: list[str] = Field(default_factory=list)


class Trajectory(BaseModel):
    """One agent run on one task, in the normalised schema."""

    traj_id: str
    task_id: str
    trial: int | None = None
    source_format: str
    source_path: str
    agent: str | None = None
    outcome: Outcome = Field(default_factory=Outcome)
    task: TaskContext = Field(default_factory=TaskContext)
    steps: list[Step] = Field(default_factory=list)
    ground_truth: GroundTruth | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)

    @property
    def usable(self) -> bool:
        """True when the outcome is known and the run is not excluded."""
        return self.outcome.status in ("success", "failure")


class Capability(BaseModel):
    """One candidate capability: what a user edits in `capabilities.json`."""

    model_config = ConfigDict(extra="ignore")

    name: str
    definition: str
    present_when: str = ""
    lacking_when: str = ""
    na_when: str = ""
    examples: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _snake_case(cls, value: str) -> str:
        if not _SNAKE.match(value):
            raise ValueError(f"capability name {value!r} is not snake_case (e.g. 'multi_step')")
        return value


class Evidence(BaseModel):
    """A pointer into the rendered transcript: the step, who wrote it, a verbatim quote.

    `speaker` is what the labeller believes wrote the step; it is checked against the step's
    real speaker, so text that only looks like the agent's cannot pass as the agent's."""

    step: int
    speaker: Source
    quote: str = Field(max_length=300)


class CapabilityLabel(BaseModel):
    """The labeller's verdict for one capability on one trajectory."""

    capability: str
    verdict: Verdict
    evidence: list[Evidence] = Field(default_factory=list)
    rationale: str = Field(default="", max_length=600)


class LabelResponse(BaseModel):
    """Structured output of one labelling call: every capability exactly once."""

    labels: list[CapabilityLabel]


class ProposedCapabilities(BaseModel):
    """Structured output of a proposal call."""

    capabilities: list[Capability]


# ---------------------------------------------------------------------------
# Label runs: what a labeller (LLM or ground truth) produces and analyze reads
# ---------------------------------------------------------------------------
LISTS = (
    "lacking_failed",
    "present_failed",
    "na_failed",
    "lacking_passed",
    "present_passed",
    "na_passed",
)
RUN_FORMAT = "trace_diagnose.labels.v1"


@dataclass
class LabelRun:
    """One labelling pass: verdicts per capability and trajectory, outcomes, exclusions."""

    attempt: int
    failed: list[str]
    passed: list[str]
    labels: dict[str, dict[str, str]]  # capability -> trajectory id -> PRESENT/LACKING/NA
    unlabelled: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, str] = field(default_factory=dict)  # trajectory id -> task id
    # trajectory id -> why it is in the flagged bucket (instruction-like text, withheld text)
    flagged: dict[str, str] = field(default_factory=dict)
    # unlabelled trajectory id -> its outcome ("failure" / "success"): losing failures biases
    # the contrast, so the limits and the sensitivity analysis count them apart
    unlabelled_outcomes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The run in the paper's layout, plus our extra keys."""
        failed, passed = set(self.failed), set(self.passed)
        labels = {}
        for cap, verdicts in self.labels.items():
            lists: dict[str, list[str]] = {k: [] for k in LISTS}
            for tid in self.failed + self.passed:
                verdict = verdicts.get(tid)
                if verdict is None:
                    continue
                side = "failed" if tid in failed else "passed"
                lists[f"{verdict.lower()}_{side}"].append(tid)
            labels[cap] = lists
        return {
            "format": RUN_FORMAT,
            "attempt": self.attempt,
            "totals": {"total_failed": len(failed), "total_passed": len(passed)},
            "labels": labels,
            "unlabelled": self.unlabelled,
            "unlabelled_outcomes": self.unlabelled_outcomes,
            "flagged": self.flagged,
            "tasks": self.tasks,
            "evidence": self.evidence,
        }
