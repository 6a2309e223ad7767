"""One assistant turn in, tool calls and a message out: the only action parser.

Accepted formats, tried in this order (ARCHITECTURE section 3):

1. an OpenAI assistant-message ``dict`` (``{"role": "assistant", "content": ...,
   "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}``); a
   ``dict`` with ``name``/``arguments`` is one call;
2. a JSON string: ``{"name", "arguments"}``, a list of those, ``{"tool_calls": [...]}`` or an
   assistant message;
3. Hermes/Qwen ``<tool_call>{...}</tool_call>`` blocks inside text (the text around them is
   the message to the user);
4. anything else is plain text to the user.

The parser never raises: a malformed turn yields an :class:`ActionError` with a stable code.
Calls that parsed are kept even when a sibling block is broken, so one typo does not waste a
whole turn. The same function serves online play, offline re-scoring and trainers, so a turn
parses the same everywhere.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from trace_gym.errors import ActionError, ErrorCode

MAX_CONTENT_CHARS = 20_000
"""Text kept from one turn; longer messages are cut with a marker (keeps logs bounded)."""

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN = "<tool_call>"


@dataclass(frozen=True)
class ToolCall:
    """One requested tool call. ``arguments`` is a dict when it parsed, else the raw value."""

    id: str
    name: str
    arguments: Any
    arguments_error: str | None = None

    def to_openai(self) -> dict[str, Any]:
        args = self.arguments
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": text},
        }


@dataclass(frozen=True)
class ParsedTurn:
    """The result of parsing one assistant turn."""

    content: str
    calls: tuple[ToolCall, ...] = ()
    error: ActionError | None = None
    format: str = "text"
    extra_errors: tuple[ActionError, ...] = field(default=())

    @property
    def is_empty(self) -> bool:
        return not self.content.strip() and not self.calls

    def to_message(self) -> dict[str, Any]:
        """The turn as an OpenAI assistant message (what logs and trainers see)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            msg["tool_calls"] = [c.to_openai() for c in self.calls]
        return msg


def _cap(text: str) -> str:
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    cut = len(text) - MAX_CONTENT_CHARS
    return text[:MAX_CONTENT_CHARS] + f"\n[... {cut} characters cut ...]"


def _shape_error(what: str) -> ActionError:
    return ActionError(ErrorCode.INVALID_SHAPE, what)


def _call_from_obj(obj: Any, call_id: str) -> ToolCall | ActionError:
    """``{"name", "arguments"}`` or OpenAI ``{"function": {...}}`` -> ToolCall."""
    if not isinstance(obj, dict):
        return _shape_error(f"a tool call must be an object, got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):
        call_id = obj["id"] if isinstance(obj.get("id"), str) and obj["id"] else call_id
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return _shape_error('a tool call needs a non-empty string "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCall(call_id, name, args, f"arguments are not valid JSON: {exc.msg}")
    return ToolCall(call_id, name, args)


def _calls_from_list(items: list[Any], prefix: str) -> tuple[list[ToolCall], list[ActionError]]:
    calls: list[ToolCall] = []
    errors: list[ActionError] = []
    for i, item in enumerate(items):
        got = _call_from_obj(item, f"{prefix}_{i}")
        (errors if isinstance(got, ActionError) else calls).append(got)  # type: ignore[arg-type]
    return calls, errors


def _turn(content: str, calls: list[ToolCall], errors: list[ActionError], fmt: str) -> ParsedTurn:
    return ParsedTurn(
        content=_cap(content),
        calls=tuple(calls),
        error=errors[0] if errors else None,
        format=fmt,
        extra_errors=tuple(errors[1:]),
    )


def _parse_dict(obj: dict[str, Any], prefix: str, fmt: str) -> ParsedTurn:
    if "tool_calls" in obj or "content" in obj or obj.get("role") == "assistant":
        content = obj.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            return _turn("", [], [_shape_error('"content" must be a string or null')], "invalid")
        raw_calls = obj.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            return _turn(content, [], [_shape_error('"tool_calls" must be a list')], "invalid")
        calls, errors = _calls_from_list(raw_calls, prefix)
        return _turn(content, calls, errors, fmt)
    if "name" in obj or "function" in obj:
        calls, errors = _calls_from_list([obj], prefix)
        return _turn("", calls, errors, fmt)
    return _turn("", [], [_shape_error("expected an assistant message or a tool call")], "invalid")


def _parse_json_text(text: str, prefix: str) -> ParsedTurn:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        err = ActionError(ErrorCode.INVALID_JSON, f"invalid JSON action: {exc.msg} at {exc.pos}")
        return _turn("", [], [err], "invalid")
    if isinstance(obj, list):
        calls, errors = _calls_from_list(obj, prefix)
        if not obj:
            errors.append(ActionError(ErrorCode.EMPTY_ACTION, "an empty list of tool calls"))
        return _turn("", calls, errors, "json")
    if isinstance(obj, dict):
        return _parse_dict(obj, prefix, "json")
    return _turn("", [], [_shape_error("a JSON action must be an object or a list")], "invalid")


def _parse_hermes(text: str, prefix: str) -> ParsedTurn:
    calls: list[ToolCall] = []
    errors: list[ActionError] = []
    for i, match in enumerate(_BLOCK.finditer(text)):
        body = match.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            errors.append(ActionError(ErrorCode.INVALID_JSON, f"<tool_call> block {i}: {exc.msg}"))
            continue
        got = _call_from_obj(obj, f"{prefix}_{i}")
        (errors if isinstance(got, ActionError) else calls).append(got)  # type: ignore[arg-type]
    rest = _BLOCK.sub("", text)
    if _OPEN in rest:
        errors.append(ActionError(ErrorCode.UNCLOSED_BLOCK, "<tool_call> without </tool_call>"))
        rest = rest.replace(_OPEN, "")
    return _turn(rest.strip(), calls, errors, "hermes")


def parse_action(action: Any, *, call_id_prefix: str = "call") -> ParsedTurn:
    """Parse one assistant turn; never raises.

    >>> parse_action('{"name": "get_order", "arguments": {"order_id": "O-1"}}').calls[0].name
    'get_order'
    >>> parse_action("").error.code.value
    'parse.empty_action'
    """
    if isinstance(action, dict):
        turn = _parse_dict(action, call_id_prefix, "openai_message")
    elif isinstance(action, list):
        calls, errors = _calls_from_list(action, call_id_prefix)
        if not action:
            errors.append(ActionError(ErrorCode.EMPTY_ACTION, "an empty list of tool calls"))
        turn = _turn("", calls, errors, "json")
    elif isinstance(action, str):
        stripped = action.strip()
        if not stripped:
            return _turn("", [], [ActionError(ErrorCode.EMPTY_ACTION, "empty action")], "invalid")
        if stripped[0] in "{[":
            turn = _parse_json_text(stripped, call_id_prefix)
        elif _OPEN in stripped:
            turn = _parse_hermes(stripped, call_id_prefix)
        else:
            turn = _turn(stripped, [], [], "text")
    else:
        kind = type(action).__name__
        msg = f"an action must be a str, an assistant-message dict or a list of calls, got {kind}"
        return _turn("", [], [_shape_error(msg)], "invalid")
    if turn.error is None and turn.is_empty:
        return _turn("", [], [ActionError(ErrorCode.EMPTY_ACTION, "empty action")], turn.format)
    return turn
