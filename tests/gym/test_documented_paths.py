"""Every ``trace_gym.<module>[.<name>]`` the README and docs/ name exists.

Modules move (issue 28 split trace_gym into library and tooling folders); a page that still
names the old path sends a reader to an ImportError. ``trace_gym.episode.v1`` is the episode
log's format name, not a module."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# a dotted trace_gym path not inside another dotted name (``info.trace_gym.isolation`` is a key)
PATH = re.compile(r"(?<![\w.])trace_gym((?:\.[A-Za-z_]\w*)+)(?::([A-Za-z_]\w*))?")
NOT_PATHS = {"trace_gym.episode.v1"}
PACKAGE = Path(importlib.import_module("trace_gym").__file__).resolve().parent


def documented_paths() -> list[tuple[str, str]]:
    found = set()
    for page in PAGES:
        for match in PATH.finditer(page.read_text(encoding="utf-8")):
            dotted = "trace_gym" + match.group(1)
            if dotted not in NOT_PATHS:
                found.add((page.name, dotted + (f":{match.group(2)}" if match.group(2) else "")))
    return sorted(found)


def resolve(path: str) -> object:
    """Import the longest module prefix of ``path`` and look the rest up as attributes."""
    dotted, _, attribute = path.partition(":")
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        # an editable install of another checkout can still serve a module deleted here
        if PACKAGE not in Path(target.__file__).resolve().parents:
            raise ModuleNotFoundError(f"{target.__name__} is not in {PACKAGE}")
        for name in [*parts[cut:], *([attribute] if attribute else [])]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(path)


def test_the_pages_name_trace_gym_paths():
    assert len(documented_paths()) > 10  # the pattern still finds them


@pytest.mark.parametrize(("page", "path"), documented_paths())
def test_a_documented_path_exists(page, path):
    try:
        resolve(path)
    except ImportError as exc:
        if "pip install 'trace-rl[" in str(exc):  # an extra this install lacks (serve, ...)
            pytest.skip(str(exc))
        pytest.fail(f"{page} names {path}, which does not exist ({exc})")
    except AttributeError as exc:
        pytest.fail(f"{page} names {path}, which does not exist ({exc})")
