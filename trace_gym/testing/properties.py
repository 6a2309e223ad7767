"""The environment contract as checks: each one plays an environment and asserts a property.

Every check takes an environment id registered with gymnasium (or a zero-argument factory, see
:mod:`trace_gym.testing.sources`) and, optionally, a ``verifier(task, episode) ->
Verification`` that replaces the environment's own, and raises ``AssertionError`` with the
failing seed when the property does not hold. The hypothesis profiles and the fuzzing
strategies (:func:`garbage_actions`, :func:`adversarial_actions` and the categories they draw
from) live here too. Import them from :mod:`trace_gym.testing`, which gathers the suite.
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import reprlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_gym.agents.baselines import (
    ID_PATTERN,
    CallEveryToolAgent,
    NullAgent,
    OracleAgent,
    PlanAgent,
    RandomAgent,
    arguments_from_schema,
)
from trace_gym.core.actions import parse_action
from trace_gym.core.env import TraceEnv
from trace_gym.episodes import rescore, run_episode
from trace_gym.errors import ErrorCode
from trace_gym.primitives.seeding import SPLITS, StableRNG
from trace_gym.testing.sources import EnvSource, Verifier, make_env

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large]
# Prefixed names: hypothesis loads its own built-in "ci" profile when it detects a CI machine,
# so registering a profile called "ci" would silently replace the importer's active settings.
settings.register_profile(
    "trace-ci", max_examples=8, derandomize=True, deadline=None,
    suppress_health_check=_SUPPRESSED, database=None,
)  # fmt: skip
settings.register_profile(
    "trace-long", max_examples=2500, deadline=None, suppress_health_check=_SUPPRESSED, database=None
)
settings.register_profile("trace-dev", max_examples=25, deadline=None, database=None)
# Registering is all an import does: loading a profile would change the importer's own
# hypothesis settings. Our conftest loads one from HYPOTHESIS_PROFILE.
PROFILES = ("trace-ci", "trace-dev", "trace-long")


def load_profile_from_env(default: str = "trace-ci") -> str:
    """Load the profile named by ``HYPOTHESIS_PROFILE`` (``ci``/``dev``/``long`` are accepted
    for ours), or ``default``; returns the name loaded. An unknown name is an error naming the
    choices rather than hypothesis' bare ``InvalidArgument``."""
    name = os.environ.get("HYPOTHESIS_PROFILE") or default
    if f"trace-{name}" in PROFILES:
        name = f"trace-{name}"
    try:
        settings.load_profile(name)
    except Exception as exc:  # hypothesis raises InvalidArgument for unregistered names
        choices = ", ".join(PROFILES)
        raise ValueError(
            f"HYPOTHESIS_PROFILE={name!r} is not a registered profile (ours: {choices})"
        ) from exc
    return name


GARBAGE_ACTIONS_PER_EXAMPLE = 40
"""Most actions per hypothesis example in :func:`check_garbage_actions`."""
LONG_FUZZ_ACTIONS = 100_000
"""Fuzzed actions per environment that :func:`check_garbage_actions` reaches under a profile
at least as large as ``trace-long``."""
RANDOM_AGENT_MAX_SUCCESS = 0.05
"""A random agent may stumble on a solution, but at most this often."""
KNOWN_CODES = {c.value for c in ErrorCode}

# -- strategies ------------------------------------------------------------------------------
seeds = st.integers(min_value=0, max_value=2**63 - 1)
difficulties = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) | st.floats(0.0, 1.0)
splits = st.sampled_from(SPLITS)


