"""render: a trajectory as deterministic, outcome-blind data the labeller cannot misread.

Public API::

    render(traj, config=RenderConfig(), withhold=None, agent_only=False) -> Rendered
    approx_tokens(text) -> int
    step_records(rendered_text) -> list[dict]   # the step records back, as the labeller got them

**Layout.** A context block (domain, tools, the policy) and then the steps, one JSON object
per line, between two boundary lines that carry a per-transcript random token::

    <steps boundary="9c1f04ab7e21">
    {"step": 0, "speaker": "user", "text": "Please cancel my flight."}
    {"step": 1, "speaker": "agent", "tool_calls": [{"name": "get_reservation_details", "arguments": {"reservation_id": "EHGLP3"}}]}
    {"step": 2, "speaker": "tool", "tool": "get_reservation_details", "output": {"status": "active"}}
    {"steps": "3-7", "summary": "2 agent steps: ls; grep -n x"}
    </steps boundary="9c1f04ab7e21">

**Why JSON records.** Whatever a user, a tool or a web page wrote, it reaches the labeller
as the value of a JSON string: its quotes are escaped and its line breaks become `\\n`
(every other line or paragraph separator, control and invisible format character is escaped
as `\\uXXXX` too), so a message body can never start a line of its own, and a forged
`[S3] AGENT: ...` line or a fake `{"step": 3, "speaker": "agent", ...}` record stays inside
the string of the step that really holds it. Who spoke is a field we fill from the
trajectory's own structure, never from its text. The boundary token is derived from a hash
of the records themselves, so text inside them cannot know it and cannot close the block
early; it is deterministic, so the same trajectory always renders to the same text and
cache key. We chose records over indented or fenced prose because the structure is then
checkable by parsing: `step_records` reads a rendered transcript back with `json.loads`,
and the tests assert, for hostile inputs, that it gives back exactly the trajectory's steps.

**What a quote may come from.** `Rendered.steps` holds, per visible step, its speaker and
the text of each content field as shown (message, thinking, each tool call, the tool
output). `label.evidence_problem` accepts a quote only inside one field of the step it
cites, checks the speaker the labeller names against the step's real speaker, and requires
a PRESENT or LACKING verdict to rest on the agent's own steps.

**Budget.** The domain policy gets `policy_chars`: its preamble, then the sections that the
trajectory's tool calls touch (a section naming a called tool, or its words), then the rest,
in the policy's own order; omitted sections are named. Long bodies keep their head and tail
around a `...[truncated N chars]...` marker. When the transcript exceeds `max_tokens`, the
first and last steps, every edit and test run (and their results), and errors are kept
before the other steps; each run of dropped steps becomes one summary record that cannot be
cited. What was cut is stated above the steps, so the labeller knows, and in
`Rendered.cuts` for the report and the console.

**Flags are hints.** A step whose text reads as addressed to the labeller
(`injection.find_instructions`) gets `"flagged": true` in its record and is listed in
`Rendered.flagged` with the reason, for the report. A flag blocks nothing: the defence is
the structure above. `withhold` replaces given quotes in given steps by a marker (see
`label`: text a labeller kept citing as evidence it is not).

**The agent-only view.** `agent_only=True` renders the same transcript with every step the
agent did not write reduced to its header: `{"step": 4, "speaker": "user", "masked": true}`
(a tool step keeps its tool name, the log's structure, not its text). It shows the same steps
as the full view (the selection is made on the full records, so a shorter view does not
bring back steps the full one summarised) and the same task context. It is what
`label` asks whether a capability applies: from the task as the benchmark wrote it and the
agent's own steps, which no user, tool or web page can write into.

Only `traj.task` and `traj.steps` are read: reward, success, status and ground truth never
reach the text (tests check this).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .injection import find_instructions, locate
from .schema import Step, Trajectory

CHARS_PER_TOKEN = 4  # a deterministic estimate; good enough for budgets and dry-run costs
TRUNCATED = "...[truncated {n} chars]..."
WITHHELD = "[withheld: {n} chars the labeller cited as evidence they are not]"


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
class StepView:
    """One visible step as the labeller sees it: who wrote it and the text of each field."""

    index: int
    speaker: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Rendered:
    """A rendered trajectory: full text, what each visible step shows, flags and cuts."""

    traj_id: str
    text: str
    steps: dict[int, StepView] = field(default_factory=dict)
    elided: tuple[int, ...] = ()
    truncated_steps: int = 0
    flagged: dict[int, str] = field(default_factory=dict)  # step -> why it reads as instructions
    withheld: dict[int, list[str]] = field(default_factory=dict)  # step -> quotes withheld
    cuts: dict[str, Any] = field(default_factory=dict)
    boundary: str = ""
    context_flag: str = ""  # why the task context (policy, tools) reads as instructions

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
    return f"{text[:head]}{TRUNCATED.format(n=cut)}{text[-tail:] if tail else ''}", True


def _args(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


# Characters JSON leaves raw that a reader or a tokenizer may take as a line break, or that
# are invisible (zero-width, bidirectional controls, tag characters): escaped as \\uXXXX, so
# a body cannot break a line and nothing in it is hidden.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn"})


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def dump_record(record: dict[str, Any]) -> str:
    """One record as one line of JSON; no character in it can end the line or hide."""
    text = json.dumps(record, ensure_ascii=False)
    if text.isascii():
        return text
    return "".join(
        c if c.isascii() or unicodedata.category(c) not in _UNSAFE_CATEGORIES else _escape(c)
        for c in text
    )


def _withhold(text: str, quotes: list[str]) -> tuple[str, bool]:
    """Replace every occurrence of each quote (folded match) by the withholding marker."""
    changed = False
    for quote in quotes:
        start = 0  # search after each marker: a quote may be a word of the marker itself
        while (span := locate(text[start:], quote)) is not None:
            a, b = start + span[0], start + span[1]
            marker = WITHHELD.format(n=b - a)
            text = text[:a] + marker + text[b:]
            start = a + len(marker)
            changed = True
    return text, changed


def _masked_record(step: Step) -> dict[str, Any]:
    """A step the agent did not write, in the agent-only view: who and where, no content."""
    rec: dict[str, Any] = {"step": step.index, "speaker": step.source}
    if step.tool_name and step.source in ("tool", "environment"):
        rec["tool"] = step.tool_name
    rec["masked"] = True
    return rec


def _record(
    step: Step, cfg: RenderConfig, withhold: list[str]
) -> tuple[dict[str, Any], tuple[str, ...], bool, bool]:
    """(record, the text of each field as shown, whether it cut, whether it withheld)."""
    rec: dict[str, Any] = {"step": step.index, "speaker": step.source}
    fields: list[str] = []
    cut_any = withheld = False

    def body(text: str, head: int, tail: int) -> str:
        nonlocal cut_any, withheld
        if withhold:
            text, hit = _withhold(text, withhold)
            withheld |= hit
        shown, cut = clip(text, head, tail)
        cut_any |= cut
        return shown

    if step.source in ("tool", "environment"):
        if step.tool_name:
            rec["tool"] = step.tool_name
        if step.is_error:
            rec["error"] = True
        shown = body(step.message, cfg.tool_head, cfg.tool_tail)
        parsed = _json_value(shown) if shown == step.message else None
        rec["output"] = parsed if parsed is not None else shown
        fields.append(shown if parsed is None else json.dumps(parsed, ensure_ascii=False))
    else:
        if step.reasoning:
            rec["thinking"] = body(step.reasoning, cfg.message_head, cfg.message_tail)
            fields.append(rec["thinking"])
        if step.message or not step.tool_calls:
            rec["text"] = body(step.message, cfg.message_head, cfg.message_tail)
            fields.append(rec["text"])
    calls = []
    for call in step.tool_calls:
        args: Any = call.arguments
        shown, cut = clip(_args(args), cfg.tool_head, cfg.tool_tail)
        cut_any |= cut
        if cut or isinstance(args, str):
            args = shown
        calls.append({"name": call.name, "arguments": args})
        fields.append(f"{call.name}({shown})")
        fields.append(json.dumps(calls[-1], ensure_ascii=False))
    if calls:
        rec["tool_calls"] = calls
    return rec, tuple(fields), cut_any, withheld


def _raw_texts(step: Step) -> list[str]:
    """Everything the trajectory wrote into a step, before truncation (what the detector
    reads: text past the truncation point is still in the trajectory)."""
    texts = [step.message, step.reasoning or ""]
    texts += [f"{c.name}({_args(c.arguments)})" for c in step.tool_calls]
    return [t for t in texts if t]


def _json_value(text: str) -> Any:
    """A tool output that is a JSON object or array, parsed (embedded as data, not a string)."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


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
    # Every context line is indented: the policy and tool names are raw text from the
    # dataset, and indented they cannot start a line of their own (a boundary line, a step
    # record, a "## Capabilities" heading) that a reader would take for the structure.
    body = "\n".join(lines[1:]).split("\n")
    return "\n".join([lines[0], *("  " + line if line else line for line in body)]), cuts


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
    """One record standing for a run of dropped steps (not citable)."""
    first, last = steps[0].index, steps[-1].index
    commands = [
        _one_line(_args(c.arguments) if c.name == "bash" else f"{c.name}({_args(c.arguments)})")
        for s in steps
        for c in s.tool_calls
    ]
    agent = sum(s.source == "agent" for s in steps)
    what = f"{len(steps)} steps, {agent} by the agent" + (
        ": " + "; ".join(commands[:5]) if commands else ""
    )
    if len(commands) > 5:
        what += f"; +{len(commands) - 5} more"
    return dump_record({"steps": f"{first}-{last}", "summary": what})


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


