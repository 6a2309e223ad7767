"""Calibration: does an environment give a learning signal to a given policy?

TRACE accepts a synthesised environment only when a reference policy, run on ``seeds`` tasks
with ``group`` rollouts each (a GRPO group), lands in an acceptance band (paper section 3.6):

| statistic | accepted when |
|---|---|
| mean reward | 0.2 - 0.6 |
| success rate | 20 - 60 % |
| all-success groups | <= 20 % |
| all-zero groups | <= 20 % |
| informative (non-constant) groups | >= 50 % |
| reward standard deviation | >= 0.05 |

Pass@k (k = 1, 4, 8, 16 up to the group size) is reported with the unbiased estimator of Chen
et al. (2021), averaged over groups. A group whose rewards are all equal gives GRPO no
advantage, hence the informative-group share.

Where the environment declares the decision its verifier judges (grant / refuse, ask / act /
decline), the report adds the success rate per decision class and the balanced accuracy (the
mean of the per-class rates): a policy that always grants wins the grant share of the tasks
and shows 0 on the refusals, which the overall rate hides (:mod:`trace_gym.validation.decisions`).

The policy is an agent spec (``oracle``, ``random:SEED``, ``deficit:precondition=0.7:SEED``,
...) or a factory ``rollout_index -> agent``. An agent with a ``seed`` attribute gets a
distinct seed per rollout of a group, as temperature sampling gives a model distinct
rollouts; a deterministic agent gives constant groups, which the report flags.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from trace_gym.agents.baselines import Agent, make_agent
from trace_gym.episodes import run_episode
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import check_difficulty, check_split, derive_seed
from trace_gym.registration import entry
from trace_gym.validation.decisions import decision_breakdown

MEAN_REWARD_BAND = (0.2, 0.6)
SUCCESS_RATE_BAND = (0.2, 0.6)
MAX_ALL_SUCCESS_SHARE = 0.2
MAX_ALL_ZERO_SHARE = 0.2
MIN_INFORMATIVE_SHARE = 0.5
MIN_REWARD_STD = 0.05
PASS_AT_K = (1, 4, 8, 16)
CONSTANT_TOLERANCE = 1e-9
"""Rewards closer than this count as equal when deciding that a group is constant."""

AgentSource = str | Callable[[int], Agent]


@dataclass(frozen=True)
class CalibrationReport:
    """The acceptance statistics of one (environment, policy, difficulty, split)."""

    env_id: str
    agent: str
    seeds: int
    group: int
    difficulty: float
    split: str
    n_episodes: int
    mean_reward: float
    reward_std: float
    success_rate: float
    zero_share: float
    """Share of episodes with reward 0."""
    partial_share: float
    """Share of episodes with a reward strictly between 0 and 1."""
    all_success_groups: float
    all_zero_groups: float
    constant_groups: float
    informative_groups: float
    pass_at_k: dict[int, float]
    flags: list[str] = field(default_factory=list)
    """One line per statistic outside the acceptance band (empty: accepted)."""
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Decision class -> ``{"n", "successes", "success_rate"}`` over the episodes (empty when
    the environment declares no decisions)."""
    balanced_accuracy: float | None = None
    """The mean of the per-class success rates (None without declared decisions)."""

    @property
    def accepted(self) -> bool:
        return not self.flags

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
        out["accepted"] = self.accepted
        return out

    def render(self) -> str:
        """A short human-readable report."""
        lines = [
            f"calibration of {self.env_id} with agent {self.agent!r}",
            f"  {self.seeds} seeds x {self.group} rollouts = {self.n_episodes} episodes "
            f"(difficulty {self.difficulty:.2f}, split {self.split})",
            f"  mean reward      {self.mean_reward:.3f}   (band {_band(MEAN_REWARD_BAND)})",
            f"  reward std       {self.reward_std:.3f}   (>= {MIN_REWARD_STD})",
            f"  success rate     {self.success_rate:.1%}  (band {_band(SUCCESS_RATE_BAND)})",
            f"  zero / partial   {self.zero_share:.1%} / {self.partial_share:.1%}",
            f"  all-success grp  {self.all_success_groups:.1%}  (<= {MAX_ALL_SUCCESS_SHARE:.0%})",
            f"  all-zero grp     {self.all_zero_groups:.1%}  (<= {MAX_ALL_ZERO_SHARE:.0%})",
            f"  informative grp  {self.informative_groups:.1%}  (>= {MIN_INFORMATIVE_SHARE:.0%})",
            "  pass@k           "
            + ", ".join(f"@{k} {v:.3f}" for k, v in sorted(self.pass_at_k.items())),
        ]
        if self.decisions:
            per = ", ".join(
                f"{d} {v['success_rate']:.1%} (n={v['n']})" for d, v in self.decisions.items()
            )
            lines.append(f"  per decision     {per}")
            lines.append(f"  balanced acc.    {self.balanced_accuracy:.1%}  (mean of the above)")
        verdict = "ACCEPTED" if self.accepted else "REJECTED"
        lines.append(f"  {verdict}" + "".join(f"\n    - {f}" for f in self.flags))
        return "\n".join(lines)


