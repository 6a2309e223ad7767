"""``trace-train``: GRPO-LoRA per capability, warm start, evaluation, composition.

    trace-train embedded                      # prepare SmolLM2-135M (converted once), print path
    trace-train warmstart --config cpu_smollm2
    trace-train grpo --config cpu_smollm2 --init-adapter runs/warmstart_smollm2/adapter
    trace-train eval --policy hf:BASE+adapter:runs/grpo_smollm2/adapter --env trace/precondition-v0
    trace-train store-adapter runs/ws/adapter benchmarks/adapters/ws --rebuild "COMMAND"
    trace-train route|merge|train-router|export ...   (composition, trace_train.compose.cli)

Every config field is also a flag (``--lora-rank 8``, ``--lora-targets [q_proj,v_proj]``);
values are read as YAML. ``--config`` takes a preset name or a YAML file and may be repeated
(later files win, flags win over files). Heavy libraries load inside the commands, so
``--help`` is instant. Known errors print one line; ``TRACE_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from trace_train.config import (
    ConfigError,
    EvalConfig,
    GRPORunConfig,
    WarmstartConfig,
    field_docs,
    load_config,
    parse_value,
)

ALIASES = {"env_id": ["--env"], "steps": ["--max-steps"], "learning_rate": ["--lr"]}


def _add_config_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--field-name`` flag per dataclass field, help from the field's docstring."""
    docs = field_docs(cls)
    parser.add_argument(
        "--config", action="append", help="preset name or YAML file (repeatable; later wins)"
    )
    for f in dataclasses.fields(cls):
        flags = [f"--{f.name.replace('_', '-')}", *ALIASES.get(f.name, [])]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        parser.add_argument(
            *flags,
            dest=f.name,
            type=parse_value,
            default=None,
            metavar="V",
            help=f"{docs.get(f.name, '')} (default: {default})".replace("%", "%%"),
        )


def _config(cls: type, args: argparse.Namespace) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    overrides = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return load_config(cls, args.config, overrides)


def cmd_grpo(args: argparse.Namespace) -> int:
    from trace_train.grpo import train

    cfg = _config(GRPORunConfig, args)
    result = train(cfg)
    print(f"adapter: {result.adapter_dir}\nlog: {result.log_path}\nsteps: {result.global_step}")
    return 0


def cmd_warmstart(args: argparse.Namespace) -> int:
    from trace_train.warmstart import train

    result = train(_config(WarmstartConfig, args))
    print(
        json.dumps(
            {"adapter": str(result.adapter_dir), "before": result.before, "after": result.after},
            indent=2,
        )
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from trace_train.evaluate import evaluate

    if args.env:  # --env may be repeated or comma-separated
        args.env_ids = [e for item in args.env for e in str(item).split(",") if e]
    summary = evaluate(_config(EvalConfig, args))
    rows = [
        (env, s["success_rate"], s["success_ci95"], s["mean_reward"])
        for env, s in summary["envs"].items()
    ]
    for env, rate, ci, reward in rows:
        print(f"{env:40s} success {rate:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]  reward {reward:.3f}")
    return 0


def cmd_store_adapter(args: argparse.Namespace) -> int:
    from trace_train.stored_adapter import store

    record = store(args.source, args.dest, rebuild=args.rebuild)
    print(f"stored {args.dest} (bfloat16, sha256 {record['sha256']})")
    return 0


def cmd_embedded(args: argparse.Namespace) -> int:
    from trace_train.embedded import embedded_model_path

    print(embedded_model_path(args.name, args.cache_dir))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trace-train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("grpo", help="train one LoRA adapter on one environment with GRPO")
    _add_config_flags(p, GRPORunConfig)
    p.set_defaults(func=cmd_grpo)

    p = sub.add_parser("warmstart", help="supervised LoRA on oracle demonstrations")
    _add_config_flags(p, WarmstartConfig)
    p.set_defaults(func=cmd_warmstart)

    p = sub.add_parser("eval", help="run a policy on held-out episodes; write logs and summary")
    _add_config_flags(p, EvalConfig)
    p.add_argument("--env", action="append", help="environment id (repeatable, or 'all')")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("store-adapter", help="keep a trained adapter in the repository: "
                       "bfloat16 weights, their hash, the training record, the rebuild command")  # fmt: skip
    p.add_argument("source", help="a training run's adapter folder (with trace_train.json)")
    p.add_argument("dest", help="the folder to write")
    p.add_argument("--rebuild", required=True, help="the one command that trains it again")
    p.set_defaults(func=cmd_store_adapter)

    p = sub.add_parser("embedded", help="prepare the embedded model and print its folder")
    p.add_argument("--name", default="smollm2", help="smollm2 (default) or gemma3-270m")
    p.add_argument("--cache-dir", default=None, help="target folder (default: the cache)")
    p.set_defaults(func=cmd_embedded)

    from trace_train.compose import cli as compose_cli  # torch loads inside its commands

    compose_cli.register(sub)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from trace_gym.errors import TraceGymError
    from trace_train.embedded import EmbeddedModelMissing
    from trace_train.policies import PolicyError

    return (
        ConfigError,
        PolicyError,
        EmbeddedModelMissing,
        TraceGymError,
        FileNotFoundError,
        ValueError,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``trace-train`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except _known_errors() as exc:
        if os.environ.get("TRACE_DEBUG") == "1":
            raise
        print(f"trace-train {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "interrupted; rerun the same command to resume from the last checkpoint",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
