"""trace/structured-data-v0: configs, the unique optimum (recomputed here), goldens, grading."""

from __future__ import annotations

import json

import pytest

from trace_gym.envs.structured_data import (
    StructuredDataConfig,
    StructuredDataEnv,
    StructuredDataTask,
)
from trace_gym.errors import ConfigError

DIFFICULTIES = (0.0, 0.25, 0.5, 0.75, 1.0)


@pytest.fixture(scope="module")
def env() -> StructuredDataEnv:
    return StructuredDataEnv()


# -- an independent reading of the catalogue ------------------------------------------------
def _options(task: StructuredDataTask) -> dict[str, dict]:
    """Every option of the search, read straight from the world's tables."""
    tables = task.world["tables"]
    out = {}
    if task.domain == "flights":
        for f in tables["flights"].values():
            if [f["origin"], f["destination"], f["date"]] != list(task.search.values()):
                continue
            dep = int(f["departs_at"][11:13]) * 60 + int(f["departs_at"][14:16])
            arr = int(f["arrives_at"][11:13]) * 60 + int(f["arrives_at"][14:16])
            for cabin, fare in f["cabins"].items():
                out[f"{f['flight_number']}/{cabin}"] = {
                    "cabin": cabin, "stops": len(f["stops"]), "departs": dep, "arrives": arr,
                    "duration": arr - dep, "price": fare["price"],
                }  # fmt: skip
    else:
        for p in tables["products"].values():
            if p["category"] != task.search["category"]:
                continue
            for v in p["variants"]:
                out[v["item_id"]] = {**v["options"], "price": v["price"],
                                     "available": v["available"], "rating": p["rating"],
                                     "brand": p["brand"]}  # fmt: skip
    return out


def _meets(c: dict, attrs: dict) -> bool:
    a, v = attrs[c["attr"]], c["value"]
    return {"eq": a == v, "ne": a != v, "le": a <= v, "ge": a >= v}[c["op"]]


def _rank(task: StructuredDataTask, attrs: dict) -> float:
    attr = {"cheapest": "price", "earliest": "departs", "shortest": "duration"}.get(
        task.objective, "rating"
    )
    return -attrs[attr] if task.objective == "highest_rated" else attrs[attr]


def _best(task: StructuredDataTask, constraints: list[dict]) -> list[str]:
    ok = {k: a for k, a in _options(task).items() if all(_meets(c, a) for c in constraints)}
    if not ok:
        return []
    top = min(_rank(task, a) for a in ok.values())
    return sorted(k for k, a in ok.items() if _rank(task, a) == top)


def _book(task: StructuredDataTask, env: StructuredDataEnv, option: str) -> dict:
    """The booking action for an option (the right passengers and card)."""
    if task.domain == "products":
        return {"name": "place_order", "arguments": {"customer_id": task.customer_id,
                "item_ids": [option], "payment_method_id": task.payment_method_id}}  # fmt: skip
    number, cabin = option.split("/")
    fare = task.world["tables"]["flights"][number]["cabins"][cabin]["price"]
    split = [{"payment_method_id": task.payment_method_id,
              "amount": round(fare * task.passengers, 2)}]  # fmt: skip
    return {"name": "book_reservation", "arguments": {"customer_id": task.customer_id,
            "flight_number": number, "cabin": cabin, "passengers": task.passengers,
            "insurance": False, "payment_methods": split}}  # fmt: skip


def _play(env: StructuredDataEnv, seed: int, d: float, actions: list) -> dict:
    env.reset(seed=seed, options={"difficulty": d})
    for a in [*actions, "Done.", "Done.", "Done."]:
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            return info["verification"]
    raise AssertionError("episode did not end")


def _search(task: StructuredDataTask) -> dict:
    name = "search_flights" if task.domain == "flights" else "search_products"
    return {"name": name, "arguments": task.search}


