"""trace-diagnose: the command line, a thin layer over `trace_diagnose.run`.

    trace-diagnose run INPUT... -o RUN_DIR --model openai/gpt-4o-mini   # every stage, resumable
    trace-diagnose ingest INPUT... -o RUN_DIR [--redact REGEX]
    trace-diagnose render RUN_DIR
    trace-diagnose propose RUN_DIR --model M
    trace-diagnose label RUN_DIR --model M [--n-runs 10]
    trace-diagnose analyze [RUN_DIR] [--runs 'DIR/run_*.json'] [--json OUT]
    trace-diagnose map-envs RUN_DIR [--model M] [--registry envs_registry.yaml]
    trace-diagnose report RUN_DIR
    trace-diagnose status RUN_DIR

Errors print one line and exit 1 (2 for a budget stop or a `--cache-only` miss, both
resumable; 3 when the model cannot be used: credentials, model name, endpoint; 4 when too
many trajectories stayed unlabelled). `TRACE_DEBUG=1` shows the traceback. Rerunning a
command resumes it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from .analyze import CONSISTENCY, DELTA, RHO
from .errors import ConfigError, DiagnoseError
from .run import MAX_FLAGGED, MAX_UNLABELLED

EXAMPLES = """examples:
  trace-diagnose run results/airline.json -o runs/airline --model openai/gpt-4o-mini --max-cost 5
  trace-diagnose run results/airline.json -o runs/airline --model openai/gpt-4o-mini --dry-run
  trace-diagnose analyze --runs 'pipeline/run_*.json' --json selected.json
  trace-diagnose status runs/airline
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit code 1) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


