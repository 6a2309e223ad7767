"""The final report of ``trace run``: one self-contained HTML page plus JSON.

Base vs each single adapter vs routed vs mixture (and, with ``plain_grpo``, vs plain GRPO on the
target at the same rollouts) on the target's held-out split (success and mean reward with 95 %
intervals), the validation gates of every synthesised environment, the LACKING rate per capability
before and after training (re-diagnosis), per-capability success before and after, success per
decision class with the balanced accuracy (where the target's environments declare decisions),
rollouts spent per adapter, the diagnosis summary, and links to every artifact of the run. Inline CSS and SVG
only; every string is escaped by jinja2's autoescape; the page makes no external request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from trace_diagnose.stats import newcombe, newcombe_paired
from trace_gym.episodes import read_episodes
from trace_train.pipeline.config import COMPOSITIONS, PLAIN_GRPO
from trace_train.runlog import training_time

BAR_WIDTH = 420
"""Pixel width of a 100 % bar in the success chart."""
LABEL_WIDTH = 290
"""Pixel width of the policy-name column left of the bars."""


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _rollouts(log: Path) -> dict[str, Any]:
    """Rollouts and steps a GRPO run used, and its held-out result, from training_log.jsonl."""
    if not log.exists():
        return {}
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    steps = [x for x in lines if "event" not in x]
    return {
        "steps": len(steps),
        "rollouts": max((x.get("rollouts/total", 0) for x in steps), default=0),
        "seconds": training_time(lines)["train_seconds"],
        "mean_reward_last": steps[-1].get("reward/mean") if steps else None,
    }


def _rel(run: Any, path: str | Path) -> str:
    """A path as the report links it: relative to the run folder the page sits in."""
    return os.path.relpath(Path(path).resolve(), run.dir.resolve())


def _outcomes(episodes: Path) -> dict[str, bool] | None:
    """Success per task id of one policy's evaluation, or None when a task was played more
    than once (or the log is missing): then there is no one-to-one pairing to use."""
    if not episodes.exists():
        return None
    # read_episodes splits at "\n" only: str.splitlines would also split inside a record at a
    # U+2028 the model wrote (episodes are written with ensure_ascii=False).
    lines = list(read_episodes(episodes))
    outcomes = {x["task_id"]: bool(x["is_success"]) for x in lines if "task_id" in x}
    return outcomes if len(outcomes) == len(lines) else None


def _policy_rows(run: Any) -> list[dict[str, Any]]:
    rows, outcomes = [], {}
    for name, path in run.output("evaluate").get("summaries", {}).items():
        summary = _read_json(Path(path))
        if summary is None:
            continue
        outcomes[name] = _outcomes(Path(path).with_name("episodes.jsonl"))
        overall = summary["overall"]
        lo, hi = overall["success_ci95"]
        rows.append(
            {
                "name": name,
                "policy": summary.get("policy", name),
                "episodes": overall["episodes"],
                "success": overall["success_rate"],
                "success_lo": lo,
                "success_hi": hi,
                "reward": overall["mean_reward"],
                "reward_ci": overall["mean_reward_ci95"],
                "capabilities": overall.get("capabilities", {}),
                "decisions": overall.get("decisions", {}),
                "balanced_accuracy": overall.get("balanced_accuracy"),
                "episodes_path": _rel(run, Path(path).with_name("episodes.jsonl")),
            }
        )
    base = next((r for r in rows if r["name"] == "base"), None)
    plain = next((r for r in rows if r["name"] == PLAIN_GRPO), None)

    def against(reference: dict[str, Any] | None, r: dict[str, Any]) -> dict[str, Any] | None:
        if reference is None or r is reference:
            return None
        return versus(reference, r, (outcomes[reference["name"]], outcomes[r["name"]]))

    for r in rows:
        r["vs_base"] = against(base, r)
        # The paper's comparison: TRACE's policies against plain GRPO at the same rollouts.
        trace_policy = r["name"] in COMPOSITIONS or r["name"].startswith("adapter:")
        r["vs_plain_grpo"] = against(plain, r) if trace_policy else None
    return rows


def versus(
    before: dict[str, Any],
    after: dict[str, Any],
    outcomes: tuple[dict[str, bool] | None, dict[str, bool] | None] | None = None,
) -> dict[str, Any]:
    """Success of ``after`` minus ``before`` with a 95 % interval, and what it says:
    ``improved`` / ``worse`` only when the interval excludes zero.

    Policies evaluated on the same tasks (``outcomes``: success per task id of each, the same
    ids) get the paired interval (Newcombe 1998b): it uses that two policies agree on most
    tasks, so it is narrower than the two-sample one (Newcombe 1998), used otherwise."""
    n0, n1 = before["episodes"], after["episodes"]
    k0, k1 = round(before["success"] * n0), round(after["success"] * n1)
    first, then = outcomes or (None, None)
    if first and then and first.keys() == then.keys():
        both = sum(first[t] and then[t] for t in first)
        gained = sum(then[t] and not first[t] for t in first)
        lost = sum(first[t] and not then[t] for t in first)
        lo, hi = newcombe_paired(both, gained, lost, len(first) - both - gained - lost) or (-1.0, 1.0)  # fmt: skip
        interval = "paired"
    else:
        lo, hi = newcombe(k1, n1, k0, n0) or (-1.0, 1.0)
        interval = "unpaired"
    verdict = "improved" if lo > 0 else "worse" if hi < 0 else "no measurable change"
    return {"diff": k1 / n1 - k0 / n0, "lo": lo, "hi": hi, "verdict": verdict, "interval": interval}


def _interval(v: dict[str, Any]) -> str:
    unpaired = ", unpaired" if v["interval"] == "unpaired" else ""
    return f"[{v['lo']:+.0%}, {v['hi']:+.0%}{unpaired}]"


def closing_summary(run: Any) -> list[str]:
    """What improved over the base agent, with intervals: the last lines ``trace run`` prints."""
    rows = _policy_rows(run)
    if not rows:
        return []
    lines = [f"held-out success on {run.config.target} ({run.config.evaluate.split} split):"]
    for r in rows:
        line = (
            f"  {r['name']:<32} {r['success']:6.1%}  "
            f"(95 % {r['success_lo']:.0%}-{r['success_hi']:.0%}, n={r['episodes']})"
        )
        if r["balanced_accuracy"] is not None:
            line += f"  balanced accuracy {r['balanced_accuracy']:.0%}"
        if r["vs_base"]:
            v = r["vs_base"]
            line += f"  vs base {v['diff']:+.0%} {_interval(v)}: {v['verdict']}"
        lines.append(line)
    plain = run.output("train").get("plain_grpo")
    against = [r for r in rows if r["vs_plain_grpo"]]
    if plain and against:
        lines.append(
            f"TRACE against plain GRPO on the target, both at {plain['rollouts']} rollouts:"
        )
        for r in against:
            v = r["vs_plain_grpo"]
            lines.append(
                f"  {r['name']:<32} {v['diff']:+.0%} {_interval(v)}: "
                + {"improved": "better", "worse": "worse"}.get(v["verdict"], v["verdict"])
            )
    return lines


def _chart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry of the success chart (bars with 95 % interval whiskers)."""
    bars = []
    for i, r in enumerate(rows):
        y = 10 + i * 34
        bars.append(
            {
                "label": r["name"],
                "y": y,
                "w": round(BAR_WIDTH * r["success"], 1),
                "lo": round(LABEL_WIDTH + BAR_WIDTH * r["success_lo"], 1),
                "hi": round(LABEL_WIDTH + BAR_WIDTH * r["success_hi"], 1),
                "text": f"{r['success']:.0%}",
            }
        )
    return {
        "bars": bars,
        "height": 20 + 34 * len(rows),
        "width": LABEL_WIDTH + BAR_WIDTH + 60,
        "x0": LABEL_WIDTH,
    }