# -- tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [{"n_constraints": 1}, {"n_constraints": 7}, {"n_candidates": 1},
     {"near_duplicate_share": 1.5}, {"domains": ("boats",)}, {"domains": ()}, {"colour": "red"}],
)  # fmt: skip
def test_bad_config_rejected(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        StructuredDataConfig.from_difficulty(0.5, overrides)


@pytest.mark.parametrize("d", [0.0, 0.5, 1.0])
def test_unique_optimum_recomputed(env: StructuredDataEnv, d: float) -> None:
    domains = set()
    for seed in range(40):
        env.reset(seed=seed, options={"difficulty": d})
        task = env.task
        domains.add(task.domain)
        assert _best(task, task.constraints) == [task.answer]
        assert len(_options(task)) >= len(task.candidates)
    assert domains == {"flights", "products"}


def test_difficulty_features_monotone(env: StructuredDataEnv) -> None:
    means = []
    for d in DIFFICULTIES:
        feats = [env.reset(seed=s, options={"difficulty": d})[1]["difficulty_features"]
                 for s in range(40)]  # fmt: skip
        means.append([sum(f[k] for f in feats) / len(feats)
                      for k in ("n_constraints", "n_candidates", "n_near_duplicates")])  # fmt: skip
    for key in range(3):
        column = [m[key] for m in means]
        assert column == sorted(column), column
    assert means[0][0] < means[-1][0] and means[0][1] < means[-1][1]


def test_imperfect_agent_does_not_gain_with_difficulty(env: StructuredDataEnv) -> None:
    """An agent that reads only the first two constraints: its reward must not rise."""
    means = []
    for d in (0.0, 0.5, 1.0):
        total = 0.0
        for seed in range(30):
            env.reset(seed=seed, options={"difficulty": d})
            task = env.task
            pick = _best(task, task.constraints[:2])[0]
            total += _play(env, seed, d, [_search(task), _book(task, env, pick)])["score"]
        means.append(total / 30)
    assert means[0] >= means[1] >= means[2] and means[0] > means[2], means


def test_grading_cases(env: StructuredDataEnv) -> None:
    seen = set()
    for seed in range(30):
        env.reset(seed=seed, options={"difficulty": 1.0})
        task = env.task
        search, right = _search(task), _book(task, env, task.answer)
        assert _play(env, seed, 1.0, [search, right])["score"] == 1.0
        skip = _play(env, seed, 1.0, [right])
        assert not skip["passed"] and 0.0 < skip["score"] < 1.0  # no search first
        others = [o for o in task.candidates if o != task.answer]
        bookable = [o for o in others if _options(task)[o].get("available", True)]
        twice = _play(env, seed, 1.0, [search, _book(task, env, bookable[0]), right])
        assert twice["gated"] and twice["score"] == 0.0
        for option in others:
            attrs = _options(task)[option]
            broken = [c for c in task.constraints if not _meets(c, attrs)]
            got = _play(env, seed, 1.0, [search, _book(task, env, option)])
            assert not got["passed"]
            if attrs.get("available") is False:  # the shop refuses: nothing is booked
                assert got["score"] == 0.0
            elif any(c["strict"] for c in broken):
                assert got["gated"] and got["score"] == 0.0
                seen.add("strict")
            elif not broken:  # feasible but worse: a wrong choice earns nothing
                assert got["gated"] and got["score"] == 0.0
                seen.add("worse")
            else:
                assert got["gated"] and got["score"] == 0.0
                seen.add("soft")
    assert seen == {"strict", "worse", "soft"}


@pytest.mark.parametrize("d", [0.0, 1.0])
def test_answer_is_rarely_the_first_search_result(env: StructuredDataEnv, d: float) -> None:
    """Taking the first listed option must not pay: the answer leads the listing in at
    most half of chance (1 / 2n) of tasks, far below the 10 % information-free bound."""
    first = 0
    for seed in range(200):
        obs, _ = env.reset(seed=seed, options={"difficulty": d})
        task = env.task
        search = "search_flights" if task.domain == "flights" else "search_products"
        _, _, _, _, info = env.step({"name": search, "arguments": task.search})
        listing = json.loads(info["messages"][-1]["content"])
        if task.domain == "flights":
            top = f"{listing['flights'][0]['flight_number']}/{task.answer.split('/')[1]}"
        else:
            top = listing["products"][0]["variants"][0]["item_id"]
        first += top == task.answer
    assert first / 200 <= 0.06, first
