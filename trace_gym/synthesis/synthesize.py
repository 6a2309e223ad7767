"""``trace-gym synthesize``: a model writes a capability spec, the validation gates judge it.

One attempt: the model gets the contract (:mod:`trace_gym.core.spec`), a reference spec
(:mod:`trace_gym.examples.loyalty_points`), the world's tables, builders and tool vocabulary,
and the capability's definition with the diagnosed failure evidence; it returns one Python
module defining ``SPEC``. The module is untrusted:

1. **static**: it must parse, import only :data:`ALLOWED_IMPORTS` (our environment
   packages and pure standard-library modules), and use no file, network, process,
   ``eval``/``exec``/``compile``/``__import__`` or reflection (``getattr``, dunder attributes);
2. then :func:`trace_gym.validation.validate.validate` runs every gate, plus the near-duplicate gate, in
   the limited child process (this process never imports the module);
3. the spec must train the requested capability.

A rejected attempt's failing gates and their reasons go back to the model and it tries again
(``--attempts``, default 5). An accepted module lands in ``--out`` with its ``registry.yaml``
row, so with ``TRACE_GYM_PATH=OUT`` a new process can ``gym.make`` it, next to
``synthesis/<capability>.json``: the model, the prompt's hash, and every attempt's gates.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trace_gym.errors import ConfigError
from trace_gym.registration import REGISTRY_VERSION, USER_REGISTRY_FILE, read_registry_file
from trace_gym.validation.validate import Gate, Report, validate

ALLOWED_IMPORTS = (
    "trace_gym.core", "trace_gym.primitives", "trace_gym.world", "trace_gym.envs", "trace_gym.agents",
    "trace_gym.errors",
    "__future__", "math", "dataclasses", "typing", "itertools", "collections", "re", "json",
    "functools", "enum", "fractions", "decimal", "string", "statistics", "operator",
    "textwrap", "datetime", "abc",
)  # fmt: skip
"""Modules (and their submodules) a synthesised spec may import."""
FORBIDDEN_NAMES = frozenset(
    "open eval exec compile __import__ getattr setattr delattr globals locals vars input "
    "breakpoint memoryview help exit quit __builtins__ __loader__ __spec__".split()
)
ALLOWED_DUNDERS = frozenset({"__init__", "__post_init__", "__name__", "__doc__", "__future__"})
DEFAULT_ATTEMPTS = 5
MAX_FEEDBACK_CHARS = 6000
CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
SYSTEM = (
    "You write reinforcement-learning environments for LLM customer-service agents as Python "
    "modules that define SPEC = CapabilitySpec(...). An environment trains one capability "
    "alone: seeded procedural tasks, a deterministic scripted customer, an algorithmic "
    "verifier and an oracle that scores 1.0. It must not be winnable by doing nothing, by "
    "calling every tool, by reading and stalling, by refusing, or by copying the request. "
    "Reply with the complete module in one ```python block and nothing else."
)


# -- static check -----------------------------------------------------------------------------
def _allowed(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in ALLOWED_IMPORTS)


def static_check(source: str) -> list[str]:
    """Problems that forbid running ``source`` at all (empty: it may go to the sandbox)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"does not parse: {exc.msg} at line {exc.lineno}"]
    problems = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = ["." * node.level + (node.module or "")]
        else:
            modules = []
        for module in modules:
            if not _allowed(module):
                problems.append(f"line {line}: import of {module!r} is not allowed")
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            problems.append(f"line {line}: use of {node.id!r} is not allowed")
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            if node.attr not in ALLOWED_DUNDERS:
                problems.append(f"line {line}: attribute {node.attr!r} is not allowed")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("__") and node.value.endswith("__"):
                if node.value not in ALLOWED_DUNDERS:
                    problems.append(f"line {line}: the string {node.value!r} is not allowed")
    if not problems and not any(_assigns(n, "SPEC") for n in tree.body):
        problems.append("the module does not assign SPEC at top level")
    return problems