def _capability_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    caps = sorted({c for r in rows for c in r["capabilities"]})
    table = []
    for cap in caps:
        cells = []
        for r in rows:
            c = r["capabilities"].get(cap)
            cells.append(None if c is None else {"rate": c["success_rate"], "n": c["n"]})
        table.append({"capability": cap, "cells": cells})
    return {"columns": [r["name"] for r in rows], "rows": table}


def _decision_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Success per decision class (rows) and policy (columns), and each policy's balanced
    accuracy; no rows when the target declares no decisions."""
    classes = sorted({d for r in rows for d in r["decisions"]})
    table = []
    for decision in classes:
        cells = []
        for r in rows:
            c = r["decisions"].get(decision)
            cells.append(None if c is None else {"rate": c["success_rate"], "n": c["n"]})
        table.append({"decision": decision, "cells": cells})
    return {
        "columns": [r["name"] for r in rows],
        "rows": table,
        "balanced": [r["balanced_accuracy"] for r in rows],
    }


def _moe_stats(run: Any) -> dict[str, Any]:
    folder = run.output("compose").get("moe")
    config = _read_json(Path(folder) / "trace_moe_config.json") if folder else None
    return (config or {}).get("stats", {})


def _synthesized(run: Any) -> list[dict[str, Any]]:
    """Per capability the synthesize stage handled: outcome, attempts and the last attempt's
    gates (name, status, reason), or the request file written for later."""
    rows = []
    for cap, info in run.output("synthesize").get("environments", {}).items():
        rows.append(
            {
                "capability": cap,
                **info,
                "request": _rel(run, info["request"]) if info.get("request") else None,
                "record": _rel(run, info["record"]) if info.get("record") else None,
            }
        )
    return rows


def _plain_grpo(run: Any) -> dict[str, Any] | None:
    """The plain-GRPO baseline's run, shown beside the adapters it is matched against."""
    plain = run.output("train").get("plain_grpo")
    if not plain:
        return None
    log = Path(plain["adapter"]).parent / "training_log.jsonl"
    return {**plain, **_rollouts(log), "adapter": _rel(run, plain["adapter"]),
            "log": _rel(run, log)}  # fmt: skip


