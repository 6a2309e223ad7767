"""Information-free policies: agents that act without using what the capability is about.

Each one reads what the oracle reads (or nothing) and then decides the same way on every
task: refuse citing a fixed rule, grant what the customer asked for as stated, ask one fixed
question, take the first search result, stall, or bury the customer in keywords. A sound
environment scores them near zero; :mod:`trace_gym.testing.soundness` checks that bound.

They are built generically from the environment's oracle plan (``oracle_actions()``), tool
kinds (``read`` / ``write`` / ``control``) and tool schemas, plus two optional hooks on the
environment class that may only return what the agent sees in the system prompt and the
opening message:

* ``listed_rules(task) -> list[str]``: the rule codes the policy in the system prompt lists.
* ``requested_call(task) -> dict | None``: ``{"name", "arguments"}``, the write the customer
  asks for with arguments exactly as stated (nothing looked up in the records).

An environment class may also declare ``information_free_exempt: ClassVar[dict[str, str]]``
mapping a policy name (or a name prefix ending in ``:``) to the reason it does not apply,
e.g. tool-call, whose task *is* copying the request.

Policy names are stable API:

=================================  ===========================================================
``read_then_stall``                the oracle's reads, then neutral talk until the episode ends
``refuse_citing_rule:<i>``         the oracle's reads, then refuse citing the i-th listed rule
``refuse_with_reason:<v>``         the oracle's reads, then a control call with enum value v
``refuse_with_reason:<v>_no_reads`` the same control call at once, with no reads
``grant_by_copying``               the oracle's reads, then ``requested_call(task)``
``fixed_question_template``        one fixed question naming every write argument, then the
                                   oracle's turns without its own questions
``first_search_result``            the oracle's plan with every id it took from a tool result
                                   replaced by the first id of the same kind in the results
``keyword_stuffed``                the oracle's reads, then one ~100 KB message of every word
                                   seen so far
``null``                           only talks
=================================  ===========================================================

When two control tools offer the same enum value, the later tool's policy is named
``refuse_with_reason:<tool>.<v>``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trace_gym.agents.baselines import NullAgent
from trace_gym.core.env import TraceEnv

NEUTRAL = "Let me look into that. Is there anything else?"
STUFFED_CHARS = 100_000

_TOKEN = re.compile(r"\b[A-Z]{1,4}-?[A-Z0-9]*\d[A-Z0-9]*(?:-\d+)?\b")
"""Record ids and codes as tools print them: O-12345, PM-4711, R-4F2K1Q, TR2289, I-12345-2."""
_KIND = re.compile(r"[A-Z]+-?")
_WORD = re.compile(r"[\w$.:-]+")


def id_kind(value: Any) -> str | None:
    """The kind of an id-like value: its letter prefix (``O-``, ``PM-``, ``TR``), else None."""
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        return None
    match = _KIND.match(value)
    return match.group(0) if match else None


def turn_calls(turn: Any) -> list[dict[str, Any]] | None:
    """The calls of a plan turn, or None when the turn is a message to the customer."""
    if isinstance(turn, dict) and "tool_calls" in turn:
        return [dict(c) for c in turn["tool_calls"]]
    if isinstance(turn, dict) and "name" in turn:
        return [dict(turn)]
    return None


def as_turn(calls: list[dict[str, Any]]) -> Any:
    return calls[0] if len(calls) == 1 else {"tool_calls": calls}


def tool_kind(env: TraceEnv, name: str) -> str | None:
    tool = env.tools.get(name)
    return None if tool is None else tool.kind


def _decision(env: TraceEnv, turn: Any) -> bool:
    """A turn with a write or control call."""
    return any(tool_kind(env, c["name"]) != "read" for c in turn_calls(turn) or [])


def oracle_reads(env: TraceEnv, plan: list[Any]) -> list[Any]:
    """The read-kind calls of ``plan``, turn by turn (turns without reads dropped)."""
    turns = []
    for turn in plan:
        calls = turn_calls(turn)
        if calls:
            reads = [c for c in calls if tool_kind(env, c["name"]) == "read"]
            if reads:
                turns.append(as_turn(reads))
    return turns


def _fill(schema: dict[str, Any], text: str) -> Any:
    """A valid value for ``schema`` carrying no information (strings say ``text``)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: _fill(props[k], text) for k in required if k in props}
    if kind == "array":
        return [_fill(schema.get("items", {}), text) for _ in range(int(schema.get("minItems", 0)))]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return text


