"""mini-swe-agent (`*.traj.json`) and SWE-agent (`*.traj`) trajectories.

A mini-swe-agent run of a trace_gym repository environment (`trace_gym.integrations.
mini_swe_agent`) carries its verdict in `info.trace_gym`: the verifier's reward, pass/fail
and the capabilities its failed checks exercise, which become the outcome and the ground
truth (a harness `infra_error` excludes it). Otherwise the file does not say whether the
patch resolved the issue: the outcome is joined from a SWE-bench harness report (`{"resolved_ids": [...], "unresolved_ids": [...],
"empty_patch_ids": [...], "error_ids": [...]}`) passed as `swebench_report`. `error_ids`
are excluded (harness error); an instance missing from the report, or no report at all,
leaves the outcome unknown, which also keeps it out of the statistics.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import IngestError
from ..schema import GroundTruth, Outcome, Step, TaskContext, ToolCall, Trajectory
from .common import content_text, load_json, parse_arguments

MINI_FORMAT = "mini_swe_agent"
SWE_AGENT_FORMAT = "swe_agent"
_FENCE = re.compile(r"```(?:bash|sh)?\s*\n(.*?)```", re.DOTALL)


class SweReport:
    """Outcome lookup from a SWE-bench harness report file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.resolved: set[str] = set()
        self.failed: set[str] = set()
        self.errors: set[str] = set()
        if path is None:
            return
        data = load_json(path)
        if not looks_like_report(data):
            raise IngestError(f"{path}: not a SWE-bench report (no 'resolved_ids' list)")
        self.resolved = set(data.get("resolved_ids") or [])
        self.failed = set(data.get("unresolved_ids") or []) | set(data.get("empty_patch_ids") or [])
        self.errors = set(data.get("error_ids") or [])

    def outcome(self, instance_id: str) -> Outcome:
        """Outcome of one instance according to the report."""
        if self.path is None:
            return Outcome(
                status="unknown", exclusion_reason="no SWE-bench report given (--swebench-report)"
            )
        if instance_id in self.errors:
            return Outcome(status="excluded", exclusion_reason="SWE-bench harness error")
        if instance_id in self.resolved:
            return Outcome(reward=1.0, success=True, status="success")
        if instance_id in self.failed:
            return Outcome(reward=0.0, success=False, status="failure")
        return Outcome(status="unknown", exclusion_reason=f"{instance_id} not in {self.path.name}")


def looks_like_report(data: Any) -> bool:
    """True for a SWE-bench harness report."""
    return isinstance(data, dict) and isinstance(data.get("resolved_ids"), list)


def read_mini(path: Path, report: SweReport) -> list[Trajectory]:
    """Read one mini-swe-agent trajectory (v1 text or v2 tool-call messages)."""
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise IngestError(f"{path}: mini-swe-agent trajectory needs a 'messages' list")
    iid = str(data.get("instance_id") or path.name.removesuffix(".traj.json"))
    steps: list[Step] = []
    seen_task = False
    for i, msg in enumerate(data["messages"]):
        role = msg.get("role")
        text = content_text(msg.get("content"))
        extra = msg.get("extra") or {}
        if role == "assistant":
            steps.append(
                Step(
                    index=i,
                    source="agent",
                    message=text,
                    tool_calls=_mini_actions(msg, extra, text),
                )
            )
        elif role == "tool":
            steps.append(
                Step(
                    index=i,
                    source="tool",
                    message=text,
                    result_of=msg.get("tool_call_id"),
                    is_error=bool(extra.get("exception_info"))
                    or extra.get("returncode") not in (None, 0),
                )
            )
        elif role == "user" and seen_task:
            # In text mode the observations come back as user messages: they are the environment.
            steps.append(Step(index=i, source="environment", message=text))
        elif role in ("system", "user"):
            seen_task = seen_task or role == "user"
            steps.append(Step(index=i, source=role, message=text))
        elif role == "exit":
            # mini-swe-agent >= 1.x ends every run with an `exit` message (its exit status, and
            # the submission when there is one): how the run ended, shown as the environment.
            status = extra.get("exit_status") or "exit"
            steps.append(
                Step(index=i, source="environment", message=f"[run ended: {status}] {text}")
            )
        else:
            raise IngestError(f"{path}: message {i} has unknown role {role!r}")
    info = data.get("info") or {}
    return [_swe_trajectory(iid, path, MINI_FORMAT, steps, report, info)]


def _mini_actions(msg: dict[str, Any], extra: dict[str, Any], text: str) -> list[ToolCall]:
    # A mini-swe-agent message carries its commands in extra.actions, in tool_calls or in
    # fenced bash blocks of its text; the first of these that is present wins.
    if extra.get("actions"):
        return [
            ToolCall(
                id=a.get("tool_call_id"), name="bash", arguments={"command": a.get("command", "")}
            )
            for a in extra["actions"]
        ]
    if msg.get("tool_calls"):
        calls = []
        for tc in msg["tool_calls"]:
            fn = tc.get("function") or {}
            calls.append(
                ToolCall(
                    id=tc.get("id"),
                    name=str(fn.get("name", "bash")),
                    arguments=parse_arguments(fn.get("arguments")),
                )
            )
        return calls
    return [ToolCall(name="bash", arguments={"command": m.strip()}) for m in _FENCE.findall(text)]