def _assigns(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def extract_code(reply: str) -> str:
    """The module in a model's reply: its first fenced python block, else the whole reply."""
    blocks = CODE_BLOCK.findall(reply)
    return (max(blocks, key=len) if blocks else reply).strip() + "\n"


# -- prompt -----------------------------------------------------------------------------------
def vocabulary_text() -> str:
    """The shared world in brief: tables, record builders, tool vocabulary."""
    from trace_gym.world import generate, model
    from trace_gym.world.tools import VOCABULARY

    lines = ["World tables (trace_gym.world.model.TABLES): " + ", ".join(model.TABLES)]
    lines.append("Record builders (trace_gym.world.generate):")
    for name in ("draw_now", "new_customer", "new_payment_method", "new_order", "new_reservation"):
        fn = getattr(generate, name)
        lines.append(f"  {name}{inspect.signature(fn)}")
    lines.append("Helpers (trace_gym.world.model): money, cents, day_offset, parse_day, World")
    lines.append("Tool vocabulary (trace_gym.world.tools.VOCABULARY; name the ones you use):")
    for tool in VOCABULARY.values():
        args = ", ".join(tool.parameters.get("properties", {}))
        lines.append(f"  [{tool.kind}] {tool.name}({args}): {tool.description}")
    return "\n".join(lines)


def diagnosed_capability(run_dir: str | Path, capability: str) -> dict[str, Any] | None:
    """The row of ``capability`` in a ``trace-diagnose`` run's ``capabilities.json`` (its
    rubric: ``definition``, ``lacking_when``, ``present_when``, ``examples``), or None when the
    run has no rubric or the rubric does not name it. Reads the file as trace_diagnose writes
    it (``{"capabilities": [...]}``), a bare list, or the paper's candidate file
    (``{"candidates": [...]}`` with ``description`` for ``definition``); trace_gym may not
    import trace_diagnose, so this is the one reader for trace_gym and ``trace run``."""
    path = Path(run_dir) / "capabilities.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the capability rubric ({exc})") from exc
    rows = data.get("capabilities", data.get("candidates")) if isinstance(data, dict) else data
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and row.get("name") == capability:
            if not row.get("definition") and row.get("description"):
                row = {**row, "definition": row["description"]}
            return row
    return None


