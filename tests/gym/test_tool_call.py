"""trace/tool-call-v0: configs, the reference call re-derived from the wording, goldens, grading."""

from __future__ import annotations

import copy
import re
from datetime import date, datetime, timedelta

import pytest

from trace_gym.envs.tool_call import ToolCallConfig, ToolCallEnv, ToolCallTask
from trace_gym.errors import ConfigError

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
STATES = {"Illinois": "IL", "Texas": "TX", "Oregon": "OR", "Colorado": "CO", "Ohio": "OH",
          "Wisconsin": "WI", "North Carolina": "NC", "Arizona": "AZ"}  # fmt: skip


@pytest.fixture(scope="module")
def env() -> ToolCallEnv:
    return ToolCallEnv()


def _play(env: ToolCallEnv, seed: int, d: float, actions: list) -> dict:
    env.reset(seed=seed, options={"difficulty": d})
    for a in [*actions, "Done.", "Done.", "Done."]:
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            return info["verification"]
    raise AssertionError("episode did not end")


# -- an independent reading of the request ---------------------------------------------------
def _date_said(text: str, now: date) -> str:
    """The ISO date a sentence names, relative to ``now`` or spelled out."""
    if "the day after tomorrow" in text:
        return (now + timedelta(days=2)).isoformat()
    if "a week from today" in text:
        return (now + timedelta(days=7)).isoformat()
    if m := re.search(r"in (\d+) days", text):
        return (now + timedelta(days=int(m.group(1)))).isoformat()
    if m := re.search(r"on the first (\w+) after today", text):
        day = now + timedelta(days=1)
        while WEEKDAYS[day.weekday()] != m.group(1):
            day += timedelta(days=1)
        return day.isoformat()
    return _spelled(re.search(r"\d{4} on ([A-Z][a-z]+ \d+, \d{4}|\d+ [A-Z][a-z]+ \d{4})", text)[1])


def _spelled(text: str) -> str:
    for fmt in ("%B %d, %Y", "%d %B %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).date().isoformat()
        except ValueError:
            pass
    raise AssertionError(f"unreadable date {text!r}")


def _instrument_said(task: ToolCallTask) -> str:
    pms = [p for p in task.world["tables"]["payment_methods"].values()]
    if "gift card" in task.opening:
        matches = [p for p in pms if p["kind"] == "gift_card"]
    elif "travel certificate" in task.opening:
        matches = [p for p in pms if p["kind"] == "certificate"]
    else:
        brand, last4 = re.search(r"my (\w+) card ending in (\d{4})", task.opening).groups()
        matches = [p for p in pms if p.get("brand") == brand and p.get("last4") == last4]
    assert len(matches) == 1, matches
    return matches[0]["payment_method_id"]


def _recompute(task: ToolCallTask) -> dict:
    """Reference arguments as far as the wording fixes them, derived without the generator."""
    text, now = task.opening, date.fromisoformat(task.world["now"][:10])
    got = {}
    if task.request in ("update_payment", "add_bags", "change_flight"):
        got["payment_method_id"] = _instrument_said(task)
    if task.request == "add_bags":
        word = re.search(r"add (\w+) checked", text).group(1)
        got["bags"] = ["one", "two", "three"].index(word) + 1
    if task.request == "cancel_order":
        got["reason"] = {"anymore": "no_longer_needed", "mistake": "ordered_by_mistake",
                         "plans": "change_of_plans"}[re.search(r"(anymore|mistake|plans)",
                                                               text).group(1)]  # fmt: skip
    if task.request == "change_flight":
        got["flights"] = [{"flight_number": re.search(r"flight (TR\d{4})", text).group(1),
                           "date": _date_said(text, now)}]  # fmt: skip
    if task.request == "change_address":
        state = next(s for s in STATES if f", {s} " in text)
        got["address"] = {"state": STATES[state], "zip": re.search(r"(\d{5}) instead", text)[1]}
    if task.request == "set_passengers":
        births = re.findall(r"born ([A-Z][a-z]+ \d+, \d{4}|\d+ [A-Z][a-z]+ \d{4})", text)
        got["passengers"] = [{"date_of_birth": _spelled(b)} for b in births]
    return got


def _subset(small: dict | list, big: dict | list) -> bool:
    if isinstance(small, dict):
        return all(k in big and _subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return len(small) == len(big) and all(
            _subset(a, b) for a, b in zip(small, big, strict=True)
        )
    return small == big


# -- tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [{"requests": ("teleport",)}, {"requests": ()}, {"max_passengers": 0},
     {"max_passengers": 4}, {"relative_date_probability": -0.1}, {"n_similar_ids": 5},
     {"nested_weight": -1}, {"similar": 1}],
)  # fmt: skip
def test_bad_config_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        ToolCallConfig.from_difficulty(0.5, overrides)