def build_context(run: Any) -> dict[str, Any]:
    cfg = run.config
    analysis = _read_json(run.path("diagnose", "analysis.json")) or {}
    rows = _policy_rows(run)
    adapters = run.output("train").get("adapters", {})
    diagnose = run.output("diagnose")
    return {
        "target": cfg.target,
        "model": cfg.model,
        "base_model": run.base_model if run.output("warmstart") else cfg.model,
        "base_policy": run.output("rollout-base").get("policy"),
        "trajectories": run.output("rollout-base").get("trajectories", []),
        "diagnosed_tasks": run.output("rollout-base").get("tasks"),
        "warm_start": run.output("warmstart"),
        "report_note": cfg.report_note,
        "diagnosis_method": diagnose.get("method"),
        "core": analysis.get("core", []),
        "capability_stats": [
            {
                "name": c["name"],
                "mean_cov": c.get("mean_cov"),
                "mean_delta": c.get("mean_delta"),
                "verdict": c.get("verdict"),
                "reason": c.get("reason"),
            }
            for c in analysis.get("capabilities", [])
        ],
        "totals": analysis.get("totals", {}),
        "ground_truth": analysis.get("ground_truth", {}),
        "env_plan": run.training_plan(),
        "synthesized": _synthesized(run),
        "adapters": [
            {
                "capability": cap,
                **info,
                "adapter": _rel(run, info["adapter"]),
                "log": _rel(run, Path(info["adapter"]).parent / "training_log.jsonl"),
                **_rollouts(Path(info["adapter"]).parent / "training_log.jsonl"),
            }
            for cap, info in adapters.items()
        ],
        "plain_grpo": _plain_grpo(run),
        "policies": rows,
        "chart": _chart(rows),
        "cap_table": _capability_table(rows),
        "decision_table": _decision_table(rows),
        "compose": {k: _rel(run, v) for k, v in run.output("compose").items()},
        "routing_check": _read_json(run.path("compose", "routing_check.json")) or {},
        "moe_stats": _moe_stats(run),
        "rediagnosis": _read_json(run.path("rediagnose", "lacking.json")) or {},
        "eval_split": cfg.evaluate.split,
        "diagnosis_report": diagnose.get("report"),
        "stages": run.state,
        "run_dir": str(run.dir),
    }


def write_run_report(run: Any) -> dict[str, Path]:
    """Write ``report.html`` and ``report.json`` into the run folder."""
    ctx = build_context(run)
    env = Environment(
        loader=PackageLoader("trace_train", "templates"),
        autoescape=select_autoescape(["html", "jinja"]),
    )
    html = env.get_template("run_report.html.jinja").render(**ctx)
    paths = {"html": run.path("report.html"), "json": run.path("report.json")}
    paths["html"].write_text(html, encoding="utf-8")
    paths["json"].write_text(json.dumps(ctx, indent=2, default=str), encoding="utf-8")
    return paths
