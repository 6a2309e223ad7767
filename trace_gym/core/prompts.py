"""Every system prompt is assembled here: the agent preamble and the tool listings.

* :func:`agent_prompt`: the preamble (said once, also in the composite), the current time
  and an environment's instructions.
* :func:`tool_block`: the tools appended to the system prompt, in one of
  :data:`TOOL_PROMPT_STYLES`: ``none`` (tools only in ``info["tools"]``), ``hermes`` (every
  tool's JSON schema in ``<tools>``, what Qwen-style chat templates are tuned on) or
  ``compact`` (one ``name(arg: type, opt?: type): purpose`` line per tool, 3-4x fewer
  tokens); both listings use the ``<tool_call>`` convention the action parser reads.
"""

from __future__ import annotations

import json
from typing import Any

AGENT_PREAMBLE = "You are a customer-service agent for Tracewell, an online shop and travel agency."
"""The first sentence of every customer-service system prompt (said once, here)."""
TOOL_PROMPT_STYLES = ("none", "hermes", "compact")


def agent_prompt(preamble: str, now: str, body: str) -> str:
    """A system prompt: ``preamble``, the current time ``now``, then ``body``."""
    head = f"{preamble} The current time is {now}." if preamble else ""
    return f"{head}\n\n{body}".strip()


def hermes_tool_block(tools: list[dict[str, Any]]) -> str:
    """Every tool's JSON schema and the ``<tool_call>`` convention (Hermes / Qwen style)."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "\n\n# Tools\n\nYou may call one or more functions. Function signatures are "
        f"within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each "
        "function call, return a JSON object with the function name and arguments "
        'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-'
        'name>, "arguments": <args-json-object>}\n</tool_call>\n'
        "Reply without a tool call to talk to the customer."
    )


def compact_tool_block(tools: list[dict[str, Any]]) -> str:
    """One signature line per tool and the ``<tool_call>`` convention."""
    lines = []
    for tool in tools:
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {}
        required = set(params.get("required") or [])
        args = []
        for name, schema in (params.get("properties") or {}).items():
            kind = (
                "|".join(json.dumps(v) for v in schema["enum"])
                if "enum" in schema
                else schema.get("type", "any")
            )
            args.append(f"{name}{'' if name in required else '?'}: {kind}")
        lines.append(f"{fn['name']}({', '.join(args)}): {fn.get('description', '')}".strip())
    return (
        "\n\n# Tools\n\n" + "\n".join(lines) + "\n\nTo call a tool, write a JSON object with its "
        "name and arguments within <tool_call></tool_call> XML tags, one block per call:\n"
        '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "O-12345"}}\n</tool_call>\n'
        "Reply without a tool call to talk to the customer."
    )


def tool_block(style: str, tools: list[dict[str, Any]]) -> str:
    """The tool listing of ``style`` ('' for ``none``), appended to the system prompt."""
    if style == "hermes":
        return hermes_tool_block(tools)
    if style == "compact":
        return compact_tool_block(tools)
    return ""
