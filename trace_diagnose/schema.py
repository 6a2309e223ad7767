"""The normalised data model every stage shares.

`Trajectory` is what ingest produces from any format (ATIF-aligned step names, see
`research/diagnose.md` section 2.9). `Capability` is one entry of the editable
`capabilities.json`. `CapabilityLabel` / `LabelResponse` are the structured output the
labeller must return; pydantic validates them before anything is stored.

Outcome fields (`Trajectory.outcome`, `Trajectory.ground_truth`) are never rendered into a
labelling prompt: `render.py` reads only `task` and `steps`.
"""

from __future__ import annotations

import re
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
    """A pointer into the rendered transcript: step index and a verbatim quote."""

    step: int
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
