"""``trace-train eval``: a policy on seeded held-out episodes, with confidence intervals.

Writes ``episodes.jsonl`` (one ``trace_gym.episode.v1`` record per episode, which
``trace_diagnose`` ingests and ``trace-gym score`` replays) and ``summary.json``: per
environment the success rate with a Wilson 95% interval, the mean reward with a normal 95%
interval, per-capability results from the verifier's ``required_capabilities`` /
``lacking_capabilities`` (the composite benchmark reports several capabilities per task), and,
where the environment declares the decision its verifier judges (grant / refuse, ask / act /
decline), success per decision class with a Wilson interval and the balanced accuracy (the
mean of the per-class rates), which a policy that never makes the decision cannot raise
(:mod:`trace_gym.validation.decisions`; a composite's requests count per ``<member>:<class>``).
Episodes the harness failed (``harness_faults``: a served environment lost mid-episode, an
environment's internal or infrastructure error) are counted but left out of every rate.

An interrupted evaluation resumes: a rerun into the same folder keeps the episodes already
written when the policy (its files' hashes included) and every setting are the same
(``episodes.resume.json``), and plays only the rest. Each invocation appends the machine it
ran on to ``machines.jsonl`` (and ``summary.json``'s ``machines``), with the first episode it
played: greedy decoding on another CPU's kernels (AVX-512 or AVX2) can pick another token at a
near tie, so a reader rebuilding an evaluation that spanned machines needs to know which
episodes ran where.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from trace_diagnose.stats import Z95, wilson
from trace_train.config import EvalConfig
from trace_train.rollout import HARNESS_FAULTS, EpisodeSpec


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate, mean reward (with 95% intervals), per-capability results, and success per
    decision class with the balanced accuracy (empty / None without declared decisions), over
    the episodes the harness did not fail (``harness_faults`` counts those left out: a lost
    environment endpoint, an environment's internal or infrastructure error)."""
    from trace_gym.validation.decisions import records_breakdown

    played = len(records)
    records = [r for r in records if r.get("end_reason") not in HARNESS_FAULTS]
    n = len(records)
    rewards = [float(r["final_reward"]) for r in records]
    wins = sum(bool(r["is_success"]) for r in records)
    mean = statistics.fmean(rewards) if rewards else 0.0
    half = Z95 * statistics.stdev(rewards) / math.sqrt(n) if n > 1 else 0.0
    caps: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "lacking": 0})
    for r in records:
        ver = r.get("verification") or {}
        required = ver.get("required_capabilities") or [r.get("capability")]
        lacking = set(ver.get("lacking_capabilities") or [])
        for cap in required:
            caps[cap]["n"] += 1
            caps[cap]["lacking"] += cap in lacking
    breakdown = records_breakdown(records)
    decisions = {
        d: {**v, "success_ci95": list(wilson(v["successes"], v["n"]) or (0.0, 1.0))}
        for d, v in breakdown["per_decision"].items()
    }
    return {
        "episodes": played,
        "harness_faults": played - n,
        "success_rate": wins / n if n else 0.0,
        "success_ci95": list(wilson(wins, n) or (0.0, 1.0)),  # no episodes: no information
        "mean_reward": mean,
        "mean_reward_ci95": [mean - half, mean + half],
        "mean_turns": statistics.fmean(r["turns"] for r in records) if records else 0.0,
        "capabilities": {
            cap: {**v, "success_rate": 1 - v["lacking"] / v["n"]} for cap, v in sorted(caps.items())
        },
        "decisions": decisions,
        "balanced_accuracy": breakdown["balanced_accuracy"],
    }


def episode_specs(env_id: str, cfg: EvalConfig) -> list[EpisodeSpec]:
    return [
        EpisodeSpec(env_id, cfg.seed_start + i, cfg.difficulty, cfg.split)
        for i in range(cfg.episodes)
    ]


