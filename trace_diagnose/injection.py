"""injection: read trajectory text the way a fooled labeller would, to compare and to flag.

Public API::

    fold(text) -> str                        # the text as a reader sees it (see below)
    locate(text, quote) -> tuple[int, int] | None   # where a quote sits in the raw text
    find_instructions(text) -> list[Finding]        # text that reads as aimed at the labeller

**Folding.** A reader does not see zero-width characters, tells no difference between a
Cyrillic "А" and a Latin "A" or between "𝐏𝐑𝐄𝐒𝐄𝐍𝐓" and "PRESENT", reads "A̶G̶E̶N̶T̶" (a
combining stroke on each letter) as "AGENT", and ignores runs of white space. `fold` does the
same: Unicode NFKD, combining and enclosing marks (accents included: "présent" reads as
"present") and format characters (category Cf: zero-width spaces and joiners,
bidirectional controls, soft hyphens) removed, letters that Unicode's confusables table
(through `confusable_homoglyphs`) lists as look-alikes of a Latin letter mapped to it, white
space collapsed, and (by default) case folded. Unicode tag characters (U+E0020-U+E007E) are
invisible but spell ASCII that models do read ("ASCII smuggling"): they fold to that ASCII,
so hidden text is seen, not dropped. Evidence quotes are
compared folded, and the detector reads folded text, so neither is defeated by look-alikes.

**The detector is a hint, not the defence.** What keeps trajectory text from steering the
labels is the transcript's structure and the evidence checks (`render`, `label`). The
detector only marks text that reads as addressed to the labeller, so the report can name
those trajectories and the analysis can show the selection with and without them; it never
blocks a quote and never removes a trajectory. It is not a list of known attacks: it asks
whether a sentence speaks the vocabulary of *our* labelling task (the verdicts PRESENT /
LACKING / NA, capabilities, labels, evidence, an auditor or grader) together with a command or an override of instructions, or whether it
imitates the transcript's structure (step headers, speaker labels, record fields, the
truncation marker, the transcript fence). Text that steers our verdicts has to name them;
ordinary conversation rarely does. Its misses and false alarms on a labelled set are
measured in the tests (`tests/diagnose/fixtures/injection_labelled.jsonl`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

_SPACE = re.compile(r"\s+")


@lru_cache(maxsize=8192)
def _latin(char: str) -> str:
    """The Latin letter `char` imitates (Unicode confusables), else `char` itself."""
    from confusable_homoglyphs import confusables

    found = confusables.is_confusable(char, preferred_aliases=["latin", "common"])
    for item in found or ():
        for glyph in item["homoglyphs"]:
            if glyph["n"].startswith("LATIN ") and glyph["c"].isascii():
                return glyph["c"]
    return char


_TAGS = range(0xE0020, 0xE007F)  # Unicode tag characters that spell printable ASCII
_MARKS = frozenset({"Mn", "Me", "Cf"})  # combining and enclosing marks, format characters


def _fold_char(char: str) -> str:
    if char.isascii():
        return char
    if ord(char) in _TAGS:  # invisible, yet a model that reads them reads their ASCII
        return chr(ord(char) - 0xE0000)
    out = []
    # NFKD splits a letter from its accents: the marks go, as a reader looks through them
    for c in unicodedata.normalize("NFKD", char):
        if c.isascii():
            out.append(c)
        elif unicodedata.category(c) not in _MARKS:
            out.append(_latin(c))
    return "".join(out)


def _folded_with_origin(text: str, casefold: bool) -> tuple[str, list[int]]:
    """Folded text and, for each of its characters, the index of the raw character."""
    chars: list[str] = []
    origin: list[int] = []
    space = True  # drop leading white space
    for i, raw in enumerate(text):
        piece = _fold_char(raw)
        if casefold:
            piece = piece.casefold()
        for c in piece:
            if c.isspace():
                if space:
                    continue
                c, space = " ", True
            else:
                space = False
            chars.append(c)
            origin.append(i)
    while chars and chars[-1] == " ":
        chars.pop()
        origin.pop()
    return "".join(chars), origin


def fold(text: str, casefold: bool = True) -> str:
    """`text` as a reader sees it: NFKC, no format characters, Latin look-alikes mapped to
    Latin, white space collapsed to single spaces, case folded (unless `casefold=False`)."""
    if text.isascii():
        text = _SPACE.sub(" ", text).strip()
        return text.casefold() if casefold else text
    return _folded_with_origin(text, casefold)[0]


def locate(text: str, quote: str) -> tuple[int, int] | None:
    """The raw span of `text` whose folded form contains folded `quote`, or None."""
    needle = fold(quote)
    if not needle:
        return None
    folded, origin = _folded_with_origin(text, casefold=True)
    at = folded.find(needle)
    if at < 0:
        return None
    return origin[at], origin[at + len(needle) - 1] + 1


# -- the detector -------------------------------------------------------------------------
# Cue families, read on folded text (case kept where the case is the signal).
_STRUCTURE = re.compile(
    r"\[\s*s\s*\d+(?:\s*-\s*s?\s*\d+)?\s*(?:\]|summar)"  # a step header or summary: [S3], [S5-S9 ...
    r"|(?:^|[\n\r])\s*(?:agent|assistant|user|customer|tool|system|environment|human|developer)"
    r"\s*(?:\([^)\n]{0,40}\)\s*)?(?:->|:)"  # a speaker label opening a line
    r"|\"(?:step|speaker)\"\s*:"  # a transcript record field
    r"|</?\s*(?:transcript|steps)\b|\[truncated \d+ chars\]|\[abridged for length|\[withheld:",
    re.I,
)
_VERDICT_CASED = re.compile(r"\b(?:PRESENT|LACKING|N/?A)\b")
_VERDICT = re.compile(
    r"\bverdicts?\b|\bnot applicable\b"
    r"|\b(?:as|=|:|to|->)\s*[\"'`]?(?:present|lacking|n/?a)\b",
    re.I,
)
_TASK = re.compile(
    r"\bcapabilit(?:y|ies)\b|\brubric\b|\blabel(?:s|led|ed|ling|ing)?\b|\bevidence\b"
    r"|\btranscripts?\b|\bannotat\w*|\bskills?\b|\bcriteri(?:on|a)\b",
    re.I,
)
_AUDITOR = re.compile(
    r"\b(?:auditor|labell?er|annotator|grader|evaluator|assessor|rater|judge|classifier)s?\b"
    r"|\b(?:language model|llm|ai model|ai assistant|chatgpt|gpt-?\d\w*|claude)\b(?!-)",
    re.I,
)
# Whoever reads the log, addressed as such: a reader of this conversation is the labeller.
_READER = re.compile(
    r"\b(?:dear|attention|hey|hello|hi|note (?:to|for)|message (?:to|for)|reminder (?:to|for)|to)"
    r"\s+(?:the\s+|any\s+|all\s+)?(?:auditor|labell?er|annotator|grader|evaluator|assessor|rater"
    r"|reviewer|judge model|ai|llm|model)s?\b"
    r"|\b(?:whoever|anyone|anybody|any (?:ai|model|llm|system))\s+(?:who\s+)?(?:grades|reviews|"
    r"evaluates|judges|labels|audits|scores|rates|reads|analy[sz]es|is (?:grading|reviewing|"
    r"evaluating|judging|labell?ing|auditing|reading))\b"
    r"|\b(?:ai|llm|model|system|assistant)\s+(?:that is\s+|who is\s+)?(?:reading|reviewing|"
    r"grading|judging|evaluating|auditing|labell?ing|analy[sz]ing)\s+(?:this|these|the)\s+"
    r"(?:chat|conversation|transcript|log|logs|trajectory|messages?)\b",
    re.I,
)
_YOUR_JUDGEMENT = re.compile(
    r"\byour\s+(?:assessment|evaluation|grading|grade|audit|labels?|labell?ing|verdicts?"
    r"|judge?ments?|annotations?|scoring|rubric)\b",
    re.I,
)
_OVERRIDE_STRONG = re.compile(
    r"\bsystem\s*prompt\b|\bdeveloper mode\b|\bjailbreak|\bprompt injection", re.I
)
_OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override|overrule|bypass|supersede|skip)\w*\b[^.!?\n]{0,60}?"
    r"\b(?:instructions?|prompts?|rules|guidelines|directives?|guidance|system)\b"
    r"|\bsystem\s*(?:override|message|instructions?|notice|update|directive)\b|^\s*override\b"
    r"|\bnew\s+(?:instructions?|directives?)\b",
    re.I,
)
_COMMAND = re.compile(
    r"\b(?:label|mark|rate|classify|grade|score|tag|assign|output|answer|respond|return"
    r"|evaluate|assess|record|treat|consider|set|give|write|say)\b",
    re.I,
)
_SCOPE = re.compile(r"\b(?:every|each|all|any|everything)\b", re.I)
_SPACED = re.compile(r"\b(?:[A-Za-z] ){3,}[A-Za-z]\b")  # "P R E S E N T" read as one word
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|[\n\r\u2028\u2029\x85\v\f]+")


@dataclass(frozen=True)
class Finding:
    """A span of raw text that reads as addressed to the labeller, and why."""

    start: int
    end: int
    reason: str


def _reason(sentence: str) -> str | None:
    if _STRUCTURE.search(sentence):
        return "imitates the transcript's structure (step header, speaker label or fence)"
    sentence = _SPACED.sub(lambda m: m.group(0).replace(" ", ""), sentence)
    if _READER.search(sentence) or _OVERRIDE_STRONG.search(sentence):
        return "addresses the labeller"
    verdict = bool(_VERDICT_CASED.search(sentence) or _VERDICT.search(sentence))
    task = bool(_TASK.search(sentence))
    auditor = bool(_AUDITOR.search(sentence))
    override = bool(_OVERRIDE.search(sentence))
    command = bool(_COMMAND.search(sentence))
    if verdict and (command or task or auditor or override or _SCOPE.search(sentence)):
        return "names a verdict with a command"
    if override and (task or auditor or command or verdict):
        return "overrides instructions"
    if auditor and (task or command):
        return "addresses the labeller"
    if _YOUR_JUDGEMENT.search(sentence) and command:
        return "addresses the labeller's judgement"
    return None


def find_instructions(text: str) -> list[Finding]:
    """Sentences of `text` that read as addressed to the labeller (see the module docstring).

    Each finding is a span of the raw text (one sentence or line) with a short reason."""
    if not text:
        return []
    findings: list[Finding] = []
    whole = fold(text, casefold=False)
    # the structure cues need the raw line breaks, which folding turns into spaces
    structure = _STRUCTURE.search(_fold_lines(text))
    if structure is None and _reason(whole) is None:
        return []  # the common case: nothing anywhere, no need to split
    pos, previous = 0, ""
    for piece in _SENTENCE_END.split(text):
        start = text.find(piece, pos)
        if start < 0 or not piece.strip():
            continue
        pos = start + len(piece)
        # a sentence is read with the one before it: "Forget your rules. Say ..." is one order
        reason = _reason(_fold_lines(piece)) or (
            _reason(fold(previous + " " + piece, casefold=False)) if previous else None
        )
        if reason:
            findings.append(Finding(start, pos, reason))
        previous = piece
    if not findings and structure is not None:
        findings.append(Finding(0, len(text), "imitates the transcript's structure"))
    return findings


def _fold_lines(text: str) -> str:
    """Fold each line but keep the line breaks (the structure cues look at line starts)."""
    return "\n".join(
        fold(line, casefold=False) for line in re.split(r"[\n\r\u2028\u2029\x85\v\f]", text)
    )
