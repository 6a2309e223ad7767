"""``trace/swe-refactor-awareness-v0``: use the helper that already does it right.

## Capability
*Structural-refactor awareness* (6.5 % of the paper's unresolved SWE-bench instances): the
module has a helper for exactly this job (half-up rounding to cents with ``decimal``, a
ratio safe against a zero denominator and clamped to [0, 1]); the defective function does
the job inline and gets an edge case wrong. The fix is to call the helper; an inline patch
that only covers the issue's example fails the hidden edge cases (negative halves, ratios
above one), and the special-casing gate zeroes it.

## Task
A generated module (:mod:`trace_gym.envs.helpers.swe_codegen`) with the helper, 1-4 functions that
already use it, and the defective one.

## Observation and Action, Reward, Episode End
As for every single-turn SWE environment (:mod:`trace_gym.envs.helpers.swe_common`).

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| functions already using the helper (the hint in the code) | 4 | 1 |
| the helper's name says what it does | yes | no (``_norm_<value>``) |
| filler functions (module size) | 30 | 48 |

The knobs are declared in ``SweRefactorEnv.knob_rates`` and hold on every task.

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

CAPABILITY = "structural_refactor_awareness"
ENV_ID = "trace/swe-refactor-awareness-v0"
HELPERS = ("round_half_up", "safe_ratio")
USER_WORDS = ("daily", "weekly", "audit", "export", "invoice", "summary")


@dataclass(frozen=True)
class RefactorConfig(SpecConfig):
    n_users: int = 2
    """Functions that already call the helper (1..4)."""
    plain_name: bool = True
    n_fillers: int = 38

    def __post_init__(self) -> None:
        if not 1 <= self.n_users <= 4:
            raise ConfigError(f"n_users must be in 1..4, got {self.n_users}")
        if not 8 <= self.n_fillers <= 60:
            raise ConfigError(f"n_fillers must be in 8..60, got {self.n_fillers}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> RefactorConfig:
        base = cls(n_users=4 - round(3 * d), plain_name=d < 0.6, n_fillers=30 + round(18 * d))
        return apply_overrides(base, overrides, "swe-refactor-awareness")


def plan(rng: StableRNG, d: cg.Domain, cfg: RefactorConfig) -> tuple:
    kind = rng.choice(HELPERS)
    val, rec = d.value, d.record
    words = rng.sample(USER_WORDS, cfg.n_users + 1)
    units = []
    if kind == "round_half_up":
        helper = f"_round_half_up_{val}" if cfg.plain_name else f"_norm_{val}"
        units.append(
            cg.Unit(
                helper,
                (
                    f'def {helper}(x):\n    """Round half away from zero to cents: 0.125 -> 0.13, '
                    f"-0.125 -> -0.13.\n\n    Use it for every reported {val}; built-in ``round`` "
                    f'rounds half to even on the\n    binary float.\n    """\n'
                    f'    return float(Decimal(repr(x)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))\n'
                ),
                (),
            )
        )
        body = f'    total = sum(r["{val}"] for r in {rec}s)\n'
        for w in words:
            name = f"{w}_{val}_total"
            units.append(
                cg.Unit(
                    name,
                    (
                        f'def {name}({rec}s):\n    """The {w} {val} total, rounded to cents."""\n{body}'
                        f"    return {helper}(total)\n"
                    ),
                    (),
                )
            )
        fn = name
        good = f"{body}    return {helper}(total)\n"
        bad = f"{body}    return round(total, 2)\n"
        one = lambda x: f"M.{fn}([{{'{val}': {x}}}])"  # noqa: E731
        target = (one(0.125),)
        hidden = (one(2.625), one(-0.125), one(-2.625), one(0.625))
        visible = (one(1.5), one(3.25), f"M.{fn}([])")
        constants = "from decimal import ROUND_HALF_UP, Decimal\n"
    else:
        helper = f"_safe_{val}_ratio" if cfg.plain_name else f"_norm_{val}"
        units.append(
            cg.Unit(
                helper,
                (
                    f'def {helper}(part, whole):\n    """``part / whole`` clamped to [0, 1]; 0.0 when '
                    f'``whole`` is not positive."""\n    if whole <= 0:\n        return 0.0\n'
                    f"    return round(min(1.0, max(0.0, part / whole)), 4)\n"
                ),
                (),
            )
        )
        for w in words:
            name = f"{w}_{rec}_share"
            units.append(
                cg.Unit(
                    name,
                    (
                        f'def {name}(done, planned):\n    """Share of the {w} {rec}s completed, '
                        f'in [0, 1]."""\n    return {helper}(done, planned)\n'
                    ),
                    (),
                )
            )
        fn = name
        good = f"    return {helper}(done, planned)\n"
        bad = "    return round(done / planned, 4)\n"
        target = (f"M.{fn}(3, 0)",)
        hidden = (f"M.{fn}(12, 10)", f"M.{fn}(-1, 4)", f"M.{fn}(5, -2)")
        visible = (f"M.{fn}(1, 4)", f"M.{fn}(2, 3)")
        constants = ""
    head = units[-1].source.split("    return")[0] if kind == "safe_ratio" else ""
    reps = ((head + good, head + bad),) if head else ((units[-1].source.split('"""\n', 2)[0]
                                                        + '"""\n' + good,
                                                        units[-1].source.split('"""\n', 2)[0]
                                                        + '"""\n' + bad),)  # fmt: skip
    p = cg.DefectPlan(tuple(units), reps, target, hidden, visible, constants=constants,
                      keep_order=False)  # fmt: skip
    intro = f"`{fn}` disagrees with the other {val} functions on some inputs."
    return (
        p,
        {"helper": helper, "function": fn, "kind": kind},
        {"n_users": cfg.n_users, "plain_name": cfg.plain_name, "helper_kind": kind},
        cg.call_issue(intro)(p),
    )


