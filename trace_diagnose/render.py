"""render: a trajectory as deterministic, step-indexed, outcome-blind text.

Public API::

    render(traj, config=RenderConfig()) -> Rendered
    approx_tokens(text) -> int
    injection_spans(text) -> list[tuple[int, int]]

Each step becomes lines headed `[S<index>] SOURCE`, e.g.
`[S12] AGENT -> tool get_order({"order_id": "#W1"})` or `[S13] TOOL get_order (error): ...`.
Long bodies keep their head and tail around a `...[truncated N chars]...` marker.

**Budget.** The domain policy gets `policy_chars`: its preamble, then the sections that the
trajectory's tool calls touch (a section naming a called tool, or its words), then the rest,
in the policy's own order; omitted sections are named. When the transcript exceeds
`max_tokens`, the first and last steps, every edit and test run (and their results), and
errors are kept before the other steps; each run of dropped steps becomes one summary line
(`[S5-S9 summarised: 3 agent steps: ls; grep -n x; cat a.py]`) that cannot be cited. What
was cut is stated at the top of the transcript, so the labeller knows, and in
`Rendered.cuts` for the report and the console.

**Injected instructions.** Text in the trajectory that reads like instructions to the
labeller ("ignore previous instructions", "label everything PRESENT", ...) is wrapped in
`<flagged_instruction>` tags; the prompt says it is data, and evidence quoted from it is
rejected (`Rendered.clean` holds each step without those spans).

Only `traj.task` and `traj.steps` are read: reward, success, status and ground truth never
reach the text (tests check this). The same trajectory always renders to the same text and
hash, which is part of every LLM cache key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .schema import Step, Trajectory

CHARS_PER_TOKEN = 4  # a deterministic estimate; good enough for budgets and dry-run costs


@dataclass(frozen=True)
class RenderConfig:
    """How much text each trajectory may take in a prompt.

    max_tokens: cap on the whole rendered trajectory (approximate tokens); beyond it the least
        informative steps are summarised (see the module docstring). Default 8,000.
    tool_head / tool_tail: characters kept at the start / end of a long tool output.
    message_head / message_tail: the same for user and agent messages.
    policy_chars: characters of the domain policy in the context block (sections the
        trajectory's tool calls touch first). Default 6,000.
    """

    max_tokens: int = 8000
    tool_head: int = 1200
    tool_tail: int = 300
    message_head: int = 2000
    message_tail: int = 500
    policy_chars: int = 6000
    keep_ends: int = 2

    def __post_init__(self) -> None:
        if self.max_tokens < 200:
            raise ConfigError(
                f"max_tokens={self.max_tokens} is too small to render a transcript; use >= 200"
            )
        if self.policy_chars < 0:
            raise ConfigError(f"policy_chars={self.policy_chars} must be >= 0")


@dataclass(frozen=True)
class Rendered:
    """A rendered trajectory: full text, the visible text of each step, and its hash."""

    traj_id: str
    text: str
    steps: dict[int, str] = field(default_factory=dict)
    elided: tuple[int, ...] = ()
    truncated_steps: int = 0
    clean: dict[int, str] = field(default_factory=dict)  # visible steps minus flagged spans
    flagged: tuple[int, ...] = ()  # steps holding instruction-like text
    cuts: dict[str, Any] = field(default_factory=dict)

    @property
    def cut_note(self) -> str:
        """One line saying what the labeller does not see, or "" when nothing was cut."""
        return cut_note(self.cuts)

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


_TAGS = re.compile(r"<(/?)(transcript|flagged_instruction)", re.I)
_INJECTION = re.compile(
    r"(ignore|disregard|forget|override)\s+(all\s+|any\s+|the\s+)?(previous|prior|above|earlier|"
    r"preceding|your|system)\s+(instructions|prompts?|rules|guidelines)"
    r"|(label|mark|rate|classify|judge)\s+(everything|all|every\s+\w+|each\s+\w+)"
    r"(\s+\w+){0,3}\s+(as\s+)?(present|lacking|na)\b"
    r"|new\s+instructions\s*:|you\s+are\s+now\s+(a|an|in)\b"
    r"|(as|to)\s+the\s+(auditor|labell?er|grader|evaluator)\b",
    re.I,
)
OPEN_FLAG, CLOSE_FLAG = "<flagged_instruction>", "</flagged_instruction>"


def _neutralise(text: str) -> str:
    # The transcript is fenced in <transcript> tags and flagged spans in <flagged_instruction>
    # tags; text from the trajectory must not open or close either.
    return _TAGS.sub(lambda m: f"<\\{m.group(1)}{m.group(2)}", text)


def injection_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of instruction-like sentences aimed at the labeller (merged)."""
    spans: list[tuple[int, int]] = []
    for m in _INJECTION.finditer(text):
        # from the start of the sentence (never before a step's "[S4] USER:" header)
        start = max(text.rfind(c, 0, m.start()) for c in ".!?\n:") + 1
        ends = [i for i in (text.find(c, m.end()) for c in "\n") if i >= 0]
        end = min(ends) if ends else len(text)
        while start < m.start() and text[start].isspace():
            start += 1
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _flag(text: str) -> tuple[str, str, bool]:
    """(text with flagged spans wrapped, text with them removed, whether any was found)."""
    spans = injection_spans(text)
    if not spans:
        return text, text, False
    marked, clean, pos = [], [], 0
    for a, b in spans:
        marked += [text[pos:a], OPEN_FLAG, text[a:b], CLOSE_FLAG]
        clean += [text[pos:a], " \u241f "]  # a separator no quote can match across
        pos = b
    marked.append(text[pos:])
    clean.append(text[pos:])
    return "".join(marked), "".join(clean), True


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
        args, cut = clip(_args(call.arguments), cfg.tool_head, cfg.tool_tail)
        cut_any |= cut
        parts.append(f"[S{step.index}] {label} -> tool {call.name}({args})")
    return _neutralise("\n".join(parts)), cut_any


def _args(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


# -- policy -----------------------------------------------------------------------------
_HEADING = re.compile(r"^#{1,6} .*$", re.M)


def _sections(policy: str) -> list[tuple[str, str]]:
    """(heading, text) per Markdown section; the preamble has heading ""."""
    starts = [m.start() for m in _HEADING.finditer(policy)]
    if not starts:
        return [("", policy)]
    bounds = ([0] if starts[0] > 0 else []) + starts + [len(policy)]
    out = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        chunk = policy[a:b]
        head = chunk.splitlines()[0].lstrip("#").strip() if chunk.startswith("#") else ""
        out.append((head, chunk))
    return out


def _tool_words(traj: Trajectory) -> tuple[set[str], set[str]]:
    names = {c.name for s in traj.steps for c in s.tool_calls if c.name}
    words = {w for n in names for w in re.split(r"[^a-z0-9]+", n.lower()) if len(w) > 3}
    return names, words - {"get", "list", "find", "with", "from", "info", "details"}


def _policy(traj: Trajectory, cfg: RenderConfig) -> tuple[str, dict[str, Any]]:
    """The policy within `policy_chars`: preamble, then sections the tool calls touch."""
    policy = traj.task.policy or ""
    if len(policy) <= cfg.policy_chars:
        return policy, {}
    sections = _sections(policy)
    if len(sections) == 1:
        half = cfg.policy_chars // 2
        text, _ = clip(policy, half, half)
        return text, {"policy_chars_omitted": len(policy) - cfg.policy_chars}
    names, words = _tool_words(traj)

    def score(i: int) -> tuple[int, int]:
        head, body = sections[i]
        low = body.lower()
        named = sum(n.lower() in low for n in names)
        touched = sum(w in low for w in words)
        return (0 if i == 0 else 1, -(10 * named + touched))

    keep: set[int] = set()
    budget = cfg.policy_chars
    for i in sorted(range(len(sections)), key=score):
        size = len(sections[i][1])
        if size <= budget:
            keep.add(i)
            budget -= size
    parts, omitted = [], []
    for i, (head, body) in enumerate(sections):
        if i in keep:
            parts.append(body)
        else:
            omitted.append(head or "(preamble)")
            parts.append(f"[policy section omitted: {head or '(preamble)'}]\n")
    dropped = sum(len(sections[i][1]) for i in range(len(sections)) if i not in keep)
    return "".join(parts), {"policy_sections_omitted": omitted, "policy_chars_omitted": dropped}


def _context(traj: Trajectory, cfg: RenderConfig) -> tuple[str, dict[str, Any]]:
    lines = ["## Context"]
    cuts: dict[str, Any] = {}
    if traj.task.domain:
        lines.append(f"Domain: {traj.task.domain}")
    if traj.task.tools:
        lines.append(f"Tools available: {', '.join(traj.task.tools)}")
    if traj.task.policy:
        policy, cuts = _policy(traj, cfg)
        lines.append("Policy the agent must follow:\n" + policy)
    return _neutralise("\n".join(lines)), cuts


# -- step selection ---------------------------------------------------------------------
_EDIT = re.compile(
    r"\bsed\s+-i|\bapply_patch\b|\bgit\s+apply\b|\bpatch\s+-p|cat\s*(<<|>)|(?<![<>&0-9])>\s*\S+\.\w+"
    r"|\b(str_replace|create|insert|edit|write_file|replace)\b",
    re.I,
)
_TEST = re.compile(
    r"\b(pytest|unittest|tox|nox|runtests?|go\s+test|cargo\s+test|npm\s+(run\s+)?test|"
    r"make\s+(test|check)|python\s+\S*test\S*)",
    re.I,
)


def _key_steps(traj: Trajectory) -> set[int]:
    """Edits and test runs, with the observation that follows each; and tool errors."""
    key: set[int] = set()
    steps = traj.steps
    for pos, step in enumerate(steps):
        text = " ".join(f"{c.name} {_args(c.arguments)}" for c in step.tool_calls)
        if step.tool_calls and (_EDIT.search(text) or _TEST.search(text)):
            key.add(step.index)
            if pos + 1 < len(steps) and steps[pos + 1].source in ("tool", "environment"):
                key.add(steps[pos + 1].index)
        if step.is_error:
            key.add(step.index)
    return key


def _summary(steps: list[Step]) -> str:
    """One line standing for a run of dropped steps (not citable)."""
    first, last = steps[0].index, steps[-1].index
    commands = [
        _one_line(_args(c.arguments) if c.name == "bash" else f"{c.name}({_args(c.arguments)})")
        for s in steps
        for c in s.tool_calls
    ]
    agent = sum(s.source == "agent" for s in steps)
    what = f"{agent} agent steps" + (": " + "; ".join(commands[:5]) if commands else "")
    if len(commands) > 5:
        what += f"; +{len(commands) - 5} more"
    return _neutralise(f"[S{first}-S{last} summarised, {len(steps)} steps: {what}]")


def _one_line(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    if text.startswith('{"command": "') and text.endswith('"}'):
        text = text[13:-2]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _select(traj: Trajectory, texts: dict[int, str], budget: int, keep_ends: int) -> set[int]:
    """Steps to show within `budget` tokens: ends, key steps, then the rest middle-out."""
    order = list(texts)
    ends = order[:keep_ends] + order[-keep_ends:] if keep_ends else []
    key = [i for i in order if i in _key_steps(traj)]
    middle: list[int] = []
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        middle.append(order[lo])
        if hi != lo:
            middle.append(order[hi])
        lo, hi = lo + 1, hi - 1
    keep: set[int] = set()
    for idx in ends + key + middle:
        if idx in keep:
            continue
        cost = approx_tokens(texts[idx]) + 1
        if cost <= budget:
            keep.add(idx)
            budget -= cost
    return keep


def cut_note(cuts: dict[str, Any]) -> str:
    """A one-line account of what a rendered transcript leaves out."""
    parts = []
    if cuts.get("steps_summarised"):
        parts.append(
            f"{cuts['steps_summarised']} of {cuts['steps_total']} steps summarised in one-line "
            "summaries (they cannot be cited)"
        )
    if cuts.get("policy_sections_omitted"):
        names = ", ".join(cuts["policy_sections_omitted"][:6])
        more = len(cuts["policy_sections_omitted"]) - 6
        parts.append(
            f"policy sections omitted ({cuts['policy_chars_omitted']} chars): {names}"
            + (f" and {more} more" if more > 0 else "")
        )
    elif cuts.get("policy_chars_omitted"):
        parts.append(f"{cuts['policy_chars_omitted']} chars of the policy omitted")
    if cuts.get("bodies_truncated"):
        parts.append(f"{cuts['bodies_truncated']} long messages or outputs truncated")
    return "; ".join(parts)


def render(traj: Trajectory, config: RenderConfig | None = None) -> Rendered:
    """Render one trajectory (outcome-blind); see the module docstring for the layout."""
    cfg = config or RenderConfig()
    context, cuts = _context(traj, cfg)
    texts: dict[int, str] = {}
    clean: dict[int, str] = {}
    flagged: list[int] = []
    truncated = 0
    for step in traj.steps:
        text, cut = _step_text(step, cfg)
        texts[step.index], clean[step.index], hit = _flag(text)
        if hit:
            flagged.append(step.index)
        truncated += cut
    header = context + "\n\n## Transcript"
    keep = set(texts)
    text = _assemble(traj, header, texts, keep, cuts, truncated)
    budget = cfg.max_tokens - approx_tokens(header) - 80  # 80: the cut note
    for _ in range(8):  # shrink the step budget until the summary lines fit as well
        if approx_tokens(text) <= cfg.max_tokens or budget <= 0:
            break
        keep = _select(traj, texts, budget, cfg.keep_ends)
        text = _assemble(traj, header, texts, keep, cuts, truncated)
        budget -= max(0, approx_tokens(text) - cfg.max_tokens) + 10
    visible = {i: t for i, t in texts.items() if i in keep}
    elided = tuple(i for i in texts if i not in keep)
    return Rendered(
        traj.traj_id,
        text,
        visible,
        elided,
        truncated,
        clean={i: clean[i] for i in visible},
        flagged=tuple(flagged),
        cuts=_cuts(cuts, texts, elided, truncated),
    )


def _cuts(
    base: dict[str, Any], texts: dict[int, str], elided: tuple[int, ...], truncated: int
) -> dict[str, Any]:
    cuts = {
        **base,
        "steps_total": len(texts),
        "steps_summarised": len(elided),
        "bodies_truncated": truncated,
    }
    return {k: v for k, v in cuts.items() if v}


def _assemble(
    traj: Trajectory,
    header: str,
    texts: dict[int, str],
    keep: set[int],
    base_cuts: dict[str, Any],
    truncated: int,
) -> str:
    """The transcript text: header, cut note, kept steps, one summary per dropped run."""
    elided = tuple(i for i in texts if i not in keep)
    note = cut_note(_cuts(base_cuts, texts, elided, truncated))
    lines = [header]
    if note:
        lines.append(f"[Abridged for length: {note}.]")
    by_index = {s.index: s for s in traj.steps}
    run: list[Step] = []
    for i, text in texts.items():
        if i in keep:
            if run:
                lines.append(_summary(run))
                run = []
            lines.append(text)
        else:
            run.append(by_index[i])
    if run:
        lines.append(_summary(run))
    return "\n".join(lines)
