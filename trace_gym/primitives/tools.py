"""Tool declarations: one JSON schema each, validated by ``jsonschema``, exported to the
shapes that model providers and protocols expect.

A :class:`Tool` couples a schema to a plain function ``handler(world, **arguments)``. The
environment validates arguments against the schema before calling the handler, so handlers
may trust their inputs (every number in them is finite and at most :data:`MAX_MAGNITUDE` in
size, whatever the schema says: JSON schema lets ``NaN`` pass ``"minimum": 0``); a handler signals that the world refuses the call by raising
:class:`ToolRefusal` (returned to the agent as ``tool.precondition``).

Tool *kinds* matter to verifiers and to the property suite's mutation operators: ``read``
calls never change the world, ``write`` calls may, and ``control`` calls (refuse, transfer to
a human) record a decision without changing the world.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from jsonschema import Draft202012Validator

from trace_gym.errors import ActionError, ErrorCode

ToolKind = Literal["read", "write", "control"]
TOOL_KINDS: tuple[str, ...] = ("read", "write", "control")
EXPORT_FORMATS = ("openai", "openai_responses", "anthropic", "mcp")
MAX_MAGNITUDE = 1e12
"""Largest absolute number accepted in tool arguments: money arithmetic in cents stays exact
in a float far beyond any real amount, and ``1e308`` would overflow it."""


def _bad_number(value: Any, path: str = "$") -> tuple[str, str] | None:
    """(path, what) of the first non-finite or absurdly large number in JSON data, or None.

    Iterative: arguments reach here already bounded in depth by the action parser, but a
    tool's ``validate`` is public and may be handed anything.
    """
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, bool):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            return p, f"{v!r} is not a finite number"
        if isinstance(v, int | float) and abs(v) > MAX_MAGNITUDE:
            return p, f"a number of magnitude above {MAX_MAGNITUDE:.0e} is not accepted"
        if isinstance(v, dict):
            stack.extend((x, f"{p}.{k}") for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{p}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


class ToolRefusal(Exception):
    """Raised by a handler when the world refuses the call (a ``tool.precondition`` error)."""


@dataclass(frozen=True)
class Tool:
    """One tool: name, description, JSON schema of its arguments, kind and handler.

    ``terminal`` tools end the episode after they run (``transfer_to_human``).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind
    handler: Callable[..., Any] = field(compare=False, repr=False)
    terminal: bool = False
    _validator: Draft202012Validator = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in TOOL_KINDS:
            raise ValueError(f"tool {self.name!r}: kind must be one of {TOOL_KINDS}")
        Draft202012Validator.check_schema(self.parameters)
        object.__setattr__(self, "_validator", Draft202012Validator(self.parameters))

    def validate(self, arguments: Any) -> ActionError | None:
        """None when ``arguments`` match the schema, else a ``tool.schema`` error."""
        if not isinstance(arguments, dict):
            kind = type(arguments).__name__
            msg = f"{self.name}: arguments must be a JSON object, got {kind}"
            return ActionError(ErrorCode.SCHEMA, msg, tool=self.name, path="$")
        bad = _bad_number(arguments)
        if bad is not None:
            path, what = bad
            return ActionError(ErrorCode.SCHEMA, f"{self.name}: {what}", tool=self.name, path=path)
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is None:
            return None
        path = "$" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
        message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
        return ActionError(ErrorCode.SCHEMA, f"{self.name}: {message}", tool=self.name, path=path)

    def export(self, fmt: str = "openai") -> dict[str, Any]:
        """The declaration in one provider's shape (see :data:`EXPORT_FORMATS`)."""
        if fmt == "openai":
            return {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.parameters,
                },
            }
        if fmt == "openai_responses":
            return {
                "type": "function",
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        if fmt == "anthropic":
            return {
                "name": self.name,
                "description": self.description,
                "input_schema": self.parameters,
            }
        if fmt == "mcp":
            return {
                "name": self.name,
                "description": self.description,
                "inputSchema": self.parameters,
            }
        raise ValueError(f"unknown tool export format {fmt!r}; use one of {EXPORT_FORMATS}")


def object_schema(properties: dict[str, Any], required: Iterable[str] | None = None) -> dict:
    """A closed JSON object schema (no extra keys); all properties required by default."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties if required is None else required),
        "additionalProperties": False,
    }


class ToolSet:
    """An ordered, fixed set of tools (TRL probes the tool list once per class)."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def of_kind(self, kind: str) -> list[Tool]:
        return [t for t in self._tools.values() if t.kind == kind]

    def export(self, fmt: str = "openai") -> list[dict[str, Any]]:
        """All declarations in one provider's shape."""
        return [t.export(fmt) for t in self._tools.values()]