def control_call(env: TraceEnv, tool_name: str, arg: str, value: str) -> dict[str, Any]:
    """A call to control tool ``tool_name`` with ``arg=value`` and neutral other arguments."""
    tool = env.tools.get(tool_name)
    assert tool is not None
    arguments = _fill(tool.parameters, f"Not allowed under rule {value}.")
    arguments[arg] = value
    return {"name": tool_name, "arguments": arguments}


def control_enums(env: TraceEnv) -> list[tuple[str, str, list[str]]]:
    """``(tool, argument, enum values)`` for every enum argument of every control tool."""
    found = []
    for tool in env.tools.of_kind("control"):
        for arg, schema in tool.parameters.get("properties", {}).items():
            if "enum" in schema:
                found.append((tool.name, arg, [str(v) for v in schema["enum"]]))
    return found


def refusal_tool(env: TraceEnv) -> tuple[str, str] | None:
    """The control tool and enum argument a refusal cites a rule with (``refuse`` first)."""
    enums = control_enums(env)
    enums.sort(key=lambda e: e[0] != "refuse")
    return (enums[0][0], enums[0][1]) if enums else None


class ScriptAgent:
    """Plays a plan built from the task at reset, then repeats a closing line.

    ``signature`` is the plan as JSON: equal signatures on the same task play identically,
    so the soundness check runs each distinct one once.
    """

    def __init__(self, name: str, closing: str = NEUTRAL) -> None:
        self.name = name
        self.closing = closing
        self.plan: list[Any] = []
        self._next = 0

    def build(self, env: TraceEnv) -> list[Any]:
        raise NotImplementedError

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.plan = self.build(env)
        self._next = 0

    @property
    def signature(self) -> str:
        return json.dumps([self.plan, self.closing], sort_keys=True)

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        self._next += 1
        if self._next <= len(self.plan):
            return self.plan[self._next - 1]
        return self.closing


class ReadThenStall(ScriptAgent):
    def __init__(self) -> None:
        super().__init__("read_then_stall")

    def build(self, env: TraceEnv) -> list[Any]:
        return oracle_reads(env, env.oracle_actions())


class RefuseCitingRule(ScriptAgent):
    """Refuses citing the ``position``-th rule of ``listed_rules(task)`` (the last one when
    fewer are listed)."""

    def __init__(self, position: int) -> None:
        super().__init__(f"refuse_citing_rule:{position}")
        self.position = position

    def build(self, env: TraceEnv) -> list[Any]:
        self.closing = NEUTRAL
        rules = list(env.listed_rules(env.task))  # type: ignore[attr-defined]
        reads = oracle_reads(env, env.oracle_actions())
        target = refusal_tool(env)
        if not rules or target is None:
            return reads
        code = rules[min(self.position, len(rules)) - 1]
        self.closing = f"I can't do that under rule {code}."
        return [*reads, control_call(env, target[0], target[1], code), self.closing]


class RefuseWithReason(ScriptAgent):
    """Calls control tool ``tool`` with ``arg=value``, after the oracle's reads or at once."""

    def __init__(self, name: str, tool: str, arg: str, value: str, reads: bool) -> None:
        super().__init__(name, closing=f"I can't do that under rule {value}.")
        self.tool, self.arg, self.value, self.reads = tool, arg, value, reads

    def build(self, env: TraceEnv) -> list[Any]:
        reads = oracle_reads(env, env.oracle_actions()) if self.reads else []
        return [*reads, control_call(env, self.tool, self.arg, self.value), self.closing]


