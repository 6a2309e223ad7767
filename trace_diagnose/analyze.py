"""analyze: from label runs to a capability selection (pure Python, no LLM).

Public API::

    load_label_runs(paths_or_glob) -> list[LabelRun]     # ours or the paper's run_XX.json
    analyze(runs, descriptions=None, *, rho=RHO, delta=DELTA, k_consistency=None,
            trajectories=None) -> dict                  # the analysis.json content

**The paper's rule, exactly** (the TRACE release's `aggregate_capabilities.py`): for
each run r and capability c, with lf/pf/lp/pp the LACKING/PRESENT counts among failed and
passed trajectories (NA excluded from the rates): `Cov = lf / total_failed`,
`ER- = lf/(lf+pf)`, `ER+ = lp/(lp+pp)`, `delta = ER- - ER+`. A run passes when
`Cov >= rho and delta >= delta_min` (both inclusive; an undefined rate fails the run). c is
selected when it passes in at least `k_consistency` runs (default 8 of 10, i.e.
`ceil(0.8 * n_runs)`), ordered by mean delta (descending). Means and population standard
deviations are over the runs where the value is defined. `selected_capabilities` reproduces
the paper's `selected_capabilities.json` entries.

**On top** (over the per-trajectory majority label across runs; a tie counts as NA):
Wilson intervals for ER- and ER+, a Newcombe interval for delta, a one-sided Fisher exact
test (LACKING over-represented among failures) with Benjamini-Hochberg q-values, mean
pairwise Cohen's kappa across runs, a greedy cumulative failure-coverage curve and the
failures no core capability explains. A paper-selected capability with fewer than
`MIN_FAIL_NON_NA` non-NA failures, fewer than `MIN_LACKING` lacking failures or no non-NA
success gets the verdict "insufficient evidence"; one whose Benjamini-Hochberg q is at least
`Q_MAX` gets "not significant". Both are left out of `core`, the list map-envs and the
report treat as the diagnosis (`selected_capabilities` stays the paper's rule).

Label runs: `run_XX.json` files holding, per capability, the six id lists
`lacking_failed, present_failed, na_failed, lacking_passed, present_passed, na_passed` and
`totals`. Ours add `format`, `unlabelled` (trajectory id -> reason; no label, so in no
rate), `unlabelled_outcomes`, `flagged` (trajectory id -> why) and `evidence`.

**Buckets and sensitivity.** Flagged trajectories (text addressed to the labeller, or
labelled only after text it misused was withheld) stay in every statistic; unlabelled ones
have no label to count. Both are reported as their own bucket (`flagged`, `unlabelled`,
each reason once per trajectory, with the runs it came from), counted by outcome in
`totals`, and `sensitivity` gives the core selection without the flagged trajectories and
with the unlabelled ones counted all LACKING and all PRESENT, with one line saying whether
the selection holds in every variant.
"""

from __future__ import annotations

import glob
import json
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .schema import LISTS, LabelRun, Trajectory
from .stats import benjamini_hochberg, cohen_kappa, fisher_greater, mean_std, newcombe, wilson

RHO = 0.10  # coverage threshold (paper)
DELTA = 0.20  # contrastive-gap threshold (paper)
CONSISTENCY = 0.8  # share of runs a capability must pass (8 of 10 in the paper)
MIN_FAIL_NON_NA = 5  # fewer non-NA failures than this: "insufficient evidence"
MIN_LACKING = 3  # fewer LACKING failures than this: "insufficient evidence"
Q_MAX = 0.10  # Benjamini-Hochberg q at or above this: "not significant"
EXAMPLES = 8  # example failed cases kept per selected capability (paper)