def _number(kind: type, lo: float | None = None, hi: float | None = None, above: bool = False):
    """An argparse type: `kind` within bounds (`above`: strictly greater than `lo`)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if value != value or (lo is not None and (value <= lo if above else value < lo)):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {lo}, got {text}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


POS_INT = _number(int, 1)
NONNEG_INT = _number(int, 0)
NONNEG = _number(float, 0.0)
POSITIVE = _number(float, 0.0, above=True)
SHARE = _number(float, 0.0, 1.0)
MIN_RENDER_TOKENS = 200


def _llm_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    g = p.add_argument_group("LLM (litellm)")
    g.add_argument(
        "--model", required=required, help="litellm provider/model, e.g. openai/gpt-4o-mini"
    )
    g.add_argument(
        "--api-base", help="base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1)"
    )
    g.add_argument(
        "--api-key-env",
        help="read the API key from this environment variable (default: the provider's own)",
    )
    g.add_argument(
        "--max-concurrency",
        "--concurrency",
        dest="concurrency",
        type=POS_INT,
        default=8,
        help="requests in flight at once (default 8)",
    )
    g.add_argument(
        "--rpm",
        type=POSITIVE,
        help="requests per minute at most, retries and repairs included, evenly paced "
        "(default: no limit); set it to the provider's limit to avoid 429s",
    )
    g.add_argument(
        "--max-connection-failures",
        type=POS_INT,
        default=16,
        help="after the endpoint answered, stop (exit code 3, finished calls cached) once this "
        "many requests in a row failed to connect or timed out (default 16)",
    )
    g.add_argument(
        "--dead-after",
        type=POSITIVE,
        default=120.0,
        help="stop the same way after this many seconds without one answer while requests "
        "fail to connect (default 120)",
    )
    g.add_argument(
        "--timeout", type=POSITIVE, default=120.0, help="seconds per request (default 120)"
    )
    g.add_argument(
        "--retries",
        type=NONNEG_INT,
        default=3,
        help="retries of a request after a 429, 5xx or timeout (default 3); bad credentials, "
        "an unknown model or an unreachable endpoint stop at once (exit code 3)",
    )
    g.add_argument(
        "--repair-retries",
        type=NONNEG_INT,
        default=2,
        help="re-asks after an invalid answer (default 2)",
    )
    g.add_argument(
        "--temperature", type=NONNEG, default=0.7, help="sampling temperature (default 0.7)"
    )
    g.add_argument(
        "--max-cost",
        type=NONNEG,
        help="hard cap in USD on new calls, for the whole command (all stages together); "
        "stops with exit code 2, resumable",
    )
    g.add_argument(
        "--price-in",
        type=NONNEG,
        help="USD per million input tokens (overrides litellm's price map)",
    )
    g.add_argument("--price-out", type=NONNEG, help="USD per million output tokens")
    g.add_argument(
        "--cache-only",
        action="store_true",
        help="replay cached calls only; a miss exits with code 2",
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print calls, tokens and cost still to spend, then stop",
    )
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (terminal) or progress lines (piped output, every 10%% or 30 s); "
        "the final summary line stays",
    )


def _llm_config(args: argparse.Namespace) -> Any:
    from .llm import LLMConfig

    if not args.model:
        return None
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ConfigError(
                f"--api-key-env {args.api_key_env}: that environment variable is empty or unset"
            )
    return LLMConfig(
        model=args.model,
        api_base=args.api_base,
        api_key=key,
        concurrency=args.concurrency,
        timeout=args.timeout,
        retries=args.retries,
        repair_retries=args.repair_retries,
        temperature=args.temperature,
        max_cost=args.max_cost,
        price_in=args.price_in,
        price_out=args.price_out,
        cache_only=args.cache_only,
        rpm=args.rpm,
        max_connection_failures=args.max_connection_failures,
        dead_after=args.dead_after,
    )


def _ingest_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="trajectory files or folders")
    p.add_argument("-o", "--out", required=True, metavar="RUN_DIR", help="run directory")
    p.add_argument(
        "--redact",
        action="append",
        metavar="REGEX",
        help="replace matches with [REDACTED] before any LLM call (repeatable)",
    )
    p.add_argument(
        "--format",
        default="auto",
        help="auto (default), tau2, openai_jsonl, mini_swe_agent, swe_agent, trace_gym",
    )
    p.add_argument(
        "--swebench-report", help="SWE-bench harness report giving SWE trajectories their outcome"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="abort on the first unreadable file, line or record (default: skip it with a "
        "warning, count it in ingest_summary.json and list it in the report)",
    )
    p.add_argument(
        "--success-threshold",
        type=NONNEG,
        default=1.0,
        help="reward counted as success for JSONL inputs (default 1.0)",
    )


def _analysis_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rho", type=SHARE, default=RHO, help=f"coverage threshold per run (default {RHO})"
    )
    p.add_argument(
        "--delta",
        type=_number(float, -1.0, 1.0),
        default=DELTA,
        help=f"delta threshold per run (default {DELTA})",
    )
    p.add_argument(
        "--k-consistency",
        type=POS_INT,
        help=f"runs a capability must pass (default: ceil({CONSISTENCY} * runs))",
    )


def _label_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--n-runs",
        type=POS_INT,
        default=10,
        help="independent labelling runs per trajectory, for consistency (default 10; the "
        "paper's rule needs a capability in 80%% of them)",
    )
    p.add_argument(
        "--max-unlabelled",
        type=SHARE,
        default=MAX_UNLABELLED,
        help="share of the failed, and separately of the passed, trajectories allowed to stay "
        "unlabelled; above it the command fails with exit code 4 and the report says so at the "
        f"top (default {MAX_UNLABELLED})",
    )
    p.add_argument(
        "--max-flagged",
        type=SHARE,
        default=MAX_FLAGGED,
        help="share of the failed, and separately of the passed, trajectories allowed to hold "
        "text addressed to the labeller (or to be labelled only with text withheld); above it "
        f"exit code 4 (default {MAX_FLAGGED}). They are kept either way: the report shows the "
        "selection with and without them",
    )
    _render_options(p)


def _render_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-tokens-per-trajectory",
        type=_number(int, MIN_RENDER_TOKENS),
        default=8000,
        help="budget of one rendered transcript in tokens (default 8000); beyond it quiet "
        "middle steps are summarised, and what was cut is reported",
    )
    p.add_argument(
        "--policy-chars",
        type=NONNEG_INT,
        default=6000,
        help="characters of the domain policy shown to the labeller (default 6000); the "
        "sections the trajectory's tool calls touch are kept first",
    )


def _map_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--registry",
        help="environment registry (trace_gym's form, id: module:SPEC) to match capabilities "
        "against (default: trace_gym's own plus the folders in TRACE_GYM_PATH)",
    )
    p.add_argument(
        "--min-score",
        type=SHARE,
        default=0.3,
        help="lexical match score (0-1) an environment needs without --model; below it the "
        "capability needs a new environment (default 0.3)",
    )


def _max_caps(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-caps",
        type=POS_INT,
        default=8,
        help="capabilities the model may propose at most (default 8)",
    )


def make_parser() -> argparse.ArgumentParser:
    """The argument parser (one subcommand per stage)."""
    parser = _Parser(
        prog="trace-diagnose",
        description="Diagnose an agent's failures into missing capabilities (TRACE stage 1).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "run",
        help="all stages, resumable",
        description="Every stage, from trajectory files to report.html. Rerun to resume.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _ingest_options(p)
    _llm_options(p)
    _analysis_options(p)
    _label_options(p)
    p.add_argument("--capabilities", help="use this capabilities.json instead of proposing")
    _max_caps(p)
    _map_options(p)
    p = sub.add_parser(
        "ingest",
        help="read trajectories into RUN_DIR/trajectories.jsonl",
        description="Read trajectory files (format auto-detected) into the run directory; "
        "bad files and lines are skipped with a warning unless --strict.",
    )
    _ingest_options(p)
    p = sub.add_parser(
        "render",
        help="write the outcome-blind transcripts the labeller sees",
        description="Write RUN_DIR/rendered.jsonl: the exact text each labelling prompt holds.",
    )
    p.add_argument("run_dir")
    _render_options(p)
    p = sub.add_parser(
        "propose",
        help="propose capabilities into RUN_DIR/capabilities.json",
        description="Ask the model for candidate capabilities from contrasted trajectories.",
    )
    p.add_argument("run_dir")
    _llm_options(p)
    _max_caps(p)
    p.add_argument(
        "--n-sample",
        type=POS_INT,
        default=24,
        help="trajectories shown to the proposer (default 24)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing (maybe edited) capabilities.json",
    )
    p = sub.add_parser(
        "label",
        help="label every trajectory N times",
        description="Label every usable trajectory against capabilities.json, --n-runs times.",
    )
    p.add_argument("run_dir")
    _llm_options(p)
    _label_options(p)
    p = sub.add_parser(
        "analyze",
        help="statistics and selection (no LLM)",
        description="Coverage, delta, the paper's selection rule and statistics (no LLM).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", nargs="?")
    p.add_argument(
        "--runs", help="label runs to read, e.g. 'DIR/run_*.json' (ours or the paper's format)"
    )
    p.add_argument("--json", help="also write the analysis to this file")
    p.add_argument(
        "--capabilities",
        help="capability descriptions (default: capabilities.json or candidate_capabilities.json beside the runs)",
    )
    _analysis_options(p)
    p = sub.add_parser(
        "map-envs",
        help="match core capabilities to environment ids",
        description="Match each core capability to trace_gym environments (registry "
        "definitions and tags, or the model when --model is given).",
    )
    p.add_argument("run_dir")
    _llm_options(p, required=False)
    _map_options(p)
    p = sub.add_parser(
        "report",
        help="write report.md, report.html and report.json",
        description="Write report.md, a self-contained report.html and report.json from the "
        "run directory (no LLM).",
    )
    p.add_argument("run_dir")
    p = sub.add_parser(
        "status",
        help="stages done, calls, cost, unlabelled trajectories",
        description="Print, as JSON, the stages done, LLM calls, tokens and cost per stage, "
        "and the trajectories left unlabelled.",
    )
    p.add_argument("run_dir")
    return parser


def _render_config(args: argparse.Namespace) -> Any:
    from .render import RenderConfig

    return RenderConfig(max_tokens=args.max_tokens_per_trajectory, policy_chars=args.policy_chars)


def _print_estimate(est: dict[str, Any]) -> None:
    print(f"dry run for {est['model']} (nothing was sent):")
    for stage, e in est["stages"].items():
        cost = "unknown price" if e["cost_usd"] is None else f"{e['cost_usd']:.4f} USD"
        print(
            f"  {stage:16s} {e['calls']:6d} calls  {e['prompt_tokens']:9d} prompt tokens  {e['output_tokens']:8d} output tokens  {cost}"
        )
    total = est["total_cost_usd"]
    print(
        f"  {'total':16s} {'unknown (pass --price-in/--price-out)' if total is None else f'{total:.4f} USD'}  ({est['note']})"
    )


def _print_analysis(result: dict[str, Any]) -> None:
    print(f"{'capability':40s} {'runs':>6s} {'cov':>6s} {'delta':>6s}  verdict")
    for r in result["capabilities"]:
        cov = "n/a" if r["mean_cov"] is None else f"{r['mean_cov']:.3f}"
        delta = "n/a" if r["mean_delta"] is None else f"{r['mean_delta']:.3f}"
        print(
            f"{r['name'][:40]:40s} {r['n_runs_passed']:>3d}/{r['n_runs_total']:<2d} {cov:>6s} {delta:>6s}  {r['verdict']}"
        )
    print(
        f"paper rule selects: {', '.join(s['skill'] for s in result['selected_capabilities']) or 'none'}"
    )
    print(f"core: {', '.join(result['core']) or 'none'}")
    if result.get("sensitivity"):
        print(f"sensitivity: {result['sensitivity']['line']}")


def _print_seen(run_dir: str | Path) -> None:
    """One line each when the labeller saw abridged transcripts or flagged text."""
    from .run import RunDir, read_json

    rd = RunDir(run_dir)
    stage = (read_json(rd.manifest).get("stages", {}) if rd.manifest.exists() else {}).get("label")
    if not stage:
        return
    if stage.get("abridged"):
        print(
            f"abridged for the labeller: {stage['abridged']} of {stage['usable']} transcripts "
            f"({stage['steps_summarised']} steps summarised, {stage['policy_cut']} policies cut "
            "to --policy-chars); see report.md, 'What the labeller saw'"
        )
    if stage.get("flagged"):
        print(
            f"flagged (text addressed to the labeller, or labelled with text withheld): "
            f"{len(stage['flagged'])} trajectories, kept as their own bucket: "
            + ", ".join(stage["flagged"][:5])
            + (" ..." if len(stage["flagged"]) > 5 else "")
        )


def _print_matches(run_dir: str | Path) -> None:
    """The environment of each core capability, with the runner-up candidates."""
    from .map_envs import describe
    from .run import RunDir, read_json

    rd = RunDir(run_dir)
    for m in read_json(rd.env_matches) if rd.env_matches.exists() else []:
        print(f"environment for {describe(m)}")


def _cmd_run(args: argparse.Namespace, budget: Any) -> int:
    from . import run

    llm = _llm_config(args)
    if args.dry_run:
        run.stage_ingest(
            args.out,
            args.inputs,
            args.redact,
            args.format,
            args.swebench_report,
            args.success_threshold,
            args.strict,
        )
        _print_estimate(
            run.estimate(args.out, llm, args.n_runs, _render_config(args), args.max_caps)
        )
        return 0
    result = run.run_diagnosis(
        args.inputs,
        args.out,
        llm=llm,
        n_runs=args.n_runs,
        redact=args.redact,
        fmt=args.format,
        swebench_report=args.swebench_report,
        capabilities=args.capabilities,
        registry=args.registry,
        render_config=_render_config(args),
        max_caps=args.max_caps,
        rho=args.rho,
        delta=args.delta,
        k_consistency=args.k_consistency,
        show_progress=not args.no_progress,
        max_unlabelled=args.max_unlabelled,
        max_flagged=args.max_flagged,
        strict=args.strict,
        budget=budget,
        min_score=args.min_score,
    )
    _print_seen(args.out)
    _print_analysis(result)
    _print_matches(args.out)
    print(f"report: {Path(args.out) / 'report.html'}")
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .analyze import analyze, descriptions_from_file, load_label_runs
    from .run import stage_analyze, write_json

    if args.run_dir is None and args.runs is None:
        raise ConfigError("analyze needs RUN_DIR or --runs 'DIR/run_*.json'")
    if args.run_dir is not None:
        result = stage_analyze(args.run_dir, args.runs, args.rho, args.delta, args.k_consistency)
    else:
        runs = load_label_runs(args.runs)
        caps = Path(args.capabilities) if args.capabilities else None
        if caps is None:
            folder = Path(args.runs).parent
            caps = next(
                (
                    folder / n
                    for n in ("capabilities.json", "candidate_capabilities.json")
                    if (folder / n).exists()
                ),
                None,
            )
        descriptions = descriptions_from_file(caps) if caps else None
        result = analyze(
            runs, descriptions, rho=args.rho, delta=args.delta, k_consistency=args.k_consistency
        )
    if args.json:
        write_json(Path(args.json), result)
    _print_analysis(result)
    return 0


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; LLM commands end with the one-line summary of their calls (on
    stdout, so that an error stays the single line on stderr), after a stop too."""
    from .llm import Budget

    uses_llm = getattr(args, "model", None) and not getattr(args, "dry_run", False)
    budget = Budget(args.max_cost) if uses_llm else None
    ok = False
    try:
        code = _dispatch_command(args, budget)
        ok = True
        return code
    finally:
        if budget is not None and (ok or budget.calls + budget.failed + budget.cache_hits):
            print(budget.summary(), flush=True)


