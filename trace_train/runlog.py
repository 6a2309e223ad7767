"""The training log: one JSON line per optimizer step, written by a TRL callback.

Each line joins what the rollouts of that step did (reward, success with and without the hint,
group reward variance and the share of informative groups, tokens, rollouts used so far) with
TRL's own metrics (loss, grad norm, learning rate), under namespaced keys (``reward/...``,
``env/...``, ``group/...``, ``tokens/...``, ``train/...``), and where the step's wall time
went (``time/step_seconds``, ``time/step_cpu_seconds`` for this process and all its threads,
and ``time/{prefill,decode,backward,env}_share``, shares of the wall time; the rest is the
loss's forward passes, the optimizer and bookkeeping) with the precision each
generation phase ran in (``gen/prefill_dtype``, ``gen/decode_dtype``). Event lines
(``eval_before``, ``train_end``) carry held-out results. Episodes the harness failed are
counted (``env/harness_faults``) and left out of the reward and success means. The share of
groups whose hint-free rollouts differ in reward (``group/informative_share_no_hint``) is
what trains when hinted rollouts are dropped; with importance-weighted hinted rollouts,
``hints/weight_*`` summarise their per-token weights.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from trace_train.decoding import PhaseClock

#: Phases whose share of a step's wall time the log reports.
TIMED_PHASES = ("prefill", "decode", "backward", "env")

_TRL_KEYS = {
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "learning_rate": "train/learning_rate",
}


class RolloutStats:
    """Accumulates the rollouts of the current step; :meth:`flush` summarises and clears."""

    def __init__(self, total: int = 0, group_size: int = 1) -> None:
        self.total = total
        self.group_size = group_size
        self.pending: list[Any] = []
        self.clock = PhaseClock()
        self.wall_start: float | None = None
        self.cpu_start = 0.0
        self.hint_weights: list[float] = []
        self.hint_weight_cap: float | None = None

    def start_clock(self) -> None:
        """Start the wall clock of the next logged step (and drop time spent before it)."""
        self.wall_start, self.cpu_start = time.perf_counter(), time.process_time()
        self.clock.flush()

    def timing(self) -> dict[str, Any]:
        """Shares of the wall time since the last call spent per phase; restarts the clock."""
        if self.wall_start is None:
            return {}
        now, cpu_now = time.perf_counter(), time.process_time()
        wall, seconds = now - self.wall_start, self.clock.flush()
        out: dict[str, Any] = {"time/step_seconds": round(wall, 3),
                               "time/step_cpu_seconds": round(cpu_now - self.cpu_start, 3)}  # fmt: skip
        self.wall_start, self.cpu_start = now, cpu_now
        for phase in TIMED_PHASES:
            out[f"time/{phase}_share"] = round(seconds.get(phase, 0.0) / wall, 4) if wall else 0.0
        out.update({f"gen/{k}": v for k, v in self.clock.notes.items()})
        return out

    def add(self, rollouts: list[Any]) -> None:
        self.pending.extend(rollouts)
        self.total += len(rollouts)

    def add_hint_weights(self, weights: Any, mask: Any) -> None:
        """The importance weights of hinted rollouts' model tokens (``hinted_rollouts:
        importance_weighted``), for this step's ``hints/weight_*`` keys."""
        self.hint_weights.extend(weights[mask.bool()].flatten().tolist())

    def _hint_weight_summary(self) -> dict[str, Any]:
        weights, self.hint_weights = self.hint_weights, []
        if not weights:
            return {}
        out = {"hints/weight_mean": _mean(weights), "hints/weight_min": round(min(weights), 6),
               "hints/weight_max": round(max(weights), 6)}  # fmt: skip
        if self.hint_weight_cap is not None:
            capped = sum(w >= self.hint_weight_cap for w in weights) / len(weights)
            out["hints/weight_capped_share"] = round(capped, 6)
        return out

    def flush(self) -> dict[str, Any]:
        rs, self.pending = self.pending, []
        timing = self.timing()
        if not rs:
            return {"rollouts/total": self.total, **timing}
        played = rs
        faults = sum(getattr(r, "fault", None) is not None for r in played)
        rs = [r for r in played if getattr(r, "fault", None) is None] or played  # scored
        groups: dict[str, list[float]] = defaultdict(list)
        for r in rs:
            groups[r.spec.key()].append(r.reward)
        variances = [statistics.pvariance(v) for v in groups.values()]
        plain = [r for r in rs if not r.spec.hint]
        hinted = [r for r in rs if r.spec.hint]
        plain_groups: dict[str, list[float]] = defaultdict(list)
        for r in plain:
            plain_groups[r.spec.key()].append(r.reward)
        plain_variances = [statistics.pvariance(v) for v in plain_groups.values()]
        return {
            "rollouts/step": len(played),
            "rollouts/total": self.total,
            "reward/mean": _mean(r.reward for r in rs),
            "reward/mean_no_hint": _mean(r.reward for r in plain),
            "reward/mean_hint": _mean(r.reward for r in hinted),
            "env/success": _mean(float(r.success) for r in rs),
            "env/success_no_hint": _mean(float(r.success) for r in plain),
            "env/success_hint": _mean(float(r.success) for r in hinted),
            "env/turns": _mean(r.record.get("turns", 0) for r in rs),
            "env/harness_faults": faults,
            "env/difficulty": _mean(r.spec.difficulty for r in rs),
            "group/reward_variance": _mean(variances),
            "group/informative_share": _mean(float(v > 0) for v in variances),
            # what trains under hinted_rollouts: drop (the hint-free rollouts' rewards differ)
            "group/informative_share_no_hint": _mean(float(v > 0) for v in plain_variances),
            "tokens/model": sum(r.model_tokens for r in played),
            "tokens/env": sum(r.env_tokens for r in played),
            "tokens/prompt": sum(len(r.prompt_ids) for r in played),
            **self._hint_weight_summary(),
            **timing,
        }