def _run_from_json(data: Any, path: Path) -> LabelRun:
    if not isinstance(data, dict) or not isinstance(data.get("labels"), dict):
        raise ConfigError(f"{path}: not a label run (needs a 'labels' object of capabilities)")
    failed: dict[str, None] = {}
    passed: dict[str, None] = {}
    labels: dict[str, dict[str, str]] = {}
    for cap, lists in data["labels"].items():
        missing = [k for k in LISTS if not isinstance(lists.get(k), list)]
        if missing:
            raise ConfigError(f"{path}: capability {cap!r} lacks the lists {', '.join(missing)}")
        labels[cap] = {}
        for key in LISTS:
            verdict, side = key.split("_")
            for tid in lists[key]:
                labels[cap][str(tid)] = verdict.upper()
                (failed if side == "failed" else passed)[str(tid)] = None
    totals = data.get("totals") or {}
    if totals and totals.get("total_failed") not in (None, len(failed)):
        raise ConfigError(
            f"{path}: totals.total_failed={totals['total_failed']} but the lists hold {len(failed)} failed ids"
        )
    return LabelRun(
        attempt=int(data.get("attempt", 0)),
        failed=list(failed),
        passed=list(passed),
        labels=labels,
        unlabelled=dict(data.get("unlabelled") or {}),
        evidence=dict(data.get("evidence") or {}),
        tasks=dict(data.get("tasks") or {}),
        flagged=dict(data.get("flagged") or {}),
        unlabelled_outcomes=dict(data.get("unlabelled_outcomes") or {}),
    )


def load_label_runs(paths: str | Path | Iterable[str | Path]) -> list[LabelRun]:
    """Load label runs from a glob pattern, a directory (its run_*.json) or a list of files."""
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        files = (
            sorted(p.glob("run_*.json"))
            if p.is_dir()
            else sorted(Path(f) for f in glob.glob(str(paths)))
        )
    else:
        files = [Path(f) for f in paths]
    if not files:
        raise ConfigError(f"no label runs match {paths!s} (expected files like run_01.json)")
    runs = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{f}: cannot read label run ({exc})") from exc
        runs.append(_run_from_json(data, f))
    return runs


def _rates(run: LabelRun, cap: str) -> dict[str, Any]:
    verdicts = run.labels.get(cap, {})
    count = Counter()
    for tid in run.failed:
        count[(verdicts.get(tid, "NA"), "f")] += 1
    for tid in run.passed:
        count[(verdicts.get(tid, "NA"), "p")] += 1
    lf, pf = count[("LACKING", "f")], count[("PRESENT", "f")]
    lp, pp = count[("LACKING", "p")], count[("PRESENT", "p")]
    cov = lf / len(run.failed) if run.failed else None
    er_minus = lf / (lf + pf) if lf + pf else None
    er_plus = lp / (lp + pp) if lp + pp else None
    delta = er_minus - er_plus if er_minus is not None and er_plus is not None else None
    return {
        "attempt": run.attempt,
        "lf": lf,
        "pf": pf,
        "lp": lp,
        "pp": pp,
        "cov": cov,
        "er_minus": er_minus,
        "er_plus": er_plus,
        "delta": delta,
    }


def paper_rule(
    runs: list[LabelRun], cap: str, rho: float, delta_min: float, k: int
) -> dict[str, Any]:
    """Per-run coverage and delta, runs passed, means and population spreads for one capability."""
    per_run = []
    for run in runs:
        r = _rates(run, cap)
        r["passed"] = (
            r["cov"] is not None
            and r["delta"] is not None
            and r["cov"] >= rho
            and r["delta"] >= delta_min
        )
        per_run.append(r)
    mean_cov, std_cov = mean_std([r["cov"] for r in per_run if r["cov"] is not None])
    mean_delta, std_delta = mean_std([r["delta"] for r in per_run if r["delta"] is not None])
    n_passed = sum(r["passed"] for r in per_run)
    return {
        "per_run": per_run,
        "n_runs_passed": n_passed,
        "n_runs_total": len(runs),
        "passes_consistency": n_passed >= k,
        "mean_cov": mean_cov,
        "std_cov": std_cov,
        "mean_delta": mean_delta,
        "std_delta": std_delta,
    }


def consensus(runs: list[LabelRun], caps: list[str]) -> dict[str, dict[str, str]]:
    """Majority verdict per capability and trajectory over the runs that labelled it (tie: NA)."""
    out: dict[str, dict[str, str]] = {c: {} for c in caps}
    for c in caps:
        votes: dict[str, Counter] = {}
        for run in runs:
            for tid, v in run.labels.get(c, {}).items():
                votes.setdefault(tid, Counter())[v] += 1
        for tid, counter in votes.items():
            (top, n1), *rest = counter.most_common()
            out[c][tid] = "NA" if rest and rest[0][1] == n1 else top
    return out


