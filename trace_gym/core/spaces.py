"""A text space that accepts what LLMs write.

``gymnasium.spaces.Text`` checks every character against a charset whose default has no
space, so ``"hello world"`` is not in it, and its ``min_length`` defaults to 1. LLM actions
and observations are arbitrary Unicode, possibly empty: :class:`AnyText` accepts any ``str``
up to ``max_length``. Sampling (used by ``check_env``) draws printable ASCII.

With vector environments use ``AsyncVectorEnv(..., shared_memory=False)``: shared memory
stores charset indices and crashes on characters outside the charset.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces


class AnyText(spaces.Text):
    """Any Python ``str`` of length ``0..max_length``.

    >>> AnyText(100).contains("café au lait ☕")
    True
    """

    def __init__(self, max_length: int = 100_000, *, seed: int | None = None) -> None:
        super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length
