"""run: the run directory, one function per stage, resume, status and the dry-run estimate.

Public API (what `trace_train/pipeline.py` and the CLI call)::

    run_diagnosis(inputs, run_dir, model, *, n_runs=10, llm=None, ...) -> dict  # all stages
    stage_ingest(run_dir, inputs, redact=None, fmt="auto", swebench_report=None) -> list[Trajectory]
    stage_render(run_dir, render_config=None) -> Path
    stage_propose(run_dir, llm, max_caps=8, n_sample=24, force=False) -> list[Capability]
    stage_label(run_dir, llm, n_runs=10, render_config=None) -> list[LabelRun]
    stage_analyze(run_dir, runs_glob=None, rho=RHO, delta=DELTA, k_consistency=None) -> dict
    stage_map_envs(run_dir, llm=None, registry=None, min_score=0.3) -> list[dict]
    stage_report(run_dir) -> dict[str, Path]
    estimate(run_dir, llm, n_runs=10, ...) -> dict        # --dry-run, no LLM call
    status(run_dir) -> dict

Layout of RUN_DIR: `trajectories.jsonl` and `ingest_summary.json` (ingest), `rendered.jsonl`
(render), `capabilities.json` (propose; editable, never overwritten unless forced),
`labels/run_XX.json` (label), `analysis.json` (analyze), `env_matches.json` (map-envs),
`report.md` / `report.html` / `report.json` (report), `cache.sqlite` (every LLM call) and
`manifest.json` (configuration and stage status). Every artifact is written atomically.
Resuming is rerunning the same command: LLM calls come from the cache, so nothing that
finished is asked again.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from .analyze import DELTA, RHO, analyze, load_label_runs, over_limits
from .errors import ConfigError, IncompleteDiagnosis
from .ingest import ingest
from .label import (
    AGENT_ONLY_SAMPLE,
    DEFAULT_RUNS,
    agent_only_messages,
    label_messages,
    label_trajectories,
    labels_from_ground_truth,
    others_wrote,
)
from .llm import Budget, Cache, LLMClient, LLMConfig
from .map_envs import MIN_SCORE, map_envs
from .propose import propose_capabilities, read_capabilities, select_sample, write_capabilities
from .render import RenderConfig, approx_tokens, render
from .schema import Capability, LabelResponse, LabelRun, Trajectory

LABEL_OUTPUT_TOKENS_PER_CAP = 70  # measured on the stub's answers; used only for estimates
MAX_UNLABELLED = 0.10  # above this share of unlabelled failures (or passes): exit code 4
MAX_FLAGGED = 0.10  # above this share of flagged failures (or passes): exit code 4


class RunDir:
    """Paths of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.trajectories = self.path / "trajectories.jsonl"
        self.summary = self.path / "ingest_summary.json"
        self.rendered = self.path / "rendered.jsonl"
        self.capabilities = self.path / "capabilities.json"
        self.labels = self.path / "labels"
        self.analysis = self.path / "analysis.json"
        self.env_matches = self.path / "env_matches.json"
        self.cache = self.path / "cache.sqlite"
        self.manifest = self.path / "manifest.json"

    def ensure(self) -> RunDir:
        """Create the directory."""
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def need(self, path: Path, stage: str) -> Path:
        """Return `path` or explain which stage produces it."""
        if not path.exists():
            raise ConfigError(f"{path} is missing: run `trace-diagnose {stage} {self.path}` first")
        return path


