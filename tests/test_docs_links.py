"""Every relative link in README.md and docs/*.md leads somewhere.

A link or image whose target is a path (not ``http(s)://`` or ``mailto:``) must name a file or
folder that exists, resolved from the page that holds it; a ``#fragment`` on a Markdown page
must name one of that page's headings, slugged the way GitHub slugs them. Links inside fenced
code blocks and inline code are not links and are skipped. Pages move (the README was cut into
docs/ once), so a moved page's relative links are what this catches.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = ("http://", "https://", "mailto:")


def links(text: str) -> list[str]:
    """Link and image targets of a Markdown page, code left out."""
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    return LINK.findall(prose)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's slug on ``page``, with GitHub's ``-1``, ``-2`` for repeated ones."""
    seen: dict[str, int] = {}
    slugs = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The relative links of ``page`` that lead nowhere, each with the reason (paths shown
    from ``root``)."""
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if target.startswith(EXTERNAL):
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file {resolved.relative_to(root.resolve())}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(REPO)} has broken links"


def test_pages_are_found() -> None:
    """The check covers the README and the docs pages (a moved docs folder would skip it)."""
    assert (REPO / "README.md") in PAGES
    assert len(PAGES) > 5


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading: with `code`\n\ntext\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok too](there.md#a-heading-with-code) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](there.md#nope)\n"
        "```\n[in code](also-missing.md)\n```\n"
        "`[inline](inline-missing.md)` ![img](pic.png)\n"
    )
    found = broken_links(page, root=tmp_path)
    assert [entry.split(":")[0] for entry in found] == ["missing.md", "there.md#nope", "pic.png"]
