"""Where the test data lives: fixtures beside the tests, shared reference data beside the repo."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = (REPO / "../shared").resolve()
TRACE_SELECTION = SHARED / "reference" / "trace-selection"
TAU2_REAL = (
    SHARED / "reference" / "tau2-trajectories" / "tau2-bench_pr448_whissle_airline_run1.json"
)


def need(path: Path) -> Path:
    """Skip the test (with the reason) when shared reference data is absent."""
    if not path.exists():
        pytest.skip(
            f"shared reference data not found at {path} (expected ../shared beside the repo)"
        )
    return path