def _nest(depth: int, kind: str = "list") -> Any:
    """A Python list (or dict) nested ``depth`` deep, built without recursion."""
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def _nested_text(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "0" + "}" * depth
    return "[" * depth  # unclosed: must still be refused before the decoder recurses


BEYOND_RECURSION = st.integers(min_value=1_100, max_value=20_000) | st.just(100_000)
"""Nesting depths beyond Python's default recursion limit (1,000)."""

deep_json_texts = st.builds(
    _nested_text, BEYOND_RECURSION, st.sampled_from(["list", "object", "unclosed"])
)
"""JSON text nested deeper than Python's recursion limit."""
deep_objects = st.builds(_nest, BEYOND_RECURSION, st.sampled_from(["list", "dict"]))
"""Python lists / dicts nested deeper than the recursion limit (an action given as data)."""
huge_integer_texts = st.integers(min_value=4_301, max_value=20_000).map(lambda n: "9" * n)
"""Integer literals past Python's 4,300-digit int conversion limit."""
huge_integers = st.integers(min_value=4_301, max_value=6_000).map(lambda n: 10**n)
"""Python ints with more than 4,300 digits."""
non_finite_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, 1e308, -1e308, 1.7976931348623157e308, 1e13, -5e15, 2**70]
) | st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not abs(x) <= 1e12)
"""Numbers money arithmetic must never see: NaN, infinities, and absurd magnitudes."""
NON_FINITE_LITERALS = ("NaN", "Infinity", "-Infinity", "1e308", "-1e400", "1e999")
"""Python's json module reads these as NaN / infinities / huge floats."""
wrong_type_ids = st.one_of(
    st.lists(st.sampled_from(["O-12345", "C-1", "R-ABC123", "PM-1"]), min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(["id", "order_id"]), st.text(max_size=8), min_size=1),
    st.integers(),
    st.booleans(),
    st.none(),
    st.just([["O-12345"]]),
    st.just({"$ref": "#"}),
)
"""Values of the wrong JSON type for an id argument (a list id is a common model mistake)."""
_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    _json_leaf,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=12,
)
adversarial_values = st.one_of(
    json_values, wrong_type_ids, non_finite_numbers, huge_integers, deep_objects,
    st.text(max_size=5_000), st.sampled_from(["O-12345", "", " ", "\x00", "-1", "0"]),
)  # fmt: skip
"""Argument values: ordinary JSON, wrong types, non-finite or huge numbers, deep nesting."""


def foreign_tool_names(own: list[str]) -> list[str]:
    """Tool names of the other trace_gym environments (the shared vocabulary) not in ``own``."""
    from trace_gym.world.tools import VOCABULARY

    return sorted(set(VOCABULARY) - set(own)) or ["get_weather"]


def _as_json_text(value: Any) -> str:
    try:
        return json.dumps(value)
    except (ValueError, RecursionError):  # huge ints and deep objects have no json.dumps
        return "[" * 2_000


def _call_text(name_json: str, args_text: str) -> str:
    """A JSON call written by hand, so the arguments can be text ``json.dumps`` cannot make."""
    return '{"name": ' + name_json + ', "arguments": ' + args_text + "}"


def action_formats(call: dict[str, Any]) -> st.SearchStrategy[Any]:
    """One call ``{"name", "arguments"}`` in every action format the parser accepts."""
    args_text = _as_json_text(call["arguments"])
    name = json.dumps(call["name"])
    text = _call_text(name, args_text)
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function",
         "function": {"name": call["name"], "arguments": args_text}}]}  # fmt: skip
    return st.sampled_from([
        call,
        [call],
        {"tool_calls": [call]},
        text,
        f"[{text}]",
        '{"tool_calls": [' + text + "]}",
        f"Let me check. <tool_call>{text}</tool_call>",
        message,
        json.dumps(message),
    ])  # fmt: skip