def generate(rng: StableRNG, cfg: RefactorConfig) -> SweTask:
    return cg.draw_task(rng, cfg.n_fillers, lambda r, d: plan(r, d, cfg), "refactor")


def hint(task: SweTask) -> str:
    return (
        "Before writing new logic, look for a helper in the module that already does "
        "this job (and handles its edge cases) and call it."
    )


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Write the helper's job inline, covering the issue's example only."""
    out = []
    for p, s, _ in oracle_triples(seg.task):
        if "round(total, 2)" in s:
            inline = s.replace("round(total, 2)", "round(total + 1e-9, 2)")
        else:
            inline = s.replace(
                "round(done / planned, 4)", "round(done / planned, 4) if planned else 0.0"
            )
        out.append((p, s, inline))
    return emit_edits(seg, out)


SPEC = single_turn_spec(
    id=ENV_ID,
    capability=CAPABILITY,
    description=(
        "Replace inline logic that misses an edge case with the module's existing helper "
        "that already does the job right (half-up cents rounding, a safe clamped ratio)."
    ),
    tags=(
        "structural_refactor_awareness",
        "swe",
        "code_repair",
        "reuse_existing_helpers",
        "refactoring",
        "codebase_conventions",
    ),
    config=RefactorConfig,
    generate=generate,
    hint=hint,
    lapse=lapse,
    knob_rates=(
        # each knob is a function of the difficulty: every task at d = 0 and d = 1
        KnobRate("n_users", 0.0, 1.0, 0.0, equals=4),
        KnobRate("n_users", 1.0, 1.0, 0.0, equals=1),
        KnobRate("plain_name", 0.0, 1.0, 0.0),
        KnobRate("plain_name", 1.0, 0.0, 0.0),
    ),
    template_floor=800,
    # Distinct masked task templates per 1,000 seeds (300 of 300 measured at d = 0, 0.5 and 1).
    env_name="SweRefactorEnv",
)
SweRefactorEnv = SPEC.env_class
