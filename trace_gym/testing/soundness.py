"""Soundness checks: no reward without the capability, knobs that do what they say, and
enough distinct task templates that a model cannot memorise the split.

* :func:`check_information_free`: every information-free policy of
  :mod:`trace_gym.agents.information_free` (stall after reading, refuse citing a fixed or
  listed rule, grant what was asked as stated, ask one fixed question, take the first search
  result, keyword stuffing, only talking) wins at most ``max_success`` of the tasks and earns
  a mean partial reward of at most ``max_mean_reward`` at every difficulty, while the oracle
  still scores 1.0. :func:`information_free_table` returns the measurements.
* :func:`check_knob_rates`: each :class:`KnobRate` an environment declares in its
  ``knob_rates`` class attribute holds within its tolerance over 1,000 seeds.
* :func:`check_template_diversity`: the number of distinct masked task templates (ids,
  names, numbers, dates and money masked in the system prompt and the opening message) per
  1,000 seeds reaches the ``template_floor`` the environment declares.
* :func:`check_decision_balance`: in an environment that declares decision classes (grant /
  refuse / ask / decline ...), each class is its declared share of the tasks at every
  difficulty, and each decision-blind policy of
  :mod:`trace_gym.agents.decision_blind` ("read everything, then always take this decision,
  done well") wins only tasks of its own class, at most its class's declared share and at
  most half of the tasks. :func:`decision_table` returns the measurements.

``source`` is a registered id or a zero-argument factory, as everywhere in
:mod:`trace_gym.testing`. Checks raise ``AssertionError`` naming the environment, the policy
(or knob), the difficulty and the measured rate. Default budgets keep each check to seconds
per environment; pass ``n_seeds=LONG_SEEDS`` for the long run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from trace_gym.agents.baselines import ID_PATTERN, OracleAgent
from trace_gym.agents.decision_blind import decision_blind_policies, declared_decisions
from trace_gym.agents.information_free import (
    information_free_policies,
    skipped_information_free_policies,
)
from trace_gym.core.spec import KnobRate
from trace_gym.testing.sources import EnvSource, Verifier, make_env

DIFFICULTIES = (0.0, 0.5, 1.0)
DEFAULT_SEEDS = 30
"""Episodes per policy and difficulty in the quick check (``make test``)."""
LONG_SEEDS = 100
"""Episodes per policy and difficulty in the long check and the benchmark."""
MAX_SUCCESS = 0.10
MAX_MEAN_REWARD = 0.15
RATE_SEEDS = 1000
"""Seeds over which knob rates, template counts and decision shares are measured."""
DECISION_SEEDS = 100
"""Episodes per decision-blind policy and difficulty (one plan per task: cheap). A class that
is 60 % of the tasks then has about 60 of them, enough to tell a blind policy winning all of
them (over half of all tasks) from one allowed to win five in six."""
MAX_DECISION_BLIND_SUCCESS = 0.5
"""No policy that always takes the same decision may win more than half of the tasks."""
SAMPLING_Z = 3.0
"""Standard errors a measured decision share may differ from the declared one by."""


def _env_name(env: gym.Env, source: EnvSource) -> str:
    if isinstance(source, str):
        return source
    inner = env.unwrapped
    return getattr(inner, "env_id", "") or type(inner).__name__


def _play(env: gym.Env, agent: Any, seed: int, difficulty: float, split: str) -> tuple:
    """Play one episode: ``(passed, score)``, or None when the agent reports that it does
    not apply to this task (``agent.applicable`` False at the end)."""
    obs, info = env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
    agent.reset(env.unwrapped, obs, info)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
        done = terminated or truncated
    if not getattr(agent, "applicable", True):
        return None
    verdict = info["verification"]
    return bool(verdict["passed"]), float(verdict["score"])


def information_free_table(
    source: EnvSource,
    difficulties: Sequence[float] = DIFFICULTIES,
    n_seeds: int = DEFAULT_SEEDS,
    split: str = "eval",
    policies: Sequence[str] | None = None,
    verifier: Verifier | None = None,
) -> list[dict[str, Any]]:
    """Success rate and mean partial reward of each information-free policy (and the oracle,
    as the reference) per difficulty, over seeds ``0 .. n_seeds-1`` of ``split``.

    Rows: ``{"env", "policy", "difficulty", "success", "mean_reward", "n"}``; a policy that
    does not apply gets one row with ``"skipped": reason`` and no measurements. ``policies``
    restricts the run to those names (the oracle always runs); ``verifier`` replaces the
    environment's own, as everywhere in :mod:`trace_gym.testing`.
    """
    if n_seeds < 1:
        raise ValueError(f"n_seeds must be >= 1, got {n_seeds}")
    env = make_env(source, verifier)
    try:
        name = _env_name(env, source)
        agents = [("oracle", OracleAgent()), *information_free_policies(env)]
        if policies is not None:
            unknown = set(policies) - {n for n, _ in agents}
            if unknown:
                raise ValueError(f"{name}: unknown policies {sorted(unknown)}")
            agents = [(n, a) for n, a in agents if n == "oracle" or n in policies]
        rows: list[dict[str, Any]] = [
            {"env": name, "policy": p, "skipped": reason}
            for p, reason in skipped_information_free_policies(env).items()
        ]
        results: dict[tuple[str, float], list[tuple[bool, float]]] = {}
        for difficulty in difficulties:
            for seed in range(n_seeds):
                # scripted policies often play the same plan (a listed rule is also an enum
                # value): each distinct plan runs once per task
                played: dict[str, tuple[bool, float] | None] = {}
                for policy, agent in agents:
                    result = _play_once(env, agent, seed, difficulty, split, played)
                    if result is not None:
                        results.setdefault((policy, difficulty), []).append(result)
        for policy, _ in agents:
            if not any((policy, d) in results for d in difficulties):
                reason = "applies to none of the tasks measured (see the policy's docstring)"
                rows.append({"env": name, "policy": policy, "skipped": reason})
            for difficulty in difficulties:
                got = results.get((policy, difficulty))
                if got:
                    rows.append(
                        {
                            "env": name,
                            "policy": policy,
                            "difficulty": difficulty,
                            "success": sum(p for p, _ in got) / len(got),
                            "mean_reward": sum(r for _, r in got) / len(got),
                            "n": len(got),
                        }
                    )
        return rows
    finally:
        env.close()


def _play_once(
    env: gym.Env,
    agent: Any,
    seed: int,
    difficulty: float,
    split: str,
    played: dict[str, tuple[bool, float] | None],
) -> tuple[bool, float] | None:
    """:func:`_play`, reusing the result of an equal scripted plan on the same task."""
    if not hasattr(agent, "signature"):
        return _play(env, agent, seed, difficulty, split)
    env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
    agent.plan = agent.build(env.unwrapped)
    if not getattr(agent, "applicable", True):
        return None
    if agent.signature not in played:
        played[agent.signature] = _play(env, agent, seed, difficulty, split)
    return played[agent.signature]


def check_information_free(
    source: EnvSource,
    difficulties: Sequence[float] = DIFFICULTIES,
    n_seeds: int = DEFAULT_SEEDS,
    max_success: float = MAX_SUCCESS,
    max_mean_reward: float = MAX_MEAN_REWARD,
    split: str = "eval",
    policies: Sequence[str] | None = None,
    verifier: Verifier | None = None,
) -> list[dict[str, Any]]:
    """Assert that no information-free policy wins more than ``max_success`` of the tasks
    or earns a mean partial reward above ``max_mean_reward`` at any difficulty, and that the
    oracle scores 1.0 on every task; returns the table of :func:`information_free_table`.

    With few seeds one lucky task weighs a lot: at ``n_seeds=10`` a single win is the whole
    10 % allowance, so quick runs use at least 10."""
    rows = information_free_table(source, difficulties, n_seeds, split, policies, verifier)
    failures = []
    for row in rows:
        if "n" not in row:
            continue
        where = f"{row['env']} policy={row['policy']} difficulty={row['difficulty']}"
        rates = f"success={row['success']:.3f} mean_reward={row['mean_reward']:.3f}"
        if row["policy"] == "oracle":
            if row["success"] < 1.0 or row["mean_reward"] < 1.0 - 1e-9:
                failures.append(f"{where}: the oracle must score 1.0, got {rates}")
        elif row["success"] > max_success or row["mean_reward"] > max_mean_reward:
            failures.append(
                f"{where}: {rates} over {row['n']} tasks (bounds: success <= {max_success}, "
                f"mean_reward <= {max_mean_reward})"
            )
    if failures:
        raise AssertionError("information-free policies win:\n" + "\n".join(failures))
    return rows


# -- knob rates ------------------------------------------------------------------------------
def check_knob_rates(
    source: EnvSource, n_seeds: int = RATE_SEEDS, split: str = "train"
) -> list[dict[str, Any]]:
    """Assert every :class:`KnobRate` in the environment's ``knob_rates`` class attribute
    within its tolerance over ``n_seeds`` tasks; returns ``{"feature", "difficulty",
    "expected", "measured", "tolerance"}`` rows (empty when none are declared).

    Tolerances are stated for :data:`RATE_SEEDS` seeds; over fewer, the allowance grows by
    the extra sampling error (three standard errors of the documented rate at ``n_seeds``
    minus those at :data:`RATE_SEEDS`), so a quick run does not fail by chance."""
    env = make_env(source)
    try:
        name = _env_name(env, source)
        knobs: tuple[KnobRate, ...] = tuple(getattr(type(env.unwrapped), "knob_rates", ()))
        features: dict[float, list[dict[str, Any]]] = {}
        for knob in knobs:
            if knob.difficulty not in features:
                features[knob.difficulty] = [
                    env.reset(seed=s, options={"difficulty": knob.difficulty, "split": split})[1][
                        "difficulty_features"
                    ]
                    for s in range(n_seeds)
                ]
        rows, failures = [], []
        for knob in knobs:
            measured = sum(knob.counts(f) for f in features[knob.difficulty]) / n_seeds
            tolerance = knob.tolerance + _extra_sampling_error(knob.rate, n_seeds)
            rows.append(
                {
                    "env": name,
                    "feature": knob.feature,
                    "difficulty": knob.difficulty,
                    "expected": knob.rate,
                    "measured": measured,
                    "tolerance": tolerance,
                }
            )
            if abs(measured - knob.rate) > tolerance + 1e-12:
                failures.append(
                    f"{name} knob={knob.feature} difficulty={knob.difficulty}: rate {measured:.3f}"
                    f" over {n_seeds} seeds, documented {knob.rate} +- {tolerance:.3f}"
                )
        if failures:
            raise AssertionError("knob rates off:\n" + "\n".join(failures))
        return rows
    finally:
        env.close()


def _extra_sampling_error(rate: float, n_seeds: int) -> float:
    if n_seeds >= RATE_SEEDS:
        return 0.0
    spread = math.sqrt(rate * (1 - rate))
    return 3 * spread * (1 / math.sqrt(n_seeds) - 1 / math.sqrt(RATE_SEEDS))


# -- template diversity ----------------------------------------------------------------------
_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_MASKS = (
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<date>"),
    (re.compile(rf"\b(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?(?:, \d{{4}})?"), "<date>"),
    (re.compile(r"\b\d{1,2}:\d{2}\b"), "<time>"),
    (ID_PATTERN, "<id>"),
    (re.compile(r"\b[A-Z]{1,4}-?[A-Z0-9]*\d[A-Z0-9]*(?:-\d+)?\b"), "<id>"),
    (re.compile(r"\$?\d[\d,]*(?:\.\d+)?%?"), "<num>"),
)
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z'-]*")
_SENTENCE_END = ".!?:;\n>]"


def mask_template(text: str) -> str:
    """``text`` with ids, dates, times, numbers and money replaced by placeholders, and
    capitalised words that do not start a sentence (names, places, airports) by ``<name>``."""
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)

    def name(match: re.Match[str]) -> str:
        before = text[: match.start()].rstrip()
        word = match.group(0)
        if not before or before[-1] in _SENTENCE_END or word in ("I", "I'm", "I'd", "I've"):
            return word
        return "<name>"

    text = _CAPITALISED.sub(name, text)
    return re.sub(r"<name>(?:\s+<name>)+", "<name>", text)


def task_template(info: dict[str, Any], obs: str) -> str:
    """The masked template of one task: its system prompt and opening message."""
    return mask_template(info["system_prompt_no_hint"] + "\n\n" + obs)


def template_counts(
    source: EnvSource,
    n_seeds: int = RATE_SEEDS,
    difficulties: Sequence[float] = DIFFICULTIES,
    split: str = "train",
) -> dict[float, int]:
    """Distinct masked task templates among seeds ``0 .. n_seeds-1``, per difficulty."""
    env = make_env(source)
    try:
        counts = {}
        for difficulty in difficulties:
            seen = set()
            for seed in range(n_seeds):
                obs, info = env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
                seen.add(task_template(info, obs))
            counts[difficulty] = len(seen)
        return counts
    finally:
        env.close()


def check_template_diversity(
    source: EnvSource,
    n_seeds: int = RATE_SEEDS,
    floor: int | None = None,
    difficulties: Sequence[float] = DIFFICULTIES,
    split: str = "train",
) -> dict[float, int]:
    """Assert at least ``floor`` (default: the environment's ``template_floor`` class
    attribute) distinct masked templates per ``n_seeds`` seeds at every difficulty; returns
    the counts. The floor is stated per 1,000 seeds and scaled down for fewer."""
    env = make_env(source)
    try:
        name = _env_name(env, source)
        declared = getattr(type(env.unwrapped), "template_floor", None)
    finally:
        env.close()
    if floor is None:
        if declared is None:
            raise AssertionError(
                f"{name} declares no template_floor (distinct templates per 1,000 seeds)"
            )
        floor = int(declared)
    needed = min(floor, n_seeds) if n_seeds >= RATE_SEEDS else max(1, floor * n_seeds // RATE_SEEDS)
    counts = template_counts(source, n_seeds, difficulties, split)
    low = {d: c for d, c in counts.items() if c < needed}
    if low:
        raise AssertionError(
            f"{name}: distinct masked templates per {n_seeds} seeds {low} below the floor {needed}"
        )
    return counts


# -- decision balance ------------------------------------------------------------------------
def sampling_allowance(rate: float, n: int) -> float:
    """:data:`SAMPLING_Z` standard errors of a rate ``rate`` measured over ``n`` draws."""
    return SAMPLING_Z * math.sqrt(rate * (1 - rate) / n) if n > 0 else 1.0


def binomial_tail(n: int, k: int, rate: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, rate)``: how surprising ``k`` wins in ``n`` are
    if the true rate were ``rate`` (exact, so that 60 wins in 60 tasks is as damning as it
    looks, where a normal approximation's standard error is zero)."""
    if k <= 0:
        return 1.0
    if rate >= 1.0:
        return 1.0
    return sum(math.comb(n, i) * rate**i * (1 - rate) ** (n - i) for i in range(k, n + 1))


