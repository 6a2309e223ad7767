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
"""

from __future__ import annotations

import json
import math
import statistics
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
    policy = policy or parse_policy(cfg.policy, settings)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    episodes_path = out / "episodes.jsonl"
    episodes_path.write_text("")
    batch = getattr(policy, "batch_size", None) or cfg.batch_size
    summary: dict[str, Any] = {
        "policy": policy.name,
        "split": cfg.split,
        "difficulty": cfg.difficulty,
        "envs": {},
    }
    all_records = []
    bar = tqdm(
        total=cfg.episodes * len(env_ids), desc=f"eval {label or policy.name}", disable=not progress
    )
    for env_id in env_ids:
        specs, records = episode_specs(env_id, cfg), []
        for i in range(0, len(specs), batch):
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
