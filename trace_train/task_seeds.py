"""Which train-split task seeds each training phase draws, disjoint by construction.

The warm start learns from oracle demonstrations and GRPO then trains on tasks of the same
environment's ``train`` split. Had both drawn seeds ``seed * 10^6 + i`` (as before), GRPO's
first groups would replay tasks the warm start had just been shown the answers to, and its
reward would partly measure recall. So the seed space is cut in two parts:

* the warm start's demonstration ``i`` plays seed ``seed * 10^6 + i``;
* GRPO's group ``i`` plays seed ``seed * 10^6 + 500_000 + i``.

A warm-start seed has ``task_seed mod 10^6 < 500_000`` and a GRPO seed ``>= 500_000``, whatever
``seed`` each run was given, so the two sets never meet (also across runs with different seeds),
as long as neither phase asks for more than 500,000 tasks (the configs reject that).
Each run records its part (:func:`record`) in ``trace_train.json``.
"""

from __future__ import annotations

from typing import Any

SEED_BLOCK = 1_000_000
"""Task seeds of one run seed: ``[seed * SEED_BLOCK, (seed + 1) * SEED_BLOCK)``."""
PART_SIZE = SEED_BLOCK // 2
"""Most tasks one phase may draw from a run seed's block."""
PARTS = {"warmstart": 0, "grpo": PART_SIZE}
"""Offset of each phase's part inside the block."""


def phase_seeds(phase: str, seed: int, count: int) -> list[int]:
    """The ``count`` train-split task seeds ``phase`` (``warmstart`` or ``grpo``) plays."""
    if phase not in PARTS:
        raise ValueError(f"phase={phase!r}; use one of {sorted(PARTS)}")
    if not 0 <= count <= PART_SIZE:
        raise ValueError(f"{phase} asks for {count} tasks; one run draws at most {PART_SIZE}")
    start = seed * SEED_BLOCK + PARTS[phase]
    return list(range(start, start + count))


def phase_of(task_seed: int) -> str:
    """Which phase's part a train-split task seed lies in."""
    return "warmstart" if task_seed % SEED_BLOCK < PART_SIZE else "grpo"


def record(phase: str, seed: int, count: int) -> dict[str, Any]:
    """What a run's record says about the tasks it trained on."""
    seeds = phase_seeds(phase, seed, count)
    return {
        "split": "train",
        "phase": phase,
        "run_seed": seed,
        "count": count,
        "first": seeds[0] if seeds else None,
        "last": seeds[-1] if seeds else None,
        "rule": (
            f"task_seed = run_seed * {SEED_BLOCK} + {PARTS[phase]} + i; warm start and GRPO "
            f"draw from disjoint halves of each {SEED_BLOCK}-seed block (trace_train.task_seeds)"
        ),
    }
