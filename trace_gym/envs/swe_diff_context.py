"""``trace/swe-diff-context-v0``: the right fix in the right one of several near-duplicates.

## Capability
*Diff-context precision* (8 % of the paper's unresolved SWE-bench instances): the agent
knows the fix but places it wrongly. The module holds 2-5 near-duplicate converter
functions; one of them was copy-pasted from the function before it and kept that function's
factor. Because a SEARCH block applies at its first occurrence, a block that quotes only the
wrong line edits the earlier (correct) twin: the target still fails and a passing test
breaks. The block must carry enough context (the ``def`` line) to be unique.

## Task
A generated module (:mod:`trace_gym.envs.helpers.swe_codegen`) with converters
``{value}_from_{source}(value)``; the issue says one converter gives its twin's result.

## Observation and Action, Reward, Episode End
As for every single-turn SWE environment (:mod:`trace_gym.envs.helpers.swe_common`).

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| near-duplicate converters | 2 | 5 |
| decoy similarity | each twin names its variables apart | identical bodies but the constants |
| filler functions (module size) | 30 | 48 |

The knobs are declared in ``SweDiffContextEnv.knob_rates`` and hold on every task.

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

CAPABILITY = "diff_context_precision"
ENV_ID = "trace/swe-diff-context-v0"
SOURCES = ("legacy", "vendor", "partner", "archive", "edge", "backup", "import", "mirror")
FACTORS = ("0.25", "1.5", "2.0", "0.8", "1.25", "3.0", "0.4", "2.5")


@dataclass(frozen=True)
class DiffContextConfig(SpecConfig):
    n_twins: int = 3
    """Near-duplicate converters (2..5)."""
    identical: bool = True
    """Twins share variable names, so only the ``def`` line tells them apart."""
    n_fillers: int = 38

    def __post_init__(self) -> None:
        if not 2 <= self.n_twins <= 5:
            raise ConfigError(f"n_twins must be in 2..5, got {self.n_twins}")
        if not 8 <= self.n_fillers <= 60:
            raise ConfigError(f"n_fillers must be in 8..60, got {self.n_fillers}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> DiffContextConfig:
        base = cls(n_twins=2 + round(3 * d), identical=d >= 0.25, n_fillers=30 + round(18 * d))
        return apply_overrides(base, overrides, "swe-diff-context")


def plan(rng: StableRNG, d: cg.Domain, cfg: DiffContextConfig) -> tuple:
    val = d.value
    sources = rng.sample(SOURCES, cfg.n_twins)
    factors = rng.sample(FACTORS, cfg.n_twins)
    offset = rng.choice(("0", "0.5", "1"))
    bad_at = rng.integer(1, cfg.n_twins - 1)
    units, names = [], []
    for src, factor in zip(sources, factors, strict=True):
        name = f"{val}_from_{src}"
        var = "scaled" if cfg.identical else f"{src}_scaled"
        names.append(name)
        units.append(
            cg.Unit(
                name,
                (
                    f'def {name}(value):\n    """Convert a {val} reported by the {src} feed to {d.unit}."""\n'
                    f"    {var} = value * {factor}\n    return round({var} + {offset}, 3)\n"
                ),
                (),
            )
        )
    var = "scaled" if cfg.identical else f"{sources[bad_at]}_scaled"
    head = f"def {names[bad_at]}(value):\n"
    doc = f'    """Convert a {val} reported by the {sources[bad_at]} feed to {d.unit}."""\n'
    good = f"{head}{doc}    {var} = value * {factors[bad_at]}\n"
    bad = f"{head}{doc}    {var} = value * {factors[bad_at - 1]}\n"
    fn = names[bad_at]
    target = (f"M.{fn}(10)",)
    hidden = (f"M.{fn}(4)", f"M.{fn}(7.5)", f"M.{fn}(-2)")
    visible = tuple(f"M.{n}({x})" for n in names for x in (10, 3) if n != fn)
    p = cg.DefectPlan(tuple(units), ((good, bad),), target, hidden, visible)
    twin = names[bad_at - 1]
    intro = (
        f"`{fn}` looks copy-pasted from `{twin}`: it gives the {sources[bad_at - 1]} "
        f"result for {sources[bad_at]} data."
    )
    return (
        p,
        {"function": fn, "twin": twin},
        {"n_twins": cfg.n_twins, "identical_twins": cfg.identical},
        cg.call_issue(intro)(p),
    )


def generate(rng: StableRNG, cfg: DiffContextConfig) -> SweTask:
    return cg.draw_task(rng, cfg.n_fillers, lambda r, d: plan(r, d, cfg), "diff_context")


def hint(task: SweTask) -> str:
    return (
        "Several functions look alike. Quote enough context in SEARCH (the def line) "
        "that it matches only the function the issue names."
    )


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Quote only the changed line; it first occurs in the twin defined earlier."""
    out = []
    for p, s, r in oracle_triples(seg.task):
        old = [ln for ln in s.split("\n") if ln.strip()][-1]
        new = [ln for ln in r.split("\n") if ln.strip()][-1]
        out.append((p, old + "\n", new + "\n"))
    return emit_edits(seg, out)


SPEC = single_turn_spec(
    id=ENV_ID,
    capability=CAPABILITY,
    description=(
        "Fix the one wrong function among 2-5 near-duplicates with a SEARCH block that "
        "carries enough context to match it alone (a block applies at its first match)."
    ),
    tags=(
        "diff_context_precision",
        "swe",
        "code_repair",
        "patch_localization",
        "edit_placement",
        "near_duplicate_code",
    ),
    config=DiffContextConfig,
    generate=generate,
    hint=hint,
    lapse=lapse,
    knob_rates=(
        # each knob is a function of the difficulty: every task at d = 0 and d = 1
        KnobRate("n_twins", 0.0, 1.0, 0.0, equals=2),
        KnobRate("n_twins", 1.0, 1.0, 0.0, equals=5),
        KnobRate("identical_twins", 0.0, 0.0, 0.0),
        KnobRate("identical_twins", 1.0, 1.0, 0.0),
    ),
    template_floor=900,
    # Distinct masked task templates per 1,000 seeds (1,000 of 1,000 measured at d = 0 and 0.5).
    env_name="SweDiffContextEnv",
)
SweDiffContextEnv = SPEC.env_class