def _pooled(verdicts: dict[str, str], failed: list[str], passed: list[str]) -> dict[str, Any]:
    a = sum(verdicts.get(t) == "LACKING" for t in failed)
    b = sum(verdicts.get(t) == "PRESENT" for t in failed)
    c = sum(verdicts.get(t) == "LACKING" for t in passed)
    d = sum(verdicts.get(t) == "PRESENT" for t in passed)
    er_minus = a / (a + b) if a + b else None
    er_plus = c / (c + d) if c + d else None
    return {
        "table": {
            "lacking_failed": a,
            "present_failed": b,
            "lacking_passed": c,
            "present_passed": d,
        },
        "coverage": a / len(failed) if failed else None,
        "er_minus": er_minus,
        "er_minus_ci": wilson(a, a + b),
        "er_plus": er_plus,
        "er_plus_ci": wilson(c, c + d),
        "delta": er_minus - er_plus if er_minus is not None and er_plus is not None else None,
        "delta_ci": newcombe(a, a + b, c, c + d),
        "blame_precision": a / (a + c) if a + c else None,
        "fisher_p": fisher_greater(a, b, c, d),
    }


def _kappa(runs: list[LabelRun], cap: str) -> dict[str, Any]:
    kappas, agreements = [], []
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            x, y = runs[i].labels.get(cap, {}), runs[j].labels.get(cap, {})
            common = sorted(set(x) & set(y))
            if not common:
                continue
            xs, ys = [x[t] for t in common], [y[t] for t in common]
            agreements.append(sum(p == q for p, q in zip(xs, ys, strict=True)) / len(common))
            k = cohen_kappa(xs, ys)
            if k is not None:
                kappas.append(k)
    return {
        "kappa_mean": sum(kappas) / len(kappas) if kappas else None,
        "agreement_mean": sum(agreements) / len(agreements) if agreements else None,
        "pairs": len(agreements),
    }


def _verdict(rule: dict[str, Any], pooled: dict[str, Any]) -> tuple[str, str]:
    t = pooled["table"]
    if not rule["passes_consistency"]:
        return (
            "not selected",
            f"passed the per-run thresholds in {rule['n_runs_passed']} of {rule['n_runs_total']} runs",
        )
    non_na_fail = t["lacking_failed"] + t["present_failed"]
    if (
        non_na_fail < MIN_FAIL_NON_NA
        or t["lacking_failed"] < MIN_LACKING
        or t["lacking_passed"] + t["present_passed"] == 0
    ):
        return "insufficient evidence", (
            f"{t['lacking_failed']} LACKING of {non_na_fail} non-NA failures and "
            f"{t['lacking_passed'] + t['present_passed']} non-NA successes: too few to support a selection "
            f"(need >= {MIN_LACKING} LACKING, >= {MIN_FAIL_NON_NA} non-NA failures, >= 1 non-NA success)"
        )
    if pooled["bh_q"] is None or pooled["bh_q"] >= Q_MAX:
        return "not significant", (
            f"passed in {rule['n_runs_passed']} of {rule['n_runs_total']} runs, but the majority labels give "
            f"Fisher q = {pooled['bh_q'] if pooled['bh_q'] is None else round(pooled['bh_q'], 3)} >= {Q_MAX}: "
            "the contrast may be chance"
        )
    return "selected", f"passed in {rule['n_runs_passed']} of {rule['n_runs_total']} runs"