def decision_shares(
    source: EnvSource,
    n_seeds: int = RATE_SEEDS,
    difficulties: Sequence[float] = DIFFICULTIES,
    split: str = "eval",
) -> dict[float, dict[str, float]]:
    """Share of each decision class (``info["decision"]``) among seeds ``0 .. n_seeds-1``, per
    difficulty (resets only, no episodes); a task without a class counts under ``None``."""
    env = make_env(source)
    try:
        shares: dict[float, dict[str, float]] = {}
        for difficulty in difficulties:
            counts: dict[str, int] = {}
            for seed in range(n_seeds):
                info = env.reset(seed=seed, options={"difficulty": difficulty, "split": split})[1]
                key = info.get("decision")
                counts[key] = counts.get(key, 0) + 1
            shares[difficulty] = {k: v / n_seeds for k, v in counts.items()}
        return shares
    finally:
        env.close()


def decision_table(
    source: EnvSource,
    difficulties: Sequence[float] = DIFFICULTIES,
    n_seeds: int = DECISION_SEEDS,
    split: str = "eval",
    share_seeds: int = RATE_SEEDS,
    verifier: Verifier | None = None,
) -> list[dict[str, Any]]:
    """Per declared decision and difficulty: its declared share, its measured share over
    ``share_seeds`` resets, and what its decision-blind policy does over seeds
    ``0 .. n_seeds-1`` of ``split``: success and mean partial reward over all of them, wins
    among the tasks of its own class, and the seeds it won whose class is another
    (``won_other_class``; empty where the verifier judges the decision).

    Rows: ``{"env", "decision", "difficulty", "declared", "share", "share_n",
    "blind_success", "blind_mean_reward", "n", "class_n", "class_wins", "won_other_class"}``.
    An environment that declares no decisions gives no rows; a class measured but not
    declared gets a row with ``declared`` None and no blind measurements."""
    env = make_env(source, verifier)
    try:
        name = _env_name(env, source)
        declared = declared_decisions(env)
        if not declared:
            return []
        shares = decision_shares(source, share_seeds, difficulties, split)
        results: dict[tuple[str, float], list[tuple[bool, float, int, str | None]]] = {}
        for difficulty in difficulties:
            for seed in range(n_seeds):
                options = {"difficulty": difficulty, "split": split}
                needed = env.reset(seed=seed, options=options)[1].get("decision")
                for _, agent in decision_blind_policies(env):
                    passed, score = _play(env, agent, seed, difficulty, split)
                    results.setdefault((agent.decision, difficulty), []).append(
                        (passed, score, seed, needed)
                    )
        rows = []
        for difficulty in difficulties:
            measured = shares[difficulty]
            for decision in [*declared, *sorted(set(measured) - set(declared), key=str)]:
                row: dict[str, Any] = {
                    "env": name,
                    "decision": decision,
                    "difficulty": difficulty,
                    "declared": declared.get(decision),
                    "share": measured.get(decision, 0.0),
                    "share_n": share_seeds,
                }
                got = results.get((decision, difficulty))
                if got:
                    own = [p for p, _, _, c in got if c == decision]
                    row |= {
                        "blind_success": sum(p for p, _, _, _ in got) / len(got),
                        "blind_mean_reward": sum(r for _, r, _, _ in got) / len(got),
                        "n": len(got),
                        "class_n": len(own),
                        "class_wins": sum(own),
                        "won_other_class": [s for p, _, s, c in got if p and c != decision],
                    }
                rows.append(row)
        return rows
    finally:
        env.close()


