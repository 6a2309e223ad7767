"""``trace``: the TRACE loop end to end.

Examples::

    trace run --config trace_train/configs/demo_cpu.yaml
    trace run --config my.yaml --llm openai/gpt-4o-mini --set evaluate.episodes=50
    trace run --set target=trace/service-desk-v0 --set trajectories='["tau2.json"]' \\
        --set train=false --llm openai/gpt-4o-mini
    trace run --config trace_train/configs/demo_cpu.yaml --set evaluate.episodes=8 --redo evaluate
    trace run --config trace_train/configs/demo_cpu.yaml --set grpo.steps=4 --redo train
    trace run --config trace_train/configs/fair_cpu.yaml --set grpo.seed=2 --until compose
    trace status runs/demo

``--set KEY=VALUE`` sets any field of ``trace_train.pipeline.PipelineConfig`` (the value is
YAML: ``8``, ``true``, ``[routed]``); ``--set SECTION.NAME=VALUE`` one setting of a section
(``diagnose``, ``synthesize``, ``warmstart``, ``grpo``, ``compose``, ``evaluate``,
``generation``).

A rerun of the same command resumes: finished stages are skipped, an interrupted one picks up
where it stopped; ``--redo STAGE`` runs a finished stage again, and the stages after it.
Errors print one line (``TRACE_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

from trace_train.config import parse_value


def _overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set {pair!r}: use KEY=VALUE")
        out[key.strip()] = parse_value(value)  # 1e-4 is a float, as YAML 1.1 would not read it
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from trace_train.pipeline import PipelineConfig, run_pipeline

    overrides = _overrides(args.set or [])
    if args.llm:
        overrides["llm"] = args.llm
    if args.run_dir:
        overrides["run_dir"] = args.run_dir
    with warnings.catch_warnings(record=True) as caught:  # old config keys: one line each
        warnings.simplefilter("always", FutureWarning)
        config = PipelineConfig.load(args.config, overrides)
    for warning in caught:
        print(f"trace: warning: {warning.message}", file=sys.stderr)
    report = run_pipeline(config, redo=args.redo, until=args.until)
    if report is not None:  # None: an accelerate helper process, or stopped by --until
        print(f"\nreport: {report}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from trace_train.pipeline import STAGES, status

    state = status(args.run_dir)
    for stage in STAGES:
        entry = state.get(stage.name, {})
        seconds = f"  ({entry['seconds']} s" if "seconds" in entry else ""
        if seconds:  # a stage resumed after a kill: its time is every invocation's together
            runs = entry.get("invocations", 1)
            seconds += f" over {runs} invocations)" if runs > 1 else ")"
        print(f"{stage.name:<13} {entry.get('status', 'pending')}{seconds}")
    if args.json:
        print(json.dumps(state, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from trace_train.pipeline.config import settings_help

    run = sub.add_parser(
        "run",
        help="diagnose, select, synthesize, train, compose, evaluate, rediagnose, report",
        description="Run (or resume) the TRACE loop into one run folder.",
        epilog="settings (YAML keys, or --set KEY=VALUE; a section's as SECTION.NAME):\n"
        + settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--config", help="YAML file of PipelineConfig fields")
    run.add_argument(
        "--llm",
        help="provider/model for the diagnosis and for writing missing environments "
        "(default: ground-truth labels; synthesis requests written for later)",
    )
    run.add_argument("--run-dir", help="run folder (overrides the config)")
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a setting: a field (train=false) or SECTION.NAME (grpo.steps=4)",
    )
    run.add_argument(
        "--redo",
        metavar="STAGE",
        help="run a finished stage again, and every stage after it (e.g. --redo evaluate "
        "after --set evaluate.episodes=50)",
    )
    run.add_argument(
        "--until",
        metavar="STAGE",
        help="stop after this stage (e.g. --until compose: train and compose now, evaluate "
        "with a later rerun without it)",
    )
    run.set_defaults(fn=cmd_run)
    st = sub.add_parser("status", help="which stages of a run folder finished")
    st.add_argument("run_dir")
    st.add_argument("--json", action="store_true")
    st.set_defaults(fn=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (ValueError, OSError, RuntimeError) as exc:
        if os.environ.get("TRACE_DEBUG"):
            raise
        print(f"trace: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
