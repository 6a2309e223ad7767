"""User environment folders: environments outside the package, registered like ours.

``TRACE_GYM_PATH`` lists folders (separated by ``os.pathsep``, like ``PATH``). Each holds a
``registry.yaml`` in the format of ``envs_registry.yaml`` whose entry points name a spec in a
module of that folder (``loyalty_points:SPEC``), and the modules themselves::

    my_envs/
      registry.yaml        # environments: [{id: trace/loyalty-points-v0, entry_point: ...}]
      loyalty_points.py    # SPEC = CapabilitySpec(...)

``import trace_gym`` registers them with gymnasium next to the shipped environments (the
folders are appended to ``sys.path``, so a module there never shadows an installed one), and
``gym.make("trace/loyalty-points-v0")`` imports the module on first use. ``trace-gym
synthesize --out my_envs`` writes such a folder.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from trace_gym.errors import RegistryError

PATH_VARIABLE = "TRACE_GYM_PATH"
REGISTRY_FILE = "registry.yaml"


def user_folders() -> list[Path]:
    """The folders named by ``TRACE_GYM_PATH`` (empty entries ignored)."""
    raw = os.environ.get(PATH_VARIABLE, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def user_entries(taken: set[str]) -> list:
    """Registry rows of every user folder; ``taken`` are ids already registered."""
    from trace_gym.registration import load_registry

    out = []
    for folder in user_folders():
        registry = folder / REGISTRY_FILE
        if not registry.is_file():
            raise RegistryError(f"{PATH_VARIABLE} folder {folder} has no {REGISTRY_FILE}")
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
        for row in load_registry(registry):
            if row.id in taken:
                raise RegistryError(f"{registry}: id {row.id!r} is already registered")
            module = row.entry_point.partition(":")[0]
            _check_not_shadowed(module, folder, registry)
            taken.add(row.id)
            out.append(row)
    return out


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