def render(
    traj: Trajectory,
    config: RenderConfig | None = None,
    withhold: dict[int, list[str]] | None = None,
    agent_only: bool = False,
) -> Rendered:
    """Render one trajectory (outcome-blind); see the module docstring for the layout.

    `withhold`: step index -> quotes to replace by a marker in that step's text.
    `agent_only`: mask every step the agent did not write (the agent-only view)."""
    cfg = config or RenderConfig()
    context, cuts = _context(traj, cfg)
    context_findings = find_instructions(
        "\n".join([traj.task.policy or "", ", ".join(traj.task.tools)])
    )
    texts: dict[int, str] = {}
    views: dict[int, StepView] = {}
    flagged: dict[int, str] = {}
    withheld: dict[int, list[str]] = {}
    truncated = 0
    for step in traj.steps:
        asked = (withhold or {}).get(step.index, [])
        rec, fields, cut, hit = _record(step, cfg, asked)
        if hit:
            withheld[step.index] = list(asked)
        findings = [f for text in _raw_texts(step) for f in find_instructions(text)]
        if findings:
            rec["flagged"] = True
            flagged[step.index] = findings[0].reason
        texts[step.index] = dump_record(rec)
        views[step.index] = StepView(step.index, step.source, fields)
        truncated += cut
    keep = set(texts)
    text = _assemble(traj, context, texts, keep, cuts, truncated)
    budget = cfg.max_tokens - approx_tokens(context) - 100  # 100: the cut note and fences
    for _ in range(8):  # shrink the step budget until the summary lines fit as well
        if approx_tokens(text) <= cfg.max_tokens or budget <= 0:
            break
        keep = _select(traj, texts, budget, cfg.keep_ends)
        text = _assemble(traj, context, texts, keep, cuts, truncated)
        budget -= max(0, approx_tokens(text) - cfg.max_tokens) + 10
    elided = tuple(i for i in texts if i not in keep)
    if agent_only:
        for step in traj.steps:
            if step.source != "agent":
                texts[step.index] = dump_record(_masked_record(step))
                views[step.index] = StepView(step.index, step.source, ())
                flagged.pop(step.index, None)
                withheld.pop(step.index, None)
        text = _assemble(traj, context, texts, keep, cuts, truncated)
    return Rendered(
        traj.traj_id,
        text,
        {i: v for i, v in views.items() if i in keep},
        elided,
        truncated,
        flagged=flagged,
        withheld=withheld,
        cuts=_cuts(cuts, texts, elided, truncated),
        boundary=_boundary(texts),
        context_flag=context_findings[0].reason if context_findings else "",
    )


