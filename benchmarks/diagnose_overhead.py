"""trace_diagnose overhead: calls, tokens and non-LLM time per trajectory.

Labels N planted trajectories (default 1,000) once against the stub LLM from
tests/diagnose/stub_llm.py, which answers after a fixed latency, and compares side by side:

* trace_diagnose: `stage_label` (asyncio, concurrency limit, SQLite cache, evidence checks,
  schema repair), then a `--cache-only` replay of label + analyze + report. The replay makes
  no LLM call, so its wall time is the pipeline's own (non-LLM) time.
* naive baseline: a sequential loop of `litellm.completion` calls with the same prompts,
  parsing the JSON with pydantic; no cache, no concurrency, no evidence check.

    .venv/bin/python benchmarks/diagnose_overhead.py [--n 1000] [--latency 0.05] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.diagnose.planted import CAPABILITIES, stub_config, write_planted  # noqa: E402
from tests.diagnose.stub_llm import StubLLM  # noqa: E402
from trace_diagnose.label import label_messages  # noqa: E402
from trace_diagnose.llm import LLMConfig, response_format  # noqa: E402
from trace_diagnose.render import render  # noqa: E402
from trace_diagnose.run import (
    load_trajectories,
    stage_analyze,
    stage_ingest,
    stage_label,
    stage_report,
    write_json,
)  # noqa: E402
from trace_diagnose.schema import Capability, LabelResponse  # noqa: E402


def ours(data: Path, rd: Path, stub: StubLLM, concurrency: int) -> dict:
    cfg = LLMConfig(
        model="openai/stub",
        api_base=stub.api_base,
        api_key="stub",
        concurrency=concurrency,
        price_in=0.15,
        price_out=0.6,
    )
    t0 = time.perf_counter()
    stage_ingest(rd, [data])
    write_json(rd / "capabilities.json", {"capabilities": CAPABILITIES})
    before = stub.total_requests
    stage_label(rd, cfg, n_runs=1, show_progress=False)
    wall = time.perf_counter() - t0
    calls = stub.total_requests - before
    manifest = json.loads((rd / "manifest.json").read_text())["stages"]["label"]
    t1 = time.perf_counter()
    replay = LLMConfig(**{**cfg.__dict__, "cache_only": True})
    stage_label(rd, replay, n_runs=1, show_progress=False)
    stage_analyze(rd, k_consistency=1)
    stage_report(rd)
    non_llm = time.perf_counter() - t1
    return {
        "wall": wall,
        "calls": calls,
        "prompt_tokens": manifest["prompt_tokens"],
        "completion_tokens": manifest["completion_tokens"],
        "non_llm": non_llm,
    }


def naive(data: Path, rd: Path, stub: StubLLM, n: int) -> dict:
    import litellm

    caps = [Capability(**c) for c in CAPABILITIES]
    trajs = load_trajectories(rd)[:n]
    before = stub.total_requests
    t0 = time.perf_counter()
    prompt_tokens = completion_tokens = 0
    llm_time = 0.0
    for t in trajs:
        messages = label_messages(render(t), caps)
        t1 = time.perf_counter()
        resp = litellm.completion(
            model="openai/stub",
            api_base=stub.api_base,
            api_key="stub",
            messages=messages,
            response_format=response_format(LabelResponse, "LabelResponse"),
            max_retries=0,
        )
        llm_time += time.perf_counter() - t1
        LabelResponse.model_validate_json(resp.choices[0].message.content or "{}")
        prompt_tokens += resp.usage.prompt_tokens
        completion_tokens += resp.usage.completion_tokens
    wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "calls": stub.total_requests - before,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "non_llm": wall - llm_time,
        "n": len(trajs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=1000, help="trajectories (default 1000)")
    ap.add_argument(
        "--latency",
        type=float,
        default=0.05,
        help="stub latency per call in seconds (default 0.05)",
    )
    ap.add_argument(
        "--concurrency", type=int, default=16, help="trace_diagnose concurrency (default 16)"
    )
    args = ap.parse_args()
    stub = StubLLM(stub_config(latency_s=args.latency)).start()
    # Import litellm and make one call first: its ~4 s start-up is paid once per process and
    # would otherwise land in whichever measurement runs first.
    import litellm

    litellm.completion(
        model="openai/stub",
        api_base=stub.api_base,
        api_key="stub",
        messages=[{"role": "user", "content": "warm up"}],
        max_retries=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        data = write_planted(Path(tmp) / "planted.jsonl", n_tasks=args.n // 2, trials=2, seed=7)
        rd = Path(tmp) / "run"
        a = ours(data, rd, stub, args.concurrency)
        # Same prompts, same stub; the baseline has no cache, so it asks for every one again.
        b = naive(data, rd, stub, args.n)
    stub.stop()
    n = args.n
    print(
        f"{n} trajectories, {len(CAPABILITIES)} capabilities, stub latency {args.latency * 1000:.0f} ms per call\n"
    )
    print(f"| | trace_diagnose (concurrency {args.concurrency}, cache) | naive sequential loop |")
    print("|---|---|---|")
    print(f"| LLM calls per trajectory | {a['calls'] / n:.2f} | {b['calls'] / b['n']:.2f} |")
    print(
        f"| prompt tokens per trajectory | {a['prompt_tokens'] / n:.0f} | {b['prompt_tokens'] / b['n']:.0f} |"
    )
    print(
        f"| completion tokens per trajectory | {a['completion_tokens'] / n:.0f} | {b['completion_tokens'] / b['n']:.0f} |"
    )
    print(f"| wall time, labelling (s) | {a['wall']:.1f} | {b['wall']:.1f} |")
    print(
        f"| non-LLM time per trajectory (ms) | {a['non_llm'] / n * 1000:.2f} | {b['non_llm'] / b['n'] * 1000:.2f} |"
    )
    print("\nnon-LLM time: ours = cache-only replay of label + analyze + report (no LLM call);")
    print("naive = loop wall time minus time inside litellm.completion (render + validate).")


if __name__ == "__main__":
    main()
