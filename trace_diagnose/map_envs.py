"""map-envs: selected capabilities -> trace_gym environment ids from `envs_registry.yaml`.

Public API::

    default_registry_path() -> Path
    load_registry(path) -> list[dict]
    await map_envs(capabilities, registry_path=None, client=None) -> list[dict]

Declared matches come first: a capability whose name equals an environment's `capability`
or appears in its `tags` maps to that environment ("tag"). Otherwise, given an LLM client,
the model chooses from the enum of existing ids plus "none" (a JSON-schema enum, checked
again locally), with a rationale ("llm"). Anything left is reported as "needs a new
environment". Ids are always read from the registry, never hard-coded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import ConfigError
from .llm import LLMClient, run_bounded
from .schema import Capability

NONE = "none"


class EnvChoice(BaseModel):
    """Structured output of a matching call."""

    env_id: str
    rationale: str = ""


def default_registry_path() -> Path:
    """The repository's envs_registry.yaml next to the package (a source checkout), else the
    copy shipped inside the installed trace_gym package (located without importing it)."""
    beside = Path(__file__).resolve().parent.parent / "envs_registry.yaml"
    if beside.is_file():
        return beside
    import importlib.util

    spec = importlib.util.find_spec("trace_gym")
    if spec is not None and spec.submodule_search_locations:
        shipped = Path(next(iter(spec.submodule_search_locations))) / "envs_registry.yaml"
        if shipped.is_file():
            return shipped
    return beside


def load_registry(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Read the registry's environments (id, capability, description, tags) with pyyaml."""
    import yaml

    path = Path(path) if path else default_registry_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the environment registry ({exc})") from exc
    envs = data.get("environments") if isinstance(data, dict) else None
    if not isinstance(envs, list):
        raise ConfigError(f"{path}: expected an 'environments' list")
    for i, env in enumerate(envs):
        if not isinstance(env, dict) or "id" not in env:
            raise ConfigError(f"{path}: environment {i} has no 'id'")
    return envs


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def match_by_tags(cap: str, registry: list[dict[str, Any]]) -> list[str]:
    """Ids whose declared capability or tags name this capability."""
    key = _norm(cap)
    return [
        env["id"]
        for env in registry
        if key == _norm(str(env.get("capability", "")))
        or key in {_norm(str(t)) for t in env.get("tags") or []}
    ]


def _choice_messages(cap: Capability, registry: list[dict[str, Any]]) -> list[dict[str, str]]:
    catalog = "\n".join(
        f"- {e['id']}: trains {e.get('capability', '?')}; {e.get('description', '')}; tags: {', '.join(map(str, e.get('tags') or []))}"
        for e in registry
    )
    system = (
        "You match a capability an AI agent lacks to the training environment that best trains it. "
        f'Choose exactly one id from the catalog, or "{NONE}" when no environment trains this capability well. '
        'Answer with JSON only: {"env_id": "...", "rationale": "one sentence"}.'
    )
    user = f"Capability: {cap.name}\nDefinition: {cap.definition}\n\nCatalog:\n{catalog}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def map_envs(
    capabilities: list[Capability],
    registry_path: str | Path | None = None,
    client: LLMClient | None = None,
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    """Match each capability to environment ids; see the module docstring for the order."""
    registry = load_registry(registry_path)
    ids = [e["id"] for e in registry]
    out: list[dict[str, Any]] = []
    pending: list[tuple[int, Capability]] = []
    for cap in capabilities:
        tagged = match_by_tags(cap.name, registry)
        if tagged:
            out.append(
                {
                    "capability": cap.name,
                    "env_ids": tagged,
                    "method": "tag",
                    "needs_new_environment": False,
                    "rationale": f"declared in envs_registry.yaml (capability or tags of {', '.join(tagged)})",
                }
            )
        else:
            out.append(
                {
                    "capability": cap.name,
                    "env_ids": [],
                    "method": "none",
                    "needs_new_environment": True,
                    "rationale": "no environment declares this capability"
                    + ("" if client else "; no LLM given for matching"),
                }
            )
            pending.append((len(out) - 1, cap))
    if client is None or not pending or not ids:
        return out
    schema = EnvChoice.model_json_schema()
    schema["properties"]["env_id"]["enum"] = ids + [NONE]

    def check(choice: EnvChoice) -> str | None:
        return (
            None
            if choice.env_id in ids or choice.env_id == NONE
            else f"env_id must be one of {json.dumps(ids + [NONE])}"
        )

    jobs = [
        lambda c=c: client.structured(
            "map_envs", _choice_messages(c, registry), EnvChoice, validate=check, json_schema=schema
        )
        for _, c in pending
    ]
    results = await run_bounded(
        jobs, client.config.concurrency, "map-envs", show_progress, client.budget
    )
    for (i, _), res in zip(pending, results, strict=True):
        if res.value is None:
            out[i]["rationale"] += f"; LLM matching failed: {res.error}"
        elif res.value.env_id != NONE:
            out[i].update(
                env_ids=[res.value.env_id],
                method="llm",
                needs_new_environment=False,
                rationale=res.value.rationale,
            )
        else:
            out[i].update(method="llm", rationale=f"needs a new environment: {res.value.rationale}")
    return out
