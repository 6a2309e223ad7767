"""``trace/swe-repair-v0``: a multi-turn repository repair, the SWE composite target.

## Capability
*SWE repair*: what SWE-bench agents do. A generated repository of 3-8 modules with tests
and an issue with 1-3 reported problems; each problem is a defect planted by one of the five
capability environments (semantic precision, call-graph depth, diff context, multi-site
consistency, refactor awareness). The agent explores with tools, edits, runs tests and
submits. Every check carries the capability it exercises, so a failed episode names the
capabilities it lacked (ground truth for the diagnoser).

## Task (seed 0, train split, difficulty 0.5)
Two defective modules of different domains and two clean ones, each with ``test_<module>.py``;
each defective module also has ``test_<module>_issue.py`` reproducing its problem. Hidden
tests (other inputs of each defect, previously passing tests) are never shown.

## Tools
``list_files``, ``read_file`` (a line range, at most 200 lines), ``search`` (a literal
string), ``run_tests`` (visible tests whose id contains a selector; output truncated like a
terminal) (read); ``edit`` (SEARCH/REPLACE blocks on one file) (write); ``submit``
(control, ends the episode).

## Reward (checks)
| check | weight | passes when |
|---|---|---|
| ``target:<module>`` (capability of its defect) | 0.6 / problems | its issue test passes |
| ``hidden:<module>`` (same capability) | 0 | its hidden tests of the defect pass (hard) |
| ``still_passing:<module>`` (its capability; ``swe_repair`` for the clean modules) | 0.4 / modules checked | partial: share of that module's previously passing tests still passing (counts once a target passes) |
| ``no_test_edit`` (gate) | 0 | no test file changed |
| ``no_special_casing:<module>`` (gate) | 0 | not: the target passes and a hidden test (of the defect, or one that passed before) fails |
| ``no_code_deleted:<module>`` (gate) | 0 | no function deleted, no more lines removed than the fix needs |

Only a submitted repository is graded: without ``submit`` the episode scores 0.

## Episode End
``submit``; truncated at ``max_turns``; a sandbox failure during verification ends it as
``infra_error``.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| problems (capabilities needed) | 1 | 3 |
| clean modules | 2 | 5 |
| each problem's own difficulty | d | d |

The knobs are declared in the spec's ``knob_rates`` and hold on every task.

## Version History
* v0: initial version.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from trace_gym.core.config import apply_overrides
from trace_gym.core.env import EpisodeState
from trace_gym.core.plans import Segment
from trace_gym.core.spec import CapabilitySpec, KnobRate, SpecConfig
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import Check, Verification, fraction
from trace_gym.envs import (
    swe_call_graph,
    swe_diff_context,
    swe_multi_site,
    swe_refactor_awareness,
    swe_semantic_precision,
)
from trace_gym.envs.helpers.swe_common import (
    EXTRA_DELETED_LINES,
    RUNNER_FILE,
    TAMPERING,
    PatchError,
    SweEngine,
    SweTask,
    apply_patch,
    hidden_tests,
    parse_patch,
    run_feedback_tests,
    run_suite,
)
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG
from trace_gym.primitives.tools import Tool, ToolRefusal, ToolSet
from trace_gym.world.model import World

CAPABILITY = "swe_repair"
ENV_ID = "trace/swe-repair-v0"
TARGET_TOTAL, KEEP_WEIGHT = 0.6, 0.4
READ_LIMIT = 200
OUTPUT_LIMIT = 4000
SPECS = {
    m.CAPABILITY: m.SPEC
    for m in (swe_semantic_precision, swe_call_graph, swe_diff_context, swe_multi_site,
              swe_refactor_awareness)
}  # fmt: skip
ENVS = {cap: spec.env_class for cap, spec in SPECS.items()}
"""The five single-turn environments' engine classes, by capability (kept for callers)."""


