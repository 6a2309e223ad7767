"""Does GRPO make an agent better on a CPU? One capability, held-out success before and after.

SmolLM2-135M-Instruct (the embedded model) learns ``trace/tool-call-v0`` at difficulty 0 (one
precise tool call: cancel an order, move a payment, add bags):

1. ``warmstart``: supervised LoRA on oracle demonstrations from the train split, so the model
   writes tool calls at all (untrained it writes none, and GRPO gets no signal);
2. ``eval_before``: greedy, on ``--heldout`` tasks of the eval split (seeds 0..N-1);
3. ``grpo``: the warm-start adapter keeps training with GRPO (groups of ``--group`` rollouts of
   one task, a quarter of them hinted, partial-credit reward);
4. ``eval_after``: the same held-out tasks, the same greedy decoding;
5. ``report``: ``benchmarks/results/learning_cpu.json`` (the gain with Newcombe's 95 % interval,
   the per-step training log, the command) and ``learning_cpu.png`` (the learning curve).

Every phase resumes: the trainers from their checkpoints, the evaluations from the episodes
already written, and a finished phase is skipped, so an interrupted run picks up where it was.

    OMP_NUM_THREADS=2 python benchmarks/learning_cpu.py            # ~1.5 h on 2 cores
    OMP_NUM_THREADS=1 python benchmarks/learning_cpu.py --demos 8 --heldout 8 --steps 1  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RESULTS = Path(__file__).parent / "results"
ENV_ID = "trace/tool-call-v0"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--difficulty", type=float, default=0.0)
    ap.add_argument("--demos", type=int, default=128, help="oracle demonstrations (warm start)")
    ap.add_argument("--epochs", type=float, default=2.0, help="warm-start epochs")
    ap.add_argument("--warmstart-lr", type=float, default=4e-4)
    ap.add_argument(
        "--init-adapter",
        help="start GRPO from this LoRA adapter (e.g. a warm-start checkpoint) instead of "
        "training a warm start",
    )
    ap.add_argument("--heldout", type=int, default=100, help="held-out tasks, before and after")
    ap.add_argument(
        "--heldout-first-seed",
        type=int,
        default=0,
        help="first eval-split seed of the held-out tasks (a confirmation run takes seeds no "
        "earlier run has been judged on)",
    )
    ap.add_argument(
        "--skip-base",
        action="store_true",
        help="do not evaluate the untrained model (the slowest phase: it writes prose to the "
        "token limit every turn)",
    )
    ap.add_argument(
        "--eval-adapter",
        action="append",
        default=[],
        metavar="STEP=PATH",
        help="also evaluate this adapter, saved after GRPO step STEP (e.g. an earlier run's or "
        "a kept checkpoint), on the same held-out tasks: a point of the held-out curve",
    )
    ap.add_argument("--steps", type=int, default=24, help="GRPO optimizer steps")
    ap.add_argument("--group", type=int, default=8, help="rollouts per group (one task)")
    ap.add_argument("--groups-per-step", type=int, default=1)
    ap.add_argument("--grpo-lr", type=float, default=1e-4)
    ap.add_argument("--temperature", type=float, default=0.8, help="GRPO rollout temperature")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--run-dir", default="runs/learning_cpu")
    ap.add_argument("--out", default=str(RESULTS / "learning_cpu.json"))
    return ap.parse_args(argv)


def rollout_settings(args: argparse.Namespace) -> dict:
    """How every phase plays an episode: one call, one closing message, one turn to repair."""
    from trace_train.decoding import bf16_supported

    return {
        "model": args.model,
        "env_id": ENV_ID,
        "difficulty": args.difficulty,
        "max_turns": 3,
        "max_new_tokens": 160,  # the longest d=0 call is ~70 tokens; 64 cut calls mid-JSON
        "max_completion_tokens": 768,
        "tool_prompt": "compact",
        "reward_mode": "partial",
        # autocast in forward/backward where bf16 is native: 1.8x on AVX512-BF16 (fp32 weights)
        "bf16": bf16_supported(),
    }


def phase_done(run: Path, name: str) -> dict | None:
    marker = run / f"{name}.done.json"
    return json.loads(marker.read_text()) if marker.exists() else None


def finish_phase(run: Path, name: str, record: dict) -> dict:
    (run / f"{name}.done.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


# ---------------------------------------------------------------------------------------------
def warm_start(args: argparse.Namespace, run: Path) -> dict:
    from trace_train import warmstart
    from trace_train.config import WarmstartConfig

    cfg = WarmstartConfig(
        **rollout_settings(args),
        output_dir=str(run / "warmstart"),
        demonstrations=args.demos,
        epochs=args.epochs,
        learning_rate=args.warmstart_lr,
        batch_size=4,
        save_steps=8,
        eval_episodes=0,  # evaluated below, on more tasks, with per-task records
        difficulty_spread=False,  # demonstrations at the difficulty we evaluate
    )
    started = time.time()
    result = warmstart.train(cfg)
    lines = [json.loads(x) for x in result.log_path.read_text().splitlines()]
    losses = [x["train/loss"] for x in lines if "train/loss" in x]
    return {
        "adapter": str(result.adapter_dir),
        "seconds": round(time.time() - started, 1),
        "demonstrations": args.demos,
        "epochs": args.epochs,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
    }


def given_adapter(path: str) -> dict:
    """A warm start trained elsewhere: what its trainer state says about it, if it has one."""
    if not (Path(path) / "adapter_config.json").is_file():
        raise SystemExit(
            f"--init-adapter {path}: no adapter_config.json there (not a LoRA adapter)"
        )
    record = {"adapter": path, "seconds": 0.0, "demonstrations": None, "epochs": None,
              "loss_first": None, "loss_last": None}  # fmt: skip
    state = Path(path) / "trainer_state.json"
    if state.is_file():  # a Trainer checkpoint: how far into its schedule it was saved
        trainer = json.loads(state.read_text())
        losses = [x["loss"] for x in trainer.get("log_history", []) if "loss" in x]
        record.update(
            epochs=trainer.get("epoch"),
            steps=f"{trainer.get('global_step')} of {trainer.get('max_steps')}",
            loss_first=losses[0] if losses else None,
            loss_last=losses[-1] if losses else None,
        )
    return record


def intermediate_adapters(args: argparse.Namespace) -> list[tuple[int, str]]:
    """``--eval-adapter STEP=PATH`` values, checked: a step number and a LoRA adapter folder."""
    pairs = []
    for value in args.eval_adapter:
        step, _, path = value.partition("=")
        if not step.isdigit() or not (Path(path) / "adapter_config.json").is_file():
            raise SystemExit(
                f"--eval-adapter {value}: expected STEP=PATH, a GRPO step number and a LoRA "
                "adapter folder (with adapter_config.json)"
            )
        pairs.append((int(step), path))
    return pairs


def heldout_seeds(args: argparse.Namespace) -> range:
    return range(args.heldout_first_seed, args.heldout_first_seed + args.heldout)


def evaluation(args: argparse.Namespace, run: Path, name: str, adapter: str | None) -> dict:
    """The evaluation phase ``name``: finished, continued or run. Episodes already written for
    other held-out seeds (an earlier run in the same folder) are refused, not mixed in."""
    path, seeds = run / f"{name}.episodes.jsonl", heldout_seeds(args)
    written = [json.loads(x)["seed"] for x in path.read_text().splitlines()] if path.exists() else []  # fmt: skip
    if written != list(seeds[: len(written)]) or len(written) > len(seeds):
        raise SystemExit(
            f"{path}: its episodes are not for seeds {seeds.start}..{seeds.stop - 1} "
            "(--heldout-first-seed, --heldout); use another --run-dir for other held-out seeds"
        )
    finished = phase_done(run, name)
    if finished and finished["tasks"] == len(seeds):
        return finished
    return finish_phase(run, name, held_out(args, run, name, adapter))  # continues, or extends


def held_out(args: argparse.Namespace, run: Path, name: str, adapter: str | None) -> dict:
    """Greedy episodes on ``--heldout`` eval-split seeds from ``--heldout-first-seed``; episodes
    are appended as they finish, so a rerun continues after the last one written."""
    from tqdm.auto import tqdm

    from trace_gym.validation.decisions import decision_breakdown, record_outcomes
    from trace_train.policies import ModelPolicy, PlaySettings, load_hf
    from trace_train.rollout import EpisodeSpec

    s = rollout_settings(args)
    model, tokenizer = load_hf(args.model, adapter)
    policy = ModelPolicy(model, tokenizer, name)
    settings = PlaySettings(
        s["max_turns"], s["max_new_tokens"], s["max_completion_tokens"], 0.0, s["reward_mode"],
        tool_prompt=s["tool_prompt"],
    )  # fmt: skip
    path = run / f"{name}.episodes.jsonl"
    done = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    specs = [EpisodeSpec(ENV_ID, i, args.difficulty, "eval") for i in heldout_seeds(args)]
    with tqdm(total=len(specs), initial=len(done), desc=name) as bar:
        for i in range(len(done), len(specs), 8):
            batch_started = time.time()
            records = policy.play(specs[i : i + 8], settings)
            seconds_each = (time.time() - batch_started) / max(1, len(records))
            with open(path, "a", encoding="utf-8") as fh:
                for r in records:
                    checks = (r.get("verification") or {}).get("checks", [])
                    row = {"seed": r["task_seed"], "success": bool(r["is_success"]),
                           "reward": float(r["final_reward"]), "turns": r["turns"],
                           "failed_checks": [c["name"] for c in checks if not c["passed"]],
                           "decisions": [list(x) for x in record_outcomes(r) if x[0]],
                           "seconds": round(seconds_each, 2)}  # fmt: skip
                    fh.write(json.dumps(row) + "\n")
                    done.append(row)
            bar.update(len(records))
    return {
        "tasks": len(done),
        "successes": sum(r["success"] for r in done),
        "mean_reward": round(sum(r["reward"] for r in done) / max(1, len(done)), 4),
        # summed over the episodes, so that an evaluation resumed or extended counts them all
        "seconds": round(sum(r.get("seconds", 0.0) for r in done), 1),
        "per_task_success": [int(r["success"]) for r in done],
        "failed_checks": dict(Counter(c for r in done for c in r.get("failed_checks", []))),
        # where the environment declares decisions: success per class and balanced accuracy
        **decision_breakdown(tuple(x) for r in done for x in r.get("decisions", [])),
    }


def grpo_phase(args: argparse.Namespace, run: Path, adapter: str) -> dict:
    from trace_train import grpo
    from trace_train.config import GRPORunConfig

    cfg = GRPORunConfig(
        **rollout_settings(args),
        output_dir=str(run / "grpo"),
        init_adapter=adapter,
        group_size=args.group,
        groups_per_step=args.groups_per_step,
        steps=args.steps,
        learning_rate=args.grpo_lr,
        temperature=args.temperature,
        hint_ratio=0.25,
        save_steps=2,
        eval_episodes=0,
    )
    result = grpo.train(cfg)
    lines = [json.loads(x) for x in result.log_path.read_text().splitlines()]
    steps = [x for x in lines if "event" not in x]
    keep = ("step", "reward/mean", "reward/mean_no_hint", "env/success", "env/success_no_hint",
            "group/informative_share", "rollouts/total", "time/step_seconds")  # fmt: skip
    return {
        "adapter": str(result.adapter_dir),
        # summed over the steps, so that a run resumed from a checkpoint counts them all
        "seconds": round(sum(x.get("time/step_seconds", 0.0) for x in steps), 1),
        "steps": result.global_step,
        "rollouts": steps[-1].get("rollouts/total", 0) if steps else 0,
        "log": [{k: x[k] for k in keep if k in x} for x in steps],
    }


def plot(report: dict, path: Path) -> None:
    """Train reward / success per GRPO step and held-out success before, during and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = report["training_log"]
    steps = [x["step"] for x in log]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.plot(
        steps, [x.get("reward/mean_no_hint") for x in log], ".-", label="train reward (unhinted)"
    )
    ax.plot(steps, [x.get("env/success_no_hint") for x in log], ".-", alpha=0.6,
            label="train success (unhinted)")  # fmt: skip
    for step, key, colour, when in (
        (0, "before", "tab:red", "of the warm start (GRPO's start)"),
        (report["grpo_steps"], "after", "tab:green", "after GRPO"),
    ):
        p, (lo, hi) = report[f"{key}_success_rate"], report[f"{key}_success_ci95"]
        ax.errorbar([step], [p], yerr=[[max(0.0, p - lo)], [max(0.0, hi - p)]], fmt="s", color=colour, capsize=4,
                    label=f"held-out success {when} ({report['heldout_tasks']} tasks, 95 % CI)")  # fmt: skip
    n = report["heldout_tasks"]
    between = [x for x in report["heldout_by_step"] if 0 < x["step"] < report["grpo_steps"]]
    for i, x in enumerate(between):
        p, (lo, hi) = x["successes"] / n, x["ci95"]
        ax.errorbar([x["step"]], [p], yerr=[[max(0.0, p - lo)], [max(0.0, hi - p)]], fmt="s", color="tab:purple", capsize=4,
                    label=None if i else "held-out success during GRPO (same tasks)")  # fmt: skip
    if "base_successes" in report:
        ax.axhline(report["base_successes"] / report["heldout_tasks"], ls="--", color="grey",
                   label="held-out success of the untrained model")  # fmt: skip
    ax.set_xlabel(f"GRPO step ({report['rollouts'] // max(1, report['grpo_steps'])} rollouts each)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{report['model']} on {report['env_id']} (d={report['difficulty']:g}), CPU")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)


