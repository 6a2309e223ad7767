"""The stages of ``trace run``, one function each, in the order they run::

    warmstart -> rollout-base -> diagnose -> select -> map-envs -> synthesize -> train
              -> compose -> evaluate -> rediagnose -> report

Each stage reads the run's config and what earlier stages recorded (``run.output(name)``),
writes into the run folder (``run_folder``), and returns what it produced; the driver
(``driver.run_pipeline``) records that in ``stages.json``. Helpers sit right under the stage
that uses them. The three packages are imported inside the stages, so each still installs
and works alone.

Diagnosis uses ``trace_diagnose`` with an LLM when ``llm`` is set. Without one, and with a
trace_gym target, the environment's own capability-tagged checks label the trajectories
(``trace_diagnose.diagnose_from_ground_truth``: a capability in ``lacking_capabilities`` is
LACKING, a required one PRESENT, others NA); the console and the report say so.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trace_train import distributed
from trace_train.pipeline.config import PLAIN_GRPO, PipelineError
from trace_train.pipeline.run_folder import Run, resolve_model

if TYPE_CHECKING:
    from trace_train.config import GRPORunConfig

Say = Callable[[str], None]
"""Where a stage reports progress (``print`` on the console, a list in tests)."""


def _evaluate(
    run: Run, policy: str, episodes: int, split: str, out: Path, label: str, seed_start: int = 0
) -> dict:
    """``policy`` on the target (``PipelineConfig.eval_config``); returns its summary."""
    from trace_train.evaluate import evaluate

    cfg = run.config.eval_config(policy, episodes, split, out, seed_start)
    return evaluate(cfg, label=label)


# ---------------------------------------------------------------------------------------------
# [0] warm start: teach the base model the tool-call format
# ---------------------------------------------------------------------------------------------
def stage_warmstart(run: Run, say: Say) -> dict[str, Any]:
    """Supervised LoRA on the target's oracle demonstrations, merged into ``base_model/``."""
    cfg = run.config
    if not cfg.train or cfg.trajectories:
        return {"skipped": "no training, or diagnosing given trajectories"}
    if cfg.warm_start_adapter:
        return _merge_stored(run, say)
    if not cfg.warm_start_on:
        return {"skipped": "warm start off (warmstart.demonstrations is 0)"}
    from trace_train.warmstart import train as warmstart

    base = resolve_model(cfg.model)
    result = warmstart(cfg.warmstart_config(model=base, out=run.path("warmstart")))
    merged = run.path("base_model")
    if distributed.is_main():
        _merge_adapter(base, result.adapter_dir, merged)
    distributed.barrier()  # the merged base exists before any process trains on it
    say(f"warm start: adapter merged into {merged}")
    return {"adapter": str(result.adapter_dir), "base_model": str(merged)}


def _merge_stored(run: Run, say: Say) -> dict[str, Any]:
    """The stored warm-start adapter, checked (its hash, the base weights it was trained on),
    merged into ``base_model/``."""
    from trace_train import stored_adapter

    base, adapter = resolve_model(run.config.model), Path(run.config.warm_start_adapter)
    try:
        record = stored_adapter.load(adapter, base)
    except stored_adapter.StoredAdapterError as err:
        raise PipelineError(f"warm_start_adapter: {err}") from None
    merged = run.path("base_model")
    if distributed.is_main():
        _merge_adapter(base, adapter, merged)
    distributed.barrier()
    say(f"warm start: stored adapter {adapter} ({record['sha256'][:12]}) merged into {merged}")
    return {"adapter": str(adapter), "stored": True, "sha256": record["sha256"],
            "rebuild": record.get("rebuild"), "base_model": str(merged)}  # fmt: skip


def restore_base_model(run: Run, say: Say) -> None:
    """Merge the warm-start adapter into ``base_model/`` again when a finished run folder
    lacks it: the merged base is the one large file of a run (0.5 GB for SmolLM2-135M), so a
    run folder committed to resume on another machine leaves it out, and the merge rebuilds it
    exactly from the adapter it recorded."""
    out = run.output("warmstart")
    if not run.done("warmstart") or "base_model" not in out:
        return
    merged, adapter = Path(out["base_model"]), Path(out.get("adapter") or "")
    if (merged / "config.json").exists():
        return
    if not (adapter / "adapter_config.json").exists():
        raise PipelineError(
            f"{merged}: the warm-started base is missing and so is its adapter {adapter}; "
            "rerun the warm start with --redo warmstart"
        )
    if distributed.is_main():
        _merge_adapter(resolve_model(run.config.model), adapter, merged)
    distributed.barrier()
    say(f"warm start: {merged} was missing; merged {adapter} into it again")