def _band(band: tuple[float, float]) -> str:
    return f"{band[0]:g}-{band[1]:g}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` passed (Chen et al., 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _is_constant(rewards: Sequence[float]) -> bool:
    return max(rewards) - min(rewards) <= CONSTANT_TOLERANCE


def summarize(
    rewards: Sequence[Sequence[float]],
    successes: Sequence[Sequence[bool]],
    decisions: Sequence[str | None] | None = None,
    **meta: Any,
) -> CalibrationReport:
    """The report for per-group rewards and successes (one inner list per seed).

    ``decisions`` gives each group's decision class (its task's ``info["decision"]``), for
    success per class and the balanced accuracy; ``meta`` gives the descriptive fields:
    ``env_id``, ``agent``, ``difficulty``, ``split``.
    """
    if not rewards or any(len(g) != len(rewards[0]) or not g for g in rewards):
        raise ConfigError("calibration needs at least one group, all of one non-zero size")
    flat = [r for g in rewards for r in g]
    wins = [bool(s) for g in successes for s in g]
    n_groups, size = len(rewards), len(rewards[0])
    passed_per_group = [sum(bool(s) for s in g) for g in successes]
    if decisions is not None and len(decisions) != n_groups:
        raise ConfigError(f"decisions needs one class per group: {len(decisions)} for {n_groups}")
    breakdown = decision_breakdown(
        (decision, bool(s))
        for decision, group in zip(decisions or [None] * n_groups, successes, strict=True)
        for s in group
    )
    report = CalibrationReport(
        env_id=str(meta.get("env_id", "")),
        agent=str(meta.get("agent", "")),
        seeds=n_groups,
        group=size,
        difficulty=float(meta.get("difficulty", 0.5)),
        split=str(meta.get("split", "train")),
        n_episodes=len(flat),
        mean_reward=statistics.fmean(flat),
        reward_std=statistics.pstdev(flat),
        success_rate=sum(wins) / len(wins),
        zero_share=sum(r <= 0.0 for r in flat) / len(flat),
        partial_share=sum(0.0 < r < 1.0 for r in flat) / len(flat),
        all_success_groups=sum(c == size for c in passed_per_group) / n_groups,
        all_zero_groups=sum(max(g) <= 0.0 for g in rewards) / n_groups,
        constant_groups=sum(_is_constant(g) for g in rewards) / n_groups,
        informative_groups=sum(not _is_constant(g) for g in rewards) / n_groups,
        pass_at_k={
            k: statistics.fmean(pass_at_k(size, c, k) for c in passed_per_group)
            for k in PASS_AT_K
            if k <= size
        },
        decisions=breakdown["per_decision"],
        balanced_accuracy=breakdown["balanced_accuracy"],
    )
    return _flagged(report)


def _flagged(r: CalibrationReport) -> CalibrationReport:
    flags = []
    lo, hi = MEAN_REWARD_BAND
    if not lo <= r.mean_reward <= hi:
        flags.append(f"mean reward {r.mean_reward:.3f} outside {lo}-{hi}")
    lo, hi = SUCCESS_RATE_BAND
    if not lo <= r.success_rate <= hi:
        flags.append(f"success rate {r.success_rate:.1%} outside {lo:.0%}-{hi:.0%}")
    if r.all_success_groups > MAX_ALL_SUCCESS_SHARE:
        flags.append(f"{r.all_success_groups:.1%} all-success groups (max 20%): too easy")
    if r.all_zero_groups > MAX_ALL_ZERO_SHARE:
        flags.append(f"{r.all_zero_groups:.1%} all-zero groups (max 20%): too hard")
    if r.informative_groups < MIN_INFORMATIVE_SHARE:
        flags.append(f"only {r.informative_groups:.1%} informative groups (min 50%)")
    if r.reward_std < MIN_REWARD_STD:
        flags.append(f"reward std {r.reward_std:.3f} below {MIN_REWARD_STD}")
    return CalibrationReport(**{**r.__dict__, "flags": flags})