# -- config -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RepairConfig(SpecConfig):
    n_problems: int = 2
    """Defective modules, each needing one capability (1..3)."""
    n_clean: int = 3
    """Modules without a defect (1..5)."""
    capabilities: tuple[str, ...] = tuple(ENVS)
    difficulty: float = 0.5
    """Each problem's own difficulty (the episode's difficulty)."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_problems <= 3:
            raise ConfigError(f"n_problems must be in 1..3, got {self.n_problems}")
        if not 1 <= self.n_clean <= 5:
            raise ConfigError(f"n_clean must be in 1..5, got {self.n_clean}")
        if len(self.capabilities) < self.n_problems or set(self.capabilities) - set(ENVS):
            raise ConfigError(f"capabilities: at least n_problems of {sorted(ENVS)}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> RepairConfig:
        base = cls(n_problems=1 + round(2 * d), n_clean=2 + round(3 * d), difficulty=d)
        return apply_overrides(base, overrides, "swe-repair")


# -- task ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RepairTask:
    problems: list[SweTask]
    capabilities: list[str]
    clean: list[SweTask]
    """Modules shown fixed (their reference fix applied); only their visible tests count."""
    issue: str
    files: dict[str, str]


def _fixed_source(task: SweTask) -> str:
    source = task.source
    for _, search, replace in task.oracle_edits:
        source = source.replace(search, replace, 1)
    return source


def generate_task(rng: StableRNG, difficulty: float, cfg: RepairConfig) -> RepairTask:
    caps = rng.sample(list(cfg.capabilities), cfg.n_problems)
    kinds = caps + [rng.choice(list(cfg.capabilities)) for _ in range(cfg.n_clean)]
    tasks: list[SweTask] = []
    names: set[str] = set()
    for i, cap in enumerate(kinds):
        for _ in range(12):  # module names come from small per-domain lists: redraw clashes
            spec = SPECS[cap]
            own = spec.config.from_difficulty(difficulty, {"n_fillers": 10})
            t = spec.generate(rng.child("module", i), own)
            if t.module not in names:
                break
        else:
            raise RuntimeError("could not draw distinct module names")
        names.add(t.module)
        tasks.append(t)
    problems, clean = tasks[: cfg.n_problems], tasks[cfg.n_problems :]
    files: dict[str, str] = {}
    for t in problems:
        files[f"{t.module}.py"] = t.source
        files[f"test_{t.module}.py"] = t.visible_tests
        files[f"test_{t.module}_issue.py"] = t.target_test
    for t in clean:
        files[f"{t.module}.py"] = _fixed_source(t)
        files[f"test_{t.module}.py"] = t.visible_tests
    issue = "\n".join(
        f"{i}. In `{t.module}.py`: {t.issue.replace('test_target.py', f'test_{t.module}_issue.py')}"
        for i, t in enumerate(problems, 1)
    )
    return RepairTask(problems, caps, clean, issue, dict(sorted(files.items())))


# -- tools -----------------------------------------------------------------------------------
def _files(world: World) -> dict[str, str]:
    return {k: v["text"] for k, v in world.tables["files"].items()}


def _get(world: World, path: str) -> str:
    row = world.tables["files"].get(path)
    if row is None:
        raise ToolRefusal(f"no file {path!r}; list_files shows the repository")
    return row["text"]


def list_files(world: World) -> dict[str, Any]:
    return {"files": [{"path": p, "lines": t.count("\n")} for p, t in _files(world).items()]}


def read_file(world: World, path: str, start: int = 1, end: int | None = None) -> dict[str, Any]:
    lines = _get(world, path).split("\n")
    start = max(1, start)
    end = min(
        len(lines), end if end is not None else start + READ_LIMIT - 1, start + READ_LIMIT - 1
    )
    body = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(start, end + 1))
    return {"path": path, "start": start, "end": end, "total_lines": len(lines), "text": body}


def search(world: World, text: str) -> dict[str, Any]:
    if not text.strip():
        raise ToolRefusal("search needs a non-empty string")
    hits = []
    for path, body in _files(world).items():
        for no, line in enumerate(body.split("\n"), 1):
            if text in line:
                hits.append(f"{path}:{no}: {line.strip()[:160]}")
    return {"matches": hits[:50], "total": len(hits)}


def edit(world: World, path: str, patch: str) -> dict[str, Any]:
    _get(world, path)
    try:
        edits = parse_patch(patch)
        edits = [dataclasses.replace(e, path=e.path if e.path else path) for e in edits]
        new = apply_patch(_files(world), edits, path)
    except PatchError as exc:
        raise ToolRefusal(str(exc)) from None
    changed = [p for p, t in new.items() if t != world.tables["files"][p]["text"]]
    for p in changed:
        world.tables["files"][p]["text"] = new[p]
    return {"edited": changed, "blocks": len(edits)}


def run_tests(world: World, selector: str = "") -> dict[str, Any]:
    files = _files(world)
    mods = sorted(p[:-3] for p in files if p.startswith("test_") and p.endswith(".py"))
    run = run_feedback_tests(files, mods)
    report = run.report if isinstance(run.report, dict) else {}
    rows = [(k, v) for k, v in report.items() if selector in k]
    passed = sum(v[0] == "passed" for _, v in rows)
    lines = [f"{v[0].upper():8s} {k}" + (f"  {v[1]}" if v[1] else "") for k, v in rows
             if v[0] != "passed"]  # fmt: skip
    out = "\n".join(lines)
    if len(out) > OUTPUT_LIMIT:
        out = out[:OUTPUT_LIMIT] + f"\n... ({len(out) - OUTPUT_LIMIT} more characters)"
    summary = f"{passed} passed, {len(rows) - passed} failed" if report else run.reason
    return {"summary": summary, "failures": out}


def submit(world: World) -> dict[str, Any]:
    return {"submitted": True}


def _tool(name: str, desc: str, props: dict, required: list[str], kind: str, fn: Any,
          terminal: bool = False) -> Tool:  # fmt: skip
    schema = {"type": "object", "properties": props, "required": required,
              "additionalProperties": False}  # fmt: skip
    return Tool(name, desc, schema, kind, fn, terminal=terminal)  # type: ignore[arg-type]


_STR = {"type": "string", "maxLength": 100_000}
TOOLS = ToolSet([
    _tool("list_files", "List the repository's files with their line counts.", {}, [], "read",
          list_files),
    _tool("read_file", f"Read lines start..end (1-based, at most {READ_LIMIT}) of a file.",
          {"path": _STR, "start": {"type": "integer", "minimum": 1},
           "end": {"type": "integer", "minimum": 1}}, ["path"], "read", read_file),
    _tool("search", "Lines containing a literal string, as path:line: text.", {"text": _STR},
          ["text"], "read", search),
    _tool("run_tests", "Run the visible tests whose id contains selector ('' for all); "
          "prints the failures.", {"selector": _STR}, [], "read", run_tests),
    _tool("edit", "Apply SEARCH/REPLACE blocks to a file (first occurrence of each SEARCH).",
          {"path": _STR, "patch": _STR}, ["path", "patch"], "write", edit),
    _tool("submit", "Submit the repository as it is now; ends the episode.", {}, [], "control",
          submit, terminal=True),
])  # fmt: skip


# -- verifier ---------------------------------------------------------------------------------
def _is_test(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith("test_")


def verify(task: RepairTask, ep: EpisodeState) -> Verification:
    """FAIL_TO_PASS and PASS_TO_PASS per module on the final repository, plus gates.

    Only a submitted repository is graded (like a pull request): without ``submit`` the
    episode is undecided and scores 0, and no test runs.
    """
    if not ep.successful(name="submit"):
        check = Check("submitted", CAPABILITY, 0.0, 1.0, expected="submit", actual=None)
        return Verification((check,), tuple(task.capabilities), decided=False)
    files = _files(ep.world)
    original = task.files
    # A test file edited or deleted trips the gate; new files (a reproduction script, even
    # one named test_*.py) do not: the checks run the task's own copies of the tests.
    edited_tests = sorted(
        p for p in original if p.startswith("test_") and files.get(p) != original[p]
    )
    # New Python modules travel with every suite run, so a fix may import a helper it adds.
    created = {
        p: t
        for p, t in files.items()
        if p not in original and p.endswith(".py") and not _is_test(p) and p != RUNNER_FILE
    }
    created_tampering = sorted({m for t in created.values() for m in TAMPERING.findall(t)})
    checks: list[Check] = []
    kept, before = 0, 0
    any_target = False
    keeps: list[tuple[str, str, int, int]] = []  # (module, capability, kept, before)
    share = TARGET_TOTAL / len(task.problems)
    for t, cap in zip(task.problems, task.capabilities, strict=True):
        path = f"{t.module}.py"
        source = files.get(path, "")  # a deleted module fails its tests and the deletion gate
        suite = run_suite(t, source, created)
        ok = {k for k, (outcome, _) in suite.results.items() if outcome == "passed"}
        target = t.target_name in ok
        any_target |= target
        hidden_ok = [h for h in t.hidden_fail_to_pass if h in ok]
        keeps.append((t.module, cap, sum(p in ok for p in t.passing_before),
                      len(t.passing_before)))  # fmt: skip
        names = re.findall(r"^def (\w+)", source, re.MULTILINE)
        lost = sorted(set(t.def_names) - set(names))
        removed = t.source.count("\n") - source.count("\n")
        deleted = lost + ([f"{removed} lines"] if removed > t.oracle_removed_lines
                          + EXTRA_DELETED_LINES else [])  # fmt: skip
        tampering = sorted(
            set(TAMPERING.findall(source)) - set(TAMPERING.findall(t.source))
            | set(created_tampering)
        )
        special = target and any(h not in ok for h in hidden_tests(t))
        m = t.module
        checks += [
            Check(f"target:{m}", cap, float(target), share, expected="passed",
                  actual=suite.results.get(t.target_name, (suite.run.status,))[0]),
            Check(f"hidden:{m}", cap, fraction(len(hidden_ok), len(t.hidden_fail_to_pass)), 0.0,
                  expected=len(t.hidden_fail_to_pass), actual=len(hidden_ok)),
            Check(f"no_special_casing:{m}", cap, float(not special), 0.0, gate=True),
            Check(f"no_code_deleted:{m}", cap, float(not deleted), 0.0, gate=True,
                  actual=deleted),
            Check(f"no_harness_tampering:{m}", cap, float(not tampering), 0.0, gate=True,
                  actual=tampering),
        ]  # fmt: skip
    for t in task.clean:  # a clean module only needs re-running when it changed
        path = f"{t.module}.py"
        visible = [p for p in t.passing_before if p.startswith("test_visible::")]
        before += len(visible)
        if files.get(path) == original[path] and not created:
            kept += len(visible)
            continue
        suite = run_suite(t, files.get(path, ""), created)
        kept += sum(suite.passed(p) for p in visible)
    if before:
        keeps.append(("clean modules", CAPABILITY, kept, before))
    for module, cap, k, b in keeps:  # breaking a module's tests is its capability's failure
        checks.append(
            Check(
                f"still_passing:{module}",
                cap,
                fraction(k, b) if any_target else 0.0,
                KEEP_WEIGHT / len(keeps),
                expected=b,
                actual=k,
                message="previously passing tests still passing (counts once a target passes)",
            )
        )
    checks.append(Check("no_test_edit", CAPABILITY, float(not edited_tests), 0.0, gate=True,
                        expected=[], actual=edited_tests))  # fmt: skip
    return Verification(tuple(checks), tuple(task.capabilities))


# -- oracle and user --------------------------------------------------------------------------
def oracle(task: RepairTask) -> list[Any]:
    turns: list[Any] = []
    for t in task.problems:
        for path, search_text, replace in t.oracle_edits:
            old, new = search_text.rstrip("\n"), replace.rstrip("\n")
            patch = f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE"
            turns.append({"name": "edit", "arguments": {"path": path, "patch": patch}})
    return [*turns, {"name": "submit", "arguments": {}}]


class _Reporter(ScriptedUser):
    """The issue's reporter: has nothing to add beyond the issue."""

    patience = 3
    nudges = ("Everything I know is in the issue; please look at the repository.",)

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        return None


