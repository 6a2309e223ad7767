"""Where the test data lives: fixtures beside the tests, vendored public data in tests/data."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = REPO / "tests" / "data"
TRACE_SELECTION = DATA / "trace-selection"
TAU2_REAL = DATA / "tau2" / "tau2-bench_pr448_whissle_airline_run1.json.gz"


def need(path: Path) -> Path:
    """The path of vendored data; a missing file is a broken checkout, so the test fails."""
    assert path.exists(), f"vendored test data missing: {path} (see tests/data/PROVENANCE.md)"
    return path
