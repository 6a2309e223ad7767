"""``trace-gym``: list, show, sample, play, score and calibrate environments.

Examples::

    trace-gym list
    trace-gym show trace/precondition-v0
    trace-gym sample trace/precondition-v0 --seed 3 --difficulty 0.8
    trace-gym play trace/precondition-v0 --seed 3
    trace-gym score trace/precondition-v0 --episodes runs/episodes.jsonl
    trace-gym calibrate trace/precondition-v0 --agent random --seeds 100 --group 16
    trace-gym serve trace/precondition-v0 --port 8000 --max-sessions 64   # [serve] extra
    trace-gym validate trace/precondition-v0 --quick
    trace-gym synthesize --capability loyalty_points_calculation --definition "..." \
        --llm openai/gpt-4o-mini --out my_envs

Commands are thin: they parse options, call the library function a user could call, and
print. Known errors print one line (``TRACE_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import gymnasium as gym

import trace_gym
from trace_gym.errors import ConfigError, TraceGymError
from trace_gym.registration import entry, load_registry
from trace_gym.sandbox import UNSAFE_ENV


def cmd_list(args: argparse.Namespace) -> int:
    rows = load_registry()
    width = max(len(r.id) for r in rows)
    for r in rows:
        print(f"{r.id:<{width}}  {r.capability:<34}  {r.description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    row = entry(args.env_id)
    env = gym.make(args.env_id)
    print(f"{row.id}  (capability: {row.capability}, max turns: {row.max_turns})")
    print(row.description)
    print(f"tags: {', '.join(row.tags)}")
    print(f"entry point: {row.entry_point}  (listed in {row.registry})")
    print("tools:")
    for tool in env.unwrapped.tools:
        print(f"  [{tool.kind:7}] {tool.name}: {tool.description}")
    doc = (type(env.unwrapped).__module__, type(env.unwrapped).__name__)
    print(f"documentation: python -c 'import {doc[0]}; help({doc[0]})'")
    return 0


def _reset(args: argparse.Namespace) -> tuple[gym.Env, str, dict[str, Any]]:
    entry(args.env_id)
    env = gym.make(args.env_id)
    options = {"split": args.split, "hint": args.hint}
    if args.difficulty is not None:
        options["difficulty"] = args.difficulty
    obs, info = env.reset(seed=args.seed, options=options)
    return env, obs, info


def cmd_sample(args: argparse.Namespace) -> int:
    env, obs, info = _reset(args)
    if args.json:
        print(json.dumps({"observation": obs, "info": info}, indent=2, ensure_ascii=False))
        return 0
    print(f"task {info['task_id']}  hash {info['task_hash'][:16]}")
    print(f"difficulty features: {json.dumps(info['difficulty_features'])}")
    print("\n--- system prompt ---\n" + info["system_prompt"])
    print("\n--- first observation ---\n" + obs)
    print("\n--- oracle solution ---")
    for i, action in enumerate(env.unwrapped.oracle_actions(), 1):
        print(f"{i}. {json.dumps(action, ensure_ascii=False)}")
    return 0


def play(
    env_id: str, seed: int, stdin: TextIO = sys.stdin, out: Callable = print, **opts: Any
) -> dict:
    """Play one episode in the terminal: each input line is one assistant turn (JSON tool
    calls, ``<tool_call>`` blocks, or text to the customer); ``/tools``, ``/oracle``, ``/quit``."""
    env = gym.make(env_id)
    obs, info = env.reset(seed=seed, options=opts)
    out("--- system prompt ---\n" + info["system_prompt"])
    out('\nTools (call as JSON, e.g. {"name": "get_order", "arguments": {"order_id": "O-1"}}):')
    for tool in env.unwrapped.tools:
        out(f"  {tool.name}: {json.dumps(tool.parameters['properties'])}")
    out("\n" + obs)
    done, info = False, {}
    while not done:
        out("> ", end="") if out is print else None
        line = stdin.readline()
        if not line or line.strip() == "/quit":
            out("(quit)")
            return {}
        command = line.strip()
        if command == "/tools":
            out(", ".join(t.name for t in env.unwrapped.tools))
            continue
        if command == "/oracle":
            out("\n".join(json.dumps(a) for a in env.unwrapped.oracle_actions()))
            continue
        obs, reward, terminated, truncated, info = env.step(line.rstrip("\n"))
        done = terminated or truncated
        out(obs)
        if info["error"]:
            out(f"(error {info['error']['code']})")
    v = info["verification"]
    out(f"\nepisode over ({info['end_reason']}): success={v['passed']} score={v['score']:.2f}")
    for c in v["checks"]:
        mark = "ok " if c["passed"] else "FAIL"
        out(f"  [{mark}] {c['name']} ({c['capability']}): {c['score']:.2f}  {c['message']}")
    return v


def cmd_play(args: argparse.Namespace) -> int:
    entry(args.env_id)
    opts: dict[str, Any] = {"split": args.split, "hint": args.hint}
    if args.difficulty is not None:
        opts["difficulty"] = args.difficulty
    play(args.env_id, args.seed, **opts)
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    entry(args.env_id)
    n = mismatched = passed = 0
    for record in trace_gym.read_episodes(args.episodes):
        if record["env_id"] != args.env_id:
            continue
        result = trace_gym.rescore(record)
        n += 1
        passed += result.passed
        if not result.matches:
            mismatched += 1
            print(
                f"MISMATCH {result.task_id}: logged {result.logged_reward} replayed {result.replayed_reward}"
            )
    if n == 0:
        print(f"no episodes of {args.env_id} in {args.episodes}")
        return 1
    print(f"{n} episodes re-scored: success {passed}/{n}, {mismatched} differ from the log")
    return 1 if mismatched else 0


def cmd_serve(args: argparse.Namespace) -> int:
    entry(args.env_id)
    try:
        from trace_gym.serving.protocol import TOKEN_ENV
        from trace_gym.serving.server import check_token, serve
    except ImportError as exc:
        raise TraceGymError(str(exc)) from None
    if args.max_sessions < 1:
        raise ConfigError(f"--max-sessions must be at least 1, got {args.max_sessions}")

    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_token(args.host, token)
    print(
        f"serving {args.env_id} on http://{args.host}:{args.port} "
        f"(WebSocket /ws, /health, /schema; at most {args.max_sessions} sessions)",
        flush=True,
    )
    serve(args.env_id, host=args.host, port=args.port, max_sessions=args.max_sessions, token=token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trace-gym", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run agent code (SWE patches and commands) WITHOUT isolation where bubblewrap is "
        "missing: it can then read and write your files, use the network and leave processes "
        "running; only for code you would run yourself",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every registered environment").set_defaults(fn=cmd_list)
    show = sub.add_parser("show", help="an environment's tools and defaults")
    show.add_argument("env_id")
    show.set_defaults(fn=cmd_show)
    for name, fn, helptext in (
        ("sample", cmd_sample, "print a seeded task and its oracle solution"),
        ("play", cmd_play, "play an episode in the terminal"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("env_id")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--difficulty", type=float, default=None)
        p.add_argument("--split", default="train", choices=trace_gym.SPLITS)
        p.add_argument("--hint", action="store_true", help="include the expert-guidance hint")
        if name == "sample":
            p.add_argument("--json", action="store_true", help="print observation and info as JSON")
        p.set_defaults(fn=fn)
    score = sub.add_parser("score", help="re-score an episode log offline by replay")
    score.add_argument("env_id")
    score.add_argument("--episodes", required=True, help="JSON-lines episode log")
    score.set_defaults(fn=cmd_score)
    srv = sub.add_parser("serve", help="serve an environment with OpenEnv (HTTP + WebSocket)")
    srv.add_argument("env_id")
    srv.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--max-sessions", type=int, default=64, help="concurrent client sessions")
    srv.add_argument(
        "--token",
        help="shared token clients must send (default: $TRACE_GYM_SERVE_TOKEN); required "
        "when --host accepts other machines",
    )
    srv.set_defaults(fn=cmd_serve)
    try:
        from trace_gym.validation.calibrate import add_calibrate_parser
    except ImportError:  # pragma: no cover - calibrate ships with the package
        pass
    else:
        add_calibrate_parser(sub)
    from trace_gym.synthesis.synthesize import add_synthesize_parser
    from trace_gym.validation.validate import add_validate_parser

    add_validate_parser(sub)
    add_synthesize_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.unsafe_no_sandbox:  # read by every sandbox made without an explicit isolation,
        os.environ[UNSAFE_ENV] = "1"  # in this process and the ones it starts (validate)
    try:
        return int(args.fn(args) or 0)
    except (TraceGymError, OSError) as exc:
        if os.environ.get("TRACE_DEBUG"):
            raise
        print(f"trace-gym: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