def write_json(path: Path, data: Any) -> None:
    """Atomic JSON write (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """Read a JSON artifact."""
    return json.loads(path.read_text(encoding="utf-8"))


def _mark(rd: RunDir, stage: str, **info: Any) -> None:
    manifest = read_json(rd.manifest) if rd.manifest.exists() else {"stages": {}}
    manifest["stages"][stage] = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S"), **info}
    write_json(rd.manifest, manifest)


def load_trajectories(run_dir: str | Path) -> list[Trajectory]:
    """Read the ingested trajectories of a run directory."""
    rd = RunDir(run_dir)
    # "\n" only: a message may hold U+2028 and the like raw, where splitlines would cut
    lines = rd.need(rd.trajectories, "ingest").read_text(encoding="utf-8").split("\n")
    return [Trajectory.model_validate_json(line) for line in lines if line.strip()]


def stage_ingest(
    run_dir: str | Path,
    inputs: list[str | Path],
    redact: list[str] | None = None,
    fmt: str = "auto",
    swebench_report: str | Path | None = None,
    success_threshold: float = 1.0,
    strict: bool = False,
) -> list[Trajectory]:
    """Ingest inputs into RUN_DIR/trajectories.jsonl plus a summary with exclusion reasons
    and the files, lines and records skipped as unreadable (`strict`: abort on the first)."""
    rd = RunDir(run_dir).ensure()
    skipped: list[str] = []
    trajs = ingest(
        inputs,
        redact,
        fmt=fmt,
        swebench_report=swebench_report,
        success_threshold=success_threshold,
        strict=strict,
        skipped=skipped,
    )
    tmp = rd.trajectories.with_name("trajectories.jsonl.tmp")
    tmp.write_text("".join(t.model_dump_json() + "\n" for t in trajs), encoding="utf-8")
    tmp.replace(rd.trajectories)
    summary = {
        "inputs": [str(p) for p in inputs],
        "redact": redact or [],
        "n": len(trajs),
        "by_status": {
            s: sum(t.outcome.status == s for t in trajs)
            for s in ("success", "failure", "excluded", "unknown")
        },
        "by_format": {
            f: sum(t.source_format == f for t in trajs)
            for f in sorted({t.source_format for t in trajs})
        },
        "tasks": len({t.task_id for t in trajs}),
        "excluded": {t.traj_id: t.outcome.exclusion_reason for t in trajs if not t.usable},
        "n_skipped": len(skipped),
        "skipped": skipped,
    }
    write_json(rd.summary, summary)
    _mark(rd, "ingest", n=len(trajs))
    return trajs


def stage_render(run_dir: str | Path, render_config: RenderConfig | None = None) -> Path:
    """Write RUN_DIR/rendered.jsonl: the exact outcome-blind text the labeller sees."""
    rd = RunDir(run_dir)
    rows = []
    for t in load_trajectories(rd.path):
        r = render(t, render_config)
        rows.append(
            json.dumps(
                {
                    "traj_id": t.traj_id,
                    "sha256": r.sha256,
                    "tokens": r.tokens,
                    "elided": list(r.elided),
                    "cuts": r.cuts,
                    "flagged_steps": list(r.flagged),
                    "text": r.text,
                }
            )
        )
    tmp = rd.rendered.with_name("rendered.jsonl.tmp")
    tmp.write_text("\n".join(rows) + "\n", encoding="utf-8")
    tmp.replace(rd.rendered)
    _mark(rd, "render", n=len(rows))
    return rd.rendered


def _client(rd: RunDir, llm: LLMConfig, budget: Budget | None = None) -> LLMClient:
    client = LLMClient(llm, Cache(rd.cache), budget)
    client.check_credentials()  # a missing key stops the stage before its progress starts
    return client


def stage_propose(
    run_dir: str | Path,
    llm: LLMConfig,
    max_caps: int = 8,
    n_sample: int = 24,
    force: bool = False,
    show_progress: bool = True,
    budget: Budget | None = None,
) -> list[Capability]:
    """Propose capabilities into RUN_DIR/capabilities.json (kept as is when it exists)."""
    rd = RunDir(run_dir)
    if rd.capabilities.exists() and not force:
        return read_capabilities(rd.capabilities)
    client = _client(rd, llm, budget)
    kept, rejected = asyncio.run(
        propose_capabilities(
            load_trajectories(rd.path), client, max_caps, n_sample, show_progress=show_progress
        )
    )
    write_capabilities(rd.capabilities, kept, rejected)
    _mark(rd, "propose", kept=len(kept), rejected=len(rejected), calls=client.network_calls)
    return kept


def stage_label(
    run_dir: str | Path,
    llm: LLMConfig,
    n_runs: int = DEFAULT_RUNS,
    render_config: RenderConfig | None = None,
    show_progress: bool = True,
    budget: Budget | None = None,
    max_unlabelled: float = MAX_UNLABELLED,
    max_flagged: float = MAX_FLAGGED,
) -> list[LabelRun]:
    """Label every usable trajectory n_runs times into RUN_DIR/labels/run_XX.json.

    Raises `IncompleteDiagnosis` (after writing the runs) when, among the failed or among the
    passed trajectories, more than `max_unlabelled` got no valid label in some run, or more
    than `max_flagged` hold text addressed to the labeller (or were labelled only with text
    withheld). Failures and passes are counted apart: losing failures biases the contrast
    even when the overall share looks small. A dead or refusing model must not pass for an
    agent without failures, nor an injected one for a diagnosis."""
    if n_runs < 1:
        raise ConfigError(f"--n-runs={n_runs}: label at least one run")
    for option, share in (("--max-unlabelled", max_unlabelled), ("--max-flagged", max_flagged)):
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"{option}={share}: give a share between 0 and 1")
    rd = RunDir(run_dir)
    caps = read_capabilities(rd.need(rd.capabilities, "propose"))
    trajs = load_trajectories(rd.path)
    client = _client(rd, llm, budget)
    runs = asyncio.run(
        label_trajectories(trajs, caps, client, n_runs, render_config, show_progress)
    )
    rd.labels.mkdir(exist_ok=True)
    for run in runs:
        write_json(rd.labels / f"run_{run.attempt:02d}.json", run.to_json())
    for old in rd.labels.glob("run_*.json"):
        index = old.stem.removeprefix("run_")
        if index.isdigit() and int(index) > n_runs:
            old.unlink()  # a smaller --n-runs must not leave stale runs behind
    unlabelled = {t: why for r in runs for t, why in r.unlabelled.items()}
    flagged = {t: why for r in runs for t, why in r.flagged.items() if t not in unlabelled}
    usable = sum(t.usable for t in trajs)
    counts = _by_outcome(trajs, unlabelled, flagged)
    seen = [render(t, render_config) for t in trajs if t.usable]
    share = len(unlabelled) / usable if usable else 0.0
    client.budget.unlabelled, client.budget.usable = len(unlabelled), usable
    _mark(
        rd,
        "label",
        runs=n_runs,
        usable=usable,
        unlabelled=len(unlabelled),
        unlabelled_share=share,
        max_unlabelled=max_unlabelled,
        max_flagged=max_flagged,
        **counts,
        render=_render_settings(render_config),
        abridged=sum(bool(r.cut_note) for r in seen),
        steps_summarised=sum(len(r.elided) for r in seen),
        policy_cut=sum("policy_chars_omitted" in r.cuts for r in seen),
        flagged=sorted(flagged),
        calls=client.network_calls,
        cache_hits=client.cache_hits,
        prompt_tokens=client.prompt_tokens,
        completion_tokens=client.completion_tokens,
        cost_usd=client.spent,
    )
    problems = over_limits(counts, max_unlabelled, max_flagged)
    if problems:
        first = next(iter(unlabelled.values()), None) or next(iter(flagged.values()))
        raise IncompleteDiagnosis(f"{'; '.join(problems)}; first reason: {first[:160]}")
    return runs


def _by_outcome(
    trajs: list[Trajectory], unlabelled: dict[str, str], flagged: dict[str, str]
) -> dict[str, int]:
    """Usable, unlabelled and flagged trajectories, failed and passed counted apart."""
    status = {t.traj_id: t.outcome.status for t in trajs if t.usable}
    out = {}
    for side, word in (("failed", "failure"), ("passed", "success")):
        out[f"usable_{side}"] = sum(s == word for s in status.values())
        out[f"unlabelled_{side}"] = sum(status.get(t) == word for t in unlabelled)
        out[f"flagged_{side}"] = sum(status.get(t) == word for t in flagged)
    return out


def _render_settings(cfg: RenderConfig | None) -> dict[str, int]:
    cfg = cfg or RenderConfig()
    return {"max_tokens": cfg.max_tokens, "policy_chars": cfg.policy_chars}


def stage_analyze(
    run_dir: str | Path,
    runs_glob: str | None = None,
    rho: float = RHO,
    delta: float = DELTA,
    k_consistency: int | None = None,
) -> dict[str, Any]:
    """Analyze RUN_DIR/labels (or `runs_glob`) into RUN_DIR/analysis.json."""
    rd = RunDir(run_dir)
    runs = load_label_runs(runs_glob or str(rd.need(rd.labels, "label") / "run_*.json"))
    descriptions = (
        {c.name: c.definition for c in read_capabilities(rd.capabilities)}
        if rd.capabilities.exists()
        else None
    )
    trajs = load_trajectories(rd.path) if rd.trajectories.exists() else None
    result = analyze(
        runs, descriptions, rho=rho, delta=delta, k_consistency=k_consistency, trajectories=trajs
    )
    rd.ensure()
    write_json(rd.analysis, result)
    _mark(rd, "analyze", core=result["core"])
    return result


def stage_map_envs(
    run_dir: str | Path,
    llm: LLMConfig | None = None,
    registry: str | Path | None = None,
    show_progress: bool = True,
    budget: Budget | None = None,
    min_score: float = MIN_SCORE,
) -> list[dict[str, Any]]:
    """Match the core capabilities to environment ids into RUN_DIR/env_matches.json."""
    rd = RunDir(run_dir)
    result = read_json(rd.need(rd.analysis, "analyze"))
    rows = {r["name"]: r for r in result["capabilities"]}
    caps = [Capability(name=n, definition=rows[n].get("description") or n) for n in result["core"]]
    client = _client(rd, llm, budget) if llm else None
    matches = asyncio.run(map_envs(caps, registry, client, show_progress, min_score))
    write_json(rd.env_matches, matches)
    _mark(rd, "map-envs", matched=sum(not m["needs_new_environment"] for m in matches))
    return matches


def stage_report(run_dir: str | Path) -> dict[str, Path]:
    """Write report.md, report.html and report.json from the run directory's artifacts."""
    from .report import write_report

    rd = RunDir(run_dir)
    result = read_json(rd.need(rd.analysis, "analyze"))
    runs = load_label_runs(str(rd.labels / "run_*.json")) if rd.labels.exists() else []
    caps = read_capabilities(rd.capabilities) if rd.capabilities.exists() else []
    matches = read_json(rd.env_matches) if rd.env_matches.exists() else []
    summary = read_json(rd.summary) if rd.summary.exists() else {}
    manifest = read_json(rd.manifest) if rd.manifest.exists() else {}
    trajs = load_trajectories(rd.path) if rd.trajectories.exists() else []
    paths = write_report(rd.path, result, caps, matches, runs, trajs, summary, manifest)
    _mark(rd, "report")
    return paths