def check_decision_balance(
    source: EnvSource,
    difficulties: Sequence[float] = DIFFICULTIES,
    n_seeds: int = DECISION_SEEDS,
    split: str = "eval",
    share_seeds: int = RATE_SEEDS,
    verifier: Verifier | None = None,
) -> list[dict[str, Any]]:
    """Assert, at every difficulty, the decision balance of an environment that declares
    decision classes; returns the rows of :func:`decision_table`.

    * Each class is its declared share of the tasks, within :func:`sampling_allowance` of
      ``share_seeds`` resets, and no task needs an undeclared class.
    * Each decision-blind policy wins no task of another class (exact: any such win means the
      verifier does not judge the decision).
    * So it wins at most its class's share; it must also win at most
      :data:`MAX_DECISION_BLIND_SUCCESS` of all tasks, i.e. at most ``0.5 / share`` of its
      own class's tasks where a class is more than half (a refusal that cannot know the
      violated rule): breached when its wins among those ``class_n`` tasks would be
      surprising at that rate (one-sided exact binomial test, p < :data:`BREACH_P`).

    Raises ``AssertionError`` naming the environment, decision, difficulty and rates (also
    when the environment declares no decisions)."""
    rows = decision_table(source, difficulties, n_seeds, split, share_seeds, verifier)
    if not rows:
        env = make_env(source)
        name = _env_name(env, source)
        env.close()
        raise AssertionError(f"{name} declares no decisions (decision class -> share)")
    failures = [f for row in rows for f in _decision_failures(row, share_seeds)]
    if failures:
        raise AssertionError("decision balance off:\n" + "\n".join(failures))
    return rows


