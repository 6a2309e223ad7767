"""Helpers every reader shares: tolerant JSON loading with clear errors, content flattening."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from ..errors import IngestError


def read_text(path: Path) -> str:
    """A file's UTF-8 text; a name ending in ``.gz`` is gunzipped (large result files)."""
    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return fh.read()
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise IngestError(f"{path}: not a valid gzip file ({exc})") from exc
    return path.read_text(encoding="utf-8")


def uncompressed_name(path: Path) -> str:
    """The file name without a trailing ``.gz`` (what decides its format)."""
    return path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name


def load_json(path: Path) -> Any:
    """Parse a JSON file, or raise `IngestError` naming the file, line and column."""
    try:
        text = read_text(path)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(
            f"{path}: broken JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc


def load_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Parse a JSON Lines file into (line number, object) pairs; blank lines are skipped."""
    try:
        lines = read_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: cannot read as UTF-8 text ({exc})") from exc
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(f"{path}:{lineno}: broken JSON line: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise IngestError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        rows.append((lineno, obj))
    return rows


def content_text(content: Any) -> str:
    """Flatten message content (str, list of parts, None) into plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if "text" in part:
                    parts.append(str(part["text"]))
                elif part.get("type") in ("image_url", "image", "input_image"):
                    parts.append("[image]")
                else:
                    parts.append(json.dumps(part, sort_keys=True))
        return "\n".join(parts)
    return json.dumps(content, sort_keys=True)


def require(obj: dict[str, Any], key: str, where: str) -> Any:
    """Return obj[key] or raise an `IngestError` saying which field is missing where."""
    if key not in obj:
        raise IngestError(f"{where}: missing required field {key!r}")
    return obj[key]


def parse_arguments(raw: Any) -> dict[str, Any] | str:
    """Tool-call arguments as a dict when they are JSON, else the raw string."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return {} if raw is None else str(raw)
