"""Render an HTML report in headless Chromium and record every network request it makes.

Tests call :func:`render` and skip (through :data:`needs_chromium`) where no Chromium is
installed; CI installs it (``.ci/run``). The page is loaded from a ``file://`` URL with a fresh
profile and Chromium's background services off, and the network log
(``--log-net-log``) lists every URL the page asked for, so a report that pulls a font, a
script or an image from the network is caught, not just one that says it would.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
LOCAL_SCHEMES = ("file:", "data:", "about:", "chrome:", "chrome-extension:", "blob:")


@dataclass
class Rendered:
    dom: str
    """The DOM after Chromium parsed and laid out the page (``--dump-dom``)."""
    urls: list[str]
    """Every URL in Chromium's network log while it loaded the page."""

    @property
    def external(self) -> list[str]:
        return [u for u in self.urls if not u.startswith(LOCAL_SCHEMES)]


def render(page: Path, workdir: Path) -> Rendered:
    netlog = workdir / "netlog.json"
    cmd = [
        CHROMIUM,
        *FLAGS,
        f"--user-data-dir={workdir / 'profile'}",
        f"--log-net-log={netlog}",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<html" in out.stdout[:300].lower(), out.stdout[:500]
    return Rendered(out.stdout, sorted(set(_netlog_urls(netlog))))


def _netlog_urls(path: Path) -> list[str]:
    """URLs of the requests the page made (Chromium's own services excluded).

    Chromium itself still asks a few Google services for the time or accounts; those start
    with ``initiator: "not an origin"``, whereas anything a ``file://`` page loads carries
    the page's (opaque, ``"null"``) origin.
    """
    assert path.exists(), f"chromium wrote no network log at {path}"
    text = path.read_text(errors="replace").rstrip().rstrip(",")
    if not text.endswith("}"):  # Chromium may exit before closing the JSON array
        text += "]}"
    log = json.loads(text)
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [
        e["params"]["url"]
        for e in log["events"]
        if e.get("type") == start_job
        and e.get("params", {}).get("initiator", "not an origin") != "not an origin"
    ]


def assert_self_contained(html: str, rendered: Rendered) -> None:
    """No script anywhere, no network request, no resource pointing off the page."""
    assert "<script" not in html.lower() and "<script" not in rendered.dom.lower()
    assert rendered.external == [], rendered.external
    resources = re.findall(
        r"""(?:src|srcset|poster|data)\s*=\s*["']?\s*(https?:|//)|url\(\s*["']?\s*(https?:|//)|@import""",
        html,
        re.I,
    )
    assert resources == [], resources
    links = re.findall(r"<link\b[^>]*>", html, re.I)
    assert all("http" not in link for link in links), links
