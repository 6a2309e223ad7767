"""analyze: the paper's rule on the released runs, our extras, ground-truth label runs."""

from __future__ import annotations

import json
import math

import pytest

from trace_diagnose.analyze import analyze, descriptions_from_file, lacking_rates, load_label_runs
from trace_diagnose.errors import ConfigError
from trace_diagnose.ingest import ingest
from trace_diagnose.label import labels_from_ground_truth
from trace_diagnose.schema import LabelRun
from trace_diagnose.stats import (
    benjamini_hochberg,
    cohen_kappa,
    fisher_greater,
    mcnemar_exact,
    mcnemar_power,
    newcombe,
    newcombe_paired,
    wilson,
)

from .paths import FIXTURES, TRACE_SELECTION, need


def test_reproduces_the_papers_selected_capabilities_exactly():
    ref_dir = need(TRACE_SELECTION)
    runs = load_label_runs(str(ref_dir / "run_*.json"))
    result = analyze(runs, descriptions_from_file(ref_dir / "candidate_capabilities.json"))
    expected = json.loads((ref_dir / "selected_capabilities.json").read_text())
    got = result["selected_capabilities"]
    assert [g["skill"] for g in got] == [e["skill"] for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert g["n_runs_passed"] == e["n_runs_passed"]
        assert g["n_runs_total"] == e["n_runs_total"] == 10
        assert g["passes_consistency"] is e["passes_consistency"]
        for key in ("mean_cov", "std_cov", "mean_delta", "std_delta"):
            assert math.isclose(g[key], e[key], rel_tol=0, abs_tol=1e-12), (g["skill"], key)
        assert g["example_failed_cases"] == e["example_failed_cases"]
        assert g["description"] == e["description"]
    not_selected = {
        r["name"]: r["n_runs_passed"] for r in result["capabilities"] if not r["passes_consistency"]
    }
    assert not_selected == {
        "claim_verification_against_system": 1,
        "conditional_instruction_following": 7,
        "information_gathering_before_action": 1,
    }


def test_coverage_threshold_is_inclusive():
    ref_dir = need(TRACE_SELECTION)
    runs = load_label_runs(str(ref_dir / "run_*.json"))
    row = next(
        r for r in analyze(runs)["capabilities"] if r["name"] == "aggregation_across_records"
    )
    run6 = next(r for r in row["per_run"] if r["attempt"] == 6)
    assert run6["cov"] == 0.1 and run6["passed"]


def _run(attempt, failed, passed, labels, unlabelled=None):
    return LabelRun(attempt, failed, passed, labels, unlabelled or {})


def test_small_sample_gets_insufficient_evidence_and_stays_out_of_core():
    # 3 failures, 2 lacking: the paper rule passes, but the sample is too small to trust.
    labels = {
        "x": {"f1": "LACKING", "f2": "LACKING", "f3": "PRESENT", "p1": "PRESENT", "p2": "PRESENT"}
    }
    runs = [_run(i, ["f1", "f2", "f3"], ["p1", "p2"], labels) for i in range(1, 4)]
    result = analyze(runs)
    row = result["capabilities"][0]
    assert row["passes_consistency"] and row["verdict"] == "insufficient evidence"
    assert [s["skill"] for s in result["selected_capabilities"]] == ["x"]
    assert result["core"] == []


def test_pooled_statistics_match_independent_computation():
    failed = [f"f{i}" for i in range(20)]
    passed = [f"p{i}" for i in range(20)]
    lab = {t: ("LACKING" if i < 12 else "PRESENT") for i, t in enumerate(failed)}
    lab |= {
        t: ("LACKING" if i < 2 else "PRESENT" if i < 18 else "NA") for i, t in enumerate(passed)
    }
    result = analyze([_run(1, failed, passed, {"x": lab})], k_consistency=1)
    pooled = result["capabilities"][0]["pooled"]
    assert pooled["table"] == {
        "lacking_failed": 12,
        "present_failed": 8,
        "lacking_passed": 2,
        "present_passed": 16,
    }
    assert pooled["delta"] == pytest.approx(12 / 20 - 2 / 18)
    # Hypergeometric tail computed independently: P(X >= 12), X ~ HG(N=38, K=14, n=20).
    tail = sum(math.comb(14, x) * math.comb(24, 20 - x) for x in range(12, 15)) / math.comb(38, 20)
    assert pooled["fisher_p"] == pytest.approx(tail, rel=1e-12)
    assert result["core"] == ["x"]
    assert result["coverage_curve"] == [
        {"k": 1, "capability": "x", "new_failures": 12, "cumulative": 12, "cumulative_share": 0.6}
    ]
    assert result["unexplained_failures"] == failed[12:]


def test_unlabelled_trajectories_have_no_rate_but_stay_a_counted_bucket():
    labels = {"x": {"f1": "LACKING", "p1": "PRESENT"}}
    run = _run(1, ["f1"], ["p1"], labels, unlabelled={"f2": "schema never valid"})
    run.unlabelled_outcomes = {"f2": "failure"}
    result = analyze([run], k_consistency=1)
    assert result["totals"]["unlabelled"] == 1 and result["totals"]["unlabelled_failed"] == 1
    assert result["totals"]["unlabelled_passed"] == 0
    assert result["capabilities"][0]["per_run"][0]["cov"] == 1.0
    assert result["unlabelled"] == {"f2": ["run 1: schema never valid"]}


def test_each_reason_is_shown_once_per_trajectory_with_its_runs():
    labels = {"x": {"f1": "LACKING", "p1": "PRESENT"}}
    why = "invalid after 2 repair attempts: " + "a long reason " * 12
    runs = [_run(i, ["f1"], ["p1"], labels, {"f2": why}) for i in (1, 2, 3, 5)]
    runs.append(_run(4, ["f1"], ["p1"], labels, {"f2": "timeout"}))
    result = analyze(runs, k_consistency=1)
    assert result["unlabelled"] == {"f2": [f"runs 1-3, 5: {why}", "run 4: timeout"]}


def _contrast(n_fail, lacking_fail, n_pass, lacking_pass, prefix=""):
    """Failures and passes with the given number of LACKING labels for capability x."""
    failed = [f"{prefix}f{i}" for i in range(n_fail)]
    passed = [f"{prefix}p{i}" for i in range(n_pass)]
    verdicts = {t: "LACKING" if i < lacking_fail else "PRESENT" for i, t in enumerate(failed)}
    verdicts |= {t: "LACKING" if i < lacking_pass else "PRESENT" for i, t in enumerate(passed)}
    return failed, passed, verdicts


def test_sensitivity_says_when_the_selection_rests_on_flagged_trajectories():
    # 20 clean failures with 4 LACKING against 20 passes with 1: delta 0.15, under the rule;
    # 6 flagged failures, all LACKING, push it over. Without them x is not selected.
    failed, passed, verdicts = _contrast(20, 4, 20, 1)
    bad = [f"bad{i}" for i in range(6)]
    verdicts |= {t: "LACKING" for t in bad}
    runs = []
    for i in range(1, 4):
        run = _run(i, failed + bad, passed, {"x": verdicts})
        run.flagged = {t: "text addressed to the labeller at S3" for t in bad}
        runs.append(run)
    result = analyze(runs)
    assert result["core"] == ["x"] and result["totals"]["flagged_failed"] == 6
    sens = result["sensitivity"]
    assert not sens["robust"]
    assert sens["variants"] == [
        {"name": "without the 6 flagged (6 failed, 0 passed)", "core": [], "same": False}
    ]
    assert sens["line"].startswith("selection depends on flagged or unlabelled trajectories")
    assert result["flagged"]["bad0"] == ["runs 1-3: text addressed to the labeller at S3"]


def test_sensitivity_bounds_unlabelled_failures_both_ways():
    failed, passed, verdicts = _contrast(30, 18, 30, 3)
    runs = []
    for i in range(1, 4):
        run = _run(i, failed, passed, {"x": verdicts}, {"u1": "timeout", "u2": "timeout"})
        run.unlabelled_outcomes = {"u1": "failure", "u2": "success"}
        runs.append(run)
    sens = analyze(runs)["sensitivity"]
    assert [v["name"] for v in sens["variants"]] == [
        "with the 2 unlabelled counted LACKING",
        "with the 2 unlabelled counted PRESENT",
    ]
    assert sens["robust"] and all(v["core"] == ["x"] for v in sens["variants"])
    assert sens["line"] == (
        "selection (x) unchanged with the 2 unlabelled counted LACKING and with the 2 "
        "unlabelled counted PRESENT"
    )


def test_run_json_round_trip_keeps_the_papers_layout(tmp_path):
    labels = {"x": {"f1": "LACKING", "f2": "NA", "p1": "PRESENT"}}
    run = _run(3, ["f1", "f2"], ["p1"], labels, {"f9": "timeout"})
    data = run.to_json()
    assert data["labels"]["x"] == {
        "lacking_failed": ["f1"],
        "present_failed": [],
        "na_failed": ["f2"],
        "lacking_passed": [],
        "present_passed": ["p1"],
        "na_passed": [],
    }
    (tmp_path / "run_03.json").write_text(json.dumps(data))
    back = load_label_runs(tmp_path)[0]
    assert back.labels == labels and back.unlabelled == {"f9": "timeout"} and back.attempt == 3


def test_bad_run_files_raise_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no label runs match"):
        load_label_runs(str(tmp_path / "run_*.json"))
    (tmp_path / "run_01.json").write_text('{"labels": {"x": {"lacking_failed": []}}}')
    with pytest.raises(ConfigError, match="lacks the lists"):
        load_label_runs(tmp_path)


def test_labels_from_ground_truth_feed_the_same_analysis():
    trajs = ingest(FIXTURES / "episodes.jsonl")
    runs = labels_from_ground_truth(
        trajs, ["precondition_verification", "tool_call_precision", "other"]
    )
    run = runs[0]
    ok, bad = (t.traj_id for t in trajs)
    assert run.labels["precondition_verification"] == {ok: "PRESENT", bad: "LACKING"}
    assert run.labels["tool_call_precision"] == {ok: "NA", bad: "PRESENT"}
    assert run.labels["other"] == {ok: "NA", bad: "NA"}
    result = analyze(runs, trajectories=trajs)
    assert result["params"]["k_consistency"] == 1
    gt = result["ground_truth"]["precondition_verification"]
    assert gt["precision"] == 1.0 and gt["recall"] == 1.0
    assert "other" not in result["ground_truth"]


def test_lacking_rates_count_judged_trajectories_and_average_runs():
    a = {"x": {"f1": "LACKING", "f2": "PRESENT", "p1": "PRESENT", "p2": "NA"}, "y": {"f1": "NA"}}
    b = {"x": {"f1": "LACKING", "f2": "LACKING", "p1": "PRESENT", "p2": "NA"}, "y": {"f1": "NA"}}
    rates = lacking_rates(
        [_run(1, ["f1", "f2"], ["p1", "p2"], a), _run(2, ["f1", "f2"], ["p1", "p2"], b)]
    )
    # run 1: 1 of 3 judged (p2 is NA); run 2: 2 of 3
    assert rates["x"]["rate"] == pytest.approx(0.5)
    assert (rates["x"]["lacking"], rates["x"]["judged"], rates["x"]["runs"]) == (1, 3, 2)
    assert rates["y"]["rate"] is None and rates["y"]["judged"] == 0


def test_kappa_across_runs():
    a = {"x": {"f1": "LACKING", "f2": "PRESENT", "p1": "PRESENT", "p2": "NA"}}
    b = {"x": {"f1": "LACKING", "f2": "LACKING", "p1": "PRESENT", "p2": "NA"}}
    result = analyze(
        [_run(1, ["f1", "f2"], ["p1", "p2"], a), _run(2, ["f1", "f2"], ["p1", "p2"], b)]
    )
    rel = result["capabilities"][0]["reliability"]
    assert rel["agreement_mean"] == 0.75
    assert rel["kappa_mean"] == pytest.approx(
        cohen_kappa(list(a["x"].values()), list(b["x"].values()))
    )


def test_stats_against_hand_values():
    lo, hi = wilson(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)  # Newcombe (1998) table I
    lo, hi = newcombe(56, 70, 48, 80)  # Newcombe (1998) example: 0.0524 to 0.3339
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    lo, hi = newcombe_paired(36, 12, 2, 0)  # Newcombe (1998b) example: 0.0569 to 0.3404
    assert (round(lo, 4), round(hi, 4)) == (0.0569, 0.3404)
    assert newcombe_paired(0, 0, 0, 0) is None
    assert mcnemar_exact(11, 3) == mcnemar_exact(3, 11) == pytest.approx(2 * 470 / 2**14)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 2**10)
    assert fisher_greater(3, 1, 1, 3) == pytest.approx(17 / 70)
    assert benjamini_hochberg([0.01, 0.04, 0.03, None]) == [0.03, 0.04, 0.04, None]
    assert cohen_kappa(["a", "a", "b", "b"], ["a", "b", "b", "b"]) == pytest.approx(0.5)
    assert cohen_kappa(["a", "a"], ["a", "a"]) is None


def test_mcnemar_power_matches_a_simulation_and_holds_its_level():
    import random

    rng = random.Random(0)
    n, discordant, difference = 60, 0.3, 0.15
    win = (discordant + difference) / (2 * discordant)
    hits = 0
    for _ in range(4000):
        d = sum(rng.random() < discordant for _ in range(n))
        wins = sum(rng.random() < win for _ in range(d))
        hits += wins > d - wins and mcnemar_exact(d - wins, wins) < 0.05
    assert mcnemar_power(n, discordant, difference) == pytest.approx(hits / 4000, abs=0.025)
    # no effect: rejecting in one direction happens at most alpha / 2 of the time
    assert mcnemar_power(160, 0.2, 0.0) <= 0.025
    assert mcnemar_power(240, 0.2, 0.092) > mcnemar_power(160, 0.2, 0.092)
    with pytest.raises(ValueError, match="difference <= discordant"):
        mcnemar_power(10, 0.1, 0.2)
