"""tau2-bench `Results`: one JSON file, or `results.json` + a `simulations/` folder.

Success is tau2's own rule, `|reward - 1| <= 1e-6`. Runs that ended in
`infrastructure_error` or `user_error`, or whose review flags a critical user-simulator
error, are excluded with the reason. The domain policy and the tool names become the task
context the labeller sees; `reward_info`, `review` and task `evaluation_criteria` never do.
Trajectory ids are `<domain>:<task_id>` (the paper's ids), with `#<trial>` when a task has
several trials. Voice / tick-based (full-duplex) simulations have no message transcript: they
are skipped as unsupported, with the reason, like any malformed simulation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import IngestError
from ..schema import Outcome, Step, TaskContext, ToolCall, Trajectory
from .common import Skips, content_text, load_json, parse_arguments, require

FORMAT = "tau2"
EXCLUDED_TERMINATIONS = {"infrastructure_error", "user_error"}
_ROLE_TO_SOURCE = {"system": "system", "user": "user", "assistant": "agent", "tool": "tool"}


def read(path: Path, skips: Skips | None = None) -> list[Trajectory]:
    """Read tau2 results from a single file or from a results directory."""
    skips = skips or Skips(strict=True)
    if path.is_dir():
        return _read_dir(path, skips)
    data = load_json(path)
    if not isinstance(data, dict):
        raise IngestError(f"{path}: tau2 results must be a JSON object")
    sims = data.get("simulations")
    if not sims and (data.get("simulation_index") or (path.parent / "simulations").is_dir()):
        return _read_dir(path.parent, skips)
    if not isinstance(sims, list):
        raise IngestError(f"{path}: tau2 results have no 'simulations' list")
    return _convert(data, [(f"{path}: simulation {i}", s) for i, s in enumerate(sims)], path, skips)


def _read_dir(folder: Path, skips: Skips) -> list[Trajectory]:
    """`results.json` plus one file per simulation. The `simulation_index` is optional (tau2's
    own loader reads every file in `simulations/` without it)."""
    results = folder / "results.json"
    if not results.is_file():
        raise IngestError(f"{folder}: tau2 directory layout needs results.json")
    data = load_json(results)
    if not isinstance(data, dict):
        raise IngestError(f"{results}: tau2 results must be a JSON object")
    index = data.get("simulation_index")
    if isinstance(index, list):
        paths = []
        for entry in index:
            sim_id = entry.get("id") if isinstance(entry, dict) else None
            if sim_id is None:
                skips.skip(f"{results}: simulation_index entry without an 'id'")
                continue
            paths.append(folder / "simulations" / f"{sim_id}.json")
    else:
        paths = sorted((folder / "simulations").glob("*.json"))
    sims = []
    for sim_path in paths:
        if not sim_path.is_file():
            skips.skip(f"{results}: simulation listed but {sim_path} is missing")
            continue
        try:
            sims.append((str(sim_path), load_json(sim_path)))
        except IngestError as exc:
            skips.skip(str(exc))
    return _convert(data, sims, folder, skips)


def _unsupported(sim: dict[str, Any]) -> str | None:
    """Why a simulation cannot be rendered as a transcript, if it cannot."""
    mode = sim.get("mode")
    if (mode not in (None, "half_duplex")) or (sim.get("ticks") and not sim.get("messages")):
        return f"voice / tick-based simulation (mode={mode or 'ticks'}) is not supported"
    return None


def _convert(
    data: dict[str, Any], entries: list[tuple[str, Any]], path: Path, skips: Skips
) -> list[Trajectory]:
    info = data.get("info") or {}
    env_info = info.get("environment_info") or {}
    domain = env_info.get("domain_name") or "tau2"
    policy = env_info.get("policy")
    tools = [_tool_name(t) for t in env_info.get("tool_defs") or []]
    agent = (info.get("agent_info") or {}).get("llm")
    sims = []
    for where, sim in entries:
        if not isinstance(sim, dict):
            skips.skip(f"{where}: not an object")
        elif reason := _unsupported(sim):
            skips.skip(f"{where}: {reason}")
        else:
            sims.append((where, sim))
    trials_per_task: dict[str, int] = {}
    for _, sim in sims:
        trials_per_task[str(sim.get("task_id"))] = (
            trials_per_task.get(str(sim.get("task_id")), 0) + 1
        )
    out = []
    for i, (where, sim) in enumerate(sims):
        with skips.guard(where):
            out.append(
                _trajectory(sim, i, where, path, domain, policy, tools, agent, trials_per_task)
            )
    return out


def _trajectory(
    sim: dict[str, Any],
    i: int,
    where: str,
    path: Path,
    domain: str,
    policy: str | None,
    tools: list[str],
    agent: str | None,
    trials_per_task: dict[str, int],
) -> Trajectory:
    """One simulation as a trajectory."""
    task_id = str(require(sim, "task_id", where))
    trial = sim.get("trial") if isinstance(sim.get("trial"), int) else None
    traj_id = f"{domain}:{task_id}"
    if trials_per_task[task_id] > 1:
        traj_id += f"#{trial if trial is not None else i}"
    steps = _steps(require(sim, "messages", where), where)
    return Trajectory(
        traj_id=traj_id,
        task_id=f"{domain}:{task_id}",
        trial=trial,
        source_format=FORMAT,
        source_path=str(path),
        agent=agent,
        outcome=_outcome(sim),
        task=TaskContext(
            instruction=next((s.message for s in steps if s.source == "user"), None),
            policy=policy,
            tools=tools,
            domain=domain,
        ),
        steps=steps,
        metrics={
            "termination_reason": sim.get("termination_reason"),
            "duration_s": sim.get("duration"),
            "agent_cost": sim.get("agent_cost"),
        },
    )


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        return str(fn.get("name", "?"))
    return str(tool)


def _outcome(sim: dict[str, Any]) -> Outcome:
    reason = sim.get("termination_reason")
    review = sim.get("review") if isinstance(sim.get("review"), dict) else {}
    if reason in EXCLUDED_TERMINATIONS:
        return Outcome(status="excluded", exclusion_reason=f"termination_reason={reason}")
    if review.get("critical_user_error"):
        return Outcome(status="excluded", exclusion_reason="review: critical user-simulator error")
    reward = (sim.get("reward_info") or {}).get("reward")
    if not isinstance(reward, (int, float)):
        return Outcome(status="excluded", exclusion_reason="no reward_info.reward")
    ok = abs(float(reward) - 1.0) <= 1e-6
    return Outcome(reward=float(reward), success=ok, status="success" if ok else "failure")


def _steps(messages: Any, where: str) -> list[Step]:
    if not isinstance(messages, list):
        raise IngestError(f"{where}: 'messages' must be a list")
    steps = []
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        source = _ROLE_TO_SOURCE.get(role)
        if source is None:
            raise IngestError(f"{where}: message {i} has unknown role {role!r}")
        calls = [
            ToolCall(
                id=tc.get("id"),
                name=str(tc.get("name")),
                arguments=parse_arguments(tc.get("arguments")),
            )
            for tc in msg.get("tool_calls") or []
        ]
        meta = {k: msg[k] for k in ("turn_idx", "requestor") if msg.get(k) is not None}
        steps.append(
            Step(
                index=i,
                source=source,
                message=content_text(msg.get("content")),
                tool_calls=calls,
                result_of=msg.get("id") if source == "tool" else None,
                is_error=bool(msg.get("error")),
                meta=meta,
            )
        )
    return steps


def looks_like(data: Any) -> bool:
    """True for a tau2 Results object (single-file or directory `results.json`)."""
    return isinstance(data, dict) and (
        ("simulations" in data and ("tasks" in data or "info" in data))
        or "simulation_index" in data
    )
