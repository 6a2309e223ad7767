"""Soundness checks: information-free policies, knob rates, template diversity.

The checks pass on structured-data, tool-call and payment-calc, and each one is shown to
catch what it is for: a verifier that pays for a blind choice or for stalling, an exemption
taken away, a knob documented wrongly, a floor set too high.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from trace_gym.agents.information_free import (
    FirstSearchResult,
    information_free_policies,
    skipped_information_free_policies,
)
from trace_gym.core.verify import Check, Verification
from trace_gym.envs.payment_calc import PaymentCalcEnv
from trace_gym.envs.structured_data import StructuredDataEnv
from trace_gym.envs.tool_call import ToolCallEnv
from trace_gym.testing.soundness import (
    LONG_SEEDS,
    KnobRate,
    check_information_free,
    check_knob_rates,
    check_template_diversity,
    information_free_table,
    mask_template,
)

OWN = ("trace/structured-data-v0", "trace/tool-call-v0", "trace/payment-calc-v0")


@pytest.mark.parametrize("env_id", OWN)
def test_information_free_policies_fail(env_id: str) -> None:
    rows = check_information_free(env_id, n_seeds=20)
    measured = {r["policy"] for r in rows if "n" in r}
    assert {"oracle", "null", "read_then_stall", "keyword_stuffed"} <= measured


@pytest.mark.long  # test_information_free_policies_fail runs the same at 20 seeds
@pytest.mark.parametrize("env_id", OWN)
def test_information_free_policies_fail_long(env_id: str) -> None:
    check_information_free(env_id, n_seeds=LONG_SEEDS)
    check_template_diversity(env_id)


def test_first_search_result_is_measured_on_structured_data() -> None:
    rows = information_free_table(
        "trace/structured-data-v0", n_seeds=20, policies=["first_search_result"]
    )
    got = {r["difficulty"]: r for r in rows if r["policy"] == "first_search_result"}
    assert set(got) == {0.0, 0.5, 1.0} and all(r["n"] == 20 for r in got.values())
    assert all(r["success"] <= 0.10 for r in got.values())


class PaysAnyBooking(StructuredDataEnv):
    """A weak verifier: any booking after a search passes (the choice is never checked)."""

    def verify(self, task: Any, episode: Any) -> Verification:
        booked = any(c.ok and c.changed_world for c in episode.calls)
        return Verification((Check("booked", "x", float(booked)),), decided=booked)


class PaysForSearching(StructuredDataEnv):
    """A weak verifier: process credit for searching, with or without a decision."""

    def verify(self, task: Any, episode: Any) -> Verification:
        searched = any(c.ok and c.name.startswith("search") for c in episode.calls)
        checks = (Check("searched", "x", float(searched), 0.4), Check("booked", "x", 0.0, 0.6))
        return Verification(checks)  # decided left True: stalling is paid


def test_catches_a_verifier_that_pays_any_booking() -> None:
    with pytest.raises(AssertionError, match=r"policy=first_search_result difficulty=0\.0"):
        check_information_free(PaysAnyBooking, difficulties=(0.0,), n_seeds=10)


def test_catches_process_credit_for_stalling() -> None:
    with pytest.raises(AssertionError, match=r"policy=read_then_stall .*mean_reward=0\.400"):
        check_information_free(PaysForSearching, difficulties=(0.5,), n_seeds=5)


class ToolCallWithoutExemption(ToolCallEnv):
    information_free_exempt: ClassVar[dict[str, str]] = {}


def test_tool_call_exemption_is_needed_and_reported() -> None:
    env = ToolCallEnv()
    assert "grant_by_copying" in skipped_information_free_policies(env)
    assert "grant_by_copying" not in dict(information_free_policies(env))
    with pytest.raises(AssertionError, match="policy=grant_by_copying"):
        check_information_free(ToolCallWithoutExemption, difficulties=(0.0,), n_seeds=10)


def test_policies_without_hooks_are_reported_skipped() -> None:
    skipped = skipped_information_free_policies(PaymentCalcEnv())
    assert "hook" in skipped["grant_by_copying"] and "hook" in skipped["refuse_citing_rule"]


def test_first_search_result_swaps_only_ids_taken_from_results() -> None:
    agent = FirstSearchResult()
    agent.given = "book for customer C-11111 with card PM-22222"
    agent.seen = ["TR0001", "TR0002", "C-11111"]
    swapped = agent._swap({"customer_id": "C-11111", "flight_number": "TR0002", "n": 2})
    assert swapped == {"customer_id": "C-11111", "flight_number": "TR0001", "n": 2}
    assert agent.applicable


@pytest.mark.parametrize("env_id", OWN)
def test_knob_rates_hold(env_id: str) -> None:
    rows = check_knob_rates(env_id, n_seeds=400)
    assert rows and all(abs(r["measured"] - r["expected"]) <= r["tolerance"] for r in rows)


class WrongKnob(PaymentCalcEnv):
    knob_rates: ClassVar[tuple[KnobRate, ...]] = (KnobRate("kind", 0.0, 0.9, 0.05, "book"),)


def test_catches_a_wrongly_documented_knob() -> None:
    with pytest.raises(AssertionError, match=r"knob=kind difficulty=0\.0: rate 0\.4"):
        check_knob_rates(WrongKnob, n_seeds=200)


@pytest.mark.parametrize("env_id", OWN)
def test_template_diversity_reaches_the_floor(env_id: str) -> None:
    counts = check_template_diversity(env_id, n_seeds=300, difficulties=(0.0, 1.0))
    assert all(c >= 1 for c in counts.values())


def test_catches_too_few_templates() -> None:
    with pytest.raises(AssertionError, match="below the floor"):
        check_template_diversity(
            "trace/structured-data-v0", n_seeds=100, floor=1000, difficulties=(0.0,)
        )


def test_mask_template() -> None:
    text = (
        "Hi, I'm Zoe Silva (customer id C-44475). Fly MIA to DEN on 2026-11-11 at 09:00 "
        "for $275.50."
    )
    assert mask_template(text) == (
        "Hi, I'm <name> (customer id <id>). Fly <name> to <name> on <date> at <time> for <num>."
    )
