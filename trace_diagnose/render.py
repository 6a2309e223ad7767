"""render: a trajectory as deterministic, step-indexed, outcome-blind text.

Public API::

    render(traj, config=RenderConfig()) -> Rendered
    approx_tokens(text) -> int

Each step becomes lines headed `[S<index>] SOURCE`, e.g.
`[S12] AGENT -> tool get_order({"order_id": "#W1"})` or `[S13] TOOL get_order (error): ...`.
Long bodies keep their head and tail around a `...[truncated N chars]...` marker. When the
whole transcript exceeds `max_tokens`, middle steps are elided (first and last steps kept)
behind one `[... S5-S40 elided ...]` marker, so the labeller may only cite visible steps.

Only `traj.task` and `traj.steps` are read: reward, success, status and ground truth never
reach the text (tests check this). The same trajectory always renders to the same text and
hash, which is part of every LLM cache key.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field

from .errors import ConfigError
from .schema import Step, Trajectory

CHARS_PER_TOKEN = 4  # a deterministic estimate; good enough for budgets and dry-run costs


@dataclass(frozen=True)
class RenderConfig:
    """How much text each trajectory may take in a prompt.

    max_tokens: cap on the whole rendered trajectory (approximate tokens); middle steps are
        elided beyond it. Default 8,000.
    tool_head / tool_tail: characters kept at the start / end of a long tool output.
    message_head / message_tail: the same for user and agent messages.
    policy_chars: characters of the domain policy kept in the context block (head and tail).
    """

    max_tokens: int = 8000
    tool_head: int = 1200
    tool_tail: int = 300
    message_head: int = 2000
    message_tail: int = 500
    policy_chars: int = 3000

    def __post_init__(self) -> None:
        if self.max_tokens < 200:
            raise ConfigError(
                f"max_tokens={self.max_tokens} is too small to render a transcript; use >= 200"
            )


@dataclass(frozen=True)
class Rendered:
    """A rendered trajectory: full text, the visible text of each step, and its hash."""

    traj_id: str
    text: str
    steps: dict[int, str] = field(default_factory=dict)
    elided: tuple[int, ...] = ()
    truncated_steps: int = 0

    @property
    def sha256(self) -> str:
        """Hash of the text: the cache key component for this trajectory."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def tokens(self) -> int:
        """Approximate token count of the text."""
        return approx_tokens(self.text)


def approx_tokens(text: str) -> int:
    """Approximate token count (characters / 4, rounded up)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def clip(text: str, head: int, tail: int) -> tuple[str, bool]:
    """Keep `head` and `tail` characters around a truncation marker; report whether it cut."""
    if len(text) <= head + tail + 40:
        return text, False
    cut = len(text) - head - tail
    return f"{text[:head]}...[truncated {cut} chars]...{text[-tail:] if tail else ''}", True


def _neutralise(text: str) -> str:
    # The transcript is fenced in <transcript> tags in prompts; text must not close the fence.
    return text.replace("</transcript", "<\\/transcript").replace("<transcript", "<\\transcript")


def _step_text(step: Step, cfg: RenderConfig) -> tuple[str, bool]:
    label = step.source.upper()
    parts: list[str] = []
    cut_any = False
    if step.source == "tool" or step.source == "environment":
        body, cut_any = clip(step.message, cfg.tool_head, cfg.tool_tail)
        name = f" {step.tool_name}" if step.tool_name else ""
        err = " (error)" if step.is_error else ""
        parts.append(f"[S{step.index}] {label}{name}{err}: {body}")
    else:
        if step.reasoning:
            body, cut = clip(step.reasoning, cfg.message_head, cfg.message_tail)
            cut_any |= cut
            parts.append(f"[S{step.index}] {label} (thinking): {body}")
        if step.message or not step.tool_calls:
            body, cut = clip(step.message, cfg.message_head, cfg.message_tail)
            cut_any |= cut
            parts.append(f"[S{step.index}] {label}: {body}")
    for call in step.tool_calls:
        args = (
            call.arguments
            if isinstance(call.arguments, str)
            else json.dumps(call.arguments, ensure_ascii=False)
        )
        args, cut = clip(args, cfg.tool_head, cfg.tool_tail)
        cut_any |= cut
        parts.append(f"[S{step.index}] {label} -> tool {call.name}({args})")
    return _neutralise("\n".join(parts)), cut_any


def _context(traj: Trajectory, cfg: RenderConfig) -> str:
    lines = ["## Context"]
    if traj.task.domain:
        lines.append(f"Domain: {traj.task.domain}")
    if traj.task.tools:
        lines.append(f"Tools available: {', '.join(traj.task.tools)}")
    if traj.task.policy:
        half = cfg.policy_chars // 2
        policy, _ = clip(traj.task.policy, half, half)
        lines.append("Policy the agent must follow:\n" + policy)
    return _neutralise("\n".join(lines))


def render(traj: Trajectory, config: RenderConfig | None = None) -> Rendered:
    """Render one trajectory (outcome-blind); see the module docstring for the layout."""
    cfg = config or RenderConfig()
    header = _context(traj, cfg) + "\n\n## Transcript"
    texts: dict[int, str] = {}
    truncated = 0
    for step in traj.steps:
        text, cut = _step_text(step, cfg)
        texts[step.index] = text
        truncated += cut
    keep = _keep_within_budget(header, texts, cfg.max_tokens)
    elided = tuple(i for i in texts if i not in keep)
    lines = [header]
    marker_done = False
    for i, text in texts.items():
        if i in keep:
            lines.append(text)
        elif not marker_done:
            lines.append(f"[... S{elided[0]}-S{elided[-1]} elided: {len(elided)} steps ...]")
            marker_done = True
    visible = {i: t for i, t in texts.items() if i in keep}
    return Rendered(traj.traj_id, "\n".join(lines), visible, elided, truncated)


def _keep_within_budget(header: str, texts: dict[int, str], max_tokens: int) -> set[int]:
    """Middle-out elision: take steps alternately from the start and the end while they fit."""
    total = approx_tokens(header) + sum(approx_tokens(t) + 1 for t in texts.values())
    if total <= max_tokens:
        return set(texts)
    budget = max_tokens - approx_tokens(header) - 20  # room for the elision marker
    order = list(texts)
    keep: set[int] = set()
    lo, hi, take_head = 0, len(order) - 1, True
    while lo <= hi:
        idx = order[lo] if take_head else order[hi]
        cost = approx_tokens(texts[idx]) + 1
        if cost > budget:
            break
        budget -= cost
        keep.add(idx)
        if take_head:
            lo += 1
        else:
            hi -= 1
        take_head = not take_head
    return keep