class GrantByCopying(ScriptAgent):
    def __init__(self) -> None:
        super().__init__("grant_by_copying", closing="Done.")

    def build(self, env: TraceEnv) -> list[Any]:
        reads = oracle_reads(env, env.oracle_actions())
        call = env.requested_call(env.task)  # type: ignore[attr-defined]
        if call is None:
            return reads
        return [*reads, {"name": call["name"], "arguments": call["arguments"]}, "Done."]


class FixedQuestionTemplate(ScriptAgent):
    """Asks one question naming every argument of every write tool, then plays the oracle's
    turns without the questions it asks before its first write or control call.

    ``applicable`` is False on a task where the oracle asks no question.
    """

    def __init__(self) -> None:
        super().__init__("fixed_question_template")
        self.applicable = True

    def build(self, env: TraceEnv) -> list[Any]:
        names: list[str] = []
        for tool in env.tools.of_kind("write"):
            for arg in tool.parameters.get("properties", {}):
                if arg not in names:
                    names.append(arg)
        question = f"Could you tell me the {', '.join(names)}?"
        plan = env.oracle_actions()
        decides = [i for i, t in enumerate(plan) if _decision(env, t)]
        first_decision = decides[0] if decides else -1

        def asks(i: int, turn: Any) -> bool:  # a question before acting, not a check-in after
            return isinstance(turn, str) and "?" in turn and i < first_decision

        # where the oracle asks nothing, this plan is the oracle's plus one question: it
        # uses all the information, so the task says nothing about untargeted asking
        self.applicable = any(asks(i, t) for i, t in enumerate(plan))
        return [question, *(t for i, t in enumerate(plan) if not asks(i, t))]


class FirstSearchResult:
    """Plays the oracle's plan, but every id the oracle took from a tool result is replaced
    by the first id of the same kind that appeared in the tool results so far.

    ``applicable`` turns True once a write uses an id taken from tool results that showed
    several of its kind; on a task where none does there was no choice to make.
    """

    name = "first_search_result"

    def __init__(self) -> None:
        self.env: Any = None
        self.plan: list[Any] = []
        self.seen: list[str] = []
        self.given = ""
        self.applicable = False
        self._next = 0

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.env = env
        self.plan = env.oracle_actions()
        self.seen = []
        self.given = info.get("system_prompt_no_hint", "") + "\n" + obs
        self.applicable = False
        self._next = 0

    def _observe(self, obs: str) -> None:
        for line in obs.splitlines():
            if line.startswith("[tool "):
                for token in _TOKEN.findall(line):
                    if token not in self.seen:
                        self.seen.append(token)
            else:
                self.given += "\n" + line

    def _swap(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._swap(v) for v in value]
        kind = id_kind(value)
        if kind is None or value in self.given or value not in self.seen:
            return value  # the customer gave it, or it was never in a result
        same_kind = [s for s in self.seen if id_kind(s) == kind]
        self.applicable |= len(same_kind) > 1  # a choice among several results
        return same_kind[0]

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        self._observe(obs)
        self._next += 1
        if self._next > len(self.plan):
            return NEUTRAL
        turn = self.plan[self._next - 1]
        calls = turn_calls(turn)
        if calls is None:
            return turn
        swapped = []
        for call in calls:
            write = tool_kind(self.env, call["name"]) != "read"
            args = call.get("arguments", {})
            swapped.append({**call, "arguments": self._swap(args) if write else args})
        return as_turn(swapped)