def adversarial_calls(tools: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Calls to this environment's tools (or other environments') whose arguments keep the
    schema's names but hold adversarial values, so they reach the schema check and beyond.

    ``tools`` are OpenAI tool schemas (``env.unwrapped.tool_schemas("openai")``).
    """
    own = [t["function"]["name"] for t in tools]
    props = {
        t["function"]["name"]: t["function"]["parameters"].get("properties", {}) for t in tools
    }

    def fill(name: str) -> st.SearchStrategy[dict[str, Any]]:
        names = list(props.get(name, {})) or ["order_id"]
        return st.dictionaries(st.sampled_from(names), adversarial_values, max_size=len(names))

    names = st.sampled_from(own) | st.sampled_from(foreign_tool_names(own))
    return names.flatmap(lambda n: fill(n).map(lambda a: {"name": n, "arguments": a}))


def adversarial_actions(tools: list[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Every fuzz category in every action format: nesting beyond the recursion limit, integers
    past 4,300 digits, non-finite and huge numbers, wrong types in ids, other environments'
    tool names, and oversized turns (as a whole action, a ``<tool_call>`` body and an
    ``arguments`` string)."""
    own = [t["function"]["name"] for t in tools] or ["get_order"]
    some_tool = st.sampled_from(own)
    deep_or_huge = deep_json_texts | huge_integer_texts
    return st.one_of(
        adversarial_calls(tools).flatmap(action_formats),
        deep_or_huge,
        deep_or_huge.map(lambda t: f"<tool_call>{t}</tool_call>"),
        st.tuples(some_tool, deep_or_huge).map(
            lambda nt: {"tool_calls": [{"function": {"name": nt[0], "arguments": nt[1]}}]}
        ),
        st.tuples(some_tool, deep_or_huge).map(
            lambda nt: _call_text(json.dumps(nt[0]), '{"x": ' + nt[1] + "}")
        ),
        st.tuples(some_tool, st.sampled_from(NON_FINITE_LITERALS)).map(
            lambda nt: _call_text(json.dumps(nt[0]), '{"amount": ' + nt[1] + "}")
        ),
        deep_objects,
        st.lists(some_tool.map(lambda n: {"name": n, "arguments": {}}), min_size=33, max_size=60),
        st.integers(33, 80).map(lambda n: '<tool_call>{"name": "x"}</tool_call>' * n),
        st.integers(100_001, 120_000).map(lambda n: "[" + " " * n + "]"),
    )


def tool_call_actions(tool_names: list[str]) -> st.SearchStrategy[Any]:
    """Calls to real tool names with arbitrary (mostly wrong) arguments, in every format."""
    names = st.sampled_from(tool_names) | st.text(max_size=12)
    call = st.fixed_dictionaries({"name": names, "arguments": json_values})
    return st.one_of(
        call,
        call.map(json.dumps),
        st.lists(call, max_size=3).map(json.dumps),
        call.map(lambda c: f"<tool_call>{json.dumps(c)}</tool_call>"),
        st.lists(call, max_size=3).map(lambda cs: {"role": "assistant", "content": None,
                                                   "tool_calls": [{"id": f"c{i}", "type": "function",
                                                                   "function": {"name": c["name"],
                                                                                "arguments": json.dumps(c["arguments"])}}
                                                                  for i, c in enumerate(cs)]}),
    )  # fmt: skip


def garbage_actions(
    tool_names: list[str], tools: list[dict[str, Any]] | None = None
) -> st.SearchStrategy[Any]:
    """Anything an LLM (or a fuzzer) might send: text, broken JSON, wrong shapes, huge strings,
    non-ASCII, unknown tools, wrong argument types, and (given the OpenAI ``tools``) every
    category of :func:`adversarial_actions`."""
    plain = st.one_of(
        st.text(max_size=200),
        st.text(alphabet='{}[]":,<>/ tool_call', max_size=60),
        st.sampled_from(["", "   ", "<tool_call>", "<tool_call>{}", "{", "[]", "null", "{}"]),
        st.just("x" * 300_000),
        st.text(alphabet="éßØ漢字😀\u200b\x00", max_size=50),
        json_values,
        json_values.map(lambda v: json.dumps(v)),
        st.dictionaries(
            st.sampled_from(["role", "content", "tool_calls", "name", "x"]), json_values
        ),
        tool_call_actions(tool_names),
    )
    if tools is None:
        return plain
    return plain | adversarial_actions(tools)


# -- helpers ---------------------------------------------------------------------------------
def _inner(env: gym.Env) -> TraceEnv:
    return env.unwrapped  # type: ignore[return-value]


def _tool_names(source: EnvSource) -> list[str]:
    env = make_env(source)
    try:
        return [t["function"]["name"] for t in _inner(env).tool_schemas("openai")]
    finally:
        env.close()


def _play(env: gym.Env, agent: Any, seed: int, difficulty: float, split: str = "train") -> dict:
    return run_episode(env, agent, seed=seed, options={"difficulty": difficulty, "split": split})


def _where(source: EnvSource, seed: int, difficulty: float, split: str = "train") -> str:
    name = source if isinstance(source, str) else getattr(source, "__name__", "env")
    return f"{name} seed={seed} difficulty={difficulty} split={split}"


