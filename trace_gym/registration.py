"""Register every environment listed in ``envs_registry.yaml`` with gymnasium.

The YAML file at the repository root is the single list of environments; a copy ships
inside the package (``trace_gym/envs_registry.yaml``) so installed wheels find it too.
:func:`register_envs` is idempotent: ``import trace_gym`` calls it once, and calling it again
re-registers nothing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

from trace_gym import user_envs
from trace_gym.core.spec import CapabilitySpec
from trace_gym.errors import RegistryError, UnknownEnvError

PACKAGE_REGISTRY = Path(__file__).with_name("envs_registry.yaml")
REQUIRED_FIELDS = ("id", "capability", "entry_point", "max_turns", "description", "tags")


@dataclass(frozen=True)
class EnvEntry:
    """One row of ``envs_registry.yaml``."""

    id: str
    capability: str
    entry_point: str
    max_turns: int
    description: str
    tags: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Any:
        """What the entry point names: a :class:`CapabilitySpec` or an environment class."""
        module, _, name = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), name)

    def load_class(self) -> type:
        """The environment class (a spec's engine class when the entry point is a spec)."""
        target = self.load()
        return target.env_class if isinstance(target, CapabilitySpec) else target

    def load_spec(self) -> CapabilitySpec | None:
        """The entry point's spec (None for an environment class not built on one)."""
        target = self.load()
        if isinstance(target, CapabilitySpec):
            return target
        return getattr(target, "capability_spec", None)


def load_registry(path: str | Path | None = None) -> list[EnvEntry]:
    """Parse and check the registry file (default: the one shipped with the package)."""
    with_user_envs = path is None
    path = Path(path) if path is not None else PACKAGE_REGISTRY
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"cannot read environment registry {path}: {exc}") from exc
    rows = data.get("environments") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise RegistryError(f"{path}: expected a top-level 'environments' list")
    entries, seen = [], set()
    for i, row in enumerate(rows):
        missing = [f for f in REQUIRED_FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise RegistryError(f"{path}: environment #{i} lacks {missing}")
        if row["id"] in seen:
            raise RegistryError(f"{path}: duplicate id {row['id']!r}")
        if ":" not in str(row["entry_point"]):
            raise RegistryError(
                f"{path}: {row['id']}: entry_point must be 'module:SPEC' or 'module:Class'"
            )
        seen.add(row["id"])
        entries.append(
            EnvEntry(
                id=str(row["id"]),
                capability=str(row["capability"]),
                entry_point=str(row["entry_point"]),
                max_turns=int(row["max_turns"]),
                description=str(row["description"]),
                tags=tuple(str(t) for t in row["tags"]),
                kwargs=dict(row.get("kwargs") or {}),
            )
        )
    if with_user_envs:  # and the user environment folders named by TRACE_GYM_PATH
        entries += user_envs.user_entries({e.id for e in entries})
    return entries


def register_envs(path: str | Path | None = None) -> list[str]:
    """Register every listed environment with gymnasium (idempotent); return the ids."""
    ids = []
    for entry in load_registry(path):
        ids.append(entry.id)
        if entry.id in gym.registry:
            continue
        gym.register(
            id=entry.id,
            entry_point=entry.entry_point,
            kwargs={"max_turns": entry.max_turns, **entry.kwargs},
            nondeterministic=False,
            disable_env_checker=False,
        )
    return ids


def registered_ids() -> list[str]:
    """Every trace_gym id, in registry order."""
    return [e.id for e in load_registry()]


def entry(env_id: str) -> EnvEntry:
    """The registry row of ``env_id`` (raises :class:`UnknownEnvError` with suggestions)."""
    entries = load_registry()
    for e in entries:
        if e.id == env_id:
            return e
    raise UnknownEnvError(env_id, [e.id for e in entries])


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with a helpful error for unknown ids."""
    entry(env_id)
    return gym.make(env_id, **kwargs)