def build_world(task: RepairTask) -> World:
    world = World("2026-01-01T00:00")
    world.tables["files"] = {p: {"path": p, "text": t} for p, t in task.files.items()}
    return world


def make_user(task: RepairTask) -> ScriptedUser:
    return _Reporter(f"## Issue\n{task.issue}")


def instructions(task: RepairTask) -> str:
    return (
        "You are a software engineer resolving an issue in a Python repository. Explore it "
        "with list_files, read_file and search, change it with edit (SEARCH/REPLACE blocks; "
        "each SEARCH text must match the file exactly and applies at its first "
        "occurrence), check with run_tests, and call submit when the issue is resolved. "
        "Fix the code, not the tests: hidden tests check the same behaviour."
    )


def hint(task: RepairTask) -> str:
    return (
        "Reproduce each problem with its issue test, find where the wrong value is "
        "computed (it may be a helper several calls down, or the same mistake in several "
        "functions), prefer the module's existing helpers, quote enough context in SEARCH "
        "to be unique, and run the tests before submitting."
    )


def oracle_segments(task: RepairTask) -> list[Segment]:
    """The oracle plan, one segment per problem (its capability), then ``submit``."""
    world = build_world(task)
    plan = oracle(task)
    segments = []
    for t, cap in zip(task.problems, task.capabilities, strict=True):
        mine = [a for a in plan if a["arguments"].get("path") == f"{t.module}.py"]
        segments.append(Segment(cap, t, world, mine, TOOLS))
    return [*segments, Segment(CAPABILITY, task, world, [plan[-1]], TOOLS)]


