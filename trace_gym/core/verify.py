"""Verification results: named, weighted checks with expected vs actual, plus hard gates.

* ``passed`` is True when every hard check and every gate passed.
* ``score`` is the weighted mean of check scores (weight 0 makes a check diagnostic only),
  and 0 when any gate (a "minefield": a forbidden write, a call in an abstain task) tripped,
  so partial credit cannot be farmed around a forbidden action.
* ``decided`` is False when the episode reached no decision (no state-changing call, no
  refusal, no final answer the task asks for). Process credit (read before acting, asked a
  question, diagnosed an error) only counts once a decision is made, so an undecided episode
  scores 0: otherwise a policy learns to read and stall.
* every check names the ``capability`` it exercises; the composite benchmark's ground truth
  (which capabilities a failed episode lacked) is read off the failed hard checks and gates.

Verifiers are pure functions of (task, episode); they must not mutate the world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

REWARD_MODES = ("binary", "partial", "shaped")
"""``binary``: 1 if passed else 0. ``partial``: the gated score. ``shaped``: per-step
increments of the in-progress score that add up to the final partial score."""


@dataclass(frozen=True)
class Check:
    """One verifier check. ``score`` in [0, 1]; passed means ``score == 1``."""

    name: str
    capability: str
    score: float
    weight: float = 1.0
    hard: bool = True
    gate: bool = False
    expected: Any = None
    actual: Any = None
    message: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.score) and 0.0 <= self.score <= 1.0):
            raise ValueError(f"check {self.name!r}: score must be in [0, 1], got {self.score}")
        if self.weight < 0:
            raise ValueError(f"check {self.name!r}: weight must be >= 0, got {self.weight}")

    @property
    def passed(self) -> bool:
        return self.score >= 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "capability": self.capability,
            "weight": self.weight,
            "score": self.score,
            "passed": self.passed,
            "hard": self.hard,
            "gate": self.gate,
            "expected": self.expected,
            "actual": self.actual,
            "message": self.message,
        }


@dataclass(frozen=True)
class Verification:
    """The verdict on one episode."""

    checks: tuple[Check, ...]
    required_capabilities: tuple[str, ...] = field(default=())
    decided: bool = True

    @property
    def gated(self) -> bool:
        return any(c.gate and not c.passed for c in self.checks)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks if c.hard or c.gate)

    @property
    def score(self) -> float:
        if self.gated or not self.decided:
            return 0.0
        total = sum(c.weight for c in self.checks)
        if total <= 0:
            return 1.0 if self.passed else 0.0
        return sum(c.weight * c.score for c in self.checks) / total

    @property
    def lacking_capabilities(self) -> tuple[str, ...]:
        failed = {c.capability for c in self.checks if (c.hard or c.gate) and not c.passed}
        return tuple(sorted(failed))

    def check(self, name: str) -> Check:
        """The check called ``name`` (KeyError when absent)."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def reward(self, mode: str) -> float:
        """The final reward under ``mode`` (``binary`` or ``partial``/``shaped``)."""
        if mode == "binary":
            return 1.0 if self.passed else 0.0
        if mode in ("partial", "shaped"):
            return self.score
        raise ValueError(f"unknown reward mode {mode!r}; use one of {REWARD_MODES}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "score": self.score,
            "gated": self.gated,
            "decided": self.decided,
            "checks": [c.to_dict() for c in self.checks],
            "required_capabilities": list(self.required_capabilities),
            "lacking_capabilities": list(self.lacking_capabilities),
        }


def fraction(numerator: int, denominator: int) -> float:
    """``numerator / denominator`` with 0/0 read as complete (nothing was required)."""
    return 1.0 if denominator == 0 else numerator / denominator