def test_reference_call_follows_from_the_wording(env: ToolCallEnv) -> None:
    kinds = set()
    for d in (0.0, 0.5, 1.0):
        for seed in range(40):
            env.reset(seed=seed, options={"difficulty": d})
            task = env.task
            kinds.add(task.request)
            assert _subset(_recompute(task), task.reference_arguments), task.opening
    assert len(kinds) == 6


def test_difficulty_features_monotone(env: ToolCallEnv) -> None:
    means = []
    for d in (0.0, 0.5, 1.0):
        feats = [env.reset(seed=s, options={"difficulty": d})[1]["difficulty_features"]
                 for s in range(80)]  # fmt: skip
        means.append([sum(f[k] for f in feats) / 80
                      for k in ("n_argument_leaves", "n_similar_ids", "relative_date")])  # fmt: skip
    for key in range(3):
        column = [m[key] for m in means]
        assert column == sorted(column) and column[0] < column[-1], column


def _sloppy(task: ToolCallTask) -> dict:
    """An imperfect agent: copies nested values loosely and mixes up look-alike ids."""
    args = copy.deepcopy(task.reference_arguments)
    if "address" in args:
        args["address"]["address2"] = "n/a"
    if "passengers" in args:
        args["passengers"][-1]["date_of_birth"] = "2000-01-01"
    if "flights" in args:
        args["flights"][0]["date"] = task.world["now"][:10]
    if task.n_similar_ids >= 2:
        pms = sorted(task.world["tables"]["payment_methods"])
        args["payment_method_id"] = next(p for p in pms if p != task.payment_method_id)
    return {"name": task.tool, "arguments": args}


def test_imperfect_agent_does_not_gain_with_difficulty(env: ToolCallEnv) -> None:
    means = []
    for d in (0.0, 0.5, 1.0):
        scores = []
        for seed in range(30):
            env.reset(seed=seed, options={"difficulty": d})
            scores.append(_play(env, seed, d, [_sloppy(env.task)])["score"])
        means.append(sum(scores) / len(scores))
    assert means[0] >= means[1] >= means[2] and means[0] > means[2], means


def test_grading_cases(env: ToolCallEnv) -> None:
    seen = set()
    for seed in range(40):
        env.reset(seed=seed, options={"difficulty": 1.0})
        task = env.task
        right = {"name": task.tool, "arguments": task.reference_arguments}
        assert _play(env, seed, 1.0, [right])["score"] == 1.0
        if task.payment_method_id and task.n_similar_ids:
            digits = task.payment_method_id[3:]
            look = [p for p in task.world["tables"]["payment_methods"]
                    if p != task.payment_method_id and sorted(p[3:]) == sorted(digits)]  # fmt: skip
            wrong = copy.deepcopy(right)
            wrong["arguments"]["payment_method_id"] = look[0]
            got = _play(env, seed, 1.0, [wrong])
            if got["checks"][0]["score"] == 1.0:  # the world accepted it: gated
                assert got["gated"] and got["score"] == 0.0
                seen.add("instrument")
        if task.request == "add_bags":  # off by one bag: partial credit only
            more = copy.deepcopy(right)
            more["arguments"]["bags"] = right["arguments"]["bags"] % 3 + 1
            got = _play(env, seed, 1.0, [more])
            assert 0.5 < got["score"] < 1.0 and not got["passed"]
            seen.add("bags")
        if task.request == "cancel_order":  # the wrong tool, even refused, is gated
            miss = {"name": "cancel_reservation",
                    "arguments": {"reservation_id": "R-AAAAAA", "reason": "other"}}  # fmt: skip
            got = _play(env, seed, 1.0, [miss, right])
            assert got["gated"] and got["score"] == 0.0
            seen.add("wrong_tool")
    assert seen == {"instrument", "bags", "wrong_tool"}