def adapters_provenance(adapters: dict[str, str]) -> dict:
    """Each adapter's hash and its run's record (``trace_train.json``: commit, seeds, config,
    base hash, dtypes), with this process's commit and machine."""
    from trace_train import provenance

    record: dict = {"git": provenance.git_state(), "machine": provenance.machine()}
    for name, path in adapters.items():
        meta = Path(path) / "trace_train.json"
        record[name] = {
            **provenance.adapter_hash(path),
            "record": json.loads(meta.read_text()).get("provenance") if meta.is_file() else None,
        }
    return record


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from trace_diagnose.stats import mcnemar_exact, newcombe, newcombe_paired, wilson

    run = Path(args.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    started = time.time()

    ws = phase_done(run, "warmstart") or finish_phase(
        run,
        "warmstart",
        given_adapter(args.init_adapter) if args.init_adapter else warm_start(args, run),
    )
    before = evaluation(args, run, "eval_before", ws["adapter"])
    rl = phase_done(run, "grpo") or finish_phase(run, "grpo", grpo_phase(args, run, ws["adapter"]))
    after = evaluation(args, run, "eval_after", rl["adapter"])
    # The untrained model on the same tasks: last, as the slowest to play (it writes prose to
    # the token limit every turn), and what both trainings together are measured against.
    base = None if args.skip_base else evaluation(args, run, "eval_base", None)
    between = {step: evaluation(args, run, f"eval_step{step}", path)
               for step, path in intermediate_adapters(args)}  # fmt: skip

    n, k0, k1 = args.heldout, before["successes"], after["successes"]
    diff_lo, diff_hi = newcombe(k1, n, k0, n)
    phase_seconds = sum(x["seconds"] for x in (ws, before, rl, after, base) if x)

    def compare(first: dict, then: dict) -> dict:
        lo, hi = newcombe(then["successes"], n, first["successes"], n)
        pairs = list(zip(first["per_task_success"], then["per_task_success"], strict=True))
        gained, lost = sum(a < b for a, b in pairs), sum(a > b for a, b in pairs)
        kept = sum(a and b for a, b in pairs)
        # The same tasks before and after: the paired interval uses that (the unpaired one
        # treats them as two samples and is wider).
        paired_lo, paired_hi = newcombe_paired(kept, gained, lost, n - kept - gained - lost)
        return {
            "gain": (then["successes"] - first["successes"]) / n,
            "ci95_newcombe": [round(lo, 4), round(hi, 4)],
            "excludes_zero": lo > 0 or hi < 0,
            "ci95_paired_newcombe": [round(paired_lo, 4), round(paired_hi, 4)],
            "paired_excludes_zero": paired_lo > 0 or paired_hi < 0,
            "failed_then_solved": gained,
            "solved_then_failed": lost,
            "mcnemar_exact_p": round(mcnemar_exact(gained, lost), 4),
        }

    comparisons = {"grpo_vs_warmstart": compare(before, after)}
    comparisons.update({f"step{step}_vs_warmstart": compare(before, r) for step, r in between.items()})  # fmt: skip
    if base:
        comparisons.update(warmstart_vs_base=compare(base, before), trained_vs_base=compare(base, after))  # fmt: skip
    first = args.heldout_first_seed
    report = {
        "env_id": ENV_ID,
        "difficulty": args.difficulty,
        "model": "SmolLM2-135M-Instruct (embedded)" if args.model == "embedded" else args.model,
        "heldout_tasks": n,
        "heldout_split": f"eval, seeds {first}..{first + n - 1}, greedy",
        "before": "the warm-started adapter (GRPO's start); after: the same adapter after GRPO",
        "before_successes": k0,
        "after_successes": k1,
        "before_success_rate": k0 / n,
        "after_success_rate": k1 / n,
        "before_success_ci95": list(wilson(k0, n)),
        "after_success_ci95": list(wilson(k1, n)),
        "gain": (k1 - k0) / n,
        "gain_ci95_newcombe": [round(diff_lo, 4), round(diff_hi, 4)],
        "gain_ci95_paired_newcombe": comparisons["grpo_vs_warmstart"]["ci95_paired_newcombe"],
        # Before and after play the same tasks, so the paired interval is the one that fits;
        # the two-sample one is kept beside it (it ignores the pairing, and is wider).
        "gain_is_real": comparisons["grpo_vs_warmstart"]["ci95_paired_newcombe"][0] > 0,
        "gain_is_real_means": "the paired Newcombe 95 % interval lies above zero",
        "gain_is_real_unpaired": diff_lo > 0,
        "failed_checks": {
            "base": base.get("failed_checks") if base else None,
            "before": before.get("failed_checks"),
            "after": after.get("failed_checks"),
        },
        "before_mean_reward": before["mean_reward"],
        "after_mean_reward": after["mean_reward"],
        # success per decision class beside the overall rate (empty on an environment that
        # declares no decisions, as tool-call): a gain in one class only shows here
        "per_decision": {
            name: {
                "per_decision": r.get("per_decision", {}),
                "balanced_accuracy": r.get("balanced_accuracy"),
            }
            for name, r in (("base", base), ("before", before), ("after", after))
            if r
        },  # fmt: skip
        "comparisons": comparisons,
        # held-out success along GRPO, on the same tasks: the start, given adapters, the end
        "heldout_by_step": [
            {"step": step, "successes": r["successes"], "ci95": list(wilson(r["successes"], n))}
            for step, r in sorted({0: before, **between, rl["steps"]: after}.items())
        ],
        "rollouts": rl["rollouts"],
        "grpo_steps": rl["steps"],
        "group_size": args.group,
        "groups_per_step": args.groups_per_step,
        "grpo_learning_rate": args.grpo_lr,
        "rollout_temperature": args.temperature,
        "warmstart": {
            k: ws[k]
            for k in (
                "adapter",
                "demonstrations",
                "epochs",
                "steps",
                "seconds",
                "loss_first",
                "loss_last",
            )
            if k in ws
        },
        "phase_seconds": {
            "warmstart": ws["seconds"],
            "eval_before": before["seconds"],
            "grpo": rl["seconds"],
            "eval_after": after["seconds"],
            "eval_base": base["seconds"] if base else None,
        },  # fmt: skip
        "wall_seconds": round(phase_seconds, 1),
        "threads": args.threads,
        "bf16_autocast_in_training": rollout_settings(args)["bf16"],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "training_log": rl["log"],
        "command": f"OMP_NUM_THREADS={args.threads} python benchmarks/learning_cpu.py "
        + shlex.join(sys.argv[1:] if argv is None else argv),
    }
    if base:
        report.update(base_successes=base["successes"], base_success_ci95=list(wilson(base["successes"], n)))  # fmt: skip
    report["provenance"] = adapters_provenance({"warmstart": ws["adapter"], "grpo": rl["adapter"]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, out.with_suffix(".png"))
    print(json.dumps({k: v for k, v in report.items() if k != "training_log"}, indent=2))
    print(f"this invocation: {time.time() - started:.0f} s; report: {out}")
    return report


if __name__ == "__main__":
    main()
