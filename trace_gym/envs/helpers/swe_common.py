"""What the SWE environments share: the patch action, task assembly from a correct and a
defective module, judging outside the sandbox, the reward, the engine and the spec hooks.

A task is built from two versions of one generated module: the correct one and the one with
the planted defect. Both run in-process at generation time (the code is ours, not the
agent's) to compute every test's expected value and which tests the defect breaks, so the
tests agree with the code by construction.

**Compute inside, judge outside.** Verification never runs a test file. The harness parses
its own copies of the tests (``assert M.f(...) == <value>``) into calls and expected values
(:func:`parse_tests`), sends only the calls and the agent's module into the sandbox
(:meth:`trace_gym.sandbox.Sandbox.compute`), gets the returned values back as plain data and
compares them here (:func:`run_suite`). The hidden tests never exist inside the sandbox and
nothing the agent's code prints, writes or exits with is read as a result: a value it sends
is only compared with an expected value it never saw. The agent's own runs of the visible
tests (``run_tests`` in ``trace/swe-repair-v0``) go through an in-sandbox runner whose report
is feedback, never a verdict.

Every SWE environment is a :class:`~trace_gym.core.spec.CapabilitySpec` run by
:class:`SweEngine`; :func:`single_turn_spec` fills in the hooks the five single-turn
environments share.

Reward (the paper's, with the fewest edits as the reference for "one edit"):

| check | weight | passes when |
|---|---|---|
| ``target_test`` | 0.4 | the test the defect breaks passes |
| ``still_passing`` | 0.4 | partial: share of previously passing tests (visible and hidden) that pass |
| ``few_edits`` | 0.1 | ``min(1, edits the fix needs / edits made)`` |
| ``patch_parsed`` | 0.1 | the action holds a SEARCH/REPLACE patch that applies |
| ``hidden_tests`` | 0 | every hidden test of the defect passes (hard) |
| gates | 0 | no test file edited; no special-casing (the target passes while a hidden test, of the defect or one that passed before, fails); no code deleted (every function kept, at most a few lines more removed than the fix removes); no reaching into the harness (``sys.modules``, ``os._exit``, ...) |

A patch that does not parse or apply scores 0. ``still_passing`` and ``few_edits`` count only
once the target test passes: otherwise an empty patch would earn 0.6 for changing nothing.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import re
import textwrap
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from trace_gym.core.env import EpisodeState
from trace_gym.core.plans import Segment
from trace_gym.core.spec import CapabilitySpec, SpecEnv
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import sha256_hex
from trace_gym.primitives.tools import Tool
from trace_gym.sandbox import (
    ISOLATION_MODES,
    REPORT_MARKER,
    Limits,
    RunResult,
    Sandbox,
    default_isolation,
)
from trace_gym.world.model import World

TARGET_WEIGHT, KEEP_WEIGHT, EDITS_WEIGHT, PARSED_WEIGHT = 0.4, 0.4, 0.1, 0.1
RUNNER_FILE = "_trace_runner.py"
TEST_TIMEOUT_S = 2
EXTRA_DELETED_LINES = 6
"""Lines a patch may remove beyond what the reference fix removes before the deletion gate."""
TAMPERING = re.compile(
    r"sys\.modules|__main__|os\._exit|sys\.exit|\bgc\b|\binspect\b|builtins|settrace|"
    r"setprofile|\batexit\b|__import__|\bexec\s*\(|\beval\s*\(|@@TRACE|\bsignal\b"
)

# The agent's feedback runner (``run_tests``), inside the sandbox: imports each test module,
# runs its test_* functions in order with a per-test alarm, and prints one report line. What it
# prints is the agent's code's output: shown to the agent, never graded.
RUNNER = textwrap.dedent(
    f"""
    import _signal, importlib, sys

    class _Timeout(BaseException):
        pass

    def _alarm(signum, frame):
        raise _Timeout()

    # _signal, repr and no traceback: the `signal`, `json` and `traceback` modules would
    # import enum, re and tokenize, a good part of the runner's start-up
    _signal.signal(_signal.SIGALRM, _alarm)
    results = {{}}
    for name in sys.argv[1:]:
        try:
            mod = importlib.import_module(name)
        except BaseException as exc:
            results[name] = ["error", "cannot import: " + repr(exc)[:300]]
            continue
        for attr, fn in list(vars(mod).items()):
            if not (attr.startswith("test_") and callable(fn)):
                continue
            key = name + "::" + attr
            _signal.alarm({TEST_TIMEOUT_S})
            try:
                fn()
                outcome = ["passed", ""]
            except _Timeout:
                outcome = ["timeout", "over {TEST_TIMEOUT_S} s"]
            except AssertionError as exc:
                outcome = ["failed", str(exc)[-300:] or "assertion failed"]
            except BaseException as exc:
                outcome = ["error", repr(exc)[:300]]
            finally:
                _signal.alarm(0)
            results[key] = outcome
    sys.stdout.write("\\n{REPORT_MARKER}" + repr(results) + "\\n")
    """
)


# -- the patch action -------------------------------------------------------------------------
@dataclass(frozen=True)
class Edit:
    path: str | None
    search: str
    replace: str


class PatchError(ValueError):
    """The action holds no usable patch, or a block does not apply (message says why)."""


_BLOCK = re.compile(
    r"^[ \t]*<{5,9}[ \t]*(?:SEARCH|ORIGINAL|FIND|OLD)?[ \t]*\n(.*?)"
    r"^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9}[ \t]*(?:REPLACE|UPDATED|NEW)?[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_PATH = re.compile(r"([\w./-]+\.py)\b")
_OPENER = re.compile(r"^[ \t]*<{5,9}", re.MULTILINE)
MAX_PATCH_CHARS = 100_000
MAX_BLOCKS = 40


def parse_patch(text: str) -> list[Edit]:
    """SEARCH/REPLACE blocks in ``text``, in order.

    Accepted variants: 5-9 marker characters, ``SEARCH``/``ORIGINAL``/``FIND``/``OLD`` and
    ``REPLACE``/``UPDATED``/``NEW`` labels (or none), blocks inside Markdown fences, and a
    file name on one of the lines just before a block (``path.py``, ``### path.py``,
    ``File: path.py``, or a fence info string such as ``python path.py``).
    """
    if not isinstance(text, str) or not text.strip():
        raise PatchError("no SEARCH/REPLACE block found")
    if len(text) > MAX_PATCH_CHARS:
        raise PatchError(f"the patch is longer than {MAX_PATCH_CHARS} characters")
    text = text.replace("\r\n", "\n")
    if len(_OPENER.findall(text)) > MAX_BLOCKS:  # also bounds the block regex's backtracking
        raise PatchError(f"more than {MAX_BLOCKS} SEARCH/REPLACE blocks")
    edits, last = [], 0
    for m in _BLOCK.finditer(text):
        before = [ln for ln in text[last : m.start()].splitlines() if ln.strip()][-2:]
        path = None
        for ln in reversed(before):
            found = _PATH.search(ln)
            if found:
                path = found.group(1).lstrip("./")
                break
        edits.append(Edit(path, m.group(1), m.group(2)))
        last = m.end()
    if not edits:
        raise PatchError(
            "no SEARCH/REPLACE block found; write <<<<<<< SEARCH, the exact lines, =======, "
            "the new lines, >>>>>>> REPLACE"
        )
    return edits


def apply_patch(files: dict[str, str], edits: list[Edit], default: str) -> dict[str, str]:
    """``files`` with every edit applied in order (first occurrence of each SEARCH text).

    A SEARCH text that is not found verbatim is retried ignoring trailing whitespace on each
    line. Raises :class:`PatchError` when a block names an unknown file, has an empty SEARCH
    or does not match.
    """
    out = dict(files)
    for i, e in enumerate(edits, 1):
        path = e.path or default
        if path not in out:
            known = ", ".join(sorted(out))
            raise PatchError(f"block {i}: no file {path!r} (files: {known})")
        if not e.search.strip():
            raise PatchError(f"block {i}: empty SEARCH section")
        src = out[path]
        if e.search in src:
            out[path] = src.replace(e.search, e.replace, 1)
            continue
        lines = [ln.rstrip() for ln in src.split("\n")]
        want = [ln.rstrip() for ln in e.search.rstrip("\n").split("\n")]
        for start in range(len(lines) - len(want) + 1):
            if lines[start : start + len(want)] == want:
                new = e.replace.rstrip("\n").split("\n") if e.replace.strip() else []
                src_lines = src.split("\n")
                out[path] = "\n".join(src_lines[:start] + new + src_lines[start + len(want) :])
                break
        else:
            raise PatchError(f"block {i}: the SEARCH text does not occur in {path}")
    return out


def render_patch(edits: list[tuple[str, str, str]]) -> str:
    """A patch in the canonical format from ``(path, search, replace)`` triples."""
    parts = []
    for path, search, replace in edits:
        parts.append(
            f"{path}\n<<<<<<< SEARCH\n{search.rstrip(chr(10))}\n=======\n"
            f"{replace.rstrip(chr(10))}\n>>>>>>> REPLACE"
        )
    return "```\n" + "\n```\n\n```\n".join(parts) + "\n```"


# -- tasks -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweTask:
    """One repair task (all JSON data, hashed for ``task_hash``)."""

    module: str
    """Module name; the source lives in ``{module}.py``."""
    domain: str
    source: str
    """The defective module the agent sees."""
    visible_tests: str
    target_test: str
    """Source of the target test (``test_target.py``), shown in the issue."""
    target_name: str
    hidden_tests: str
    passing_before: list[str]
    """Test ids (``file::name``) that pass on the defective module."""
    hidden_fail_to_pass: list[str]
    issue: str
    oracle_edits: list[list[str]]
    """``[path, search, replace]`` of the reference fix."""
    def_names: list[str]
    oracle_removed_lines: int
    defect: dict[str, Any]
    features: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> dict[str, str]:
        """The files the agent may read (the hidden tests are not among them)."""
        return {
            f"{self.module}.py": self.source,
            "test_visible.py": self.visible_tests,
            "test_target.py": self.target_test,
        }


@dataclass(frozen=True)
class Probe:
    """A test: a name and assert lines that call the module as ``M``."""

    name: str
    body: list[str]


def run_tests_in_process(source: str, tests: list[Probe]) -> dict[str, bool]:
    """Whether each test passes on ``source``; trusted generator code only (never agents')."""
    scope: dict[str, Any] = {"M": load_module(source)}
    code = "\n".join(f"def {t.name}():\n" + "".join(f"    {b}\n" for b in t.body) for t in tests)
    exec(_compiled(code), scope)  # noqa: S102 - our own code
    out = {}
    for t in tests:
        try:
            scope[t.name]()
            out[t.name] = True
        except Exception:
            out[t.name] = False
    return out


@functools.lru_cache(maxsize=8)
def _compiled(code: str) -> types.CodeType:
    return compile(code, "<generated tests>", "exec")


@functools.lru_cache(maxsize=8)
def load_module(source: str) -> types.ModuleType:
    """``source`` executed as a fresh module (trusted generator code only)."""
    module = types.ModuleType("generated")
    exec(compile(source, "<generated>", "exec"), module.__dict__)  # noqa: S102 - our own code
    return module


def render_test_file(module: str, tests: list[Probe], doc: str) -> str:
    lines = [f'"""{doc}"""', "", f"import {module} as M", ""]
    for t in tests:
        lines += ["", f"def {t.name}():", *("    " + b for b in t.body), ""]
    return "\n".join(lines).rstrip() + "\n"


def assemble_task(
    *,
    module: str,
    domain: str,
    correct: str,
    defective: str,
    visible: list[Probe],
    target: Probe,
    hidden: list[Probe],
    issue: str,
    oracle_edits: list[tuple[str, str]],
    defect: dict[str, Any],
    features: dict[str, Any],
    broken: set[str],
) -> SweTask:
    """Check the planted defect against the tests and package the task.

    Every test's expected value comes from the correct module; ``broken`` names the tests
    that fail on the defective one. Raises ``ValueError`` when the tests do not pin the
    defect (the target passes on the defective module, fewer than two hidden tests fail on
    it, or the reference fix does not reproduce the correct module): generators draw again.
    """
    if target.name not in broken:
        raise ValueError("the target test passes on the defective module")
    bad = {t.name: t.name not in broken for t in [*visible, *hidden]}
    fixed = defective
    for search, replace in oracle_edits:
        if fixed.count(search) != 1:
            raise ValueError("a reference SEARCH text is not unique")
        fixed = fixed.replace(search, replace, 1)
    if fixed != correct:
        raise ValueError("the reference fix does not restore the correct module")
    where = {t.name: "test_visible" for t in visible} | {t.name: "test_hidden" for t in hidden}
    passing = [f"{where[t.name]}::{t.name}" for t in [*visible, *hidden] if bad[t.name]]
    f2p = [f"test_hidden::{t.name}" for t in hidden if not bad[t.name]]
    if len(f2p) < 2:
        raise ValueError("fewer than two hidden tests pin the defect")
    removed = sum(max(0, s.count("\n") - r.count("\n")) for s, r in oracle_edits)
    names = re.findall(r"^def (\w+)", correct, re.MULTILINE)
    return SweTask(
        module=module,
        domain=domain,
        source=defective,
        visible_tests=render_test_file(module, visible, f"Tests of {module}."),
        target_test=render_test_file(module, [target], "The test that reproduces the issue."),
        target_name=f"test_target::{target.name}",
        hidden_tests=render_test_file(module, hidden, "Hidden tests."),
        passing_before=passing,
        hidden_fail_to_pass=f2p,
        issue=issue,
        oracle_edits=[[f"{module}.py", s, r] for s, r in oracle_edits],
        def_names=names,
        oracle_removed_lines=removed,
        defect=defect,
        features={**features, "module_lines": defective.count("\n") + 1},
    )


# -- judging outside the sandbox -------------------------------------------------------------
@dataclass(frozen=True)
class TestCase:
    """One test of a task's test file as the harness keeps it: its id and, per ``assert``,
    the call (source on ``M``, sent into the sandbox) and the expected value (kept here)."""

    id: str
    calls: tuple[tuple[str, Any], ...]


@functools.lru_cache(maxsize=256)
def parse_tests(source: str, stem: str) -> tuple[TestCase, ...]:
    """The tests of a generated test file (``assert M.f(...) == <literal>`` lines, as
    :func:`render_test_file` writes them), parsed, never run. A test that has another shape
    is our generator's bug: ValueError."""
    try:
        return _parse_rendered(source, stem)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _parse_any(source, stem)


def _parse_rendered(source: str, stem: str) -> tuple[TestCase, ...]:
    """The fast path (20x faster than the AST on a 600-line file): one ``assert`` per line,
    the expected value the ``repr`` after the last `` == `` (checked: it round-trips)."""
    out: list[TestCase] = []
    name, calls = None, []
    for line in source.split("\n"):
        if line.startswith("def test_"):
            if name is not None:
                out.append(TestCase(f"{stem}::{name}", tuple(calls)))
            name, calls = line[4 : line.index("(")], []
        elif name is not None and line.startswith("    assert "):
            call, sep, text = line[len("    assert ") :].rpartition(" == ")
            value = ast.literal_eval(text) if sep else None
            if not sep or repr(value) != text or not call.startswith("M."):
                raise ValueError(line)
            calls.append((call, value))
        elif name is not None and line.strip():
            raise ValueError(line)
    if name is not None:
        out.append(TestCase(f"{stem}::{name}", tuple(calls)))
    return tuple(out)


def _parse_any(source: str, stem: str) -> tuple[TestCase, ...]:
    lines = source.split("\n")
    out = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        calls = []
        for stmt in node.body:
            test = stmt.test if isinstance(stmt, ast.Assert) else None
            if not (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Eq)
                and test.left.lineno == test.left.end_lineno
            ):
                raise ValueError(f"{stem}::{node.name}: not an 'assert CALL == VALUE' test")
            line = lines[test.left.lineno - 1].encode("utf-8")
            call = line[test.left.col_offset : test.left.end_col_offset].decode("utf-8")
            calls.append((call, ast.literal_eval(test.comparators[0])))
        out.append(TestCase(f"{stem}::{node.name}", tuple(calls)))
    return tuple(out)


