"""Golden task hashes: a seed keeps meaning the same task in every released environment.

The table is ``golden_hashes.json`` (environment, difficulty, seeds, expected hashes on the
train split; a hash is the full sha256 or its first 16 hex digits).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_gym.testing import task_hashes

TABLE = json.loads((Path(__file__).with_name("golden_hashes.json")).read_text())["rows"]


@pytest.mark.parametrize(
    "row", TABLE, ids=[f"{r['env_id'].removeprefix('trace/')}@{r['difficulty']}" for r in TABLE]
)
def test_golden_task_hashes(row: dict) -> None:
    got = task_hashes(row["env_id"], row["seeds"], row["difficulty"])
    assert [h[: len(want)] for h, want in zip(got, row["hashes"], strict=True)] == row["hashes"]


def test_table_covers_every_hand_written_environment_family() -> None:
    ids = {r["env_id"] for r in TABLE}
    assert len(ids) == 15 and all(len(r["hashes"]) == len(r["seeds"]) >= 2 for r in TABLE)
