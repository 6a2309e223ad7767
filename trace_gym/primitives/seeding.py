"""Seeds, splits and our own sampling helpers.

Why not ``random`` or ``numpy.random.Generator``: Python only promises a stable stream for
``random.random()``, and NumPy's distribution methods carry no cross-release stream guarantee
(NEP 19). A seed must mean the same task on every machine and release, so tasks are drawn from
:class:`StableRNG`, a SplitMix64 bit generator with sampling helpers written here, whose
outputs are pinned by tests against fixed vectors.

Splits are seed-disjoint: the generator seed of a task is the SHA-256 of
``(env_id, split, seed)``, so ``train`` seed 7 and ``eval`` seed 7 are unrelated tasks, and
neighbouring seeds do not overlap (reasoning-gym's ``seed + idx`` does).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, TypeVar

from trace_gym.errors import ConfigError

T = TypeVar("T")

SPLITS = ("train", "eval", "test")
_MASK64 = (1 << 64) - 1
_TWO64 = 1 << 64
_GAMMA, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def check_split(split: str) -> str:
    """Return ``split`` if it is one of :data:`SPLITS`, else raise :class:`ConfigError`."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def check_difficulty(difficulty: Any) -> float:
    """Return ``difficulty`` as a float in [0, 1], else raise :class:`ConfigError`."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, int | float):
        raise ConfigError(f"difficulty must be a number in [0, 1], got {difficulty!r}")
    d = float(difficulty)
    if not 0.0 <= d <= 1.0:
        raise ConfigError(f"difficulty must be in [0, 1], got {difficulty!r}")
    return d


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the form that is hashed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def sha256_hex(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def derive_seed(*parts: Any) -> int:
    """A 64-bit seed from any JSON-able parts, stable across processes and machines."""
    return int.from_bytes(hashlib.sha256(canonical_json(list(parts)).encode()).digest()[:8], "big")


def task_generator_seed(env_id: str, split: str, seed: int, difficulty: float) -> int:
    """The generator seed of one task: disjoint across splits, envs and difficulties."""
    return derive_seed(
        "trace_gym.task", env_id, check_split(split), int(seed), round(difficulty, 6)
    )


class StableRNG:
    """SplitMix64 with sampling helpers; identical streams on every platform and release.

    >>> rng = StableRNG(42)
    >>> [rng.integer(1, 6) for _ in range(5)]
    [2, 2, 1, 1, 5]
    """

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = int(seed) & _MASK64

    def next_u64(self) -> int:
        """The next raw 64-bit output (SplitMix64, Steele et al. 2014)."""
        state = (self._state + _GAMMA) & _MASK64
        self._state = state
        z = ((state ^ (state >> 30)) * _MIX1) & _MASK64
        z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Uniform integer in ``[0, n)`` without modulo bias (rejection sampling)."""
        if n <= 0:
            raise ValueError(f"below() needs n >= 1, got {n}")
        # next_u64 inlined: task generation draws hundreds of these per reset
        limit = _TWO64 - (_TWO64 % n)
        state = self._state
        while True:
            state = (state + _GAMMA) & _MASK64
            z = ((state ^ (state >> 30)) * _MIX1) & _MASK64
            z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
            x = z ^ (z >> 31)
            if x < limit:
                self._state = state
                return x % n

    def integer(self, low: int, high: int) -> int:
        """Uniform integer in ``[low, high]`` (both inclusive)."""
        if high < low:
            raise ValueError(f"integer() needs low <= high, got {low}, {high}")
        return low + self.below(high - low + 1)

    def random(self) -> float:
        """Uniform float in ``[0, 1)`` with 53 random bits."""
        return (self.next_u64() >> 11) / float(1 << 53)

    def bernoulli(self, p: float) -> bool:
        """True with probability ``p``."""
        return self.random() < p

    def choice(self, items: Sequence[T]) -> T:
        """One element, uniformly."""
        if not items:
            raise ValueError("choice() from an empty sequence")
        return items[self.below(len(items))]

    def weighted_choice(self, items: Sequence[T], weights: Sequence[float]) -> T:
        """One element with probability proportional to its weight."""
        total = float(sum(weights))
        if len(items) != len(weights) or total <= 0:
            raise ValueError("weighted_choice() needs one positive weight per item")
        x = self.random() * total
        for item, w in zip(items, weights, strict=True):
            x -= w
            if x < 0:
                return item
        return items[-1]

    def shuffle(self, items: Sequence[T]) -> list[T]:
        """A shuffled copy (Fisher-Yates)."""
        out = list(items)
        below = self.below
        for i in range(len(out) - 1, 0, -1):
            j = below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        """``k`` distinct elements in random order."""
        if not 0 <= k <= len(items):
            raise ValueError(f"sample() of {k} from {len(items)} items")
        return self.shuffle(items)[:k]

    def token(self, alphabet: str, length: int) -> str:
        """A random string, e.g. an id suffix."""
        # below(len(alphabet)) per character, inlined: ids are drawn by the thousand
        n = len(alphabet)
        if length <= 0:
            return ""
        if n <= 0:
            raise ValueError("below() needs n >= 1, got 0")  # as the loop of below() said
        limit = _TWO64 - (_TWO64 % n)
        state = self._state
        out = []
        for _ in range(length):
            while True:
                state = (state + _GAMMA) & _MASK64
                z = ((state ^ (state >> 30)) * _MIX1) & _MASK64
                z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
                x = z ^ (z >> 31)
                if x < limit:
                    break
            out.append(alphabet[x % n])
        self._state = state
        return "".join(out)

    def child(self, *label: Any) -> StableRNG:
        """An independent stream for one part of generation (so parts do not shift each other)."""
        return StableRNG(derive_seed(self.next_u64(), *label))