# -- plan mutations --------------------------------------------------------------------------
def _turn_calls(turn: Any) -> list[dict[str, Any]] | None:
    """The calls of a plan turn, or None for a message to the customer."""
    if isinstance(turn, dict) and "tool_calls" in turn:
        return list(turn["tool_calls"])
    if isinstance(turn, dict) and "name" in turn:
        return [turn]
    return None


def _with_calls(calls: list[dict[str, Any]]) -> Any:
    return calls[0] if len(calls) == 1 else {"tool_calls": calls}


def _significant(value: Any) -> bool:
    """Arguments whose change must matter: ids, enum-like tokens, numbers, lists."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float | list):
        return True
    return isinstance(value, str) and (bool(ID_PATTERN.fullmatch(value)) or value.isidentifier())


def _changed(value: Any, enum: list[Any] | None) -> Any:
    if enum:
        others = [v for v in enum if v != value]
        return others[0] if others else value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, list):
        return value[:-1] if len(value) > 1 else value + value
    return value + "X"


def plan_mutations(
    plan: list[Any], tools: list[dict[str, Any]], kinds: dict[str, str]
) -> Iterator[tuple[str, list[Any]]]:
    """Single-step mutations of a plan: ``(description, mutated plan)``.

    ``tools`` are OpenAI schemas (for enum members), ``kinds`` maps tool name to
    ``read``/``write``/``control``.

    * drop one call (a write, a decision, or a read the decision needs);
    * change one significant argument (an id, an enum member, a number, a list) of any call;
    * move a turn that writes or decides before the read turn preceding it.
    """
    enums: dict[tuple[str, str], list[Any]] = {}
    for t in tools:
        fn = t["function"]
        for arg, schema in fn["parameters"].get("properties", {}).items():
            if "enum" in schema:
                enums[(fn["name"], arg)] = schema["enum"]
    for i, turn in enumerate(plan):
        calls = _turn_calls(turn)
        if not calls:
            continue
        for j, call in enumerate(calls):
            rest = calls[:j] + calls[j + 1 :]
            mutated = plan[:i] + ([_with_calls(rest)] if rest else []) + plan[i + 1 :]
            yield f"drop call {call['name']} (turn {i})", mutated
            for arg, value in sorted(call["arguments"].items()):
                if not _significant(value):
                    continue
                new_args = dict(
                    call["arguments"], **{arg: _changed(value, enums.get((call["name"], arg)))}
                )
                if new_args == call["arguments"]:
                    continue
                new_calls = (
                    calls[:j] + [{"name": call["name"], "arguments": new_args}] + calls[j + 1 :]
                )
                yield (
                    f"change {call['name']}.{arg} (turn {i})",
                    plan[:i] + [_with_calls(new_calls)] + plan[i + 1 :],
                )
        acts = any(kinds.get(c["name"]) in ("write", "control") for c in calls)
        before = _turn_calls(plan[i - 1]) if i > 0 else None
        if acts and before and all(kinds.get(c["name"]) == "read" for c in before):
            swapped = plan[: i - 1] + [plan[i], plan[i - 1]] + plan[i + 1 :]
            yield f"swap turns {i - 1} and {i}", swapped


# -- checks ----------------------------------------------------------------------------------
def check_determinism(source: EnvSource, verifier: Verifier | None = None) -> None:
    """Same (seed, difficulty, split) -> same observation, info, task hash and oracle record."""

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties, split=splits)
    def prop(seed: int, difficulty: float, split: str) -> None:
        records = []
        for _ in range(2):
            env = make_env(source, verifier)
            opts = {"difficulty": difficulty, "split": split}
            obs, info = env.reset(seed=seed, options=opts)
            records.append((obs, info, _play(env, OracleAgent(), seed, difficulty, split)))
            env.close()
        assert records[0] == records[1], (
            f"not deterministic: {_where(source, seed, difficulty, split)}"
        )

    prop()


def task_hashes(
    env_id: str, seeds_: list[int], difficulty: float, split: str = "train"
) -> list[str]:
    """Task hashes of the given seeds (used for golden tests and cross-process checks)."""
    env = make_env(env_id)
    out = []
    for seed in seeds_:
        _, info = env.reset(seed=seed, options={"difficulty": difficulty, "split": split})
        out.append(info["task_hash"])
    env.close()
    return out


def check_cross_process_determinism(env_id: str, n_seeds: int = 5) -> None:
    """Task hashes agree across interpreter processes with different ``PYTHONHASHSEED``."""
    code = (
        "import json, sys, trace_gym; from trace_gym.testing import task_hashes; "
        f"print(json.dumps([task_hashes({env_id!r}, list(range({n_seeds})), d) for d in (0.0, 0.5, 1.0)]))"
    )
    expected = [task_hashes(env_id, list(range(n_seeds)), d) for d in (0.0, 0.5, 1.0)]
    for hash_seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == expected, (
            f"{env_id}: hashes differ under PYTHONHASHSEED={hash_seed}"
        )


def check_oracle(source: EnvSource, verifier: Verifier | None = None) -> None:
    """The oracle solves every task: passed, score 1.0."""

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties, split=splits)
    def prop(seed: int, difficulty: float, split: str) -> None:
        env = make_env(source, verifier)
        record = _play(env, OracleAgent(), seed, difficulty, split)
        env.close()
        v = record["verification"]
        failed = [c["name"] for c in v["checks"] if not c["passed"]]
        assert record["is_success"] and math.isclose(v["score"], 1.0), (
            f"oracle failed ({failed}): {_where(source, seed, difficulty, split)}"
        )

    prop()


def check_baselines_fail(source: EnvSource, verifier: Verifier | None = None) -> None:
    """Doing nothing scores 0; calling every tool fails; a random agent rarely passes."""

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties)
    def prop(seed: int, difficulty: float) -> None:
        env = make_env(source, verifier)
        null = _play(env, NullAgent(), seed, difficulty)
        assert not null["is_success"] and null["verification"]["score"] == 0.0, (
            f"doing nothing earned {null['verification']['score']}: {_where(source, seed, difficulty)}"
        )
        spam = _play(env, CallEveryToolAgent(), seed, difficulty)
        assert not spam["is_success"], (
            f"calling every tool passed: {_where(source, seed, difficulty)}"
        )
        env.close()

    prop()
    env = make_env(source, verifier)
    n = 60
    wins = sum(_play(env, RandomAgent(s), s, 0.5)["is_success"] for s in range(n))
    env.close()
    assert wins / n <= RANDOM_AGENT_MAX_SUCCESS, f"a random agent passed {wins}/{n} tasks"


def check_mutations(source: EnvSource, verifier: Verifier | None = None) -> None:
    """Every single-step mutation of the oracle plan fails or scores strictly below 1."""

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties)
    def prop(seed: int, difficulty: float) -> None:
        env = make_env(source, verifier)
        env.reset(seed=seed, options={"difficulty": difficulty})
        plan = _inner(env).oracle_actions()
        tools = _inner(env).tool_schemas("openai")
        kinds = {t.name: t.kind for t in _inner(env).tools}
        for what, mutated in plan_mutations(plan, tools, kinds):
            record = _play(env, PlanAgent(mutated), seed, difficulty)
            score = record["verification"]["score"]
            assert not record["is_success"] or score < 1.0, (
                f"mutation '{what}' still passes with score {score}: {_where(source, seed, difficulty)}"
            )
        env.close()

    prop()


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = (
    3,
    120,
    120,
    4,
    4,
)


def short_repr(value: Any) -> str:
    """A bounded repr for failure messages (a 100,000-deep list has no plain repr)."""
    try:
        return _SHORT.repr(value)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"


def _long_profile() -> bool:
    return settings.default.max_examples >= settings.get_profile("trace-long").max_examples


def _suite_settings() -> settings:
    """The loaded profile, without a deadline or the too-slow health check (an episode takes
    milliseconds, and fuzzed actions are big on purpose)."""
    return settings(settings.default, deadline=None, suppress_health_check=_SUPPRESSED)


def _value_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in JSON data (the root excluded), e.g. ``("refunds", 0, "amount")``."""
    out: list[tuple[Any, ...]] = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        out.append((*path, key))
        out.extend(_value_paths(child, (*path, key)))
    return out or [("x",)]


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with the position ``path`` set to ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value.get(head), rest, new)}
    if isinstance(value, list) and isinstance(head, int) and head < len(value):
        return [_replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]
    return {head: _replaced(None, rest, new)}