def evaluate(
    cfg: EvalConfig, policy: Any = None, progress: bool = True, label: str | None = None
) -> dict[str, Any]:
    """Run ``cfg.policy`` (or an already built ``policy``) and write the outputs; the progress
    bar says ``eval <label>`` (default: the policy's name, which includes its paths)."""
    from tqdm.auto import tqdm

    import trace_gym
    from trace_train.policies import PlaySettings, parse_policy

    env_ids = trace_gym.registered_ids() if cfg.env_ids == ["all"] else list(cfg.env_ids)
    unknown = sorted(set(env_ids) - set(trace_gym.registered_ids()))
    if unknown:
        raise ValueError(f"unknown env id(s) {unknown}; registered: {trace_gym.registered_ids()}")
    settings = PlaySettings(
        cfg.max_turns,
        cfg.max_new_tokens,
        cfg.max_completion_tokens,
        cfg.temperature,
        cfg.reward_mode,
        cfg.batch_size,
        cfg.tool_prompt,
        cfg.prefill_dtype,
        cfg.decode_dtype,
        cfg.env_urls,
    )
    # only a policy built here from its spec is known by its files: a built one may be any
    # in-memory model, so its evaluation starts over
    resumable = policy is None
    policy = policy or parse_policy(cfg.policy, settings)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    episodes_path = out / "episodes.jsonl"
    wanted = [(env_id, s) for env_id in env_ids for s in episode_specs(env_id, cfg)]
    fingerprint = _fingerprint(cfg, policy.name) if resumable else None
    kept = earlier_episodes(out, fingerprint, wanted)
    # rewritten with what is kept: a torn last line, or every line when nothing is kept
    trace_gym.write_episodes(episodes_path, kept, append=False)
    machines = record_machine(out, first_episode=len(kept), playing=len(kept) < len(wanted))
    batch = getattr(policy, "batch_size", None) or cfg.batch_size
    summary: dict[str, Any] = {
        "policy": policy.name,
        "split": cfg.split,
        "difficulty": cfg.difficulty,
        "machines": machines,
        "envs": {},
    }
    all_records = []
    bar = tqdm(
        total=cfg.episodes * len(env_ids),
        initial=len(kept),
        desc=f"eval {label or policy.name}",
        disable=not progress,
    )
    for env_id in env_ids:
        specs = episode_specs(env_id, cfg)
        records = [r for r in kept if r["env_id"] == env_id]
        for i in range(len(records), len(specs), batch):
            chunk = policy.play(specs[i : i + batch], settings)
            trace_gym.write_episodes(episodes_path, chunk)
            records += chunk
            bar.update(len(chunk))
        summary["envs"][env_id] = summarize(records)
        all_records += records
    bar.close()
    summary["overall"] = summarize(all_records)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def evaluate_side_by_side(
    jobs: dict[str, EvalConfig], workers: int, finished: Any = None
) -> dict[str, dict[str, Any]]:
    """Evaluate several policies (name -> config), ``workers`` at a time, each in a process of
    its own; returns their summaries in ``jobs`` order and calls ``finished(name, summary)`` as
    each ends. A CPU runs one torch thread per process best, so N cores evaluate up to N
    policies in the time of one, at N models' memory. The episodes are the same as one at a
    time: greedy play depends on the policy and the settings, not on the process."""
    if workers < 1:
        raise ValueError(f"workers={workers}: evaluate at least one policy at a time")
    summaries: dict[str, dict[str, Any]] = {}
    if workers == 1 or len(jobs) < 2:
        for name, cfg in jobs.items():
            summaries[name] = evaluate(cfg, label=name)
            if finished:
                finished(name, summaries[name])
        return summaries
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: a forked child would inherit the parent's torch threads and model memory
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context) as pool:
        running = {pool.submit(evaluate, cfg, label=name): name for name, cfg in jobs.items()}
        for done in as_completed(running):
            name = running[done]
            try:
                summaries[name] = done.result()  # a worker's error is raised here
            except Exception as exc:
                exc.add_note(f"(while evaluating the policy {name!r} in a worker process)")
                raise
            if finished:
                finished(name, summaries[name])
    return {name: summaries[name] for name in jobs}


RESUME_NAME = "episodes.resume.json"
"""Beside ``episodes.jsonl``: what its episodes were played with, so a rerun keeps them only
when nothing that decides an episode changed."""
MACHINES_NAME = "machines.jsonl"
"""Beside ``episodes.jsonl``: which machine played which of its episodes."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
"""A tokenizer's files, which training and composing copy unchanged from the base model into
every adapter and composition folder (training never changes the tokenizer); where a copy is
missing the base model's own is loaded, the same one."""


def record_machine(out: Path, first_episode: int, playing: bool = True) -> list[dict[str, Any]]:
    """Appends to ``out/machines.jsonl`` the CPU this invocation plays on, from episode
    ``first_episode`` on (a fresh start, ``first_episode`` 0, starts the file over), and returns
    every line: which machine played which episodes of the log. An invocation with nothing
    left to play (a rerun of a finished evaluation) adds no line."""
    from trace_train.provenance import machine_cpu

    path = out / MACHINES_NAME
    earlier = []
    if first_episode and path.is_file():
        earlier = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not playing:
            return earlier
        earlier = [m for m in earlier if m.get("first_episode", 0) < first_episode]
    line = {"first_episode": first_episode, **machine_cpu()}
    machines = [*earlier, line]
    path.write_text("".join(json.dumps(m, sort_keys=True) + "\n" for m in machines))
    return machines