def _mean(values: Any) -> float | None:
    values = list(values)
    return round(float(sum(values)) / len(values), 6) if values else None


class TrainingLog(TrainerCallback):
    """Appends one line per logging step to ``training_log.jsonl`` (main process only)."""

    def __init__(self, path: str | Path, stats: RolloutStats) -> None:
        self.path = Path(path)
        self.stats = stats

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.stats.start_clock()

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
    ) -> None:
        logs = dict(logs or {})
        if not state.is_world_process_zero or "train_runtime" in logs:
            return
        record: dict[str, Any] = {"step": state.global_step, **self.stats.flush()}
        for key, value in logs.items():
            if isinstance(value, (int, float)):
                record[_TRL_KEYS.get(key, f"trl/{key}")] = value
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")


def truncate_log(path: str | Path, keep_until_step: int) -> int:
    """Keep the lines of steps ``<= keep_until_step`` (a resumed run repeats the later ones);
    ``-1`` starts the log afresh. Returns the rollouts counted in the kept lines."""
    path = Path(path)
    if not path.is_file():
        return 0
    if keep_until_step < 0:
        path.unlink()
        return 0
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and json.loads(line).get("step", 0) <= keep_until_step:
            if json.loads(line).get("event") != "train_end":
                kept.append(line)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    totals = [json.loads(line).get("rollouts/total", 0) for line in kept]
    return max(totals, default=0)


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """All lines of a training log."""
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]


def time_backward(trainer: Any, stats: RolloutStats) -> None:
    """Count the trainer's backward passes in the step timing (``time/backward_share``).
    The accelerator's ``backward`` is the one call every optimizer step's gradients go
    through, so it is timed in place rather than overriding the trainer's training step."""
    backward = trainer.accelerator.backward

    def timed(*args: Any, **kwargs: Any) -> Any:
        with stats.clock.time("backward"):
            return backward(*args, **kwargs)

    trainer.accelerator.backward = timed


def training_time(lines: list[dict[str, Any]]) -> dict[str, float | None]:
    """Seconds and CPU seconds of a GRPO run's optimizer steps, summed from its log lines over
    every invocation: a run resumed from a checkpoint writes ``train_end`` once, timing only
    its last invocation. Logs older than ``time/step_cpu_seconds`` give CPU seconds only when
    one invocation ran every step (else ``None``: unknown, not zero)."""
    steps = [x for x in lines if "event" not in x and "time/step_seconds" in x]
    seconds = round(sum(x["time/step_seconds"] for x in steps), 1)
    if steps and all("time/step_cpu_seconds" in x for x in steps):
        cpu = round(sum(x["time/step_cpu_seconds"] for x in steps), 1)
        return {"train_seconds": seconds, "train_cpu_seconds": cpu}
    end = next((x for x in reversed(lines) if x.get("event") == "train_end"), {})
    per_step = end.get("seconds_per_step")
    one_invocation = bool(per_step) and round(end["seconds"] / per_step) == len(steps)
    return {"train_seconds": seconds,
            "train_cpu_seconds": end.get("cpu_seconds") if one_invocation else None}  # fmt: skip