def check_garbage_actions(
    source: EnvSource, verifier: Verifier | None = None, min_actions: int | None = None
) -> int:
    """Arbitrary actions never raise from ``step`` nor end an episode with an internal error;
    errors carry known codes; rewards stay in range and are never positive before the episode
    ends; ``info`` is JSON. Returns the number of actions stepped.

    Fuzzes with :func:`garbage_actions` (every category of :func:`adversarial_actions`), and
    with the oracle's own calls with one argument replaced by an adversarial value, so real
    ids carry bad values into the handlers. ``min_actions`` (default: 0, or
    :data:`LONG_FUZZ_ACTIONS` under a profile at least as large as ``trace-long``) repeats the
    hypothesis run until that many actions have been stepped.
    """
    from trace_gym.core.env import internal_error_count

    probe = make_env(source)
    tools = _inner(probe).tool_schemas("openai")
    probe.close()
    names = [t["function"]["name"] for t in tools]
    if min_actions is None:
        min_actions = LONG_FUZZ_ACTIONS if _long_profile() else 0
    stepped = 0

    @_suite_settings()
    @given(
        seed=seeds,
        actions=st.lists(
            garbage_actions(names, tools), min_size=1, max_size=GARBAGE_ACTIONS_PER_EXAMPLE
        ),
        data=st.data(),
    )
    def prop(seed: int, actions: list[Any], data: st.DataObject) -> None:
        nonlocal stepped
        env = make_env(source, verifier)
        inner = _inner(env)
        obs, _ = env.reset(seed=seed)
        plan = inner.oracle_actions()
        parsed = [parse_action(turn).calls for turn in plan]  # any format the oracle uses
        turns = [i for i, calls in enumerate(parsed) if calls]
        if turns:  # the oracle's turns up to one of its calls, that call with a value broken
            at = data.draw(st.sampled_from(turns), label="oracle turn")
            call = data.draw(st.sampled_from(parsed[at]), label="oracle call")
            path = data.draw(st.sampled_from(_value_paths(call.arguments)), label="path")
            bad = data.draw(adversarial_values, label="value")
            broken = {"name": call.name, "arguments": _replaced(call.arguments, path, bad)}
            actions = [*plan[:at], data.draw(action_formats(broken), label="format"), *actions]
        # A schema-shaped call to any tool, with ids from the opening message, maybe broken:
        # reaches handlers that no oracle call uses.
        if tools:  # an environment may have none
            tool = data.draw(st.sampled_from(tools), label="tool")["function"]
            rng = StableRNG(data.draw(st.integers(0, 2**32), label="rng"))
            args = arguments_from_schema(tool["parameters"], rng, ID_PATTERN.findall(obs))
            if data.draw(st.booleans(), label="break it"):
                path = data.draw(st.sampled_from(_value_paths(args)), label="shaped path")
                args = _replaced(args, path, data.draw(adversarial_values, label="shaped value"))
            shaped = data.draw(action_formats({"name": tool["name"], "arguments": args}))
            actions.insert(data.draw(st.integers(0, len(actions)), label="at"), shaped)
        before = internal_error_count()
        for action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            stepped += 1
            what = short_repr(action)
            assert "internal_error" not in info, (
                f"internal error {info.get('internal_error')} on {what}"
            )
            assert isinstance(reward, float) and math.isfinite(reward), f"reward {reward!r}"
            assert -1.0 - inner.malformed_penalty <= reward <= 1.0, f"reward {reward} out of range"
            assert inner.observation_space.contains(obs), "observation outside the space"
            if info["error"] is not None:
                assert info["error"]["code"] in KNOWN_CODES, f"unknown code {info['error']}"
                if not (terminated or truncated):
                    assert reward <= 0.0, f"a malformed action earned {reward}"
            json.dumps(info)
            if terminated or truncated:
                obs, _ = env.reset(seed=seed + 1 if seed < 2**63 - 2 else 0)
        assert internal_error_count() == before, "an internal error was counted"
        env.close()

    prop()
    while stepped < min_actions:  # non-derandomized profiles draw new examples every run
        prop()
    return stepped


