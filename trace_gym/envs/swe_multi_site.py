"""``trace/swe-multi-site-v0``: the same mistake at several parallel sites, all fixed.

## Capability
*Multi-site consistency* (8 % of the paper's unresolved SWE-bench instances): a policy the
module states once (limits are reached at equality; reported figures carry two decimals) is
broken the same way in 2-5 functions. Fixing only the site the issue mentions first leaves
the target test failing (it checks every site); decoy functions that follow the opposite
rule on purpose must stay as they are.

## Task
A generated module (:mod:`trace_gym.envs.helpers.swe_codegen`) with a ``POLICY`` comment, the sites
and the decoys; the issue names the policy and two symptoms.

## Observation and Action, Reward, Episode End
As for every single-turn SWE environment (:mod:`trace_gym.envs.helpers.swe_common`). The fewest
edits are one per site, so ``few_edits`` is full with one block per site.

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| sites with the defect | 2 | 5 |
| decoys that follow the other rule on purpose | 0 | 2 |
| filler functions (module size) | 30 | 48 |

The knobs are declared in ``SweMultiSiteEnv.knob_rates`` and hold on every task.

## Version History
* v0: initial version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trace_gym.core.config import apply_overrides
from trace_gym.core.plans import Segment
from trace_gym.core.spec import KnobRate, SpecConfig
from trace_gym.envs.helpers import swe_codegen as cg
from trace_gym.envs.helpers.swe_common import SweTask, emit_edits, oracle_triples, single_turn_spec
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG

CAPABILITY = "multi_site_consistency"
ENV_ID = "trace/swe-multi-site-v0"
POLICIES = ("inclusive_limit", "two_decimals")
SITE_WORDS = ("over_budget", "needs_review", "alert", "escalate", "throttle", "flag", "cap_hit")


@dataclass(frozen=True)
class MultiSiteConfig(SpecConfig):
    n_sites: int = 3
    n_decoys: int = 1
    n_fillers: int = 38

    def __post_init__(self) -> None:
        if not 2 <= self.n_sites <= 5:
            raise ConfigError(f"n_sites must be in 2..5, got {self.n_sites}")
        if not 0 <= self.n_decoys <= 2:
            raise ConfigError(f"n_decoys must be in 0..2, got {self.n_decoys}")
        if not 8 <= self.n_fillers <= 60:
            raise ConfigError(f"n_fillers must be in 8..60, got {self.n_fillers}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> MultiSiteConfig:
        base = cls(n_sites=2 + round(3 * d), n_decoys=round(2 * d), n_fillers=30 + round(18 * d))
        return apply_overrides(base, overrides, "swe-multi-site")


def plan(rng: StableRNG, d: cg.Domain, cfg: MultiSiteConfig) -> tuple:
    policy = rng.choice(POLICIES)
    val, rec = d.value, d.record
    words = rng.sample(SITE_WORDS, cfg.n_sites + cfg.n_decoys)
    units, reps, target, hidden, visible = [], [], [], [], []
    for i, word in enumerate(words):
        decoy = i >= cfg.n_sites
        if policy == "inclusive_limit":
            name = f"{rec}_{word}"
            limit = rng.integer(10, 90)
            op = ">" if decoy else ">="
            rule = (
                "strictly above ``limit`` (by design, unlike POLICY)"
                if decoy
                else "at or above ``limit`` (POLICY)"
            )
            head = f'def {name}(value, limit={limit}):\n    """True when the {val} is {rule}."""\n'
            units.append(cg.Unit(name, f"{head}    return value {op} limit\n", ()))
            calls = [f"M.{name}({limit})", f"M.{name}(5, 5)", f"M.{name}({limit + 3}, {limit + 3})"]
            good, bad = f"{head}    return value >= limit\n", f"{head}    return value > limit\n"
            ok_calls = [f"M.{name}({limit + 1})", f"M.{name}({limit - 1})"]
        else:
            name = f"{word}_{val}_figure"
            places = 3 if decoy else 2
            rule = "three decimals (by design, unlike POLICY)" if decoy else "two decimals (POLICY)"
            head = (
                f'def {name}(values):\n    """Reported {word.replace("_", " ")} figure: the '
                f'mean of ``values``, {rule}."""\n    mean = sum(values) / len(values)\n'
            )
            units.append(cg.Unit(name, f"{head}    return round(mean, {places})\n", ()))
            calls = [
                f"M.{name}([1, 2, 2])",
                f"M.{name}([0.5, 0.25, 0.125, 1])",
                f"M.{name}([10, 10, 11])",
            ]
            good, bad = f"{head}    return round(mean, 2)\n", f"{head}    return round(mean, 1)\n"
            ok_calls = [f"M.{name}([4, 6])", f"M.{name}([1.5])"]
        visible += ok_calls
        if decoy:
            visible += calls[:2]
            continue
        reps.append((good, bad))
        target.append(calls[0])
        hidden += calls[1:]
    p = cg.DefectPlan(tuple(rng.shuffle(units)), tuple(reps), tuple(target), tuple(hidden),
                      tuple(visible), constants=_policy_comment(policy, d), keep_order=True)  # fmt: skip
    intro = {"inclusive_limit": "Limits are reached at equality (see POLICY), but some checks "
             "only fire above the limit.",
             "two_decimals": "Reported figures must carry two decimals (see POLICY), but some "
             "are rounded to one."}[policy]  # fmt: skip
    return (
        p,
        {"policy": policy, "sites": [u.name for u in units[: cfg.n_sites]]},
        {"n_sites": cfg.n_sites, "n_decoys": cfg.n_decoys, "policy": policy},
        cg.call_issue(intro)(cg.DefectPlan(p.units, p.replacements, p.target_calls[:2], ())),
    )