def evidence_from_diagnosis(run_dir: str | Path, capability: str, limit: int = 8) -> str:
    """The capability's definition and quoted failures from a ``trace-diagnose`` run."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"--from-diagnosis: {run} is not a directory")
    parts, quotes = [], []
    row = diagnosed_capability(run, capability) or {}
    for key in ("definition", "lacking_when", "present_when"):
        if row.get(key):
            parts.append(f"{key}: {row[key]}")
    quotes += [str(e) for e in row.get("examples", [])]
    for labels in sorted((run / "labels").glob("run_*.json")) if (run / "labels").is_dir() else []:
        _collect_quotes(json.loads(labels.read_text()), capability, quotes)
    quotes = list(dict.fromkeys(q for q in quotes if q))[:limit]
    parts += [f'failure: "{q}"' for q in quotes]
    if not parts:
        raise ConfigError(f"--from-diagnosis: {run} has nothing about {capability!r}")
    return "\n".join(parts)


def _collect_quotes(node: Any, capability: str, out: list[str]) -> None:
    if isinstance(node, dict):
        if node.get("capability") == capability and node.get("verdict") == "LACKING":
            out += [
                str(e.get("quote", "")) for e in node.get("evidence", []) if isinstance(e, dict)
            ]
        for value in node.values():
            _collect_quotes(value, capability, out)
    elif isinstance(node, list):
        for value in node:
            _collect_quotes(value, capability, out)


def build_messages(capability: str, definition: str, evidence: str = "") -> list[dict[str, str]]:
    """The first request: contract, reference spec, vocabulary, capability and evidence."""
    from trace_gym.core import spec as contract
    from trace_gym.examples import loyalty_points as reference

    name = capability.replace("_", "-")
    user = (
        f"# The contract (trace_gym/core/spec.py)\n```python\n{inspect.getsource(contract)}```\n\n"
        f"# A reference spec (trace_gym/examples/loyalty_points.py)\n```python\n"
        f"{inspect.getsource(reference)}```\n\n"
        f"# The shared world\n{vocabulary_text()}\n\n"
        f"# The capability to train\nname: {capability}\ndefinition: {definition}\n"
        + (f"diagnosed failures:\n{evidence}\n" if evidence else "")
        + f"\nWrite the module. SPEC.id must be 'trace/{name}-v0' and SPEC.capability "
        f"'{capability}'. Import only from trace_gym.core, trace_gym.world, trace_gym.envs, "
        "trace_gym.agents, trace_gym.errors and pure standard-library modules (math, re, "
        "dataclasses, typing, itertools, collections, json, functools, enum, ...)."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def feedback(gates: list[Gate]) -> str:
    """What the next attempt is told about this one."""
    lines = ["Your module was rejected by these validation gates:"]
    for g in gates:
        lines.append(f"- {g.name} ({g.status}): {g.reason}")
    text = "\n".join(lines)[:MAX_FEEDBACK_CHARS]
    return text + "\n\nFix the cause and reply with the whole corrected module."


# -- the loop ---------------------------------------------------------------------------------
@dataclass
class Attempt:
    number: int
    response_sha256: str
    accepted: bool
    gates: list[dict[str, Any]]
    seconds: float


@dataclass
class SynthesisResult:
    capability: str
    model: str
    prompt_sha256: str
    accepted: bool
    env_id: str | None = None
    module_path: str | None = None
    record_path: str | None = None
    attempts: list[Attempt] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        lines = [f"synthesize {self.capability} with {self.model}"]
        for a in self.attempts:
            bad = [g for g in a.gates if g["status"] not in ("pass", "skipped")]
            shown = "; ".join(f"{g['name']}: {g['reason'][:160]}" for g in bad) or "every gate"
            lines.append(
                f"  attempt {a.number}: {'ACCEPTED' if a.accepted else 'rejected'} ({shown})"
            )
        lines.append(f"-> {self.env_id} in {self.module_path}" if self.accepted else "-> rejected")
        return "\n".join(lines)


Completion = Callable[[list[dict[str, str]]], str]


def litellm_completion(model: str, api_base: str | None = None, api_key: str | None = None,
                       timeout: float = 300.0) -> Completion:  # fmt: skip
    """A ``messages -> text`` function calling ``model`` through litellm (imported here)."""
    try:
        import litellm
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ConfigError("synthesize needs litellm: pip install 'trace-rl[diagnose]'") from exc

    def complete(messages: list[dict[str, str]]) -> str:
        kwargs: dict[str, Any] = {"model": model, "messages": messages, "timeout": timeout}
        kwargs.update(temperature=0.2, num_retries=2)
        if api_base:
            kwargs["api_base"] = api_base
            kwargs["api_key"] = api_key or os.environ.get("OPENAI_API_KEY") or "local"
        elif api_key:
            kwargs["api_key"] = api_key
        try:
            response = litellm.completion(**kwargs)
        except Exception as exc:  # noqa: BLE001  (provider errors of every kind end the run)
            raise ConfigError(f"the call to {model} failed: {type(exc).__name__}: {exc}") from exc
        return response.choices[0].message.content or ""

    return complete


def synthesize(
    capability: str,
    definition: str,
    out: str | Path,
    complete: Completion,
    *,
    model: str = "unknown",
    evidence: str = "",
    attempts: int = DEFAULT_ATTEMPTS,
    quick: bool = True,
    log: Callable[[str], None] = lambda _: None,
) -> SynthesisResult:
    """Ask for a spec until one passes every gate (at most ``attempts`` times)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", capability):
        raise ConfigError(f"--capability must be snake_case, got {capability!r}")
    if attempts < 1:
        raise ConfigError(f"--attempts must be >= 1, got {attempts}")
    out = Path(out)
    messages = build_messages(capability, definition, evidence)
    prompt_hash = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    result = SynthesisResult(capability, model, prompt_hash, accepted=False)
    module = f"trace_env_{capability}"
    for number in range(1, attempts + 1):
        started = time.monotonic()
        reply = complete(messages)
        source = extract_code(reply)
        report = _judge(source, module, capability)
        attempt = Attempt(
            number,
            hashlib.sha256(source.encode()).hexdigest(),
            report.passed,
            [asdict(g) for g in report.gates],
            round(time.monotonic() - started, 2),
        )
        result.attempts.append(attempt)
        log(f"attempt {number}: {'accepted' if report.passed else 'rejected'}")
        if report.passed:
            result.accepted, result.env_id = True, report.env["id"]
            result.module_path = str(_install(out, module, source, report))
            break
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": feedback(report.failed())},
        ]
    record = out / "synthesis" / f"{capability}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    result.record_path = str(record)
    record.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _judge(source: str, module: str, capability: str) -> Report:
    """Static check, then the sandboxed gates, then the contract."""
    problems = static_check(source)
    if problems:
        return Report(module, [Gate("static", "fail", "; ".join(problems[:10]))])
    with tempfile.TemporaryDirectory(prefix="trace-synth-") as tmp:
        (Path(tmp) / f"{module}.py").write_text(source)
        report = validate(
            f"{module}:SPEC", quick=True, novelty=True, stop_on_fail=True, search_path=tmp
        )
    report.gates.insert(0, Gate("static", "pass", "imports and calls allowed"))
    if report.passed:
        env, want = report.env, f"trace/{capability.replace('_', '-')}-v"
        problems = []
        if not env.get("is_spec"):
            problems.append("SPEC is not a CapabilitySpec")
        if env.get("capability") != capability or not str(env.get("id", "")).startswith(want):
            problems.append(
                f"SPEC trains {env.get('capability')!r} as {env.get('id')!r}; asked for "
                f"{capability!r} as {want}0"
            )
        report.gates.append(Gate("contract", "fail" if problems else "pass", "; ".join(problems)))
    return report


