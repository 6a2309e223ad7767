"""report: Markdown, one self-contained HTML page, and JSON.

Public API::

    write_report(out_dir, analysis, capabilities, env_matches, runs, trajectories,
                 summary=None, manifest=None) -> dict[str, Path]
    build_context(...) -> dict                            # what the templates render

The HTML page has inline CSS and SVG charts (cumulative failure coverage, per-capability
delta and coverage bars), no script and no external request; a Content-Security-Policy meta
tag forbids both even if something slipped through. Every piece of text goes through
jinja2's autoescaping (HTML) or a Markdown escape applied to every expression (`finalize`),
so trajectory text cannot inject markup. Evidence quotes carry their `[S<step>]` reference.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .analyze import over_limits
from .schema import Capability, LabelRun, Trajectory

TEMPLATES = Path(__file__).resolve().parent / "templates"
EXAMPLES_PER_CAPABILITY = 3


def _md_escape(value: Any) -> str:
    """Escape text for Markdown tables and inline HTML (applied to every expression)."""
    text = "" if value is None else str(value)
    # "<" and "&" are enough to keep markup and entities inert; a lone ">" mid-line is text
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = text.replace("|", "\\|").replace("`", "\\`")
    return re.sub(r"\s*\n\s*", " ", text)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return f"[{_fmt(value[0], digits)}, {_fmt(value[1], digits)}]"
    if isinstance(value, float):
        if abs(value) < 1e-12:  # floating-point noise (a spread of 1.1e-16) is zero
            return "0"
        return (
            f"{value:.{digits}f}" if abs(value) >= 10 ** (-digits) or value == 0 else f"{value:.1e}"
        )
    return str(value)


def _environments() -> tuple[Any, Any]:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    loader = FileSystemLoader(str(TEMPLATES))
    html = Environment(
        loader=loader,
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    md = Environment(
        loader=loader,
        autoescape=False,
        finalize=_md_escape,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    for env in (html, md):
        env.filters["f"] = _fmt
    return html, md


def _examples(
    cap: str,
    verdicts: dict[str, str],
    runs: list[LabelRun],
    trajs: dict[str, Trajectory],
    verdict: str,
    limit: int,
) -> list[dict[str, Any]]:
    """Evidence for trajectories whose consensus verdict is `verdict`, from the first run agreeing."""
    out = []
    for tid, v in verdicts.items():
        if v != verdict:
            continue
        for run in runs:
            item = run.evidence.get(tid, {}).get(cap)
            if item and item["verdict"] == verdict:
                t = trajs.get(tid)
                out.append(
                    {
                        "traj_id": tid,
                        "task_id": t.task_id if t else run.tasks.get(tid, ""),
                        "run": run.attempt,
                        "evidence": item["evidence"],
                        "rationale": item["rationale"],
                    }
                )
                break
        if len(out) >= limit:
            break
    return out


def _bars(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry of the per-capability chart: mean delta and mean coverage per row."""
    height = 26
    items = []
    for i, r in enumerate(rows):
        delta = max(0.0, r.get("mean_delta") or 0.0)
        cov = max(0.0, r.get("mean_cov") or 0.0)
        items.append(
            {
                "y": 30 + i * height,
                "name": r["name"],
                "delta_w": round(delta * 300, 1),
                "cov_w": round(cov * 300, 1),
                "delta": delta,
                "cov": cov,
                "selected": r["verdict"] == "selected",
            }
        )
    return {"items": items, "height": 40 + len(rows) * height}


