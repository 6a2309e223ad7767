"""The README's environment example runs and prints what its comments say.

The README shows what a step returns in comments beside the code; the example once named a
reservation id that a changed task generator no longer produced, and nothing noticed. This
runs the example (the first ``python`` block of the README's tour, which docs/environments.md
repeats) and checks each commented value against what it printed.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S)


def test_readme_environment_example_prints_what_it_says() -> None:
    example = python_blocks(REPO / "README.md")[0]
    assert 'gym.make("trace/precondition-v0"' in example
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md", "exec"), {"__name__": "readme_example"})
    lines = printed.getvalue().splitlines()
    opening = re.search(r"print\(obs\)  # (.*?) \.\.\.$", example, re.M).group(1)
    assert lines[0].startswith(opening)
    error = re.search(r'print\(info\["error"\]\)  # (.*)$', example, re.M).group(1)
    assert error in lines
    final = re.search(r'print\(reward, info\["decision"\]\)  # (\S+ \S+)', example).group(1)
    assert lines[-1] == final


def test_environments_page_repeats_the_readme_example() -> None:
    readme = python_blocks(REPO / "README.md")[0]
    assert readme in python_blocks(REPO / "docs" / "environments.md")