def _boundary(texts: dict[int, str]) -> str:
    """The per-transcript token on the boundary lines: a hash of every step record, so no
    text inside a record can contain it (it would have to contain its own hash)."""
    return hashlib.sha256("\n".join(texts.values()).encode()).hexdigest()[:16]


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
    context: str,
    texts: dict[int, str],
    keep: set[int],
    base_cuts: dict[str, Any],
    truncated: int,
) -> str:
    """The transcript text: context, cut note, the kept step records between the boundary
    lines, one summary record per dropped run."""
    elided = tuple(i for i in texts if i not in keep)
    note = cut_note(_cuts(base_cuts, texts, elided, truncated))
    boundary = _boundary(texts)
    lines = [context, "", "## Transcript"]
    if note:
        lines.append(f"[Abridged for length: {note}.]")
    lines.append(f'<steps boundary="{boundary}">')
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
    lines.append(f'</steps boundary="{boundary}">')
    return "\n".join(lines)


def step_records(text: str) -> list[dict[str, Any]]:
    """The records between a rendered transcript's boundary lines, parsed with `json.loads`.

    What a labeller that reads the structure gets back; raises `ValueError` when the block
    is missing or a line in it is not one JSON object (which the tests assert never happens,
    whatever the trajectory holds)."""
    m = re.search(r'^<steps boundary="([0-9a-f]{16})">$', text, re.M)
    if m is None:
        raise ValueError("no <steps boundary=...> line in the transcript")
    closing = f'</steps boundary="{m.group(1)}">'
    body = text[m.end() + 1 :]
    end = body.find("\n" + closing)
    if end < 0 and not body.startswith(closing):
        raise ValueError("the steps block is not closed by its own boundary line")
    lines = body[:end].split("\n") if end >= 0 else []
    records = []
    for line in lines:
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError(f"a line of the steps block is not a JSON object: {line[:80]}")
        records.append(value)
    return records
