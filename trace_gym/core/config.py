"""Generator configs: the one way an environment applies ``reset(options={"config": ...})``.

Every environment's config is a frozen dataclass whose ``from_difficulty(d, overrides)`` maps
a difficulty to field values and then applies the user's overrides through
:func:`apply_overrides`, so an unknown key fails the same way everywhere (naming the key and
listing the known ones) and JSON lists become the tuples the dataclasses declare.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from trace_gym.errors import ConfigError

C = TypeVar("C")


def check_overrides(config_cls: type, overrides: dict[str, Any], what: str) -> None:
    """Raise :class:`ConfigError` when ``overrides`` has keys ``config_cls`` does not."""
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown {what} config field(s) {unknown}; known: {sorted(known)}")


def apply_overrides(base: C, overrides: dict[str, Any], what: str) -> C:
    """``base`` with ``overrides`` applied (validated again by the dataclass)."""
    check_overrides(type(base), overrides, what)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}  # type: ignore[arg-type]
    for key, value in overrides.items():
        values[key] = (
            tuple(value) if isinstance(values[key], tuple) and isinstance(value, list) else value
        )
    return type(base)(**values)