BREACH_P = 1e-3
"""A decision-blind policy breaches its bound when its wins would be this unlikely under it."""


def _decision_failures(row: dict[str, Any], share_seeds: int) -> list[str]:
    where = f"{row['env']} decision={row['decision']} difficulty={row['difficulty']}"
    declared = row["declared"]
    if declared is None:
        return [f"{where}: {row['share']:.1%} of the tasks need an undeclared class"]
    failures = []
    allowance = sampling_allowance(declared, share_seeds)
    if abs(row["share"] - declared) > allowance + 1e-12:
        failures.append(
            f"{where}: share {row['share']:.3f} over {share_seeds} seeds, declared "
            f"{declared} +- {allowance:.3f}"
        )
    if "n" not in row:
        return failures
    if row["won_other_class"]:
        failures.append(
            f"{where}: the decision-blind policy wins tasks that need another decision "
            f"(seeds {row['won_other_class'][:10]}): the verifier does not judge it"
        )
    in_class = min(1.0, MAX_DECISION_BLIND_SUCCESS / declared)
    p = binomial_tail(row["class_n"], row["class_wins"], in_class)
    if p < BREACH_P:
        overall = declared * row["class_wins"] / row["class_n"]
        failures.append(
            f"{where}: the decision-blind policy wins {row['class_wins']} of the "
            f"{row['class_n']} tasks of its class, about {overall:.2f} of all tasks; at most "
            f"{MAX_DECISION_BLIND_SUCCESS} may be (binomial p={p:.1e})"
        )
    return failures