class KeywordStuffed:
    """The oracle's reads, then one ~100 KB message of every word seen (system prompt,
    request, tool schemas, tool results), then neutral talk."""

    name = "keyword_stuffed"

    def __init__(self) -> None:
        self.reads: list[Any] = []
        self.words: dict[str, None] = {}
        self._next = 0

    def reset(self, env: TraceEnv, obs: str, info: dict[str, Any]) -> None:
        self.reads = oracle_reads(env, env.oracle_actions())
        self.words = {}
        self._take(info.get("system_prompt_no_hint", ""))
        self._take(json.dumps(info.get("tools", [])))
        self._take(obs)
        self._next = 0

    def _take(self, text: str) -> None:
        for word in _WORD.findall(text):
            self.words.setdefault(word.strip(".:"), None)

    def act(self, obs: str, info: dict[str, Any]) -> Any:
        self._take(obs)
        self._next += 1
        if self._next <= len(self.reads):
            return self.reads[self._next - 1]
        if self._next == len(self.reads) + 1:
            block = " ".join(w for w in self.words if w)
            return (block + " ") * max(1, STUFFED_CHARS // (len(block) + 1))
        return NEUTRAL


def _has_hook(env: TraceEnv, hook: str) -> bool:
    spec = getattr(type(env), "capability_spec", None)
    if spec is not None and hasattr(spec, hook):  # a spec's engine has every hook method
        return getattr(spec, hook) is not None
    return callable(getattr(env, hook, None))


def _exempt(env: TraceEnv, name: str) -> str | None:
    exempt: dict[str, str] = getattr(type(env), "information_free_exempt", {}) or {}
    for key, reason in exempt.items():
        if name == key or (key.endswith(":") and name.startswith(key)):
            return reason
    return None


def _candidates(env: TraceEnv) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    policies: list[tuple[str, Any]] = [("null", NullAgent()), ("read_then_stall", ReadThenStall())]
    skipped: dict[str, str] = {}
    target = refusal_tool(env)
    if not _has_hook(env, "listed_rules"):
        skipped["refuse_citing_rule"] = "the environment has no listed_rules(task) hook"
    elif target is None:
        skipped["refuse_citing_rule"] = "no control tool has an enum reason argument"
    else:
        n = len(next(v for t, a, v in control_enums(env) if (t, a) == target))
        policies += [(f"refuse_citing_rule:{i}", RefuseCitingRule(i)) for i in range(1, n + 1)]
    first_tool: dict[str, str] = {}
    for tool, arg, values in control_enums(env):
        for value in values:
            first_tool.setdefault(value, tool)
            base = value if first_tool[value] == tool else f"{tool}.{value}"
            for reads, suffix in ((True, ""), (False, "_no_reads")):
                name = f"refuse_with_reason:{base}{suffix}"
                policies.append((name, RefuseWithReason(name, tool, arg, value, reads)))
    if not control_enums(env):
        skipped["refuse_with_reason"] = "no control tool has an enum argument"
    if _has_hook(env, "requested_call"):
        policies.append(("grant_by_copying", GrantByCopying()))
    else:
        skipped["grant_by_copying"] = "the environment has no requested_call(task) hook"
    if env.tools.of_kind("write"):
        policies.append(("fixed_question_template", FixedQuestionTemplate()))
    else:
        skipped["fixed_question_template"] = "the environment has no write tool"
    policies += [
        ("first_search_result", FirstSearchResult()),
        ("keyword_stuffed", KeywordStuffed()),
    ]
    kept = []
    for name, agent in policies:
        reason = _exempt(env, name)
        if reason is None:
            kept.append((name, agent))
        else:
            skipped[name] = f"exempt: {reason}"
    return kept, skipped


def information_free_policies(env: Any) -> list[tuple[str, Any]]:
    """The information-free policies that apply to ``env`` (an environment or its wrapper),
    as ``(name, agent)``; :func:`skipped_information_free_policies` says which do not."""
    return _candidates(env.unwrapped)[0]


def skipped_information_free_policies(env: Any) -> dict[str, str]:
    """Policies (or policy families) that do not apply to ``env``, with the reason."""
    return _candidates(env.unwrapped)[1]