def greedy_coverage(
    verdicts: dict[str, dict[str, str]], failed: list[str], order: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Greedy max-coverage over `order` (ties keep the given order): curve and unexplained failures."""
    remaining = set(failed)
    curve, pool = [], list(order)
    covered_total = 0
    while pool and remaining:
        gains = [
            (len({t for t in remaining if verdicts[c].get(t) == "LACKING"}), -i, c)
            for i, c in enumerate(pool)
        ]
        gain, _, best = max(gains)
        if gain == 0:
            break
        remaining -= {t for t in remaining if verdicts[best].get(t) == "LACKING"}
        covered_total += gain
        pool.remove(best)
        curve.append(
            {
                "k": len(curve) + 1,
                "capability": best,
                "new_failures": gain,
                "cumulative": covered_total,
                "cumulative_share": covered_total / len(failed),
            }
        )
    return curve, [t for t in failed if t in remaining]


def ground_truth_agreement(
    verdicts: dict[str, dict[str, str]], trajectories: list[Trajectory]
) -> dict[str, Any]:
    """Precision and recall of the consensus LACKING labels against trace_gym ground truth."""
    out = {}
    with_truth = [t for t in trajectories if t.ground_truth is not None and t.usable]
    known = {c for t in with_truth for c in t.ground_truth.required + t.ground_truth.lacking}
    for cap, labels in verdicts.items():
        if cap not in known:
            continue
        tp = fp = fn = n = 0
        for t in with_truth:
            if t.traj_id not in labels:
                continue
            n += 1
            truth, pred = cap in t.ground_truth.lacking, labels[t.traj_id] == "LACKING"
            tp += truth and pred
            fp += pred and not truth
            fn += truth and not pred
        out[cap] = {
            "n": n,
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
        }
    return out


def _selection(
    runs: list[LabelRun],
    descriptions: dict[str, str] | None,
    rho: float,
    delta: float,
    k: int,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, str]], list[str], list[str]]:
    """Rows per capability (sorted as the paper's script), the consensus, failed, passed."""
    caps = list(dict.fromkeys(c for run in runs for c in run.labels))
    failed = list(dict.fromkeys(t for run in runs for t in run.failed))
    passed = list(dict.fromkeys(t for run in runs for t in run.passed))
    agreed = consensus(runs, caps)
    rows = []
    for cap in caps:
        rule = paper_rule(runs, cap, rho, delta, k)
        pooled = _pooled(agreed[cap], failed, passed)
        rows.append(
            {
                "name": cap,
                "description": (descriptions or {}).get(cap, ""),
                **rule,
                "pooled": pooled,
                "reliability": _kappa(runs, cap),
            }
        )
    for row, q in zip(
        rows, benjamini_hochberg([r["pooled"]["fisher_p"] for r in rows]), strict=True
    ):
        row["pooled"]["bh_q"] = q
        row["verdict"], row["reason"] = _verdict(row, row["pooled"])
    # Stable sort by mean delta, descending, as the paper's script; undefined deltas last.
    rows.sort(key=lambda r: -r["mean_delta"] if r["mean_delta"] is not None else math.inf)
    return rows, agreed, failed, passed


def _core(rows: list[dict[str, Any]]) -> list[str]:
    return [r["name"] for r in rows if r["passes_consistency"] and r["verdict"] == "selected"]


def analyze(
    runs: list[LabelRun],
    descriptions: dict[str, str] | None = None,
    *,
    rho: float = RHO,
    delta: float = DELTA,
    k_consistency: int | None = None,
    trajectories: list[Trajectory] | None = None,
) -> dict[str, Any]:
    """Run the paper's rule and the extra statistics; return the analysis.json content."""
    if not runs:
        raise ConfigError("no label runs to analyze")
    k = k_consistency if k_consistency is not None else math.ceil(CONSISTENCY * len(runs) - 1e-9)
    if not 1 <= k <= len(runs):
        raise ConfigError(
            f"k_consistency={k} must be between 1 and the number of runs ({len(runs)})"
        )
    rows, agreed, failed, passed = _selection(runs, descriptions, rho, delta, k)
    selected = [r for r in rows if r["passes_consistency"]]
    core = _core(rows)
    curve, unexplained = greedy_coverage(agreed, failed, core)
    buckets = bucket_summary(runs)
    return {
        "format": "trace_diagnose.analysis.v1",
        "params": {"rho": rho, "delta": delta, "k_consistency": k, "n_runs": len(runs)},
        "totals": {
            "failed": len(failed),
            "passed": len(passed),
            "unlabelled": len(buckets["unlabelled"]),
            "unlabelled_failed": buckets["unlabelled_failed"],
            "unlabelled_passed": buckets["unlabelled_passed"],
            "flagged": len(buckets["flagged"]),
            "flagged_failed": sum(t in set(failed) for t in buckets["flagged"]),
            "flagged_passed": sum(t in set(passed) for t in buckets["flagged"]),
        },
        "capabilities": rows,
        "selected_capabilities": [_paper_entry(r, runs) for r in selected],
        "core": core,
        "sensitivity": sensitivity(runs, core, buckets, descriptions, rho, delta, k),
        "coverage_curve": curve,
        "unexplained_failures": unexplained,
        "unlabelled": buckets["unlabelled"],
        "flagged": buckets["flagged"],
        "consensus": agreed,
        "ground_truth": ground_truth_agreement(agreed, trajectories) if trajectories else {},
    }


def _ranges(numbers: list[int]) -> str:
    """'1-3, 5' for [1, 2, 3, 5]."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def bucket_summary(runs: list[LabelRun]) -> dict[str, Any]:
    """The flagged and the unlabelled trajectories, each reason once per trajectory with the
    runs it came from ("runs 1-10: ..."), and how many unlabelled ones failed or passed."""

    def grouped(pairs: dict[str, dict[str, list[int]]]) -> dict[str, list[str]]:
        out = {}
        for tid, reasons in pairs.items():
            out[tid] = [
                f"run{'s' if len(rs) > 1 else ''} {_ranges(sorted(rs))}: {why}"
                for why, rs in reasons.items()
            ]
        return out

    unlabelled: dict[str, dict[str, list[int]]] = {}
    flagged: dict[str, dict[str, list[int]]] = {}
    outcome: dict[str, str] = {}
    for run in runs:
        for tid, why in run.unlabelled.items():
            unlabelled.setdefault(tid, {}).setdefault(why, []).append(run.attempt)
        for tid, why in run.flagged.items():
            flagged.setdefault(tid, {}).setdefault(why, []).append(run.attempt)
        outcome.update({t: "failure" for t in run.failed})
        outcome.update({t: "success" for t in run.passed})
        outcome.update(run.unlabelled_outcomes)
    return {
        "unlabelled": grouped(unlabelled),
        "flagged": grouped(flagged),
        "unlabelled_failed": sum(outcome.get(t) == "failure" for t in unlabelled),
        "unlabelled_passed": sum(outcome.get(t) == "success" for t in unlabelled),
        "outcomes": outcome,
    }


def _without(runs: list[LabelRun], drop: set[str]) -> list[LabelRun]:
    return [
        LabelRun(
            attempt=r.attempt,
            failed=[t for t in r.failed if t not in drop],
            passed=[t for t in r.passed if t not in drop],
            labels={
                c: {t: v for t, v in vs.items() if t not in drop} for c, vs in r.labels.items()
            },
        )
        for r in runs
    ]


def _imputed(runs: list[LabelRun], outcomes: dict[str, str], verdict: str) -> list[LabelRun]:
    """Every run with its unlabelled trajectories of known outcome labelled `verdict` for
    every capability: the bound the sensitivity analysis needs."""
    out = []
    for r in runs:
        add = [t for t in r.unlabelled if outcomes.get(t) in ("failure", "success")]
        labels = {c: {**vs, **{t: verdict for t in add}} for c, vs in r.labels.items()}
        out.append(
            LabelRun(
                attempt=r.attempt,
                failed=r.failed + [t for t in add if outcomes[t] == "failure"],
                passed=r.passed + [t for t in add if outcomes[t] == "success"],
                labels=labels,
            )
        )
    return out


def sensitivity(
    runs: list[LabelRun],
    core: list[str],
    buckets: dict[str, Any],
    descriptions: dict[str, str] | None,
    rho: float,
    delta: float,
    k: int,
) -> dict[str, Any]:
    """How the core selection changes without the flagged trajectories and with the
    unlabelled ones counted all LACKING or all PRESENT (the two bounds of what they could
    have been). `robust` is True when every variant selects the same capabilities."""
    flagged = set(buckets["flagged"])
    outcomes = buckets["outcomes"]
    unlabelled = [t for t in buckets["unlabelled"] if outcomes.get(t) in ("failure", "success")]
    variants = []
    if flagged:
        n_fail = sum(outcomes.get(t) == "failure" for t in flagged)
        name = (
            f"without the {len(flagged)} flagged ({n_fail} failed, {len(flagged) - n_fail} passed)"
        )
        variants.append((name, _without(runs, flagged)))
    if unlabelled:
        for verdict in ("LACKING", "PRESENT"):
            name = f"with the {len(unlabelled)} unlabelled counted {verdict}"
            variants.append((name, _imputed(runs, outcomes, verdict)))
    rows = []
    for name, variant in variants:
        if not any(r.failed or r.passed for r in variant):
            rows.append({"name": name, "core": [], "same": not core})
            continue
        picked = _core(_selection(variant, descriptions, rho, delta, k)[0])
        rows.append({"name": name, "core": picked, "same": set(picked) == set(core)})
    robust = all(r["same"] for r in rows)
    shown = ", ".join(core) or "none"
    if not rows:
        line = f"selection ({shown}) rests on every usable trajectory: none flagged or unlabelled"
    elif robust:
        line = f"selection ({shown}) unchanged " + " and ".join(r["name"] for r in rows)
    else:
        line = (
            f"selection depends on flagged or unlabelled trajectories: as labelled {shown}; "
            + "; ".join(f"{r['name']}: {', '.join(r['core']) or 'none'}" for r in rows)
        )
    return {"variants": rows, "robust": robust, "line": line}


def _paper_entry(row: dict[str, Any], runs: list[LabelRun]) -> dict[str, Any]:
    lacking = set()
    for run in runs:
        fails = set(run.failed)
        lacking |= {
            t for t, v in run.labels.get(row["name"], {}).items() if v == "LACKING" and t in fails
        }
    return {
        "skill": row["name"],
        "description": row["description"],
        "mean_cov": row["mean_cov"],
        "std_cov": row["std_cov"],
        "mean_delta": row["mean_delta"],
        "std_delta": row["std_delta"],
        "n_runs_passed": row["n_runs_passed"],
        "n_runs_total": row["n_runs_total"],
        "passes_consistency": row["passes_consistency"],
        "example_failed_cases": sorted(lacking)[:EXAMPLES],
        "status": "PENDING",
    }


def descriptions_from_file(path: Path) -> dict[str, str]:
    """Capability descriptions from our capabilities.json or the paper's candidate file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read capabilities ({exc})") from exc
    items = (
        data.get("capabilities") or data.get("candidates") or [] if isinstance(data, dict) else data
    )
    return {
        c["name"]: c.get("definition") or c.get("description", "")
        for c in items
        if isinstance(c, dict) and "name" in c
    }


def lacking_rates(runs: list[LabelRun]) -> dict[str, dict[str, Any]]:
    """Per capability, how often it is LACKING where it was judged: among the trajectories
    labelled PRESENT or LACKING (NA excluded, so tasks that do not need the capability do not
    dilute it), failed and passed together. ``rate`` is the mean over runs; ``lacking`` and
    ``judged`` count the first run; ``rate`` is None where no trajectory was judged."""
    out: dict[str, dict[str, Any]] = {}
    caps = sorted({c for r in runs for c in r.labels})
    for cap in caps:
        rates, first = [], None
        for r in runs:
            verdicts = [r.labels.get(cap, {}).get(t) for t in r.failed + r.passed]
            lacking = sum(v == "LACKING" for v in verdicts)
            judged = lacking + sum(v == "PRESENT" for v in verdicts)
            if first is None:
                first = (lacking, judged)
            if judged:
                rates.append(lacking / judged)
        out[cap] = {
            "rate": sum(rates) / len(rates) if rates else None,
            "lacking": first[0] if first else 0,
            "judged": first[1] if first else 0,
            "runs": len(runs),
        }
    return out


def over_limits(counts: dict[str, Any], max_unlabelled: float, max_flagged: float) -> list[str]:
    """One phrase per bucket whose share of the failed or of the passed trajectories is over
    its limit (the counts of `_by_outcome`, as the manifest keeps them)."""
    problems = []
    for bucket, limit, option, what in (
        ("unlabelled", max_unlabelled, "--max-unlabelled", "could not be labelled"),
        ("flagged", max_flagged, "--max-flagged", "hold text addressed to the labeller"),
    ):
        shares = {}
        for side in ("failed", "passed"):
            n, total = counts.get(f"{bucket}_{side}", 0), counts.get(f"usable_{side}", 0)
            shares[side] = (n, total, n / total if total else 0.0)
        if any(share > limit for _, _, share in shares.values()):
            f, p = shares["failed"], shares["passed"]
            problems.append(
                f"{f[0]} of {f[1]} failed ({f[2]:.0%}) and {p[0]} of {p[1]} passed ({p[2]:.0%}) "
                f"trajectories {what} (limit {limit:.0%} of each, {option})"
            )
    return problems
