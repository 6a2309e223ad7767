"""Calibration report: statistics on hand-made groups, the band flags, agents, the CLI hook."""

from __future__ import annotations

import argparse
import json
import math

import pytest

import trace_gym  # noqa: F401  (registers the ids)
from trace_gym.errors import ConfigError, UnknownEnvError
from trace_gym.validation.calibrate import (
    add_calibrate_parser,
    agent_for_rollout,
    calibrate,
    pass_at_k,
    summarize,
)

ENV = "trace/precondition-v0"


def test_pass_at_k_matches_the_closed_form() -> None:
    assert pass_at_k(16, 0, 4) == 0.0
    assert pass_at_k(16, 16, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
    assert pass_at_k(4, 2, 3) == 1.0  # fewer failures than k: some sample must pass
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_summarize_counts_groups_and_flags_the_band() -> None:
    rewards = [[1.0, 1.0], [0.0, 0.0], [0.5, 0.0], [1.0, 0.5]]
    successes = [[True, True], [False, False], [False, False], [True, False]]
    r = summarize(rewards, successes, env_id="x", agent="a")
    assert r.n_episodes == 8 and r.seeds == 4 and r.group == 2
    assert r.mean_reward == pytest.approx(4.0 / 8)
    assert r.success_rate == pytest.approx(3 / 8)
    assert r.all_success_groups == pytest.approx(0.25)
    assert r.all_zero_groups == pytest.approx(0.25)
    assert r.constant_groups == pytest.approx(0.5)
    assert r.informative_groups == pytest.approx(0.5)
    assert r.zero_share == pytest.approx(3 / 8) and r.partial_share == pytest.approx(2 / 8)
    assert r.pass_at_k[1] == pytest.approx((1 + 0 + 0 + 0.5) / 4)
    assert 4 not in r.pass_at_k  # k above the group size is not reported
    # 25 % all-success and 25 % all-zero groups exceed the 20 % limits; the rest is in band
    assert len(r.flags) == 2 and not r.accepted
    assert any("all-success" in f for f in r.flags) and any("all-zero" in f for f in r.flags)


def test_a_report_inside_the_band_is_accepted() -> None:
    rewards = [[1.0, 0.0, 0.5, 0.0]] * 5
    successes = [[True, False, False, False]] * 5
    r = summarize(rewards, successes)
    assert r.accepted, r.flags
    assert "ACCEPTED" in r.render()


def test_summarize_rejects_ragged_groups() -> None:
    with pytest.raises(ConfigError):
        summarize([[1.0], [1.0, 0.0]], [[True], [True, False]])


def test_oracle_is_flagged_too_easy_and_constant() -> None:
    r = calibrate(ENV, "oracle", seeds=4, group=3)
    assert r.mean_reward == 1.0 and r.success_rate == 1.0
    assert r.constant_groups == 1.0 and r.reward_std == 0.0
    assert not r.accepted and any("all-success" in f for f in r.flags)


def test_seeded_agents_get_a_distinct_seed_per_rollout() -> None:
    a, b = agent_for_rollout("random:3", 0), agent_for_rollout("random:3", 1)
    assert a.seed != b.seed and agent_for_rollout("random:3", 1).seed == b.seed
    r = calibrate(ENV, "random:3", seeds=6, group=6)
    assert r.success_rate < 0.2  # a random agent must not look competent
    assert r == calibrate(ENV, "random:3", seeds=6, group=6)  # reproducible
    # a seeded agent that lapses half the time: distinct rollouts, so groups carry a signal
    # (a random agent's groups are all zero here, since a wrong decision scores 0)
    lapsing = calibrate(ENV, "deficit:precondition=0.5:3", seeds=6, group=6)
    assert lapsing.informative_groups > 0.5


def test_unknown_env_and_bad_sizes_fail_clearly() -> None:
    with pytest.raises(UnknownEnvError):
        calibrate("trace/precondtion-v0", "oracle", seeds=1, group=1)
    with pytest.raises(ConfigError):
        calibrate(ENV, "oracle", seeds=0, group=1)


def test_cli_hook_prints_and_writes_json(tmp_path, capsys) -> None:
    parser = argparse.ArgumentParser(prog="trace-gym")
    add_calibrate_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "report.json"
    args = parser.parse_args(
        ["calibrate", ENV, "--agent", "oracle", "--seeds", "2", "--group", "2", "--json", str(out)]
    )
    assert args.fn(args) == 0
    assert "calibration of trace/precondition-v0" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["accepted"] is False and data["n_episodes"] == 4 and data["pass_at_k"]["1"] == 1.0
    strict = parser.parse_args(
        ["calibrate", ENV, "--agent", "oracle", "--seeds", "1", "--group", "1", "--strict"]
    )
    assert strict.fn(strict) == 1


def test_success_per_decision_beside_the_overall_rate() -> None:
    """Always granting, written correctly: 40 % overall looks like a weak skill; per class it
    is all grants and no refusals, a balanced accuracy of one half."""
    rewards = [[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    successes = [[True, True], [False, False], [True, False], [False, False], [False, False]]
    decisions = ["grant", "refuse", "grant", "refuse", "refuse"]
    r = summarize(rewards, successes, decisions)
    assert r.success_rate == pytest.approx(0.3)
    assert r.decisions == {
        "grant": {"n": 4, "successes": 3, "success_rate": 0.75},
        "refuse": {"n": 6, "successes": 0, "success_rate": 0.0},
    }
    assert r.balanced_accuracy == pytest.approx(0.375)
    text = r.render()
    assert "per decision     grant 75.0% (n=4), refuse 0.0% (n=6)" in text
    assert "balanced acc.    37.5%" in text
    assert r.to_dict()["balanced_accuracy"] == pytest.approx(0.375)
    with pytest.raises(ConfigError, match="one class per group"):
        summarize(rewards, successes, decisions[:2])
    plain = summarize(rewards, successes)  # no classes: nothing to break down
    assert plain.decisions == {} and plain.balanced_accuracy is None
    assert "per decision" not in plain.render()


def test_calibrate_reads_each_task_s_class() -> None:
    r = calibrate(ENV, "oracle", seeds=12, group=1)
    assert set(r.decisions) == {"grant", "refuse"}
    assert sum(v["n"] for v in r.decisions.values()) == 12
    assert r.balanced_accuracy == 1.0
