"""trace_gym episode logs (`trace_gym.episode.v1`, see docs/episode_log.md).

One finished episode per JSONL line. Outcome is `is_success` / `final_reward`; the
verifier's `required_capabilities` and `lacking_capabilities` become `ground_truth`, which
the report compares with the labeller and `labels_from_ground_truth` turns into label runs.
trace_gym itself is never imported.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import IngestError
from ..schema import GroundTruth, Outcome, TaskContext, Trajectory
from .common import Skips, load_jsonl, require
from .openai_jsonl import steps_from_messages

FORMAT = "trace_gym"
FORMAT_TAG = "trace_gym.episode.v1"


def read(path: Path, skips: Skips | None = None) -> list[Trajectory]:
    """Read a trace_gym episode log (bad lines go to `skips`; raised when it is None)."""
    skips = skips or Skips(strict=True)
    out = []
    counts: dict[str, int] = {}
    for lineno, obj in load_jsonl(path, skips):
        where = f"{path}:{lineno}"
        with skips.guard(where):
            out.append(_episode(obj, where, path, counts))
    return out


def _episode(obj: dict, where: str, path: Path, counts: dict[str, int]) -> Trajectory:
    """One episode line as a trajectory."""
    if obj.get("format") != FORMAT_TAG:
        raise IngestError(f"{where}: expected format {FORMAT_TAG!r}, got {obj.get('format')!r}")
    task_id = str(require(obj, "task_id", where))
    steps = steps_from_messages(require(obj, "messages", where), where)
    verification = obj.get("verification")
    trial = counts.get(task_id, 0)
    counts[task_id] = trial + 1
    if not isinstance(verification, dict):
        outcome = Outcome(status="excluded", exclusion_reason="episode has no verification")
        truth = None
    else:
        ok = bool(require(obj, "is_success", where))
        reward = obj.get("final_reward")
        outcome = Outcome(
            reward=float(reward) if isinstance(reward, (int, float)) else None,
            success=ok,
            status="success" if ok else "failure",
        )
        truth = GroundTruth(
            required=list(verification.get("required_capabilities") or []),
            lacking=list(verification.get("lacking_capabilities") or []),
        )
    instruction = next((s.message for s in steps if s.source == "user"), None)
    tools = [t.get("function", {}).get("name", "?") for t in obj.get("tools") or []]
    return Trajectory(
        traj_id=f"{task_id}#{trial}",
        task_id=task_id,
        trial=trial,
        source_format=FORMAT,
        source_path=str(path),
        agent=obj.get("agent"),
        outcome=outcome,
        task=TaskContext(instruction=instruction, tools=tools, domain=obj.get("env_id")),
        steps=steps,
        ground_truth=truth,
        metrics={"turns": obj.get("turns"), "error_counts": obj.get("error_counts") or {}},
    )