def _merge_adapter(base: str, adapter: Path, out: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.quiet import quiet

    with quiet():
        model = AutoModelForCausalLM.from_pretrained(base)
        merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
        merged.save_pretrained(out)
        AutoTokenizer.from_pretrained(base).save_pretrained(out)


# ---------------------------------------------------------------------------------------------
# [1] diagnose: the agent's trajectories -> the capabilities it lacks
# ---------------------------------------------------------------------------------------------
def stage_rollout_base(run: Run, say: Say) -> dict[str, Any]:
    """The diagnosed agent on the target's ``diagnose.split`` (or the given trajectories):
    seeds 0 ... of the eval split, or the GRPO part of the train split for ``grpo.seed``."""
    from trace_train import task_seeds

    cfg = run.config
    if cfg.trajectories:
        return {"trajectories": list(cfg.trajectories), "source": "given"}
    policy = cfg.diagnose.agent or f"hf:{run.base_model}"
    out, episodes, split = run.path("rollout-base"), cfg.diagnose.episodes, cfg.diagnose.split
    start = 0
    if split == "train":
        grpo_seed = cfg.grpo_config(model=cfg.model, env_id=cfg.target, out=run.dir).seed
        start = task_seeds.phase_seeds("grpo", grpo_seed, episodes)[0]
    summary = _evaluate(run, policy, episodes, split, out, "base agent", seed_start=start)
    rate = summary["overall"]["success_rate"]
    say(
        f"base agent ({policy}) on {cfg.target} ({split} split): success {rate:.0%} over {episodes}"
    )
    seeds = {"split": split, "first": start, "count": episodes}
    return {
        "trajectories": [str(out / "episodes.jsonl")],
        "policy": policy,
        "source": "rollout",
        "tasks": seeds,
    }


def stage_diagnose(run: Run, say: Say) -> dict[str, Any]:
    """trace_diagnose with the LLM, or the environment's capability-tagged checks. Either way
    the diagnosis also matches its core capabilities to environments (``env_matches.json``),
    which the map-envs stage reads."""
    import trace_diagnose as td

    cfg = run.config
    inputs = run.output("rollout-base")["trajectories"]
    out = run.path("diagnose")
    if cfg.llm:
        say(f"diagnosis: labelling with {cfg.llm} ({cfg.diagnose.label_runs} runs)")
        analysis = td.run_diagnosis(
            inputs, out, llm=_diagnosis_llm(run), n_runs=cfg.diagnose.label_runs
        )
        method = f"llm:{cfg.llm}"
    else:
        trajectories = td.ingest(inputs)
        if not any(t.ground_truth is not None for t in trajectories):
            raise PipelineError(
                "these trajectories carry no trace_gym ground truth; give --llm provider/model "
                "to diagnose them"
            )
        say(
            "diagnosis: no LLM configured, so the environment's own capability-tagged checks "
            "label the trajectories (ground truth, not an LLM's judgement)"
        )
        analysis = td.diagnose_from_ground_truth(trajectories, out)
        method = "ground_truth"
    say(f"diagnosis: core capabilities {analysis['core'] or 'none'}")
    return {"method": method, "core": analysis["core"], "report": str(out / "report.html")}


def _diagnosis_llm(run: Run) -> Any:
    import trace_diagnose as td

    cfg = run.config
    return td.LLMConfig(model=cfg.llm, api_base=cfg.llm_api_base, max_cost=cfg.diagnose.max_cost)


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


# ---------------------------------------------------------------------------------------------
# [2] environments: one per selected capability, matched or synthesised
# ---------------------------------------------------------------------------------------------
def stage_map_envs(run: Run, say: Say) -> dict[str, Any]:
    """Each selected capability -> a training environment other than the target, as the
    diagnosis matched it (registry tags, else its LLM, else lexical similarity)."""
    from trace_diagnose.run import RunDir

    selected = run.output("select")["selected"]
    matches_path = RunDir(run.path("diagnose")).env_matches
    if selected and not matches_path.is_file():
        raise PipelineError(
            f"{matches_path} is missing (a diagnosis from an earlier release); run the "
            "diagnosis again: trace run ... --redo diagnose"
        )
    matches = {m["capability"]: m for m in json.loads(matches_path.read_text())} if selected else {}
    plan = []
    for cap in selected:
        if cap not in matches:
            raise PipelineError(f"{matches_path} does not match {cap}; use --redo diagnose")
        envs = [e for e in matches[cap]["env_ids"] if e != run.config.target]
        plan.append({**matches[cap], "env_id": envs[0] if envs else None})
        say(f"map-envs: {cap} -> {envs[0] if envs else 'needs a new environment'}")
    run.path("map-envs.json").write_text(json.dumps(plan, indent=2))
    return {"plan": plan}


def stage_synthesize(run: Run, say: Say) -> dict[str, Any]:
    """An environment for every selected capability that has none: written by an LLM and
    kept only if every validation gate passes (``trace_gym.synthesis.synthesize``); without an LLM (or
    with training off) the synthesis requests are written for ``trace-gym synthesize``."""
    cfg = run.config
    plan = [dict(item) for item in run.output("map-envs").get("plan", [])]
    missing = [item for item in plan if item.get("env_id") is None]
    if not missing:
        return {"plan": plan, "environments": {}}
    llm = cfg.synthesize.llm or cfg.llm
    if not llm or not cfg.train:
        why = "no LLM is configured (set synthesize.llm or llm)" if not llm else "training is off"
        requests = {item["capability"]: _write_request(run, item["capability"]) for item in missing}
        for cap, path in requests.items():
            say(f"synthesize: {cap} has no environment and {why}; request written to {path}")
        return {"plan": plan, "environments": {
            cap: {"status": "requested", "request": str(path)} for cap, path in requests.items()
        }}  # fmt: skip
    from trace_gym.synthesis.synthesize import litellm_completion, synthesize

    complete = litellm_completion(llm, cfg.llm_api_base)
    done: dict[str, Any] = {}
    for item in missing:
        cap = item["capability"]
        say(f"synthesize: writing an environment for {cap} with {llm}")
        result = synthesize(
            cap,
            _definition(run, cap),
            run.environments,
            complete,
            model=llm,
            evidence=_evidence(run, cap),
            attempts=cfg.synthesize.attempts,
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
            use_environments(run.environments)
        outcome = result.env_id if result.accepted else f"rejected after {len(result.attempts)}"
        say(f"synthesize: {cap} -> {outcome}")
    return {"plan": plan, "environments": done}


def _write_request(run: Run, cap: str) -> Path:
    """``synthesize/requests/<cap>.json``: what ``trace-gym synthesize`` needs, and the command."""
    definition, diagnosis = _definition(run, cap), run.path("diagnose")
    request = {
        "capability": cap,
        "definition": definition,
        "evidence": _evidence(run, cap),
        "out": str(run.environments),
        "command": (
            f"trace-gym synthesize --capability {cap} --definition {json.dumps(definition)} "
            f"--from-diagnosis {diagnosis} --llm PROVIDER/MODEL --out {run.environments}"
        ),
    }
    path = run.path("synthesize", "requests", f"{cap}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(request, indent=2) + "\n")
    return path


def _definition(run: Run, capability: str) -> str:
    """The capability's definition from the diagnosis's rubric, else its name in words."""
    from trace_gym.synthesis.synthesize import diagnosed_capability

    row = diagnosed_capability(run.path("diagnose"), capability) or {}
    return str(row.get("definition") or capability.replace("_", " "))


def _evidence(run: Run, capability: str) -> str:
    from trace_gym.errors import ConfigError as GymConfigError
    from trace_gym.synthesis.synthesize import evidence_from_diagnosis

    try:
        return evidence_from_diagnosis(run.path("diagnose"), capability)
    except GymConfigError:  # a ground-truth diagnosis quotes no failures
        return ""


def use_environments(folder: Path) -> None:
    """Register the environments of ``folder`` in this process and its children: add it to
    ``TRACE_GYM_PATH`` (which ``import trace_gym`` reads) and register its rows now."""
    from trace_gym.registration import USER_PATH_VARIABLE, USER_REGISTRY_FILE, register_envs

    if not (folder / USER_REGISTRY_FILE).is_file():
        return
    folders = [p for p in os.environ.get(USER_PATH_VARIABLE, "").split(os.pathsep) if p]
    if str(folder.resolve()) not in [str(Path(p).resolve()) for p in folders]:
        os.environ[USER_PATH_VARIABLE] = os.pathsep.join([*folders, str(folder.resolve())])
    register_envs()


# ---------------------------------------------------------------------------------------------
# [3] train: one GRPO-LoRA adapter per capability
# ---------------------------------------------------------------------------------------------
def stage_train(run: Run, say: Say) -> dict[str, Any]:
    """One GRPO-LoRA adapter per matched capability (each run resumes from its checkpoints),
    and with ``plain_grpo`` the baseline on the target at the same rollouts."""
    from trace_train.grpo import train as grpo_train

    adapters = {}
    for item in run.training_plan():
        if item["env_id"] is None:
            continue
        out = run.path("train", item["capability"])
        grpo_cfg = run.config.grpo_config(run.base_model, item["env_id"], out)
        trained = _trained_as_configured(out, grpo_cfg)
        distributed.barrier()  # every process decided before the main one writes config.yaml
        if not trained:
            say(f"train: GRPO on {item['env_id']} for {item['capability']} ({grpo_cfg.steps} steps)")  # fmt: skip
            grpo_train(grpo_cfg)
        adapters[item["capability"]] = {"adapter": str(out / "adapter"), "env_id": item["env_id"]}
    if not (run.config.plain_grpo and adapters):
        return {"adapters": adapters}
    return {"adapters": adapters, "plain_grpo": _train_plain_grpo(run, say, len(adapters))}


def _train_plain_grpo(run: Run, say: Say, n_adapters: int) -> dict[str, Any]:
    """Plain GRPO on the target at the rollout budget of all capability adapters together:
    every adapter runs the same settings, so the same group shape for ``n_adapters`` times
    the steps spends exactly their rollouts."""
    from trace_train.grpo import train as grpo_train

    cfg, out = run.config, run.path(PLAIN_GRPO)
    steps = cfg.grpo_config(run.base_model, cfg.target, out).steps * n_adapters
    grpo_cfg = cfg.grpo_config(run.base_model, cfg.target, out, steps=steps)
    rollouts = steps * grpo_cfg.groups_per_step * grpo_cfg.group_size
    record = {"adapter": str(out / "adapter"), "env_id": cfg.target, "steps": steps,
              "rollouts": rollouts}  # fmt: skip
    trained = _trained_as_configured(out, grpo_cfg)
    distributed.barrier()
    if not trained:
        say(f"train: plain GRPO on the target {cfg.target} ({steps} steps, {rollouts} rollouts)")
        grpo_train(grpo_cfg)
    return record


def _trained_as_configured(out: Path, grpo_cfg: GRPORunConfig) -> bool:
    """Whether ``out`` holds an adapter trained with exactly these settings; otherwise GRPO
    runs (again), resuming from its checkpoints, e.g. to a larger ``steps`` after
    ``trace run --redo train``."""
    import dataclasses

    saved = out / "config.yaml"
    if not ((out / "adapter" / "adapter_config.json").exists() and saved.exists()):
        return False
    # Where the environments ran (in process or which servers) does not change the training.
    same = {**dataclasses.asdict(grpo_cfg), "env_urls": None}
    return {**(yaml.safe_load(saved.read_text()) or {}), "env_urls": None} == same


# ---------------------------------------------------------------------------------------------
# [4] compose: the adapters as one policy, per task and per token
# ---------------------------------------------------------------------------------------------
def stage_compose(run: Run, say: Say) -> dict[str, Any]:
    """Per-task routing and/or the token-level mixture over the trained adapters
    (``trace_train.pipeline.compositions``)."""
    from trace_train.pipeline import compositions

    adapters = run.output("train").get("adapters", {})
    if not adapters:
        return {}
    cfg = run.config
    built = {}
    if "routed" in cfg.compose.kinds:
        routed = compositions.build_routed(run.base_model, adapters, run.path("compose", "routed"))
        built["routed"] = str(routed)
        say(f"compose: per-task router over {len(adapters)} adapter(s) -> {routed}")
        check = compositions.routing_check(
            adapters,
            routed,
            tasks_per_adapter=cfg.compose.routing_check_tasks,
            tool_prompt=cfg.tool_prompt,
            out=run.path("compose", "routing_check.json"),
        )
        if check:
            say(f"compose: per-task routing accuracy {check['accuracy']:.0%} on {check['tasks']} tasks")  # fmt: skip
    if "moe" in cfg.compose.kinds:
        folder, accuracy = compositions.build_moe(
            run.base_model,
            adapters,
            run.path("compose", "moe"),
            router_sequences_per_adapter=cfg.compose.router_sequences,
            router_steps=cfg.compose.router_steps,
            max_turns=cfg.generation.max_turns,
            max_new_tokens=cfg.generation.max_new_tokens,
            tool_prompt=cfg.tool_prompt,
        )
        built["moe"] = str(folder)
        say(f"compose: token-level mixture -> {folder} (router accuracy {accuracy:.0%})")
    return built


# ---------------------------------------------------------------------------------------------
# evaluate: every policy on the target's held-out split, then diagnosed again
# ---------------------------------------------------------------------------------------------
def policies(run: Run) -> dict[str, str]:
    """Every policy the final evaluation compares, name -> ``trace-train eval`` spec."""
    base = run.base_model
    out = {"base": f"hf:{base}"}
    for cap, info in run.output("train").get("adapters", {}).items():
        if run.config.evaluate.adapters:
            out[f"adapter:{cap}"] = f"hf:{base}+adapter:{info['adapter']}"
    plain = run.output("train").get("plain_grpo")
    if plain:
        out[PLAIN_GRPO] = f"hf:{base}+adapter:{plain['adapter']}"
    for kind, folder in run.output("compose").items():
        out[kind] = f"{kind}:{folder}"
    return out


def stage_evaluate(run: Run, say: Say) -> dict[str, Any]:
    """Every policy on the target's held-out split (one finished policy is never rerun; an
    interrupted one resumes from its last finished batch, ``trace_train.evaluate``)."""
    from trace_train.evaluate import evaluate_side_by_side

    settings = run.config.evaluate
    results, jobs = {}, {}
    for name, spec in policies(run).items():
        out = run.path("evaluate", name.replace(":", "__"))
        summary_path = out / "summary.json"
        if not (summary_path.exists() and _evaluated_as_configured(run, summary_path)):
            jobs[name] = run.config.eval_config(spec, settings.episodes, settings.split, out)
        results[name] = str(summary_path)

    def finished(name: str, summary: dict) -> None:
        rate = summary["overall"]["success_rate"]
        say(f"evaluate: {name} success {rate:.0%} on {settings.episodes} {settings.split} tasks")

    evaluate_side_by_side(jobs, settings.workers, finished)
    return {"summaries": results}


def _evaluated_as_configured(run: Run, summary_path: Path) -> bool:
    """Whether a saved evaluation (of a run interrupted during ``evaluate``) has the episode
    count and split this config asks for; one that does not is evaluated again."""
    summary = json.loads(summary_path.read_text())
    return (
        summary.get("overall", {}).get("episodes") == run.config.evaluate.episodes
        and summary.get("split") == run.config.evaluate.split
    )


def stage_rediagnose(run: Run, say: Say) -> dict[str, Any]:
    """Diagnose every evaluated policy's held-out trajectories like the base agent's, and
    tabulate per capability the LACKING rate before (the diagnosed agent) and after training
    (each policy): did the gap an adapter was trained for close?"""
    if not run.output("diagnose").get("method"):
        return {}
    folders = {}
    for name, summary in run.output("evaluate").get("summaries", {}).items():
        out = run.path("rediagnose", name.replace(":", "__"))
        episodes = Path(summary).with_name("episodes.jsonl")
        if _older_than(out, episodes):  # diagnosed from an earlier evaluation (--redo)
            shutil.rmtree(out)
        if not (out / "analysis.json").exists():
            settings = run.config.evaluate
            say(f"rediagnose: {name} on its {settings.episodes} {settings.split} episodes")
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
    table_path = run.path("rediagnose", "lacking.json")
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table = {"method": run.output("diagnose")["method"], "policies": list(folders), "rows": rows}
    table_path.write_text(json.dumps(table, indent=2))
    for row in (r for r in rows if r["trained"]):
        now = ", ".join(f"{name} {_pct(r)}" for name, r in row["after"].items() if r is not None)
        now = now or "no held-out episode needed it"
        say(f"rediagnose: {row['capability']} LACKING {_pct(row['before'])} before; {now}")
    return {"folders": folders, "table": str(table_path)}


def _diagnose_like_the_base(run: Run, inputs: list[str], out: Path) -> None:
    """Diagnose ``inputs`` into ``out`` the way the base agent's trajectories were: with the
    same LLM and the same capability rubric, or from the environment's ground truth."""
    import trace_diagnose as td

    if run.output("diagnose").get("method") == "ground_truth":
        td.diagnose_from_ground_truth(inputs, out)
        return
    rubric = run.path("diagnose", "capabilities.json")
    try:
        td.run_diagnosis(
            inputs,
            out,
            llm=_diagnosis_llm(run),
            n_runs=run.config.diagnose.label_runs,
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


def _older_than(folder: Path, source: Path) -> bool:
    """Whether ``folder`` holds a file written before ``source`` was (last) written, so it
    was derived from an earlier version; an interrupted job's newer files are kept."""
    written = [f.stat().st_mtime for f in folder.rglob("*") if f.is_file()]
    return bool(written) and min(written) < source.stat().st_mtime


def _pct(rates: dict[str, Any] | None) -> str:
    if not rates or rates.get("rate") is None:
        return "-"
    return f"{rates['rate']:.0%} of {rates['judged']}"


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def stage_report(run: Run, say: Say) -> dict[str, Any]:
    """``report.html`` and ``report.json`` in the run folder (``pipeline.report``), and
    ``provenance.json`` (:func:`write_provenance`)."""
    from trace_train.pipeline.report import write_run_report

    record = write_provenance(run)
    paths = write_run_report(run)
    say(f"report: {paths['html']}")
    return {**{k: str(v) for k, v in paths.items()}, "provenance": str(record)}


def write_provenance(run: Run) -> Path:
    """``provenance.json``: what the run's results were made from. The code's commit, the full
    config, the base model's hash (as given, and after the warm start), every adapter's hash
    (warm start, each capability, plain GRPO), and per training phase its seeds (the task seeds
    each drew, disjoint by ``trace_train.task_seeds``) and precision, from each phase's
    ``trace_train.json``; the machine."""
    from trace_train import provenance, stored_adapter

    phases: dict[str, dict[str, Any]] = {}
    warm = run.output("warmstart").get("adapter")
    if warm:
        phases["warmstart"] = {"adapter": warm}
    for cap, info in run.output("train").get("adapters", {}).items():
        phases[f"train:{cap}"] = {"adapter": info["adapter"]}
    plain = run.output("train").get("plain_grpo")
    if plain:
        phases[PLAIN_GRPO] = {"adapter": plain["adapter"]}
    for entry in phases.values():
        meta_path = Path(entry["adapter"]) / "trace_train.json"
        stored = Path(entry["adapter"]) / stored_adapter.RECORD  # kept in the repository
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
        elif stored.is_file():
            kept = json.loads(stored.read_text())
            meta = kept.get("training", {})
            entry["stored"] = {k: kept.get(k) for k in ("rebuild", "converted_from_sha256")}
        else:
            meta = {}
        recorded = meta.get("provenance", {})
        entry.update(
            sha256=provenance.adapter_hash(entry["adapter"])["sha256"],
            seeds=recorded.get("seeds"),
            dtypes=recorded.get("dtypes"),
            commit=recorded.get("git", {}).get("commit"),
        )
    record = {
        "git": provenance.git_state(),
        "config": run.config.as_dict(),
        "base_model": provenance.model_hash(resolve_model(run.config.model)),
        "warm_started_base": provenance.model_hash(run.base_model) if warm else None,
        "phases": phases,
        "machine": provenance.machine(),
    }
    path = run.path("provenance.json")
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


@dataclass(frozen=True)
class Stage:
    """One row of the stage table: its name (the key in ``stages.json``), what it runs,
    whether it belongs to training (skipped when the config sets ``train: false``), and whether
    every process of ``accelerate launch`` runs it (the stages that run TRL trainers; the main
    process alone runs the others)."""

    name: str
    fn: Callable[[Run, Say], dict[str, Any]]
    trains: bool = False
    all_processes: bool = False


STAGES: tuple[Stage, ...] = (
    Stage("warmstart", stage_warmstart, all_processes=True),
    Stage("rollout-base", stage_rollout_base),
    Stage("diagnose", stage_diagnose),
    Stage("select", stage_select),
    Stage("map-envs", stage_map_envs),
    Stage("synthesize", stage_synthesize),
    Stage("train", stage_train, trains=True, all_processes=True),
    Stage("compose", stage_compose, trains=True),
    Stage("evaluate", stage_evaluate, trains=True),
    Stage("rediagnose", stage_rediagnose, trains=True),
    Stage("report", stage_report),
)
"""Every stage of ``trace run``, in the order it runs."""
