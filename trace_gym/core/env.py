"""The base environment: the reset/step contract every trace_gym environment follows.

A capability environment subclasses :class:`TraceEnv` and fills in a few hooks; the base
class owns everything the contract fixes: seeding and splits, action
parsing, tool execution with stable error codes, the scripted user, termination and
truncation, final verification, reward modes and the ``info`` dict.

Hooks (in the order a reader meets them in an environment module):

* ``generate(rng, difficulty, config) -> task``: a pure function of its arguments; the task
  is a dataclass (hashed as canonical JSON).
* ``build_world(task) -> World`` and ``make_user(task) -> ScriptedUser``.
* ``system_prompt(task) -> str``, ``hint(task) -> str`` (abstract advice, no tool arguments).
* ``verify(task, episode) -> Verification``: pure, never mutates the episode. The property
  suite may replace it on an instance (``env.unwrapped.verify = fn``) to test a verifier.
* ``oracle(task) -> list[action]``: assistant turns that solve the task.
* ``difficulty_features(task) -> dict``: what the task contains.
* ``expected_decision(task) -> str | None``: in an environment that declares ``decisions``
  (class -> share), the class of the decision the task needs (``info["decision"]``).

``step`` never raises for anything an agent sends. An exception that escapes a tool handler,
the scripted user or the verifier is a bug in the environment, not the agent's doing: the
episode ends with ``end_reason == "internal_error"``, reward 0 and
``info["internal_error"] = {"type", "message", "where"}``, and it is counted
(:func:`internal_error_count`, ``info["internal_errors"]``) so that training code can mask
such episodes rather than learn from them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import re
from typing import Any, ClassVar

import gymnasium as gym

from trace_gym.core.actions import (
    MAX_JSON_CHARS,
    MAX_JSON_DEPTH,
    ParsedTurn,
    ToolCall,
    object_error,
    parse_action,
)
from trace_gym.core.episode import CallRecord, EpisodeState
from trace_gym.core.prompts import TOOL_PROMPT_STYLES, tool_block
from trace_gym.core.spaces import AnyText
from trace_gym.core.user import ScriptedUser
from trace_gym.core.verify import REWARD_MODES, Check, Verification
from trace_gym.errors import ActionError, ConfigError, ErrorCode, TraceGymError
from trace_gym.primitives.seeding import (
    StableRNG,
    check_difficulty,
    check_split,
    task_generator_seed,
)
from trace_gym.primitives.tools import ToolRefusal, ToolSet
from trace_gym.world.model import World, json_copy

MAX_TEXT = 200_000
"""Bound of the observation and action spaces (characters)."""
RESET_OPTIONS = ("difficulty", "split", "hint", "config", "task_seed")
_SEED_MASK = (1 << 63) - 1
INTERNAL_ERROR = "internal_error"
"""``end_reason`` of an episode cut short by a bug in the environment (see the module doc)."""
_internal_errors = 0
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def internal_error_count() -> int:
    """Episodes ended by an internal error in this process (any environment) since import."""
    return _internal_errors


def _describe(exc: BaseException, where: str) -> dict[str, str]:
    """The exception as deterministic JSON: no traceback, no memory addresses."""
    message = _ADDRESS.sub("0x?", str(exc))
    if len(message) > 500:
        message = message[:500] + "..."
    return {"type": type(exc).__name__, "message": message, "where": where}


def task_to_dict(task: Any) -> dict[str, Any]:
    """A task dataclass as JSON data (top level without ``asdict``'s deep copy)."""
    return {f.name: _plain(getattr(task, f.name)) for f in dataclasses.fields(task)}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _fields(obj: Any) -> dict[str, Any]:
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            raise TypeError(f"a task holds a {type(obj).__name__}, which is not JSON data")
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in dataclasses.fields(obj))
    return {name: getattr(obj, name) for name in names}