def estimate(
    run_dir: str | Path,
    llm: LLMConfig,
    n_runs: int = DEFAULT_RUNS,
    render_config: RenderConfig | None = None,
    max_caps: int = 8,
    n_sample: int = 24,
) -> dict[str, Any]:
    """Dry-run: calls, tokens and USD still to spend (cached calls cost nothing). No LLM call."""
    rd = RunDir(run_dir)
    trajs = load_trajectories(rd.path)
    client = LLMClient(LLMConfig(**{**llm.__dict__, "max_cost": None}), Cache(rd.cache))
    out: dict[str, Any] = {"model": llm.model, "stages": {}}
    if rd.capabilities.exists():
        caps = read_capabilities(rd.capabilities)
    else:
        sample = select_sample(trajs, n_sample)
        tokens = sum(min(approx_tokens(render(t).text), 1500) for t in sample) + 600
        out["stages"]["propose"] = {
            "calls": -(-len(sample) // 8) + 1,
            "prompt_tokens": tokens,
            "output_tokens": 300 * max_caps,
        }
        caps = [Capability(name=f"capability_{i}", definition="x" * 300) for i in range(max_caps)]
    pending, prompt_tokens = 0, 0
    for t in (t for t in trajs if t.usable):
        msgs = label_messages(render(t, render_config), caps)
        size = sum(approx_tokens(m["content"]) for m in msgs)
        for run in range(1, n_runs + 1):
            if not client.is_cached("label", msgs, LabelResponse.__name__, run):
                pending += 1
                prompt_tokens += size
    out["stages"]["label"] = {
        "calls": pending,
        "prompt_tokens": prompt_tokens,
        "output_tokens": pending * LABEL_OUTPUT_TOKENS_PER_CAP * len(caps),
    }
    # at most one agent-only call per trajectory (only those given an NA are asked)
    checks, check_tokens = 0, 0
    for t in (t for t in trajs if t.usable and others_wrote(t)):
        _, msgs = agent_only_messages(t, caps, render_config)
        if not client.is_cached(
            "label-agent-only", msgs, LabelResponse.__name__, AGENT_ONLY_SAMPLE
        ):
            checks += 1
            check_tokens += sum(approx_tokens(m["content"]) for m in msgs)
    out["stages"]["label-agent-only"] = {
        "calls": checks,
        "prompt_tokens": check_tokens,
        "output_tokens": checks * LABEL_OUTPUT_TOKENS_PER_CAP * len(caps),
    }
    total = None
    for stage in out["stages"].values():
        stage["cost_usd"] = client.estimate_cost(stage["prompt_tokens"], stage["output_tokens"])
        total = None if stage["cost_usd"] is None else (total or 0.0) + stage["cost_usd"]
    out["total_cost_usd"] = total
    out["note"] = (
        "estimate: tokens are characters/4; schema repairs and retries add to it; "
        "label-agent-only is an upper bound (asked only for trajectories given an NA)"
    )
    return out


def status(run_dir: str | Path) -> dict[str, Any]:
    """Stages done, LLM calls and cost so far, trajectories left unlabelled or flagged."""
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        raise ConfigError(f"{rd.path}: no such run directory")
    manifest = read_json(rd.manifest) if rd.manifest.exists() else {"stages": {}}
    out: dict[str, Any] = {"run_dir": str(rd.path), "stages": manifest.get("stages", {})}
    if rd.cache.exists():
        cache = Cache(rd.cache)
        out["cache"] = cache.stats()
        cache.close()
    if rd.labels.exists():
        runs = (
            load_label_runs(str(rd.labels / "run_*.json"))
            if any(rd.labels.glob("run_*.json"))
            else []
        )
        out["unlabelled"] = sorted({t for r in runs for t in r.unlabelled})
        out["flagged"] = sorted({t for r in runs for t in r.flagged})
    return out


def run_diagnosis(
    inputs: list[str | Path],
    run_dir: str | Path,
    model: str | None = None,
    *,
    llm: LLMConfig | None = None,
    n_runs: int = DEFAULT_RUNS,
    redact: list[str] | None = None,
    fmt: str = "auto",
    swebench_report: str | Path | None = None,
    capabilities: str | Path | None = None,
    registry: str | Path | None = None,
    render_config: RenderConfig | None = None,
    max_caps: int = 8,
    n_sample: int = 24,
    rho: float = RHO,
    delta: float = DELTA,
    k_consistency: int | None = None,
    show_progress: bool = True,
    max_unlabelled: float = MAX_UNLABELLED,
    strict: bool = False,
    budget: Budget | None = None,
    min_score: float = MIN_SCORE,
    max_flagged: float = MAX_FLAGGED,
) -> dict[str, Any]:
    """All stages: ingest, render, propose (unless capabilities exist or are given), label,
    analyze, map-envs and report. Returns the analysis. Rerunning resumes from the cache.

    `llm.max_cost` caps the spend of the whole call, every stage together (pass `budget` to
    read the calls, cache hits and spend afterwards, even after an error). When more than
    `max_unlabelled` of the failed or of the passed trajectories stay unlabelled (or more than
    `max_flagged` are flagged), the analysis and the report are still written (the report
    says so at the top) and `IncompleteDiagnosis` is raised."""
    if llm is None:
        if model is None:
            raise ConfigError("run_diagnosis needs a model (or an LLMConfig)")
        llm = LLMConfig(model=model)
    if n_runs < 1:
        raise ConfigError(f"--n-runs={n_runs}: label at least one run")
    budget = budget if budget is not None else Budget(llm.max_cost)
    rd = RunDir(run_dir).ensure()
    stage_ingest(rd.path, inputs, redact, fmt, swebench_report, strict=strict)
    stage_render(rd.path, render_config)
    if capabilities is not None:
        write_capabilities(rd.capabilities, read_capabilities(Path(capabilities)), [])
    stage_propose(rd.path, llm, max_caps, n_sample, show_progress=show_progress, budget=budget)
    incomplete: IncompleteDiagnosis | None = None
    try:
        runs = stage_label(
            rd.path, llm, n_runs, render_config, show_progress, budget, max_unlabelled, max_flagged
        )
    except IncompleteDiagnosis as exc:
        incomplete = exc
        runs = load_label_runs(str(rd.labels / "run_*.json"))
        if not any(r.failed or r.passed for r in runs):
            raise  # nothing labelled: there is nothing to analyse or report
    result = stage_analyze(rd.path, rho=rho, delta=delta, k_consistency=k_consistency)
    stage_map_envs(rd.path, llm, registry, show_progress, budget, min_score)
    stage_report(rd.path)
    if incomplete is not None:
        raise incomplete
    return result


def diagnose_from_ground_truth(
    inputs: list[str | Path] | list[Trajectory],
    run_dir: str | Path,
    *,
    rho: float = RHO,
    delta: float = DELTA,
    summary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Diagnose trace_gym episodes without an LLM: the environment's capability-tagged checks
    label them (a capability in ``lacking_capabilities`` is LACKING, a required one PRESENT,
    others NA), then the same analysis and report as an LLM diagnosis. Writes
    ``analysis.json``, ``labels/run_01.json``, ``env_matches.json`` and ``report.html`` into
    ``run_dir``; returns the analysis. Raises ``ConfigError`` when no trajectory carries
    ground truth."""
    trajectories = (
        list(inputs)
        if inputs and all(isinstance(t, Trajectory) for t in inputs)
        else ingest([str(p) for p in inputs])  # type: ignore[union-attr]
    )
    with_truth = [t for t in trajectories if t.ground_truth is not None]
    if not with_truth:
        raise ConfigError(
            "these trajectories carry no trace_gym ground truth; diagnose them with an LLM"
        )
    caps = sorted({c for t in with_truth for c in t.ground_truth.required})  # type: ignore[union-attr]
    runs = labels_from_ground_truth(trajectories, caps)
    analysis = analyze(runs, rho=rho, delta=delta, trajectories=trajectories)
    out = Path(run_dir)
    (out / "labels").mkdir(parents=True, exist_ok=True)
    write_json(out / "labels" / "run_01.json", runs[0].to_json())
    write_json(out / "analysis.json", analysis)
    from .report import write_report

    core = [Capability(name=c, definition=c.replace("_", " ")) for c in analysis["core"]]
    matches = asyncio.run(map_envs(core, None, None, show_progress=False))
    write_json(RunDir(out).env_matches, matches)
    report_summary = {"labeller": "environment ground truth (no LLM)", **(summary or {})}
    write_report(out, analysis, [], matches, runs, trajectories, summary=report_summary)
    return analysis
