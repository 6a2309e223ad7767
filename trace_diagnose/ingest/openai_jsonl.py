"""OpenAI chat-completions messages and the generic JSONL format built on them.

One JSON object per line::

    {"id"?: str, "task_id": str, "trial"?: int, "reward"?: float, "success"?: bool,
     "excluded"?: str, "messages": [...], "metadata"?: {...}}

Messages follow the Chat Completions shape (`system` / `developer` / `user` / `assistant` /
`tool`, plus the legacy `function_call` and `role: "function"`). Success is `success` when
given, else `reward >= success_threshold`; with neither the outcome is unknown and the line
is excluded from statistics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import IngestError
from ..schema import Outcome, Step, TaskContext, ToolCall, Trajectory
from .common import Skips, content_text, load_jsonl, parse_arguments, require

FORMAT = "openai_jsonl"
_ROLE_TO_SOURCE = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "agent",
    "tool": "tool",
    "function": "tool",
}


def steps_from_messages(messages: Any, where: str) -> list[Step]:
    """Convert OpenAI chat messages into steps (index = position in the list)."""
    if not isinstance(messages, list):
        raise IngestError(f"{where}: 'messages' must be a list")
    steps = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg:
            raise IngestError(f"{where}: message {i} has no 'role'")
        source = _ROLE_TO_SOURCE.get(msg["role"])
        if source is None:
            raise IngestError(f"{where}: message {i} has unknown role {msg['role']!r}")
        calls = [_tool_call(tc, f"{where}: message {i}") for tc in msg.get("tool_calls") or []]
        if msg.get("function_call"):
            fc = msg["function_call"]
            calls.append(
                ToolCall(name=str(fc.get("name")), arguments=parse_arguments(fc.get("arguments")))
            )
        text = content_text(msg.get("content"))
        steps.append(
            Step(
                index=i,
                source=source,
                message=text,
                reasoning=msg.get("reasoning_content") or None,
                tool_calls=calls,
                result_of=msg.get("tool_call_id"),
                tool_name=msg.get("name") if source == "tool" else None,
                is_error=source == "tool" and _looks_like_error(text),
            )
        )
    return steps


def _tool_call(raw: Any, where: str) -> ToolCall:
    if not isinstance(raw, dict):
        raise IngestError(f"{where}: tool call is not an object")
    fn = raw.get("function") if isinstance(raw.get("function"), dict) else raw
    if "name" not in fn:
        raise IngestError(f"{where}: tool call has no function name")
    return ToolCall(
        id=raw.get("id"), name=str(fn["name"]), arguments=parse_arguments(fn.get("arguments"))
    )


def _looks_like_error(text: str) -> bool:
    # trace_gym and many harnesses return tool errors as a JSON object with an "error" key.
    head = text.lstrip()[:40]
    return head.startswith('{"error"') or head.lower().startswith("error")


def outcome_from(reward: Any, success: Any, excluded: Any, threshold: float) -> Outcome:
    """Build an Outcome from optional reward / success / exclusion fields."""
    if excluded:
        return Outcome(status="excluded", exclusion_reason=str(excluded))
    reward_f = float(reward) if isinstance(reward, (int, float)) else None
    if isinstance(success, bool):
        ok = success
    elif reward_f is not None:
        ok = reward_f >= threshold - 1e-9
    else:
        return Outcome(reward=None, status="unknown", exclusion_reason="no reward or success field")
    return Outcome(reward=reward_f, success=ok, status="success" if ok else "failure")


def read(
    path: Path, success_threshold: float = 1.0, skips: Skips | None = None
) -> list[Trajectory]:
    """Read an OpenAI chat JSONL file.

    Lines without `id` or `trial` that repeat a `task_id` are attempts at the same task: they
    get an attempt index (`trial` 0, 1, ... in file order, id `<task_id>#<attempt>`), which is
    what contrastive analysis pairs on."""
    skips = skips or Skips(strict=True)
    rows = load_jsonl(path, skips)
    anonymous: dict[str, int] = {}
    for lineno, obj in rows:
        if not obj.get("id") and obj.get("trial") is None:
            key = str(obj.get("task_id", lineno))
            anonymous[key] = anonymous.get(key, 0) + 1
    attempts: dict[str, int] = {}
    out = []
    for lineno, obj in rows:
        where = f"{path}:{lineno}"
        with skips.guard(where):
            task_id = str(obj.get("task_id", obj.get("id", lineno)))
            trial = obj.get("trial")
            if not obj.get("id") and trial is None and anonymous.get(task_id, 0) > 1:
                trial = attempts.get(task_id, 0)
                attempts[task_id] = trial + 1
            steps = steps_from_messages(require(obj, "messages", where), where)
            native = str(obj.get("id") or (f"{task_id}#{trial}" if trial is not None else task_id))
            instruction = next((s.message for s in steps if s.source == "user"), None)
            out.append(
                Trajectory(
                    traj_id=native,
                    task_id=task_id,
                    trial=trial if isinstance(trial, int) else None,
                    source_format=FORMAT,
                    source_path=str(path),
                    agent=(obj.get("metadata") or {}).get("agent"),
                    outcome=outcome_from(
                        obj.get("reward"),
                        obj.get("success"),
                        obj.get("excluded"),
                        success_threshold,
                    ),
                    task=TaskContext(instruction=instruction),
                    steps=steps,
                )
            )
    return out
