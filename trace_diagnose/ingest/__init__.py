"""ingest: read trajectories in any supported format into the normalised schema.

Public API::

    ingest(paths, redact=None, *, fmt="auto", swebench_report=None, success_threshold=1.0)
        -> list[Trajectory]
    detect_format(path) -> list[tuple[Path, str]]

Formats (auto-detected, or forced with `fmt`): `tau2` (single results file, or a directory
with `results.json` + `simulations/`), `openai_jsonl`, `mini_swe_agent` (`*.traj.json`),
`swe_agent` (`*.traj`), `trace_gym` (episode logs). A directory is searched for files it
recognises. A SWE-bench report given as an input is used as `swebench_report`.

`redact` is a list of regular expressions; every match in step text, tool arguments and the
task context is replaced by `[REDACTED]` here, before any stage can send text to an LLM.
Trajectory ids are made unique across inputs by suffixing `@<hash of the source path>`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ..errors import IngestError, UnknownFormatError
from ..schema import Trajectory
from . import openai_jsonl, swe, tau2, trace_gym
from .common import Skips, load_json, uncompressed_name

FORMATS = ("tau2", "openai_jsonl", "mini_swe_agent", "swe_agent", "trace_gym")
REPORT = "swebench_report"
REDACTED = "[REDACTED]"


def detect_format(path: Path) -> list[tuple[Path, str]]:
    """Return (file or folder, format) pairs for a path; raise naming the file if unknown."""
    path = Path(path)
    if not path.exists():
        raise IngestError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "results.json").is_file() and (path / "simulations").is_dir():
            return [(path, "tau2")]
        found = []
        for child in sorted(path.rglob("*")):
            if child.is_file() and uncompressed_name(child).endswith((".json", ".jsonl", ".traj")):
                try:
                    found.extend(detect_format(child))
                except UnknownFormatError:
                    continue  # a folder may hold configs and preds next to trajectories
        if not found:
            raise UnknownFormatError(
                f"{path}: folder holds no trajectory file in a known format ({', '.join(FORMATS)})"
            )
        return found
    return [(path, _detect_file(path))]


def _detect_file(path: Path) -> str:
    name = uncompressed_name(path)  # `x.json.gz` / `x.jsonl.gz` are read gunzipped
    if name.endswith(".traj"):
        return "swe_agent"
    if name.endswith(".jsonl"):
        first = _first_jsonl_object(path)
        if first.get("format") == trace_gym.FORMAT_TAG:
            return "trace_gym"
        if "messages" in first:
            return "openai_jsonl"
        raise UnknownFormatError(
            f"{path}: JSONL lines are neither trace_gym episodes (format={trace_gym.FORMAT_TAG!r}) "
            "nor OpenAI chat records (a 'messages' list)"
        )
    if name.endswith(".json"):
        if name == "results.json" and (path.parent / "simulations").is_dir():
            return "tau2"  # the directory layout, given by its results file
        data = load_json(path)
        if tau2.looks_like(data):
            return "tau2"
        if swe.looks_like_report(data):
            return REPORT
        if (
            isinstance(data, dict)
            and isinstance(data.get("messages"), list)
            and ("trajectory_format" in data or "info" in data or name.endswith(".traj.json"))
        ):
            return "mini_swe_agent"
        if isinstance(data, dict) and ("trajectory" in data or "attempts" in data):
            return "swe_agent"
    raise UnknownFormatError(
        f"{path}: unrecognised trajectory format; expected one of {', '.join(FORMATS)} "
        "(or pass --format)"
    )


def _first_jsonl_object(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise IngestError(f"{path}:{lineno}: broken JSON line: {exc.msg}") from exc
                    if not isinstance(obj, dict):
                        raise UnknownFormatError(f"{path}:{lineno}: JSONL line is not an object")
                    return obj
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise IngestError(f"{path}: cannot read ({exc})") from exc
    raise IngestError(f"{path}: empty file")


def ingest(
    paths: list[str | Path] | str | Path,
    redact: list[str] | None = None,
    *,
    fmt: str = "auto",
    swebench_report: str | Path | None = None,
    success_threshold: float = 1.0,
    strict: bool = False,
    skipped: list[str] | None = None,
) -> list[Trajectory]:
    """Read every input into `Trajectory` objects (excluded ones included, with reasons).

    A file, line or record that cannot be read, or that repeats a trajectory id of the same
    input, is skipped with a warning naming it, and its reason appended to `skipped`;
    `strict=True` raises on the first one instead. When
    nothing at all could be read, the first problem is raised."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if fmt != "auto" and fmt not in FORMATS:
        raise IngestError(f"unknown --format {fmt!r}; choose auto or one of {', '.join(FORMATS)}")
    skips = Skips(strict)
    pairs: list[tuple[Path, str]] = []
    for p in paths:
        if fmt != "auto":
            pairs.append((Path(p), fmt))
            continue
        try:
            pairs.extend(detect_format(Path(p)))
        except IngestError as exc:
            if strict:
                raise
            skips.skip(str(exc))
    reports = [p for p, f in pairs if f == REPORT]
    if swebench_report is not None:
        reports.append(Path(swebench_report))
    if len(reports) > 1:
        raise IngestError(
            f"several SWE-bench reports given ({', '.join(map(str, reports))}); pass one"
        )
    report = swe.SweReport(reports[0] if reports else None)
    trajectories: list[Trajectory] = []
    for path, kind in pairs:
        try:
            trajectories.extend(_read(path, kind, report, success_threshold, skips))
        except IngestError as exc:
            if strict:
                raise
            skips.skip(str(exc))
    trajectories = _drop_duplicates(trajectories, skips)
    if skipped is not None:
        skipped.extend(skips.items)
    if not trajectories and skips.items:
        more = f" ({len(skips.items) - 1} more problems)" if len(skips.items) > 1 else ""
        raise IngestError(f"no trajectory could be read: {skips.items[0]}{more}")
    skips.warn()
    for t in trajectories:
        if t.usable and not any(s.message.strip() or s.tool_calls for s in t.steps):
            t.outcome = t.outcome.model_copy(
                update={"status": "excluded", "exclusion_reason": "empty trajectory: no messages"}
            )
    _make_ids_unique(trajectories)
    if redact:
        patterns = _compile(redact)
        trajectories = [redact_trajectory(t, patterns) for t in trajectories]
    return trajectories