def earlier_episodes(
    out: Path, fingerprint: dict[str, Any] | None, wanted: list[tuple[str, EpisodeSpec]]
) -> list[dict[str, Any]]:
    """The episodes an interrupted evaluation in ``out`` already played, when they were played
    with the same ``fingerprint`` (policy, its files, every setting) and are the first of
    ``wanted`` in order; none otherwise (and none without a fingerprint). Records the
    fingerprint for the next rerun."""
    marker = out / RESUME_NAME
    episodes = out / "episodes.jsonl"
    same = fingerprint is not None and marker.is_file()
    if same:
        changed = _changes(json.loads(marker.read_text()), fingerprint)
        same = not changed
        if changed and episodes.is_file() and episodes.stat().st_size:
            print(
                f"[trace-train] {out}: starting over, the episodes there were played with "
                f"other {', '.join(changed)}",
                file=sys.stderr,
            )
    if fingerprint is None:
        marker.unlink(missing_ok=True)
    else:
        marker.write_text(json.dumps(fingerprint, indent=1, sort_keys=True) + "\n")
    if not (same and episodes.is_file()):
        return []
    kept: list[dict[str, Any]] = []
    for line, (env_id, spec) in zip(episodes.read_text().splitlines(), wanted, strict=False):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break  # the line being written when the run stopped
        if (record.get("env_id"), record.get("task_seed"), record.get("split")) != (
            env_id,
            spec.task_seed,
            spec.split,
        ):
            break
        kept.append(record)
    return kept


def _changes(earlier: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, by name (settings, the policy, each changed
    file); none when they decide the same episodes. A copy of the base model's tokenizer in an
    adapter or composition folder is left out (a run snapshot does not store the copies, and
    present or missing they load the same tokenizer); an ``hf:`` base's own tokenizer counts."""

    def decisive(fingerprint: dict[str, Any]) -> dict[str, Any]:
        spec = str(fingerprint.get("settings", {}).get("policy", ""))
        kind, _, rest = spec.partition(":")
        base = Path(rest.partition("+adapter:")[0]) if kind == "hf" else None
        files = {
            path: digest
            for path, digest in fingerprint.get("files", {}).items()
            if Path(path).name not in TOKENIZER_FILES or Path(path).parent == base
        }
        return {**fingerprint, "files": files}

    earlier, now = decisive(earlier), decisive(now)
    changed = [key for key in ("settings", "policy") if earlier.get(key) != now.get(key)]
    return changed + sorted(
        f"file {path}"
        for path in earlier["files"].keys() | now["files"].keys()
        if earlier["files"].get(path) != now["files"].get(path)
    )


def _fingerprint(cfg: EvalConfig, policy_name: str) -> dict[str, Any]:
    """Every setting that decides an episode, the policy's name and the sha256 of each file
    its spec points to (a retrained adapter at the same path is another policy)."""
    import dataclasses
    import hashlib

    settings = {
        k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("episodes", "out_dir")
    }
    files = {}
    for part in cfg.policy.replace("+adapter:", ":").split(":"):
        root = Path(part)
        if not part or not root.exists():
            continue
        for path in sorted(
            p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()
        ):
            with path.open("rb") as f:
                files[str(path)] = hashlib.file_digest(f, "sha256").hexdigest()
    return {"settings": settings, "policy": policy_name, "files": files}


def evaluate_model(
    model: Any, tokenizer: Any, rollout_cfg: Any, episodes: int, split: str = "eval"
) -> dict[str, Any]:
    """Greedy held-out episodes of an in-memory model; a short summary for training logs."""
    from trace_train.policies import ModelPolicy, PlaySettings

    policy = ModelPolicy(model, tokenizer, "model")
    settings = PlaySettings(
        rollout_cfg.max_turns,
        rollout_cfg.max_new_tokens,
        rollout_cfg.max_completion_tokens,
        0.0,
        rollout_cfg.reward_mode,
        tool_prompt=getattr(rollout_cfg, "tool_prompt", "hermes"),
        prefill_dtype=getattr(rollout_cfg, "prefill_dtype", "auto"),
        decode_dtype=getattr(rollout_cfg, "decode_dtype", "auto"),
    )
    specs = [
        EpisodeSpec(rollout_cfg.env_id, i, rollout_cfg.difficulty, split) for i in range(episodes)
    ]
    from tqdm.auto import tqdm

    records = []
    with tqdm(total=len(specs), desc=f"held-out {split}", leave=False) as bar:  # time remaining
        for i in range(0, len(specs), 8):
            records += policy.play(specs[i : i + 8], settings)
            bar.update(len(specs[i : i + 8]))
    s = summarize(records)
    return {
        "heldout/episodes": s["episodes"],
        "heldout/success": s["success_rate"],
        "heldout/success_ci95": s["success_ci95"],
        "heldout/reward": s["mean_reward"],
        **({"heldout/balanced_accuracy": s["balanced_accuracy"]} if s["decisions"] else {}),
        **{f"heldout/success/{d}": v["success_rate"] for d, v in s["decisions"].items()},
    }