def _curve(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry of the cumulative coverage chart (k on x, share of failures on y)."""
    width, height, pad = 420, 220, 40
    n = max(1, len(curve))
    points = [(pad, height - pad)]
    labels = []
    for c in curve:
        x = pad + (width - 2 * pad) * c["k"] / n
        y = height - pad - (height - 2 * pad) * c["cumulative_share"]
        points.append((round(x, 1), round(y, 1)))
        labels.append(
            {"x": round(x, 1), "y": round(y, 1), "k": c["k"], "share": c["cumulative_share"]}
        )
    return {
        "points": " ".join(f"{x},{y}" for x, y in points),
        "labels": labels,
        "width": width,
        "height": height,
        "pad": pad,
    }


def _seen(trajectories: list[Trajectory], label_stage: dict[str, Any]) -> dict[str, Any]:
    """What the labeller saw: abridged transcripts (with what was cut) and flagged text."""
    from .render import RenderConfig, render

    cfg = RenderConfig(**label_stage.get("render", {}))
    abridged, flagged = [], []
    for t in trajectories:
        if not t.usable:
            continue
        r = render(t, cfg)
        if r.cut_note:
            abridged.append({"traj_id": t.traj_id, "note": r.cut_note})
        if r.flagged or r.context_flag:
            where = ["task context"] if r.context_flag else []
            flagged.append(
                {
                    "traj_id": t.traj_id,
                    "steps": ", ".join(where + [f"S{i}" for i in r.flagged]),
                    "reason": r.context_flag or next(iter(r.flagged.values())),
                }
            )
    return {"abridged": abridged, "flagged": flagged, "render": cfg.__dict__}


def _warnings(label_stage: dict[str, Any], analysis: dict[str, Any]) -> list[str]:
    """Problems that make the numbers below unreliable, shown first in every report."""
    out = []
    limits = (label_stage.get("max_unlabelled"), label_stage.get("max_flagged"))
    if "usable_failed" in label_stage and None not in limits:
        for problem in over_limits(label_stage, *limits):
            out.append(
                f"INCOMPLETE DIAGNOSIS: {problem}; the figures below rest on the rest and "
                "should not be trusted blindly. See 'Flagged and unlabelled trajectories'."
            )
    else:  # a manifest written before failures and passes were counted apart
        share, limit = label_stage.get("unlabelled_share"), label_stage.get("max_unlabelled")
        if share is not None and limit is not None and share > limit:
            out.append(
                f"INCOMPLETE DIAGNOSIS: {label_stage.get('unlabelled')} of "
                f"{label_stage.get('usable')} trajectories ({share:.0%}) could not be labelled "
                f"(limit {limit:.0%}); the figures below should not be trusted."
            )
    sensitivity = analysis.get("sensitivity") or {}
    if sensitivity and not sensitivity.get("robust", True):
        out.append(f"SENSITIVE SELECTION: {sensitivity['line']}.")
    return out


def build_context(
    analysis: dict[str, Any],
    capabilities: list[Capability],
    env_matches: list[dict[str, Any]],
    runs: list[LabelRun],
    trajectories: list[Trajectory],
    summary: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the templates show, as plain data (also the JSON report)."""
    trajs = {t.traj_id: t for t in trajectories}
    defs = {c.name: c for c in capabilities}
    matches = {m["capability"]: m for m in env_matches}
    rows = analysis["capabilities"]
    core = []
    for name in analysis["core"]:
        row = next(r for r in rows if r["name"] == name)
        verdicts = analysis["consensus"].get(name, {})
        failed = set(analysis.get("unexplained_failures", [])) | {t for r in runs for t in r.failed}
        lacking = {t: v for t, v in verdicts.items() if t in failed}
        present_ok = {t: v for t, v in verdicts.items() if t not in failed}
        cap = defs.get(name)
        core.append(
            {
                "row": row,
                "definition": cap.definition if cap else row.get("description", ""),
                "present_when": cap.present_when if cap else "",
                "lacking_when": cap.lacking_when if cap else "",
                "failures": _examples(
                    name, lacking, runs, trajs, "LACKING", EXAMPLES_PER_CAPABILITY
                ),
                "contrast": _examples(name, present_ok, runs, trajs, "PRESENT", 1),
                "envs": matches.get(name),
            }
        )
    unexplained = []
    for tid in analysis.get("unexplained_failures", []):
        t = trajs.get(tid)
        first = (
            next((s.message for s in t.steps if s.source == "user" and s.message), "") if t else ""
        )
        unexplained.append(
            {"traj_id": tid, "task_id": t.task_id if t else "", "summary": first[:160]}
        )
    stages = (manifest or {}).get("stages", {})
    seen = _seen(trajectories, stages.get("label", {}))
    warnings = _warnings(stages.get("label", {}), analysis)
    if analysis.get("flagged"):
        warnings.append(
            f"{len(analysis['flagged'])} trajectories hold text addressed to the labeller or "
            "were labelled with text withheld; they are a bucket of their own (see 'Flagged "
            "and unlabelled trajectories') and the sensitivity line says whether the "
            "selection depends on them."
        )
    return {
        "warnings": warnings,
        "seen": seen,
        "summary": summary or {},
        "params": analysis["params"],
        "totals": analysis["totals"],
        "label_stage": stages.get("label", {}),
        "core": core,
        "rows": rows,
        "curve": analysis["coverage_curve"],
        "curve_svg": _curve(analysis["coverage_curve"]),
        "bars_svg": _bars(rows),
        "unexplained": unexplained,
        "unlabelled": analysis.get("unlabelled", {}),
        "flagged": analysis.get("flagged", {}),
        "sensitivity": analysis.get("sensitivity") or {"line": "", "variants": []},
        "excluded": (summary or {}).get("excluded", {}),
        "skipped": (summary or {}).get("skipped", []),
        "ground_truth": analysis.get("ground_truth", {}),
        "env_matches": env_matches,
        "selected_capabilities": analysis.get("selected_capabilities", []),
    }


def write_report(
    out_dir: str | Path,
    analysis: dict[str, Any],
    capabilities: list[Capability],
    env_matches: list[dict[str, Any]],
    runs: list[LabelRun],
    trajectories: list[Trajectory],
    summary: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Render report.md, report.html and report.json into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = build_context(analysis, capabilities, env_matches, runs, trajectories, summary, manifest)
    html_env, md_env = _environments()
    paths = {"html": out / "report.html", "md": out / "report.md", "json": out / "report.json"}
    for key, text in (
        ("html", html_env.get_template("report.html.jinja").render(**ctx)),
        ("md", md_env.get_template("report.md.jinja").render(**ctx)),
        (
            "json",
            json.dumps(
                {k: v for k, v in ctx.items() if not k.endswith("_svg")},
                indent=2,
                ensure_ascii=False,
                default=str,
            ),
        ),
    ):
        tmp = paths[key].with_name(paths[key].name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(paths[key])
    return paths
