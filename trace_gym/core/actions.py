"""One assistant turn in, tool calls and a message out: the only action parser.

Accepted formats, tried in this order (the first that parses wins):

1. an OpenAI assistant-message ``dict`` (``{"role": "assistant", "content": ...,
   "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}``); a
   ``dict`` with ``name``/``arguments`` is one call;
2. a JSON string: ``{"name", "arguments"}``, a list of those, ``{"tool_calls": [...]}`` or an
   assistant message;
3. Hermes/Qwen ``<tool_call>{...}</tool_call>`` blocks inside text (the text around them is
   the message to the user);
4. anything else is plain text to the user.

The parser never raises: a malformed turn yields an :class:`ActionError` with a stable code.
Input is bounded *before* it reaches :mod:`json` (whose decoder recurses once per nesting
level and refuses integers of more than 4,300 digits): JSON text longer than
:data:`MAX_JSON_CHARS`, nested deeper than :data:`MAX_JSON_DEPTH`, or holding a number literal
of more than :data:`MAX_NUMBER_DIGITS` digits is a ``parse.too_large`` / ``parse.too_deep``
error, and so is an action object (dict or list) beyond the same bounds.
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
MAX_JSON_CHARS = 100_000
"""Longest JSON text parsed (a whole JSON action, one ``<tool_call>`` body, one ``arguments``
string); real tool calls are a few hundred characters."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays/objects accepted, far below Python's recursion limit."""
MAX_NUMBER_DIGITS = 400
"""Longest run of digits in a number literal (Python refuses int conversion past 4,300)."""
MAX_CALLS_PER_TURN = 32
"""Most tool calls one turn may request."""
MAX_OBJECT_NODES = 20_000
"""Most containers and scalars in an action given as a Python object."""
MAX_OBJECT_CHARS = 1_000_000
"""Most characters in all strings of an action given as a Python object."""

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN = "<tool_call>"
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_NUMBER_DIGITS + 1},}}")
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_MAX_INT_BITS = int(MAX_NUMBER_DIGITS * 3.33)  # 10**400 has 1,329 bits: 400 digits ~ 1,330


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


def _too_deep(where: str) -> ActionError:
    return ActionError(ErrorCode.TOO_DEEP, f"{where} is nested deeper than {MAX_JSON_DEPTH}")


def json_text_error(text: str, where: str = "JSON") -> ActionError | None:
    """Why ``text`` must not be handed to :func:`json.loads`, or None when it is safe.

    Cheap for ordinary input: the string scan only runs when the text has enough brackets to
    be too deep, or a run of digits long enough to matter.
    """
    if len(text) > MAX_JSON_CHARS:
        msg = f"{where} of {len(text)} characters exceeds the limit of {MAX_JSON_CHARS}"
        return ActionError(ErrorCode.TOO_LARGE, msg)
    deep = text.count("[") + text.count("{") > MAX_JSON_DEPTH
    long = _LONG_NUMBER.search(text) is not None
    if not (deep or long):
        return None
    structure = _JSON_STRING.sub('""', text)  # brackets and digits inside strings are data
    if long and _LONG_NUMBER.search(structure):
        msg = f"{where} has a number of more than {MAX_NUMBER_DIGITS} digits"
        return ActionError(ErrorCode.TOO_LARGE, msg)
    if deep:
        depth = 0
        for ch in _NOT_BRACKET.sub("", structure):
            depth = depth + 1 if ch in "[{" else depth - 1
            if depth > MAX_JSON_DEPTH:
                return _too_deep(where)
    return None


def load_json(text: str, where: str = "JSON") -> tuple[Any, ActionError | None]:
    """``json.loads`` behind the bounds of :func:`json_text_error`; never raises."""
    error = json_text_error(text, where)
    if error is not None:
        return None, error
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, ActionError(ErrorCode.INVALID_JSON, f"{where}: {exc.msg} at {exc.pos}")
    except (ValueError, RecursionError) as exc:  # bounds above make these unreachable
        return None, ActionError(ErrorCode.TOO_LARGE, f"{where}: {type(exc).__name__}")


def object_error(obj: Any, where: str = "the action") -> ActionError | None:
    """Why an action given as a Python object is not bounded JSON data, or None.

    Walked iteratively (a self-referencing dict or a 10,000-deep list must not recurse):
    depth, node count, total string length and integer size are bounded like JSON text;
    tuples count as lists; anything that is not JSON data is a ``parse.invalid_shape``.
    """
    stack: list[tuple[Any, int]] = [(obj, 1)]
    nodes = chars = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_OBJECT_NODES:
            return ActionError(ErrorCode.TOO_LARGE, f"{where} has over {MAX_OBJECT_NODES} values")
        if isinstance(value, str):
            chars += len(value)
            if chars > MAX_OBJECT_CHARS:
                msg = f"{where} has over {MAX_OBJECT_CHARS} characters of text"
                return ActionError(ErrorCode.TOO_LARGE, msg)
        elif isinstance(value, bool) or value is None or isinstance(value, float):
            continue
        elif isinstance(value, int):
            if value.bit_length() > _MAX_INT_BITS:
                msg = f"{where} has an integer of more than {MAX_NUMBER_DIGITS} digits"
                return ActionError(ErrorCode.TOO_LARGE, msg)
        elif isinstance(value, dict | list | tuple):
            if depth > MAX_JSON_DEPTH:
                return _too_deep(where)
            if isinstance(value, dict):
                if not all(isinstance(k, str) for k in value):
                    return _shape_error(f"{where}: object keys must be strings")
                chars += sum(len(k) for k in value)
                items = list(value.values())
            else:
                items = list(value)
            stack.extend((v, depth + 1) for v in items)
        else:
            return _shape_error(f"{where} holds a {type(value).__name__}, which is not JSON")
    return None


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
        if not args.strip():
            return ToolCall(call_id, name, {})
        loaded, error = load_json(args, "arguments")
        if error is not None:
            if error.code != ErrorCode.INVALID_JSON:
                return error
            return ToolCall(call_id, name, args, f"arguments are not valid JSON: {error.message}")
        args = loaded
    return ToolCall(call_id, name, args)


def _too_many_calls(n: int) -> ActionError:
    msg = f"{n} tool calls in one turn; at most {MAX_CALLS_PER_TURN} are accepted"
    return ActionError(ErrorCode.TOO_LARGE, msg)


def _calls_from_list(items: list[Any], prefix: str) -> tuple[list[ToolCall], list[ActionError]]:
    calls: list[ToolCall] = []
    errors: list[ActionError] = []
    if len(items) > MAX_CALLS_PER_TURN:
        return calls, [_too_many_calls(len(items))]
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
    obj, err = load_json(text, "JSON action")
    if err is not None:
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
        if i >= MAX_CALLS_PER_TURN:
            return _turn("", [], [_too_many_calls(len(_BLOCK.findall(text)))], "invalid")
        obj, err = load_json(match.group(1).strip(), f"<tool_call> block {i}")
        if err is not None:
            errors.append(err)
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
    if isinstance(action, dict | list | tuple):
        error = object_error(action)
        if error is not None:
            return _turn("", [], [error], "invalid")
        action = json.loads(json.dumps(action))  # plain JSON data from here on (tuples -> lists)
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