def features(task: RepairTask) -> dict[str, Any]:
    return {
        "n_problems": len(task.problems),
        "capabilities": list(task.capabilities),
        "n_modules": len(task.problems) + len(task.clean),
        "repository_lines": sum(t.count("\n") for t in task.files.values()),
    }


def generate(rng: StableRNG, cfg: RepairConfig) -> RepairTask:
    return generate_task(rng, cfg.difficulty, cfg)


SPEC = CapabilitySpec(
    id=ENV_ID,
    capability=CAPABILITY,
    description=(
        "Composite SWE target in the style of SWE-bench; resolve an issue with 1-3 "
        "problems in a generated 3-8 module repository using list_files, read_file, "
        "search, edit, run_tests and submit; each problem needs one of the five SWE "
        "capabilities and every check carries it."
    ),
    tags=(
        "composite",
        "target_benchmark",
        "swe_repair",
        "swe",
        "code_repair",
        "repository_repair",
    ),
    config=RepairConfig,
    generate=generate,
    verify=verify,
    oracle=oracle,
    user=make_user,
    instructions=instructions,
    hint=hint,
    tools=tuple(TOOLS),
    features=features,
    world=build_world,
    max_turns=30,
    preamble="",
    oracle_segments=oracle_segments,
    knob_rates=(
        # each knob is a function of the difficulty: every task at d = 0 and d = 1
        KnobRate("n_problems", 0.0, 1.0, 0.0, equals=1),
        KnobRate("n_problems", 1.0, 1.0, 0.0, equals=3),
        KnobRate("n_modules", 0.0, 1.0, 0.0, equals=3),  # problems + clean modules
        KnobRate("n_modules", 1.0, 1.0, 0.0, equals=8),
    ),
    # distinct masked task templates per 1,000 seeds (261 of 300 measured at d = 0, where one
    # problem in three modules is drawn; 300 of 300 at 0.5)
    template_floor=600,
    engine=SweEngine,
    env_name="SweRepairEnv",
)
SweRepairEnv = SPEC.env_class