def hidden_tests(task: SweTask) -> list[str]:
    """Ids of the hidden tests: those of the defect and those that passed before it."""
    before = [t for t in task.passing_before if t.startswith("test_hidden::")]
    return sorted(set(task.hidden_fail_to_pass) | set(before))


def task_tests(task: SweTask) -> tuple[TestCase, ...]:
    """Every test of a task from the harness's own copies: visible, target and hidden."""
    return (
        parse_tests(task.visible_tests, "test_visible")
        + parse_tests(task.target_test, "test_target")
        + parse_tests(task.hidden_tests, "test_hidden")
    )


@dataclass(frozen=True)
class SuiteRun:
    """The tests of one module judged here: ``results`` maps a test id to ``(outcome,
    detail)``, outcome ``passed`` / ``failed`` (a value differs) / ``error`` (a call raised,
    timed out or crashed the worker, or the module did not import)."""

    run: RunResult
    results: dict[str, tuple[str, str]]

    @property
    def infra_error(self) -> bool:
        return self.run.infra_error

    def passed(self, test_id: str) -> bool:
        return self.results.get(test_id, ("",))[0] == "passed"


class _RunContext:
    """The sandbox an SWE environment's hooks use during one step, and the runs they made."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.runs: list[RunResult] = []


_CONTEXT: contextvars.ContextVar[_RunContext | None] = contextvars.ContextVar(
    "trace_swe_run_context", default=None
)
_SANDBOXES: dict[str, Sandbox] = {}
SANDBOX_LIMITS = Limits(cpu_seconds=10, wall_seconds=20.0, memory_bytes=1 << 30)
_RUN_CACHE: OrderedDict[str, SuiteRun] = OrderedDict()
_RUN_CACHE_SIZE = 128


def shared_sandbox(isolation: str | None = None) -> Sandbox:
    """One sandbox per isolation mode for the SWE environments (it raises
    :class:`~trace_gym.sandbox.SandboxUnavailable` when it cannot be had)."""
    mode = default_isolation() if isolation in (None, "auto") else str(isolation)
    if mode not in _SANDBOXES:
        _SANDBOXES[mode] = Sandbox(SANDBOX_LIMITS, isolation=mode)
    return _SANDBOXES[mode]


def current_sandbox() -> Sandbox:
    """The sandbox of the environment stepping now (else the default one)."""
    context = _CONTEXT.get()
    return context.sandbox if context is not None else shared_sandbox()


def _record(run: RunResult) -> None:
    context = _CONTEXT.get()
    if context is not None:
        context.runs.append(run)


def run_suite(task: SweTask, module_source: str, extra: dict[str, str] | None = None) -> SuiteRun:
    """Compute every test call of ``task`` on ``module_source`` in the sandbox and judge
    here (memoised: verifying the same patch twice runs it once).

    Only the module, and ``extra`` (other modules of the repository it may import: a fix
    that moves code into a new module), go into the sandbox, with the calls; the tests and
    their expected values stay here."""
    sandbox = current_sandbox()
    extra = dict(sorted((extra or {}).items()))
    key = sha256_hex([task.module, module_source, task.visible_tests, task.hidden_tests,
                      task.target_test, sandbox.isolation, extra])  # fmt: skip
    if key in _RUN_CACHE:
        _RUN_CACHE.move_to_end(key)
        suite = _RUN_CACHE[key]
        _record(suite.run)
        return suite
    tests = task_tests(task)
    calls = list(dict.fromkeys(call for t in tests for call, _ in t.calls))
    files = {**extra, f"{task.module}.py": module_source}
    computed = sandbox.compute(files, task.module, calls, call_timeout=TEST_TIMEOUT_S)
    _record(computed.run)
    outcome = dict(zip(calls, computed.outcomes, strict=True))
    results: dict[str, tuple[str, str]] = {}
    for t in tests:
        verdict = ("passed", "")
        for call, expected in t.calls:
            got = outcome[call]
            if got.status != "value":
                verdict = ("error", f"{got.status}: {got.message}"[:300])
                break
            if not got.equals(expected):
                verdict = ("failed", f"{call[:120]} returned {got.literal[:120]}")
                break
        results[t.id] = verdict
    suite = SuiteRun(computed.run, results)
    if not computed.run.infra_error:  # a harness failure may pass on a retry: not memoised
        _RUN_CACHE[key] = suite
        while len(_RUN_CACHE) > _RUN_CACHE_SIZE:
            _RUN_CACHE.popitem(last=False)
    return suite


def run_feedback_tests(files: dict[str, str], modules: list[str]) -> RunResult:
    """The visible tests as the agent has them, run inside the sandbox for the agent's own
    feedback (the ``run_tests`` tool): their report is the agent's code's output, never a
    verdict."""
    run = current_sandbox().run({**files, RUNNER_FILE: RUNNER}, RUNNER_FILE, modules)
    _record(run)
    return run


def _patch_text(ep: EpisodeState) -> str:
    """The patch: the last ``submit_patch`` call's argument, else the last message."""
    submitted = ep.successful(name="submit_patch")
    if submitted:
        return str(submitted[-1].arguments.get("patch", ""))
    return ep.agent_texts[-1][1] if ep.agent_texts else ""


