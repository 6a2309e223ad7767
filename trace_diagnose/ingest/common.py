"""Helpers every reader shares: tolerant JSON loading with clear errors, content flattening,
and `Skips`, which decides whether a bad file, line or record aborts the ingest or is left out."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import IngestError

log = logging.getLogger("trace_diagnose")


class Skips:
    """Problems met while reading. `strict`: the first one raises `IngestError`; otherwise each
    is recorded in `items` (naming the file and line) and skipped; `warn()` logs them."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.items: list[str] = []

    def skip(self, reason: str) -> None:
        """Record a problem (or raise it when strict)."""
        if self.strict:
            raise IngestError(reason)
        self.items.append(reason)

    def warn(self) -> None:
        """Log one warning per skipped item."""
        for reason in self.items:
            log.warning("skipped %s", reason)

    @contextmanager
    def guard(self, where: str) -> Iterator[None]:
        """Run one record's conversion; a malformed record is skipped (or raised when strict)."""
        try:
            yield
        except IngestError as exc:
            self.skip(str(exc))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ()))
            self.skip(f"{where}: invalid field {field}: {first['msg']}")
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            # hostile shapes (a string where an object belongs, ...) get one line, not a traceback
            self.skip(f"{where}: malformed record ({type(exc).__name__}: {str(exc)[:120]})")


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


def load_jsonl(path: Path, skips: Skips | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Parse a JSON Lines file into (line number, object) pairs; blank lines are skipped, and
    broken lines go to `skips` (raised when it is None or strict)."""
    skips = skips or Skips(strict=True)
    try:
        # split on "\n" only: str.splitlines also breaks at U+2028, U+0085, ..., which JSON
        # strings may hold raw, and would cut a record in two
        lines = read_text(path).split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(f"{path}: cannot read as UTF-8 text ({exc})") from exc
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            skips.skip(f"{path}:{lineno}: broken JSON line: {exc.msg}")
            continue
        if not isinstance(obj, dict):
            skips.skip(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            continue
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