def _install(out: Path, module: str, source: str, report: Report) -> Path:
    """Write the module and its registry row into the user environment folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{module}.py"
    path.write_text(source)
    registry = out / USER_REGISTRY_FILE
    rows = {}
    if registry.is_file():  # the folder's other environments stay, in their order
        rows = {
            r.id: r.entry_point for r in read_registry_file(registry) if r.id != report.env["id"]
        }
    rows[report.env["id"]] = f"{module}:SPEC"
    header = (
        "# Environments written by trace-gym synthesize; put this folder on TRACE_GYM_PATH.\n"
        "# Each id names its module's SPEC, which says the rest.\n"
    )
    document = {"version": REGISTRY_VERSION, "environments": rows}
    registry.write_text(header + yaml.safe_dump(document, sort_keys=False))
    return path


# -- command line -----------------------------------------------------------------------------
def add_synthesize_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "synthesize",
        help="have an LLM write an environment for a capability; keep it if every gate passes",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--capability", required=True, help="snake_case capability name")
    p.add_argument("--definition", required=True, help="what the capability is")
    p.add_argument("--from-diagnosis", metavar="RUN_DIR", help="trace-diagnose run with evidence")
    p.add_argument("--llm", required=True, help="litellm model, e.g. openai/gpt-4o-mini")
    p.add_argument("--api-base", help="OpenAI-compatible server URL")
    p.add_argument("--out", required=True, help="user environment folder to write into")
    p.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS)
    p.set_defaults(fn=synthesize_command)
    return p


def synthesize_command(args: argparse.Namespace) -> int:
    evidence = ""
    if args.from_diagnosis:
        evidence = evidence_from_diagnosis(args.from_diagnosis, args.capability)
    result = synthesize(
        args.capability,
        args.definition,
        args.out,
        litellm_completion(args.llm, args.api_base),
        model=args.llm,
        evidence=evidence,
        attempts=args.attempts,
        log=print,
    )
    print(result.render())
    print(f"record: {result.record_path}")
    if result.accepted:
        print(f"use it: TRACE_GYM_PATH={Path(args.out).resolve()} python -c "
              f"\"import gymnasium, trace_gym; gymnasium.make('{result.env_id}')\"")  # fmt: skip
    return 0 if result.accepted else 1
