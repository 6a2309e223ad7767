"""The registry: which environment ids exist, and the one loader that turns them into rows.

A registry file maps each gymnasium id to the :class:`~trace_gym.core.spec.CapabilitySpec`
that is the environment, and says nothing else::

    version: 2
    environments:
      trace/precondition-v0: trace_gym.envs.precondition:SPEC

The spec is the registry row: an :class:`EnvEntry`'s capability, description, max turns and
tags are read from it, so they are written once. The package's file
(``trace_gym/envs_registry.yaml``) lists the shipped environments; each folder named by
``TRACE_GYM_PATH`` (separated by ``os.pathsep``, like ``PATH``) adds a ``registry.yaml`` of
the same form whose entry points name modules of that folder::

    my_envs/
      registry.yaml        # environments: {trace/loyalty-points-v0: loyalty_points:SPEC}
      loyalty_points.py    # SPEC = CapabilitySpec(...)

The folders are appended to ``sys.path``, so a module there never shadows an installed one;
``trace-gym synthesize --out my_envs`` writes such a folder.

:func:`register_envs` (``import trace_gym`` calls it) reads only the files and imports no
environment module: ``gym.make`` imports a spec's module on first use. :func:`load_registry`
and :func:`entry` import the modules to build rows. Registering is idempotent.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

from trace_gym.core.spec import CapabilitySpec
from trace_gym.errors import RegistryError, UnknownEnvError

PACKAGE_REGISTRY = Path(__file__).with_name("envs_registry.yaml")
REGISTRY_VERSION = 2
USER_PATH_VARIABLE = "TRACE_GYM_PATH"
USER_REGISTRY_FILE = "registry.yaml"


@dataclass(frozen=True)
class Listing:
    """One line of a registry file: an id, the ``module:SPEC`` it names, and where it is
    listed (``user_folder`` is the ``TRACE_GYM_PATH`` folder, None for other files)."""

    id: str
    entry_point: str
    registry: Path
    user_folder: Path | None = None

    def load_spec(self) -> CapabilitySpec:
        """Import the entry point's module and check that it names this id's spec."""
        module, _, name = self.entry_point.partition(":")
        where = f"{self.registry}: {self.id}"
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            raise RegistryError(f"{where}: cannot import {module!r} ({exc})") from exc
        if not hasattr(loaded, name):
            # a module whose import reaches load_registry before it defines its SPEC
            midway = getattr(getattr(loaded, "__spec__", None), "_initializing", False)
            reason = " yet: it is still being imported (an import cycle)" if midway else ""
            raise RegistryError(f"{where}: module {module!r} has no {name!r}{reason}")
        target = getattr(loaded, name)
        if not isinstance(target, CapabilitySpec):
            raise RegistryError(
                f"{where}: {self.entry_point} is a {type(target).__name__}, not a CapabilitySpec"
            )
        if target.id != self.id:
            raise RegistryError(f"{where}: {self.entry_point} is the spec of {target.id!r}")
        return target


@dataclass(frozen=True)
class EnvEntry:
    """A registry row: the listing plus what its spec says about the environment."""

    id: str
    entry_point: str
    capability: str
    description: str
    max_turns: int
    tags: tuple[str, ...]
    spec: CapabilitySpec
    registry: Path
    user_folder: Path | None = None

    @classmethod
    def from_listing(cls, listing: Listing) -> EnvEntry:
        spec = listing.load_spec()
        return cls(
            id=listing.id,
            entry_point=listing.entry_point,
            capability=spec.capability,
            description=spec.description,
            max_turns=int(spec.max_turns),
            tags=tuple(spec.tags),
            spec=spec,
            registry=listing.registry,
            user_folder=listing.user_folder,
        )

    def load_spec(self) -> CapabilitySpec:
        return self.spec

    def load_class(self) -> type:
        """The environment class gymnasium builds (the spec's engine class)."""
        return self.spec.env_class


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice is an error (YAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is listed twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_registry_file(path: str | Path, user_folder: Path | None = None) -> list[Listing]:
    """The listings of one registry file, checked (ids once each, entry points
    ``module:NAME``); no module is imported."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"cannot read environment registry {path}: {exc}") from exc
    environments = data.get("environments") if isinstance(data, dict) else None
    if isinstance(environments, list):  # the first format repeated each spec's fields
        raise RegistryError(
            f"{path}: 'environments' is a list of rows (registry version 1); since version "
            f"{REGISTRY_VERSION} it maps each id to its spec and nothing else, e.g. "
            "'environments: {trace/loyalty-points-v0: loyalty_points:SPEC}' (capability, "
            "description, max turns and tags come from the spec)"
        )
    if isinstance(data, dict) and data.get("version", REGISTRY_VERSION) != REGISTRY_VERSION:
        raise RegistryError(
            f"{path}: registry version {data['version']!r}; this trace_gym reads version "
            f"{REGISTRY_VERSION} (environments: {{id: module:SPEC}})"
        )
    if not isinstance(environments, dict):
        raise RegistryError(
            f"{path}: expected a top-level 'environments' mapping of id -> 'module:SPEC'"
        )
    listings = []
    for env_id, entry_point in environments.items():
        if not isinstance(env_id, str) or not isinstance(entry_point, str):
            raise RegistryError(f"{path}: {env_id!r}: expected 'id: module:SPEC' strings")
        module, _, name = entry_point.partition(":")
        if not module or not name:
            raise RegistryError(
                f"{path}: {env_id}: entry point must be 'module:SPEC', got {entry_point!r}"
            )
        listings.append(Listing(env_id, entry_point, path, user_folder))
    return listings


def user_folders() -> list[Path]:
    """The folders named by ``TRACE_GYM_PATH`` (empty entries ignored)."""
    raw = os.environ.get(USER_PATH_VARIABLE, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def _user_listings(folder: Path) -> list[Listing]:
    registry = folder / USER_REGISTRY_FILE
    if not registry.is_file():
        raise RegistryError(f"{USER_PATH_VARIABLE} folder {folder} has no {USER_REGISTRY_FILE}")
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    listings = read_registry_file(registry, user_folder=folder)
    for listing in listings:
        _check_not_shadowed(listing.entry_point.partition(":")[0], folder, registry)
    return listings


def _check_not_shadowed(module: str, folder: Path, registry: Path) -> None:
    top = module.split(".")[0]
    if not (folder / f"{top}.py").is_file() and not (folder / top).is_dir():
        raise RegistryError(f"{registry}: module {module!r} is not in {folder}")
    found = importlib.util.find_spec(top)
    origin = Path(found.origin).resolve() if found and found.origin else None
    if origin is not None and folder.resolve() not in origin.parents:
        raise RegistryError(
            f"{registry}: module name {top!r} is taken by {origin}; rename the module"
        )


def listings(
    path: str | Path | None = None, *, include_user_folders: bool | None = None
) -> list[Listing]:
    """Every listing, in file order: ``path`` (default: the package's registry), then, by
    default only with the package's registry, the ``TRACE_GYM_PATH`` folders'. An id listed
    twice is an error."""
    if include_user_folders is None:
        include_user_folders = path is None
    found = read_registry_file(PACKAGE_REGISTRY if path is None else path)
    if include_user_folders:
        for folder in user_folders():
            found += _user_listings(folder)
    seen: dict[str, Path] = {}
    for listing in found:
        if listing.id in seen:
            raise RegistryError(
                f"{listing.registry}: id {listing.id!r} is already registered by {seen[listing.id]}"
            )
        seen[listing.id] = listing.registry
    return found


def load_registry(
    path: str | Path | None = None, *, include_user_folders: bool | None = None
) -> list[EnvEntry]:
    """The registry's rows, built from their specs (this imports every listed module);
    arguments as for :func:`listings`."""
    return [
        EnvEntry.from_listing(listing)
        for listing in listings(path, include_user_folders=include_user_folders)
    ]


def register_envs(path: str | Path | None = None) -> list[str]:
    """Register every listed id with gymnasium (idempotent); return the ids. Imports no
    environment module: the defaults (max turns and the rest) are the spec's own."""
    ids = []
    for listing in listings(path):
        ids.append(listing.id)
        if listing.id in gym.registry:
            continue
        gym.register(
            id=listing.id,
            entry_point=listing.entry_point,
            nondeterministic=False,
            disable_env_checker=False,
        )
    return ids


def registered_ids() -> list[str]:
    """Every trace_gym id, in registry order (no environment module is imported)."""
    return [listing.id for listing in listings()]


def entry(env_id: str) -> EnvEntry:
    """The registry row of ``env_id`` (raises :class:`UnknownEnvError` with suggestions);
    imports that environment's module only."""
    found = listings()
    for listing in found:
        if listing.id == env_id:
            return EnvEntry.from_listing(listing)
    raise UnknownEnvError(env_id, [listing.id for listing in found])


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with a helpful error for unknown ids."""
    entry(env_id)
    return gym.make(env_id, **kwargs)