def _dispatch_command(args: argparse.Namespace, budget: Any) -> int:
    from . import run

    cmd = args.command
    if cmd == "run":
        return _cmd_run(args, budget)
    if cmd == "analyze":
        return _cmd_analyze(args)
    if cmd == "ingest":
        trajs = run.stage_ingest(
            args.out,
            args.inputs,
            args.redact,
            args.format,
            args.swebench_report,
            args.success_threshold,
            args.strict,
        )
        print(f"{len(trajs)} trajectories -> {Path(args.out) / 'trajectories.jsonl'}")
        summary = run.read_json(run.RunDir(args.out).summary)
        print(json.dumps(summary["by_status"]))
        if summary["n_skipped"]:
            print(f"skipped as unreadable: {summary['n_skipped']} (see ingest_summary.json)")
    elif cmd == "render":
        print(run.stage_render(args.run_dir, _render_config(args)))
    elif cmd == "status":
        print(json.dumps(run.status(args.run_dir), indent=2))
    elif cmd == "report":
        for kind, path in run.stage_report(args.run_dir).items():
            print(f"{kind}: {path}")
    elif args.dry_run and cmd in ("propose", "label"):
        _print_estimate(run.estimate(args.run_dir, _llm_config(args), getattr(args, "n_runs", 10)))
    elif cmd == "propose":
        caps = run.stage_propose(
            args.run_dir,
            _llm_config(args),
            args.max_caps,
            args.n_sample,
            args.force,
            not args.no_progress,
            budget,
        )
        print("\n".join(c.name for c in caps))
    elif cmd == "label":
        runs = run.stage_label(
            args.run_dir,
            _llm_config(args),
            args.n_runs,
            _render_config(args),
            not args.no_progress,
            budget,
            max_unlabelled=args.max_unlabelled,
            max_flagged=args.max_flagged,
        )
        print(f"{len(runs)} runs; unlabelled: {len({t for r in runs for t in r.unlabelled})}")
        _print_seen(args.run_dir)
    elif cmd == "map-envs":
        from .map_envs import describe

        for m in run.stage_map_envs(
            args.run_dir,
            _llm_config(args),
            args.registry,
            not args.no_progress,
            budget,
            args.min_score,
        ):
            print(describe(m))
    return 0


class _WarningLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        print(f"trace-diagnose: warning: {record.getMessage()}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `trace-diagnose`; returns the exit code."""
    logger = logging.getLogger("trace_diagnose")
    if not any(isinstance(h, _WarningLine) for h in logger.handlers):
        logger.addHandler(_WarningLine(logging.WARNING))
        logger.propagate = False
    try:
        args = make_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return exc.code if isinstance(exc.code, int) else 1
    try:
        return _dispatch(args)
    except DiagnoseError as exc:
        if os.environ.get("TRACE_DEBUG") == "1":
            traceback.print_exc()
        print(f"trace-diagnose: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "trace-diagnose: interrupted; finished calls are cached: rerun the same command to resume",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