SUBMIT_PATCH = Tool(
    "submit_patch",
    "Submit the fix as SEARCH/REPLACE blocks (the same text a plain reply may hold); ends the "
    "episode.",
    {"type": "object", "properties": {"patch": {"type": "string", "maxLength": 100_000}},
     "required": ["patch"], "additionalProperties": False},
    "control",
    lambda world, patch: {"received": True},
    terminal=True,
)  # fmt: skip


def _def_names(source: str) -> list[str] | None:
    try:
        return [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    except SyntaxError:
        return None


def verify_patch(task: SweTask, patch_text: str, capability: str) -> Verification:
    """Grade one patch: apply it here, compute the tests' calls on the patched module in the
    sandbox, compare with the expected values here."""
    cap = capability
    path = f"{task.module}.py"

    def zero(reason: str, actual: Any = None) -> Verification:
        return Verification(
            (Check("patch_parsed", cap, 0.0, PARSED_WEIGHT, expected="a patch that applies",
                   actual=actual, message=reason),),
            required_capabilities=(cap,), decided=False,
        )  # fmt: skip

    try:
        edits = parse_patch(patch_text)
    except PatchError as exc:
        return zero(str(exc))
    test_files = {"test_visible.py", "test_target.py", "test_hidden.py", RUNNER_FILE}
    touched = sorted({e.path or path for e in edits})
    edited_tests = [p for p in touched if p in test_files or p.split("/")[-1].startswith("test")]
    try:
        patched = apply_patch(task.files, edits, path)
    except PatchError as exc:
        if edited_tests:  # an edit of a test file is gated even when it does not apply
            return _gated(cap, "no_test_edit", edited_tests)
        return zero(str(exc), touched)
    new_source = patched[path]
    added = "\n".join(e.replace for e in edits)
    tampering = sorted(set(TAMPERING.findall(added)))
    names_after = _def_names(new_source)
    lost = [] if names_after is None else sorted(set(task.def_names) - set(names_after))
    removed = task.source.count("\n") - new_source.count("\n")
    gates = [
        ("no_test_edit", edited_tests, "the patch edits a test file"),
        ("no_harness_tampering", tampering, "the patch reaches into the interpreter or harness"),
        ("no_code_deleted", lost + ([f"{removed} lines"] if removed > task.oracle_removed_lines
                                    + EXTRA_DELETED_LINES else []),
         "the patch deletes functions or more code than the fix needs"),
    ]  # fmt: skip
    suite = run_suite(task, new_source)
    if suite.infra_error:
        return zero(f"sandbox failure: {suite.run.reason}", suite.run.summary())
    ok = suite.passed
    target_ok = ok(task.target_name)
    kept = [t for t in task.passing_before if ok(t)]
    hidden_ok = [t for t in task.hidden_fail_to_pass if ok(t)]
    edits_score = min(1.0, len(task.oracle_edits) / len(edits))
    # The target bought by breaking or faking behaviour elsewhere: a hidden test (of the
    # defect, or one that passed before) fails while the target passes. The correct module
    # passes every hidden test by construction.
    hidden_failing = sorted(t for t in hidden_tests(task) if not ok(t))
    special_cased = target_ok and bool(hidden_failing)
    target_result = suite.results.get(task.target_name, (suite.run.status, suite.run.reason))
    checks = [
        Check("target_test", cap, float(target_ok), TARGET_WEIGHT, expected="passed",
              actual=target_result[0], message=target_result[1]),
        Check("still_passing", cap,
              fraction(len(kept), len(task.passing_before)) if target_ok else 0.0, KEEP_WEIGHT,
              expected=len(task.passing_before),
              actual=sorted(set(task.passing_before) - set(kept))[:20],
              message="previously passing tests still passing (counts once the target passes)"),
        Check("few_edits", cap, edits_score if target_ok else 0.0, EDITS_WEIGHT,
              expected=len(task.oracle_edits), actual=len(edits)),
        Check("patch_parsed", cap, 1.0, PARSED_WEIGHT, expected="a patch that applies",
              actual=len(edits)),
        Check("hidden_tests", cap, fraction(len(hidden_ok), len(task.hidden_fail_to_pass)), 0.0,
              expected=len(task.hidden_fail_to_pass),
              actual=sorted(set(task.hidden_fail_to_pass) - set(hidden_ok))),
        Check("no_special_casing", cap, float(not special_cased), 0.0, gate=True,
              expected="every hidden test passes with the target",
              actual=hidden_failing if special_cased else [],
              message="the target passes but hidden tests fail"),
    ]  # fmt: skip
    for name, bad, message in gates:
        checks.append(
            Check(
                name, cap, float(not bad), 0.0, gate=True, expected=[], actual=bad, message=message
            )
        )
    return Verification(tuple(checks), required_capabilities=(cap,))


def _gated(cap: str, name: str, actual: Any) -> Verification:
    return Verification(
        (
            Check("patch_parsed", cap, 1.0, PARSED_WEIGHT),
            Check(name, cap, 0.0, 0.0, gate=True, expected=[], actual=actual),
        ),
        required_capabilities=(cap,),
    )


# -- the engine --------------------------------------------------------------------------------
class SweEngine(SpecEnv):
    """The engine of every SWE :class:`~trace_gym.core.spec.CapabilitySpec`: a spec's hooks
    run agent code through :func:`run_suite` / :func:`run_feedback_tests`, in the sandbox
    this engine holds.

    Args:
        isolation: the sandbox's isolation, ``bwrap`` or ``none`` (default:
            :func:`trace_gym.sandbox.default_isolation`). Stepping raises
            :class:`~trace_gym.sandbox.SandboxUnavailable`, naming how to install bubblewrap
            and the opt-in, when no sandbox can be had; ``reset`` (task generation) never
            needs one.
        **kwargs: as for :class:`~trace_gym.core.env.TraceEnv`.

    ``info["sandbox"]`` reports the last run's ``status``, ``reason`` and ``isolation`` and
    what the sandbox guarantees here. When the harness itself failed (the launcher never
    said ready), the episode ends with ``end_reason == "infra_error"``, reward 0 and
    ``info["infra_error"]``, for a trainer to mask; nothing the agent's code does after it
    started can end an episode that way.
    """

    def __init__(self, *args: Any, isolation: str | None = None, **kwargs: Any) -> None:
        if isolation not in (None, "auto", *ISOLATION_MODES):
            raise ConfigError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        self.isolation = isolation
        super().__init__(*args, **kwargs)

    def sandbox(self) -> Sandbox:
        return shared_sandbox(self.isolation)

    @contextlib.contextmanager
    def _running(self) -> Iterator[_RunContext]:
        outer = _CONTEXT.get()
        sandbox = self.sandbox()
        if outer is not None and outer.sandbox is sandbox:  # verify inside step: one record
            yield outer
            return
        context = _RunContext(sandbox)
        token = _CONTEXT.set(context)
        try:
            yield context
        finally:
            _CONTEXT.reset(token)

    def verify(self, task: Any, episode: EpisodeState) -> Verification:
        with self._running():
            return super().verify(task, episode)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self._running() as context:  # raises SandboxUnavailable before the turn
            obs, reward, terminated, truncated, info = super().step(action)
        if context.runs:
            infra = [r for r in context.runs if r.infra_error]
            run = infra[0] if infra else context.runs[-1]
            info["sandbox"] = {**run.summary(), "guarantees": context.sandbox.guarantees()}
            if infra and self.episode.end_reason != "infra_error":
                self.episode.end_reason = "infra_error"
                info["end_reason"] = "infra_error"
                info["infra_error"] = run.reason
                reward, terminated = 0.0, True
        return obs, reward, terminated, truncated, info


# -- spec hooks shared by the single-turn environments ------------------------------------------
class PatchReceiver(ScriptedUser):
    """The single turn: any message ends the episode and is graded as the patch."""

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply:
        return UserReply("Thanks, the patch was received and is being verified.", done=True)


SYSTEM_PROMPT = """\
You are a software engineer fixing an issue in a Python repository. The issue, the module and \
its tests follow. Reply with one patch in SEARCH/REPLACE format and nothing else that matters:

```
{module}.py
<<<<<<< SEARCH
exact lines copied from the current file (enough of them to be unique)
=======
the new lines
>>>>>>> REPLACE
```

Reply with the blocks as text, or pass them to the ``submit_patch`` tool. Use several \
blocks if the fix needs several places. Each SEARCH text must match the file \
exactly and is applied at its first occurrence. Fix the module, not the tests: the patch is \
checked against the visible tests, the issue's test and hidden tests."""


def empty_world(task: SweTask) -> World:
    return World("2026-01-01T00:00")  # the repository is the task; no records


def patch_user(task: SweTask) -> ScriptedUser:
    shown = "\n\n".join(f"### {name}\n```python\n{text}```" for name, text in task.files.items())
    return PatchReceiver(f"## Issue\n{task.issue}\n\n## Repository\n{shown}")


def patch_instructions(task: SweTask) -> str:
    return SYSTEM_PROMPT.format(module=task.module)


def patch_oracle(task: SweTask) -> list[Any]:
    # through the tool: a JSON action keeps the patch's newlines on one line (``play``)
    patch = render_patch([(p, s, r) for p, s, r in task.oracle_edits])
    return [{"name": "submit_patch", "arguments": {"patch": patch}}]


def task_features(task: SweTask) -> dict[str, Any]:
    return dict(task.features)


def patch_verifier(capability: str) -> Callable[[SweTask, EpisodeState], Verification]:
    """The ``verify`` hook of a single-turn environment training ``capability``."""

    def verify(task: SweTask, episode: EpisodeState) -> Verification:
        return verify_patch(task, _patch_text(episode), capability)

    verify.__qualname__ = verify.__name__ = f"verify_{capability}"
    return verify


def single_turn_spec(**fields: Any) -> CapabilitySpec:
    """A single-turn SWE environment: one patch, graded by :func:`verify_patch` (``fields``
    name the rest: id, capability, description, config, generate, hint, lapse, ...)."""
    defaults: dict[str, Any] = {
        "verify": patch_verifier(fields["capability"]),
        "oracle": patch_oracle,
        "user": patch_user,
        "instructions": patch_instructions,
        "tools": (SUBMIT_PATCH,),
        "features": task_features,
        "world": empty_world,
        "max_turns": 2,
        "preamble": "",
        "engine": SweEngine,
    }
    return CapabilitySpec(**{**defaults, **fields})


# -- lapses: the oracle's fix rewritten by an agent lacking a capability --------------------------
Triple = tuple[str, str, str]


def emit_edits(seg: Segment, edits: list[Triple]) -> list[Any]:
    """``edits`` in the form the segment's oracle used (``edit`` calls in the repository
    composite, one ``submit_patch`` in a single-turn environment)."""
    names = {a.get("name") for a in seg.actions if isinstance(a, dict)}
    if "edit" in names:
        return [
            {"name": "edit", "arguments": {"path": p, "patch": render_patch([(p, s, r)])}}
            for p, s, r in edits
        ]
    return [{"name": "submit_patch", "arguments": {"patch": render_patch(edits)}}]


def oracle_triples(task: SweTask) -> list[Triple]:
    return [(p, s, r) for p, s, r in task.oracle_edits]