def task_hash(task: Any) -> str:
    """SHA-256 of the task's canonical JSON; equal to ``sha256_hex(task_to_dict(task))``
    without building the copy first (json serialises nested dataclasses through ``default``)."""
    text = json.dumps(task, default=_fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _present(key: str, value: Any) -> dict[str, Any]:
    """``{key: value}``, or nothing when the value is None (a key only some environments
    have)."""
    return {} if value is None else {key: value}


def _jsonable(action: Any) -> Any:
    """The action as the episode log stores it; replaying the stored form gives the same
    parse (an object beyond the parser's bounds is stored as text beyond the same bounds)."""
    if isinstance(action, str):
        return action
    if isinstance(action, dict | list | tuple):
        error = object_error(action)
        if error is None:
            return json.loads(json.dumps(action))
        if error.code == ErrorCode.TOO_DEEP:
            return "[" * (MAX_JSON_DEPTH + 1)
        if error.code == ErrorCode.TOO_LARGE:
            return "[" + "9" * (MAX_JSON_CHARS + 1) + "]"
    elif action is None or isinstance(action, bool | int | float):
        return action if object_error(action) is None else [repr(type(action))]
    # Not JSON data: a list holding its repr parses to the same parse.invalid_shape error.
    return [repr(action)[:1000]]


class TraceEnv(gym.Env[str, str]):
    """Base class of all trace_gym environments (see the module docstring for the hooks).

    Args:
        difficulty: default task difficulty in [0, 1] (``reset(options={"difficulty": d})``
            overrides it per episode).
        reward_mode: ``binary``, ``partial`` (default) or ``shaped``.
        max_turns: assistant turns before truncation; the registry sets the default.
        split: default split, ``train`` / ``eval`` / ``test`` (seed-disjoint).
        hint: add the ``<expert_guidance>`` block to the system prompt by default.
        malformed_penalty: subtracted from the step reward of a turn with an error (>= 0).
        max_consecutive_errors: error-only turns in a row that end the episode.
        tool_prompt: ``none`` (tools only in ``info["tools"]``), ``hermes`` or ``compact``
            (also listed in the system prompt, as full schemas or one line per tool, with the
            ``<tool_call>`` convention, for chat templates that ignore ``tools=``; see
            :mod:`trace_gym.core.prompts`).
        config: generator overrides (each environment documents its fields).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    env_id: ClassVar[str] = ""
    capability: ClassVar[str] = ""
    version: ClassVar[int] = 0
    tools: ClassVar[ToolSet] = ToolSet([])
    default_max_turns: ClassVar[int] = 12
    decisions: ClassVar[dict[str, float]] = {}
    """Decision class -> declared share of the tasks; empty when the verifier judges no
    categorical decision (see :mod:`trace_gym.core.spec`)."""
    initial_world_from_task: ClassVar[bool] = False
    """True when ``build_world(task)`` is ``World.from_dict(task.world)``: the episode's
    initial world is then a read-only view of ``task.world`` instead of a second copy (reset
    copies the world once instead of twice; tasks are never mutated)."""

    def __init__(
        self,
        difficulty: float = 0.5,
        reward_mode: str = "partial",
        max_turns: int | None = None,
        split: str = "train",
        hint: bool = False,
        malformed_penalty: float = 0.0,
        max_consecutive_errors: int = 6,
        tool_prompt: str = "none",
        render_mode: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.difficulty = check_difficulty(difficulty)
        if reward_mode not in REWARD_MODES:
            raise ConfigError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        self.reward_mode = reward_mode
        self.max_turns = int(max_turns if max_turns is not None else self.default_max_turns)
        if self.max_turns < 2:
            raise ConfigError(f"max_turns must be >= 2, got {max_turns!r}")
        self.split = check_split(split)
        self.hint_default = bool(hint)
        if malformed_penalty < 0:
            raise ConfigError(f"malformed_penalty must be >= 0, got {malformed_penalty!r}")
        self.malformed_penalty = float(malformed_penalty)
        self.max_consecutive_errors = int(max_consecutive_errors)
        if tool_prompt not in TOOL_PROMPT_STYLES:
            raise ConfigError(f"tool_prompt must be one of {TOOL_PROMPT_STYLES}")
        self.tool_prompt = tool_prompt
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.config = dict(config or {})
        self.observation_space = AnyText(MAX_TEXT)
        self.action_space = AnyText(MAX_TEXT)
        self._tool_schemas = self.tools.export("openai")
        # info["tools"] is one copy of the schemas, handed out again while it still equals
        # them (comparing is ~4x cheaper than copying 27 schemas every step) and replaced by
        # a fresh copy (marshal version 2: no shared references) once a caller modified it.
        self._tools_blob = marshal.dumps(self._tool_schemas, 2)
        self._tools_given: list[dict[str, Any]] | None = None
        self._episode: EpisodeState | None = None
        self._user: ScriptedUser | None = None
        self._meta: dict[str, Any] = {}
        self._raw_actions: list[Any] = []
        self._return = 0.0
        self._verification: Verification | None = None
        self._where = "step"
        self._internal_error_total = 0

    # -- hooks (override) -------------------------------------------------------------------
    def generate(self, rng: StableRNG, difficulty: float, config: dict[str, Any]) -> Any:
        raise NotImplementedError

    def build_world(self, task: Any) -> World:
        raise NotImplementedError

    def make_user(self, task: Any) -> ScriptedUser:
        raise NotImplementedError

    def system_prompt(self, task: Any) -> str:
        raise NotImplementedError

    def hint(self, task: Any) -> str:
        raise NotImplementedError

    def verify(self, task: Any, episode: EpisodeState) -> Verification:
        raise NotImplementedError

    def oracle(self, task: Any) -> list[Any]:
        raise NotImplementedError

    def difficulty_features(self, task: Any) -> dict[str, Any]:
        return {}

    def expected_decision(self, task: Any) -> str | None:
        """The class of the decision ``task`` needs (None: no declared decisions)."""
        return None

    def request_decisions(self, task: Any) -> dict[str, str] | None:
        """A composite's decision class per request (member -> class); None otherwise."""
        return None

    def decision_plan(self, task: Any, decision: str) -> list[Any] | None:
        """The oracle's reads, then ``decision`` carried out without knowing which decision
        ``task`` needs (the decision-blind policies play it); None: not declared."""
        return None

    # -- public accessors -------------------------------------------------------------------
    @property
    def task(self) -> Any:
        """The current task (after ``reset``)."""
        return self._require_episode().task

    @property
    def episode(self) -> EpisodeState:
        """The current episode state (read it; do not mutate it)."""
        return self._require_episode()

    @property
    def registered_id(self) -> str:
        return self.spec.id if self.spec is not None else self.env_id

    def oracle_actions(self) -> list[Any]:
        """The oracle's assistant turns for the current task."""
        return self.oracle(self.task)

    def tool_schemas(self, fmt: str = "openai") -> list[dict[str, Any]]:
        """Tool declarations as ``openai`` / ``openai_responses`` / ``anthropic`` / ``mcp``."""
        return self.tools.export(fmt)

    def verification(self) -> Verification:
        """Verify the episode as it stands now (pure; the episode need not be over)."""
        ep = self._require_episode()
        return self.verify(ep.task, ep)

    # -- reset ----------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ConfigError(f"unknown reset option(s) {unknown}; known: {list(RESET_OPTIONS)}")
        if "task_seed" in options:
            task_seed = int(options["task_seed"])
        elif seed is not None:
            task_seed = int(seed)
        else:  # check_env: an unseeded reset must follow from the last seeded one
            task_seed = int(self.np_random.bit_generator.random_raw()) & _SEED_MASK
        difficulty = check_difficulty(options.get("difficulty", self.difficulty))
        split = check_split(options.get("split", self.split))
        hint = bool(options.get("hint", self.hint_default))
        config = {**self.config, **dict(options.get("config") or {})}

        rng = StableRNG(task_generator_seed(self.env_id, split, task_seed, difficulty))
        task = self.generate(rng, difficulty, config)
        world = self.build_world(task)
        self._user = self.make_user(task)
        prompt = self._full_system_prompt(task, hint=False)
        shown_prompt = self._full_system_prompt(task, hint=True) if hint else prompt
        messages = [
            {"role": "system", "content": shown_prompt},
            {"role": "user", "content": self._user.opening},
        ]
        initial = World.view(task.world) if self.initial_world_from_task else world.snapshot()
        self._episode = EpisodeState(task, initial, world, messages)
        self._raw_actions = []
        self._return = 0.0
        self._verification = None
        self._meta = {
            "env_id": self.registered_id,
            "env_version": self.version,
            "capability": self.capability,
            "task_id": f"{self.registered_id}:{split}:d{difficulty:.2f}:s{task_seed}",
            "task_seed": task_seed,
            "split": split,
            "difficulty": difficulty,
            "task_hash": task_hash(task),
            "difficulty_features": self.difficulty_features(task),
            "decision": self.expected_decision(task),
            **_present("request_decisions", self.request_decisions(task)),
            "system_prompt": shown_prompt,
            "system_prompt_no_hint": prompt,
            "hint": self.hint(task) if hint else None,
            "tools": self._tool_schemas,
            "max_turns": self.max_turns,
            "reward_mode": self.reward_mode,
            "reset_options": {"difficulty": difficulty, "split": split, "hint": hint}
            | ({"config": options["config"]} if options.get("config") else {}),
        }
        obs = self._render([messages[-1]])
        return obs, self._info(parsed=None, error=None)

    def _full_system_prompt(self, task: Any, *, hint: bool) -> str:
        text = self.system_prompt(task)
        if hint:
            text += f"\n\n<expert_guidance>\n{self.hint(task)}\n</expert_guidance>"
        return text + tool_block(self.tool_prompt, self._tool_schemas)

    # -- step -----------------------------------------------------------------------------
    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ep = self._require_episode()
        if ep.end_reason is not None:
            raise TraceGymError("this episode has ended; call reset() before step()")
        self._where = "step"
        try:
            return self._step(ep, action)
        except Exception as exc:  # a bug in a hook: end the episode, never the training run
            return self._internal_error(ep, exc)

    def _internal_error(
        self, ep: EpisodeState, exc: Exception
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        global _internal_errors
        _internal_errors += 1
        self._internal_error_total += 1
        described = _describe(exc, self._where)
        ep.end_reason = INTERNAL_ERROR
        check = Check(
            INTERNAL_ERROR, self.capability, 0.0, weight=0.0, gate=True,
            actual=described, message="the environment failed; mask this episode",
        )  # fmt: skip
        self._verification = Verification((check,), decided=False)
        reward = -self._return if self.reward_mode == "shaped" else 0.0
        self._return += reward
        note = f"[environment] internal error in {described['where']}; the episode ended"
        ep.messages.append({"role": "system", "content": note})
        try:
            info = self._info(parsed=None, error=None)
        except Exception:  # the episode itself cannot be rendered: report the bare minimum
            info = {k: v for k, v in self._meta.items() if k != "tools"}
            info |= {"turn": ep.turn, "error": None, "verification": self._verification.to_dict()}
            info |= {"is_success": False, "end_reason": INTERNAL_ERROR}
        info["internal_error"] = described
        info["internal_errors"] = self._internal_error_total
        return note, float(reward), True, False, info

    def _step(self, ep: EpisodeState, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        ep.turn += 1
        self._raw_actions.append(_jsonable(action))
        parsed = parse_action(action, call_id_prefix=f"call_{ep.turn}")
        ep.messages.append(parsed.to_message())
        new_messages: list[dict[str, Any]] = []
        errors = [e for e in (parsed.error, *parsed.extra_errors) if e is not None]
        if errors and not parsed.calls:
            note = "; ".join(f"error {e.code.value}: {e.message}" for e in errors)
            new_messages.append({"role": "system", "content": f"[environment] {note}"})
        ended_by_tool = False
        for call in parsed.calls:
            record = self._execute(call, ep)
            payload = {"error": record.error} if record.error else record.result
            content = json.dumps(payload, ensure_ascii=False, sort_keys=True)
            new_messages.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
            )
            if record.error:
                errors.append(ActionError(ErrorCode(record.error["code"]), record.error["message"]))
            tool = self.tools.get(call.name)
            ended_by_tool |= bool(record.ok and tool is not None and tool.terminal)
        if not parsed.calls and parsed.content.strip():
            ep.agent_texts.append((ep.turn, parsed.content))
            if not ended_by_tool:
                self._where = "user"
                reply = self._user.reply(parsed.content, ep)  # type: ignore[union-attr]
                new_messages.append({"role": "user", "content": reply.text})
                if reply.done:
                    ep.end_reason = "user_end"
        if ended_by_tool:
            ep.end_reason = "agent_end"
        ep.messages.extend(new_messages)
        for e in errors:
            ep.error_counts[e.code.value] = ep.error_counts.get(e.code.value, 0) + 1
        any_ok = any(c.ok for c in ep.calls if c.turn == ep.turn)
        ep.consecutive_error_turns = ep.consecutive_error_turns + 1 if errors and not any_ok else 0
        if ep.end_reason is None and ep.consecutive_error_turns >= self.max_consecutive_errors:
            ep.end_reason = "error_limit"
        terminated = ep.end_reason is not None
        truncated = not terminated and ep.turn >= self.max_turns
        if truncated:
            ep.end_reason = "turn_limit"
            limit = ActionError(ErrorCode.TURN_LIMIT, f"turn limit of {self.max_turns} reached")
            errors.append(limit)
            ep.error_counts[limit.code.value] = ep.error_counts.get(limit.code.value, 0) + 1
        reward = self._reward(done=terminated or truncated, had_error=bool(errors))
        self._return += reward
        error = errors[0] if errors else None
        info = self._info(parsed=parsed, error=error)
        return self._render(new_messages), reward, terminated, truncated, info

    def _execute(self, call: ToolCall, ep: EpisodeState) -> CallRecord:
        tool = self.tools.get(call.name)
        index = len(ep.calls)
        record = CallRecord(
            ep.turn, index, call.id, call.name, call.arguments, tool.kind if tool else None, False
        )
        ep.calls.append(record)
        if tool is None:
            known = ", ".join(self.tools.names)
            err = ActionError(ErrorCode.UNKNOWN_TOOL, f"no tool {call.name!r}; tools: {known}")
        elif call.arguments_error is not None:
            err = ActionError(ErrorCode.INVALID_JSON, f"{call.name}: {call.arguments_error}")
        else:
            err = tool.validate(call.arguments)
        if err is None:
            assert tool is not None
            self._where = f"tool:{tool.name}"
            before = ep.world.snapshot() if tool.kind == "write" else None
            try:
                record.result = tool.handler(ep.world, **call.arguments)
                record.ok = True
            except ToolRefusal as refusal:
                err = ActionError(ErrorCode.PRECONDITION, str(refusal), tool=call.name)
            self._where = "step"
            if before is not None:
                record.changed_world = before != ep.world
        if err is not None:
            record.error = err.to_dict()
        return record

    def _reward(self, *, done: bool, had_error: bool) -> float:
        ep = self._require_episode()
        penalty = self.malformed_penalty if had_error else 0.0
        self._where = "verify"
        if done:
            self._verification = self.verify(ep.task, ep)
            final = self._verification.reward(self.reward_mode)
            if self.reward_mode == "shaped":  # increments add up to the final score
                return float(final - self._return - penalty)
            return float(final - penalty)
        if self.reward_mode == "shaped":
            progress = self.verify(ep.task, ep).score
            return float(progress - self._return - penalty)
        return float(-penalty)

    # -- info, render, log ----------------------------------------------------------------
    def _info(self, *, parsed: ParsedTurn | None, error: ActionError | None) -> dict[str, Any]:
        ep = self._require_episode()
        info = {k: json_copy(v) for k, v in self._meta.items() if k != "tools"}
        if self._tools_given is None or self._tools_given != self._tool_schemas:
            self._tools_given = marshal.loads(self._tools_blob)
        info["tools"] = self._tools_given
        info["turn"] = ep.turn
        info["messages"] = json_copy(ep.messages)
        info["parsed_calls"] = (
            []
            if parsed is None
            else [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in parsed.calls]
        )
        info["action_format"] = None if parsed is None else parsed.format
        info["error"] = None if error is None else error.to_dict()
        info["error_counts"] = dict(ep.error_counts)
        info["internal_errors"] = self._internal_error_total
        if self._verification is not None:
            info["verification"] = self._verification.to_dict()
            info["is_success"] = self._verification.passed
            info["end_reason"] = ep.end_reason
        return info

    @staticmethod
    def _render(messages: list[dict[str, Any]]) -> str:
        parts = []
        for m in messages:
            if m["role"] == "tool":
                parts.append(f"[tool {m['name']}] {m['content']}")
            else:
                parts.append(f"[{m['role']}] {m['content']}")
        return "\n".join(parts)[:MAX_TEXT]

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._episode is None:
            return None
        lines = []
        for m in self._episode.messages:
            if m["role"] == "assistant" and m.get("tool_calls"):
                calls = ", ".join(
                    f"{c['function']['name']}({c['function']['arguments']})"
                    for c in m["tool_calls"]
                )
                lines.append(f"[assistant] {m.get('content') or ''} -> {calls}".strip())
            else:
                lines.extend(self._render([m]).splitlines())
        return "\n".join(lines)

    def episode_record(self, agent: str = "unknown") -> dict[str, Any]:
        """The finished episode in the ``trace_gym.episode.v1`` log format."""
        ep = self._require_episode()
        if self._verification is None:
            raise TraceGymError("episode_record() needs a finished episode")
        meta = self._meta
        return {
            "format": "trace_gym.episode.v1",
            **{k: meta[k] for k in ("env_id", "env_version", "capability", "task_id")},
            **{k: meta[k] for k in ("task_seed", "split", "difficulty", "task_hash")},
            "decision": meta.get("decision"),
            **_present("request_decisions", meta.get("request_decisions")),
            "env_kwargs": self.replay_kwargs(),
            "reset_options": meta["reset_options"],
            "agent": agent,
            "system_prompt": meta["system_prompt_no_hint"],
            "tools": meta["tools"],
            "messages": list(ep.messages),
            "actions": list(self._raw_actions),
            "turns": ep.turn,
            "terminated": ep.end_reason != "turn_limit",
            "truncated": ep.end_reason == "turn_limit",
            "end_reason": ep.end_reason,
            "return": self._return,
            "final_reward": self._verification.reward(self.reward_mode),
            "is_success": self._verification.passed,
            "error_counts": dict(ep.error_counts),
            "verification": self._verification.to_dict(),
        }

    def replay_kwargs(self) -> dict[str, Any]:
        """Constructor arguments that a replay needs to reproduce this episode."""
        return {
            "reward_mode": self.reward_mode,
            "max_turns": self.max_turns,
            "malformed_penalty": self.malformed_penalty,
            "max_consecutive_errors": self.max_consecutive_errors,
            "tool_prompt": self.tool_prompt,
            "config": dict(self.config),
        }

    def _require_episode(self) -> EpisodeState:
        if self._episode is None:
            raise TraceGymError("call reset() before using the episode")
        return self._episode