def _policy_comment(policy: str, d: cg.Domain) -> str:
    if policy == "inclusive_limit":
        return (
            f"# POLICY: a {d.value} limit is reached when the value equals it; checks "
            "compare with >= unless their docstring says otherwise.\n"
        )
    return f"# POLICY: every reported {d.value} figure is rounded to two decimals.\n"


def generate(rng: StableRNG, cfg: MultiSiteConfig) -> SweTask:
    return cg.draw_task(rng, cfg.n_fillers, lambda r, d: plan(r, d, cfg), "multi_site")


def hint(task: SweTask) -> str:
    return (
        "The issue's rule is broken in more than one place: find every function that "
        "implements it and fix each, but leave functions documented as exceptions."
    )


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Fix the site the issue names first and stop."""
    return emit_edits(seg, oracle_triples(seg.task)[:1])


SPEC = single_turn_spec(
    id=ENV_ID,
    capability=CAPABILITY,
    description=(
        "Fix the same policy mistake at every one of 2-5 parallel sites of a generated "
        "module, leaving decoys documented as exceptions untouched."
    ),
    tags=(
        "multi_site_consistency",
        "swe",
        "code_repair",
        "parallel_sites",
        "consistent_edits",
        "incomplete_fix",
    ),
    config=MultiSiteConfig,
    generate=generate,
    hint=hint,
    lapse=lapse,
    knob_rates=(
        # each knob is a function of the difficulty: every task at d = 0 and d = 1
        KnobRate("n_sites", 0.0, 1.0, 0.0, equals=2),
        KnobRate("n_sites", 1.0, 1.0, 0.0, equals=5),
        KnobRate("n_decoys", 0.0, 0.0, 0.0),
        KnobRate("n_decoys", 1.0, 1.0, 0.0, equals=2),
    ),
    template_floor=800,
    # Distinct masked task templates per 1,000 seeds (300 of 300 measured at d = 0, 0.5 and 1).
    env_name="SweMultiSiteEnv",
)
SweMultiSiteEnv = SPEC.env_class