def agent_for_rollout(agent: AgentSource, rollout: int) -> Agent:
    """The agent of one rollout of a group (a distinct seed when the agent has one)."""
    if callable(agent):
        return agent(rollout)
    made = _make_from_spec(agent)
    if hasattr(made, "seed"):
        made.seed = derive_seed("calibrate.rollout", made.seed, rollout)
    return made


def _make_from_spec(spec: str) -> Agent:
    if spec.startswith("deficit"):
        from trace_gym.agents.deficit import deficit_agent_from_spec  # avoids an import cycle

        return deficit_agent_from_spec(spec)
    return make_agent(spec)


def calibrate(
    env_id: str,
    agent_spec: AgentSource,
    seeds: int = 100,
    group: int = 16,
    difficulty: float = 0.5,
    split: str = "train",
    env_kwargs: dict[str, Any] | None = None,
) -> CalibrationReport:
    """Run ``seeds`` tasks x ``group`` rollouts of an agent and report against the band.

    Task seeds are ``0 .. seeds-1`` of ``split``; every rollout of a group plays the same task.
    """
    entry(env_id)  # an unknown id fails here, with suggestions
    if seeds < 1 or group < 1:
        raise ConfigError(f"seeds and group must be >= 1, got {seeds} and {group}")
    difficulty, split = check_difficulty(difficulty), check_split(split)
    env = gym.make(env_id, disable_env_checker=True, **dict(env_kwargs or {}))
    agents = [agent_for_rollout(agent_spec, r) for r in range(group)]
    options = {"difficulty": difficulty, "split": split}
    rewards, successes, decisions = [], [], []
    try:
        for seed in range(seeds):
            records = [run_episode(env, a, seed=seed, options=options) for a in agents]
            rewards.append([float(rec["final_reward"]) for rec in records])
            successes.append([bool(rec["is_success"]) for rec in records])
            decisions.append(records[0].get("decision"))
    finally:
        env.close()
    name = agent_spec if isinstance(agent_spec, str) else getattr(agents[0], "name", "agent")
    return summarize(
        rewards,
        successes,
        decisions,
        env_id=env_id,
        agent=name,
        difficulty=difficulty,
        split=split,
    )


# -- command line -----------------------------------------------------------------------------
def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``calibrate ID --agent SPEC --seeds N --group G [--difficulty D] [--json OUT]``."""
    p = subparsers.add_parser(
        "calibrate",
        help="run an agent on seeds x rollouts and report against the acceptance band",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("env_id", metavar="ID", help="environment id, e.g. trace/precondition-v0")
    p.add_argument(
        "--agent",
        required=True,
        help="agent spec: oracle, null, random[:SEED], call_every_tool, "
        "deficit:CAP=P[,CAP=P...][:SEED]",
    )
    p.add_argument("--seeds", type=int, default=100, help="tasks (default 100)")
    p.add_argument("--group", type=int, default=16, help="rollouts per task (default 16)")
    p.add_argument("--difficulty", type=float, default=0.5, help="difficulty (default 0.5)")
    p.add_argument("--split", default="train", help="train, eval or test (default train)")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT")
    p.add_argument(
        "--strict", action="store_true", help="exit with status 1 when the report is rejected"
    )
    p.set_defaults(fn=calibrate_command)
    return p


def calibrate_command(args: argparse.Namespace) -> int:
    """Handler of the ``calibrate`` subcommand: print the report, optionally write JSON."""
    report = calibrate(
        args.env_id,
        args.agent,
        seeds=args.seeds,
        group=args.group,
        difficulty=args.difficulty,
        split=args.split,
    )
    print(report.render())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 1 if getattr(args, "strict", False) and not report.accepted else 0