def check_pickle_roundtrip(source: EnvSource, verifier: Verifier | None = None) -> None:
    """``pickle`` and ``copy.deepcopy`` of a live environment (right after ``reset`` and after
    some of the oracle's turns) continue exactly like the original: same observations,
    rewards, flags and ``info`` for the rest of the oracle's turns and a closing message.

    A verifier replaced on the instance is set again on the copy (it may be a lambda, which
    pickle cannot carry; vector environments rebuild it the same way)."""

    def copies(env: gym.Env) -> list[gym.Env]:
        inner = _inner(env)
        own = inner.__dict__.pop("verify", None)
        try:
            out = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
        finally:
            if own is not None:
                inner.verify = own
        for c in out:
            if own is not None:
                _inner(c).verify = verifier
        return out

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties, at=st.floats(0.0, 1.0))
    def prop(seed: int, difficulty: float, at: float) -> None:
        env = make_env(source, verifier)
        env.reset(seed=seed, options={"difficulty": difficulty})
        plan = _inner(env).oracle_actions()
        cut = int(at * len(plan))
        for i, action in enumerate(plan[:cut]):
            if any(env.step(action)[2:4]):  # the oracle may finish before its last turn
                cut = i
                break
        if _inner(env).episode.end_reason is not None:
            env.reset(seed=seed, options={"difficulty": difficulty})
            cut = 0
        envs = [env, *copies(env)]
        where = f"{_where(source, seed, difficulty)} after {cut} of {len(plan)} turns"
        for action in [*plan[cut:], "Thanks, is there anything else?"]:
            outs = [json.dumps(e.step(action), sort_keys=True, default=repr) for e in envs]
            assert outs[1] == outs[0], f"pickled copy diverged: {where}"
            assert outs[2] == outs[0], f"deep copy diverged: {where}"
            if json.loads(outs[0])[2] or json.loads(outs[0])[3]:
                break
        for e in envs:
            e.close()

    prop()