def _read(
    path: Path, kind: str, report: swe.SweReport, threshold: float, skips: Skips
) -> list[Trajectory]:
    if kind == REPORT:
        return []
    if kind == "tau2":
        return tau2.read(path, skips)
    if kind == "openai_jsonl":
        return openai_jsonl.read(path, threshold, skips)
    if kind == "trace_gym":
        return trace_gym.read(path, skips)
    if kind == "mini_swe_agent":
        return swe.read_mini(path, report)
    if kind == "swe_agent":
        return swe.read_swe_agent(path, report)
    raise UnknownFormatError(f"{path}: no reader for format {kind!r}")


def _drop_duplicates(trajectories: list[Trajectory], skips: Skips) -> list[Trajectory]:
    """A trajectory id repeated within one input: the first is kept, the others are skipped
    with a warning (`--strict`: the ingest stops), like any other unreadable record."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for t in trajectories:
        key = (t.source_path, t.traj_id)
        if key in seen:
            skips.skip(f"{t.source_path}: duplicate trajectory id {t.traj_id!r}: kept the first")
            continue
        seen.add(key)
        kept.append(t)
    return kept


def _make_ids_unique(trajectories: list[Trajectory]) -> None:
    seen: dict[str, int] = {}
    for t in trajectories:
        seen[t.traj_id] = seen.get(t.traj_id, 0) + 1
    for t in trajectories:
        if seen[t.traj_id] > 1:
            # Same native id from two inputs: the source path disambiguates, stably.
            t.traj_id = f"{t.traj_id}@{hashlib.sha256(t.source_path.encode()).hexdigest()[:8]}"


def _compile(patterns: list[str]) -> list[re.Pattern[str]]:
    compiled = []
    for pat in patterns:
        try:
            compiled.append(re.compile(pat))
        except re.error as exc:
            raise IngestError(f"--redact {pat!r}: invalid regular expression ({exc})") from exc
    return compiled


def _scrub(value: Any, patterns: list[re.Pattern[str]]) -> Any:
    if isinstance(value, str):
        for pat in patterns:
            value = pat.sub(REDACTED, value)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, patterns) for v in value]
    return value


def redact_trajectory(traj: Trajectory, patterns: list[re.Pattern[str]]) -> Trajectory:
    """Return a copy with every regex match in text fields replaced by `[REDACTED]`."""
    data = traj.model_dump()
    data["steps"] = _scrub(data["steps"], patterns)
    data["task"] = _scrub(data["task"], patterns)
    return Trajectory.model_validate(data)
