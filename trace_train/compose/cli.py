"""``trace-train`` subcommands for composing capability adapters (TRACE stage 4).

The CLI owner calls :func:`register` with the ``trace-train`` subparsers. Each command is a
thin layer over a library function with the same parameter names; torch and friends are
imported inside the commands so ``--help`` stays fast.

Examples::

    trace-train route --base BASE --adapter pre=runs/pre --description pre="Check preconditions" \\
        --out routed/
    trace-train merge --base BASE --adapters runs/pre runs/table --out moe/
    trace-train train-router --moe moe/ --data rollouts.jsonl
    trace-train export --moe moe/ --expert pre --out pre_adapter/
    trace-train export --base BASE --adapters runs/pre runs/table --combination ties --out ties/
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _jsonl(path: str) -> list[dict]:
    """The records of a JSON-lines file, split at "\\n" only (``str.splitlines`` would also
    split at a U+2028 inside a record), with an error naming the file and line when broken."""
    rows = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
    return rows


def _named(items: list[str]) -> dict[str, str]:
    """``NAME=PATH`` or ``PATH`` (name = folder name) -> ``{name: path}``."""
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).name, item
        if name in out:
            raise ValueError(f"adapter name {name!r} given twice; use NAME=PATH to rename one")
        out[name] = path
    return out


def cmd_route(args: argparse.Namespace) -> int:
    """Write a per-task routed policy folder (and report accuracy on ``--check`` tasks)."""
    from trace_train.compose.routing import (
        RoutedExpert,
        RoutingConfig,
        load_routed,
        save_routed,
        task_routing_accuracy,
    )

    adapters = _named(args.adapter)
    descriptions = _named(args.description)
    missing = sorted(set(adapters) - set(descriptions))
    if missing:
        raise ValueError(f"no --description for {missing}; add --description NAME='when to use it'")
    experts = [RoutedExpert(n, d, descriptions[n]) for n, d in adapters.items()]
    out = save_routed(RoutingConfig(args.base, experts), args.out)
    if args.check:
        tasks = _jsonl(args.check)
        report = task_routing_accuracy(
            load_routed(out), [(t["messages"], t["expected"]) for t in tasks]
        )
        print(json.dumps(report, indent=2))
    print(f"routed policy written to {out}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Build a token-routed mixture from PEFT adapters and save it (routers untrained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.compose.moe import ExpertSpec, MoEConfig, RouterSpec, attach_experts, save_moe

    experts = [ExpertSpec(name=n, adapter_dir=d) for n, d in _named(args.adapters).items()]
    router = RouterSpec(
        granularity=args.granularity,
        router_layer=args.router_layer,
        include_base_slot=not args.no_base_slot,
        kernel=args.kernel,
    )
    model = AutoModelForCausalLM.from_pretrained(args.base)
    attach_experts(model, MoEConfig(args.base, experts, router))
    save_moe(model, args.out, tokenizer=AutoTokenizer.from_pretrained(args.base))
    print(f"mixture of {len(experts)} experts written to {args.out}; train its router next")
    return 0


def cmd_train_router(args: argparse.Namespace) -> int:
    """Train the routers of a saved mixture on labelled rollouts (JSONL) and save it."""
    from trace_train.compose.moe import load_moe, moe_state, save_moe
    from trace_train.compose.router_training import (
        LabelledSequence,
        RouterTrainingConfig,
        token_routing_accuracy,
        train_routers,
    )

    model, tok = load_moe(args.moe)
    rows = _jsonl(args.data)
    seqs = [
        LabelledSequence(r.get("input_ids") or tok(r["text"]).input_ids, r["slot"]) for r in rows
    ]
    cfg = RouterTrainingConfig(steps=args.steps, dagger_rounds=args.dagger_rounds, lr=args.lr)
    result = train_routers(model, seqs, cfg)
    stats = token_routing_accuracy(model, seqs)
    moe_state(model).config.stats.update({"train_routing": stats, "train": result.accuracy})
    save_moe(model, args.out or args.moe, tokenizer=tok)
    print(json.dumps({"routing_accuracy": stats["mean"], "per_slot": stats["per_slot"]}))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export one expert of a mixture, or a static merge of adapters, as a PEFT adapter."""
    from trace_train.compose.export import export_expert, static_merge

    if args.moe and args.expert:
        out = export_expert(args.moe, args.expert, args.out)
    elif args.base and args.adapters:
        out = static_merge(
            args.base, _named(args.adapters), args.out, combination_type=args.combination
        )
    else:
        raise ValueError("give either --moe DIR --expert NAME, or --base MODEL --adapters ...")
    print(f"PEFT adapter written to {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``route``, ``merge``, ``train-router`` and ``export`` to ``trace-train``."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("route", help="per-task routed policy", formatter_class=fmt)
    p.add_argument("--base", required=True, help="base model id or folder")
    p.add_argument("--adapter", nargs="+", required=True, help="NAME=PEFT_DIR (or PEFT_DIR)")
    p.add_argument("--description", nargs="+", required=True, help="NAME='when to use it'")
    p.add_argument("--out", required=True, help="output folder (routed:DIR for eval)")
    p.add_argument("--check", help="JSONL of {messages, expected}: report routing accuracy")
    p.set_defaults(func=cmd_route)

    p = subparsers.add_parser("merge", help="token-routed mixture of LoRA experts")
    p.add_argument("--base", required=True, help="base model id or folder")
    p.add_argument("--adapters", nargs="+", required=True, help="NAME=PEFT_DIR or PEFT_DIR ...")
    p.add_argument("--out", required=True, help="output folder (moe:DIR for eval)")
    p.add_argument("--granularity", choices=["per_block", "global"], default="per_block")
    p.add_argument("--router-layer", type=int, default=0, help="global router's block")
    p.add_argument(
        "--kernel", choices=["concat_masked", "sorted_segments", "dense"], default="concat_masked"
    )
    p.add_argument("--no-base-slot", action="store_true", help="omit the no-adapter slot")
    p.set_defaults(func=cmd_merge)

    p = subparsers.add_parser("train-router", help="train a mixture's routers, experts frozen")
    p.add_argument("--moe", required=True, help="folder written by merge")
    p.add_argument("--data", required=True, help="JSONL of {input_ids or text, slot}")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--dagger-rounds", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--out", help="output folder (default: overwrite --moe)")
    p.set_defaults(func=cmd_train_router)

    p = subparsers.add_parser("export", help="plain PEFT adapter: one expert or a static merge")
    p.add_argument("--moe", help="mixture folder (with --expert)")
    p.add_argument("--expert", help="expert name to export")
    p.add_argument("--base", help="base model (with --adapters)")
    p.add_argument("--adapters", nargs="+", help="NAME=PEFT_DIR ... to merge statically")
    p.add_argument("--combination", default="linear", help="linear, ties, cat, ... (peft)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_export)