def read_swe_agent(path: Path, report: SweReport) -> list[Trajectory]:
    """Read one SWE-agent `.traj` file (a RetryAgent file uses its chosen attempt)."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise IngestError(f"{path}: SWE-agent trajectory must be a JSON object")
    info = data.get("info") or {}
    if isinstance(data.get("attempts"), list) and data["attempts"]:
        chosen = info.get("best_attempt_idx", len(data["attempts"]) - 1)
        data = data["attempts"][chosen]
    if isinstance(data.get("trajectory"), list):
        steps = _steps_from_trajectory(data)
    elif isinstance(data.get("history"), list):
        steps = _steps_from_history(data["history"], path)
    else:
        raise IngestError(f"{path}: SWE-agent trajectory needs a 'trajectory' or 'history' list")
    iid = path.name.removesuffix(".traj")
    return [
        _swe_trajectory(iid, path, SWE_AGENT_FORMAT, steps, report, info or data.get("info") or {})
    ]


def _steps_from_trajectory(data: dict[str, Any]) -> list[Step]:
    history = [h for h in data.get("history") or [] if not h.get("is_demo")]
    task = next((content_text(h.get("content")) for h in history if h.get("role") == "user"), "")
    steps = [Step(index=0, source="user", message=task)]
    for entry in data["trajectory"]:
        thought = str(entry.get("thought") or "")
        action = str(entry.get("action") or "")
        steps.append(
            Step(
                index=len(steps),
                source="agent",
                message=thought,
                tool_calls=[ToolCall(name="bash", arguments={"command": action})] if action else [],
            )
        )
        steps.append(
            Step(
                index=len(steps), source="environment", message=str(entry.get("observation") or "")
            )
        )
    return steps


def _steps_from_history(history: list[Any], path: Path) -> list[Step]:
    """A `.traj` holding only the model's message history (no `trajectory` list): system and
    task first, then assistant turns (thought and action, or tool calls) and observations."""
    steps: list[Step] = []
    seen_task = False
    for i, h in enumerate(history):
        if not isinstance(h, dict):
            raise IngestError(f"{path}: history entry {i} is not an object")
        if h.get("is_demo"):
            continue
        role = h.get("role")
        text = content_text(h.get("content"))
        if role == "assistant":
            calls = [
                ToolCall(
                    id=tc.get("id"),
                    name=str((tc.get("function") or {}).get("name", "bash")),
                    arguments=parse_arguments((tc.get("function") or {}).get("arguments")),
                )
                for tc in h.get("tool_calls") or []
            ]
            if not calls and h.get("action"):
                calls = [ToolCall(name="bash", arguments={"command": str(h["action"]).strip()})]
            message = str(h.get("thought") or text)
            steps.append(Step(index=len(steps), source="agent", message=message, tool_calls=calls))
        elif role == "tool":
            steps.append(Step(index=len(steps), source="tool", message=text))
        elif role == "user" and seen_task:
            steps.append(Step(index=len(steps), source="environment", message=text))
        elif role in ("system", "user"):
            seen_task = seen_task or role == "user"
            steps.append(Step(index=len(steps), source=role, message=text))
        else:
            raise IngestError(f"{path}: history entry {i} has unknown role {role!r}")
    return steps


def _swe_trajectory(
    iid: str, path: Path, fmt: str, steps: list[Step], report: SweReport, info: dict[str, Any]
) -> Trajectory:
    stats = info.get("model_stats") or {}
    outcome, truth, domain = report.outcome(iid), None, None
    verdict = _trace_gym_verdict(info.get("trace_gym"))
    if verdict is not None:
        outcome, truth, domain = verdict
    tools = sorted({c.name for s in steps for c in s.tool_calls}) or ["bash"]
    return Trajectory(
        traj_id=iid,
        task_id=iid,
        source_format=fmt,
        source_path=str(path),
        agent=((info.get("config") or {}).get("model") or {}).get("model_name")
        if isinstance(info.get("config"), dict)
        else None,
        outcome=outcome,
        task=TaskContext(
            instruction=next((s.message for s in steps if s.source == "user"), None),
            tools=tools,
            domain=domain,
        ),
        steps=steps,
        ground_truth=truth,
        metrics={"exit_status": info.get("exit_status"), "cost_usd": stats.get("instance_cost")},
    )


def _trace_gym_verdict(data: Any) -> tuple[Outcome, GroundTruth, str | None] | None:
    """Outcome and ground truth from `info.trace_gym` (our verifier's), or None without one."""
    if not isinstance(data, dict) or not isinstance(data.get("verification"), dict):
        return None
    verification = data["verification"]
    truth = GroundTruth(
        required=list(verification.get("required_capabilities") or []),
        lacking=list(verification.get("lacking_capabilities") or []),
    )
    env_id = data.get("env_id") if isinstance(data.get("env_id"), str) else None
    if data.get("infra_error"):
        reason = f"trace_gym harness error: {data['infra_error']}"
        return Outcome(status="excluded", exclusion_reason=reason), truth, env_id
    ok = bool(data.get("is_success"))
    reward = data.get("final_reward")
    outcome = Outcome(
        reward=float(reward) if isinstance(reward, (int, float)) else None,
        success=ok,
        status="success" if ok else "failure",
    )
    return outcome, truth, env_id