def check_verifier_purity(source: EnvSource, verifier: Verifier | None = None) -> None:
    """Verifying twice gives the same result and leaves the episode untouched."""

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties, agent=st.sampled_from(["oracle", "random"]))
    def prop(seed: int, difficulty: float, agent: str) -> None:
        env = make_env(source, verifier)
        player = OracleAgent() if agent == "oracle" else RandomAgent(seed % 1000)
        _play(env, player, seed, difficulty)
        inner = _inner(env)
        before = copy.deepcopy(
            (inner.episode.world.to_dict(), inner.episode.initial_world.to_dict())
        )
        first, second = inner.verification().to_dict(), inner.verification().to_dict()
        after = (inner.episode.world.to_dict(), inner.episode.initial_world.to_dict())
        assert first == second, f"verification not repeatable: {_where(source, seed, difficulty)}"
        assert before == after, (
            f"verification mutated the world: {_where(source, seed, difficulty)}"
        )
        env.close()

    prop()


def check_replay(source: str, verifier: Verifier | None = None) -> None:
    """Offline re-scoring of an episode log equals the online reward (ids only)."""
    if verifier is not None:
        return  # re-scoring rebuilds the environment from its id, with its own verifier

    @_suite_settings()
    @given(seed=seeds, difficulty=difficulties, agent=st.sampled_from(["oracle", "random", "spam"]))
    def prop(seed: int, difficulty: float, agent: str) -> None:
        env = make_env(source)
        player = {
            "oracle": OracleAgent(),
            "random": RandomAgent(seed % 997),
            "spam": CallEveryToolAgent(),
        }
        record = _play(env, player[agent], seed, difficulty)
        env.close()
        rescored = rescore(json.loads(json.dumps(record)))
        assert rescored.matches, (
            f"replay gave {rescored.replayed_reward}, online {rescored.logged_reward}: "
            f"{_where(source, seed, difficulty)}"
        )

    prop()


def check_split_disjointness(source: EnvSource, n: int = 200) -> None:
    """No task is shared between the train, eval and test splits over ``n`` seeds each."""
    env = make_env(source)
    hashes = {}
    for split in SPLITS:
        hashes[split] = {
            env.reset(seed=s, options={"split": split})[1]["task_hash"] for s in range(n)
        }
    env.close()
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not hashes[a] & hashes[b], f"splits {a} and {b} share tasks"


def check_gymnasium_env_checker(source: EnvSource) -> None:
    """``gymnasium.utils.env_checker.check_env`` passes."""
    env = make_env(source)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
