"""``trace/swe-semantic-precision-v0``: fix a boundary or operator mistake in one function.

## Capability
*Semantic-logic precision* (61 % of the unresolved SWE-bench instances in the paper's
diagnosis): the algorithm is almost right, but one comparison, bound, division or rounding
is not what the docstring and the issue say. The fix is one precise edit.

## Task (seed 0, train split, difficulty 0.5)
A 300-600 line module of a synthetic engineering domain (job scheduling, a ledger, PID
tuning, ...). One function has a planted defect: ``>`` for ``>=`` at a band edge, an
exclusive range that should be inclusive, floor division for true division, a page offset
off by one, a batch count rounded down. The issue shows a call, what it returns and what is
expected; the target test reproduces it; hidden tests probe the same function elsewhere.

## Observation and Action
The issue, the module and its visible tests as text; the action is one SEARCH/REPLACE patch
(see :mod:`trace_gym.envs.helpers.swe_common` for the accepted variants).

## Reward
See :mod:`trace_gym.envs.helpers.swe_common`: 0.4 target test + 0.4 previously passing tests still
passing + 0.1 few edits + 0.1 parsed; gates for editing tests, special-casing, deleting code.

## Episode End
The first message is graded as the patch; the episode ends there (``max_turns`` 2 leaves one
retry after a malformed tool call).

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| filler functions (module size) | 30 | 48 |
| defect kinds | operator swaps | also boundary-only and off-by-one |
| near-identical comparisons in the function (decoys) | 0 | 2 |

The knobs are declared in ``SwePrecisionEnv.knob_rates`` and hold on every task.

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

CAPABILITY = "semantic_logic_precision"
ENV_ID = "trace/swe-semantic-precision-v0"
KINDS = ("band_edge", "inclusive_range", "true_division", "page_offset", "batch_count")
EASY_KINDS = ("true_division", "batch_count", "page_offset")


@dataclass(frozen=True)
class SemanticConfig(SpecConfig):
    n_fillers: int = 24
    kinds: tuple[str, ...] = KINDS
    decoys: int = 1
    """Extra comparisons with the same shape in the defective function (0..2)."""

    def __post_init__(self) -> None:
        if not 8 <= self.n_fillers <= 60:
            raise ConfigError(f"n_fillers must be in 8..60, got {self.n_fillers}")
        if not self.kinds or set(self.kinds) - set(KINDS):
            raise ConfigError(f"kinds must be a non-empty subset of {KINDS}")
        if not 0 <= self.decoys <= 2:
            raise ConfigError(f"decoys must be in 0..2, got {self.decoys}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> SemanticConfig:
        base = cls(n_fillers=30 + round(18 * d), kinds=KINDS if d >= 0.3 else EASY_KINDS,
                   decoys=round(2 * d))  # fmt: skip
        return apply_overrides(base, overrides, "swe-semantic-precision")


def plan(rng: StableRNG, d: cg.Domain, cfg: SemanticConfig) -> tuple[cg.DefectPlan, str]:
    kind = rng.choice(cfg.kinds)
    rec, val = d.record, d.value
    fn = f"{rng.choice(('classify', 'band', 'grade'))}_{val}"
    if kind == "band_edge":
        low, high = rng.integer(5, 20), rng.integer(30, 60)
        extra = "".join(
            f'    if value >= high + {10 * (i + 1)}:\n        return "critical{i}"\n'
            for i in reversed(range(cfg.decoys))
        )
        src = (f'def {fn}(value, low={low}, high={high}):\n    """Band of a {val}: "low" below '
               f'``low``, "high" from ``high`` (inclusive),\n    "normal" in between."""\n{extra}'
               f'    if value >= high:\n        return "high"\n    if value < low:\n'
               f'        return "low"\n    return "normal"\n')  # fmt: skip
        good = '    if value >= high:\n        return "high"'
        bad = '    if value > high:\n        return "high"'
        target = [f"M.{fn}({high})"]
        hidden = [f"M.{fn}({high + 7}, {low}, {high + 7})", f"M.{fn}({low + 3}, {low}, {low + 3})"]
        visible = [f"M.{fn}({low - 1})", f"M.{fn}({high + 1})", f"M.{fn}({low + 1})"]
    elif kind == "inclusive_range":
        fn = f"count_{rec}s_between"
        extra = "".join(
            f"        if r['{val}'] < 0:\n            continue\n" for _ in range(min(cfg.decoys, 1))
        )
        src = (
            f'def {fn}({rec}s, lo, hi):\n    """How many {rec}s have lo <= {val} <= hi '
            f'(both ends inclusive)."""\n    n = 0\n    for r in {rec}s:\n{extra}'
            f"        if lo <= r['{val}'] <= hi:\n            n += 1\n    return n\n"
        )
        good, bad = f"if lo <= r['{val}'] <= hi:", f"if lo <= r['{val}'] < hi:"
        rows = "[" + ", ".join(f"{{'{val}': {v}}}" for v in (3, 7, 10, 12)) + "]"
        target = [f"M.{fn}({rows}, 3, 10)"]
        hidden = [f"M.{fn}({rows}, 7, 12)", f"M.{fn}({rows}, 0, 7)"]
        visible = [f"M.{fn}({rows}, 4, 9)", f"M.{fn}({rows}, 20, 30)"]
    elif kind == "true_division":
        fn = f"mean_{val}_per_{d.count}"
        src = (
            f'def {fn}(total, {d.count}):\n    """Average {val} per {d.count.rstrip("s")}, '
            f'two decimals; 0.0 when there are none."""\n    if {d.count} <= 0:\n'
            f"        return 0.0\n    return round(total / {d.count}, 2)\n"
        )
        good, bad = f"round(total / {d.count}, 2)", f"round(total // {d.count}, 2)"
        target = [f"M.{fn}(7, 2)"]
        hidden = [f"M.{fn}(10, 4)", f"M.{fn}(1, 3)"]
        visible = [f"M.{fn}(9, 3)", f"M.{fn}(5, 0)", f"M.{fn}(8, 4)"]
    elif kind == "page_offset":
        fn = f"page_of_{rec}s"
        src = (
            f'def {fn}(items, page, size):\n    """Items of 1-based ``page`` when listing '
            f'``size`` {rec}s per page."""\n    if page < 1 or size < 1:\n'
            f'        raise ValueError("page and size start at 1")\n'
            f"    start = (page - 1) * size\n    return items[start:start + size]\n"
        )
        good, bad = "    start = (page - 1) * size\n", "    start = page * size\n"
        items = list(range(1, 11))
        target = [f"M.{fn}({items}, 1, 3)"]
        hidden = [f"M.{fn}({items}, 2, 4)", f"M.{fn}({items}, 3, 3)"]
        visible = [f"M.{fn}({items}, 9, 5)"]
    else:  # batch_count
        fn = f"{rec}_batches"
        src = (
            f'def {fn}(n, batch_size):\n    """Batches needed for ``n`` {rec}s, '
            f'``batch_size`` per batch (a partial batch counts)."""\n'
            f'    if batch_size < 1:\n        raise ValueError("batch_size must be >= 1")\n'
            f"    return -(-n // batch_size)\n"
        )
        good, bad = "    return -(-n // batch_size)\n", "    return n // batch_size\n"
        target = [f"M.{fn}(7, 3)"]
        hidden = [f"M.{fn}(1, 4)", f"M.{fn}(11, 5)"]
        visible = [f"M.{fn}(9, 3)", f"M.{fn}(0, 2)"]
    unit = cg.Unit(fn, src, ())
    return cg.DefectPlan(
        (unit,), ((good, bad),), tuple(target), tuple(hidden), tuple(visible)
    ), kind


def issue_text(calls: tuple[str, ...]) -> Any:
    def issue(correct: str, defective: str) -> str:
        call = calls[0]
        got, want = cg.expected_of(defective, call), cg.expected_of(correct, call)
        shown = call.replace("M.", "", 1)
        return (f"`{shown}` returns `{got!r}`, but the docstring (and the reports built on "
                f"it) say it should be `{want!r}`. `test_target.py` reproduces it.")  # fmt: skip

    return issue


def generate_task(rng: StableRNG, cfg: SemanticConfig) -> SweTask:
    for _ in range(20):
        d = rng.choice(cg.DOMAINS)
        p, kind = plan(rng, d, cfg)
        try:
            return cg.build(rng, d, rng.choice(d.module), p, cfg.n_fillers,
                            issue_text(p.target_calls), {"kind": kind},
                            {"kind": kind, "decoys": cfg.decoys, "n_functions": cfg.n_fillers + 1,
                             "domain": d.name}, "semantic")  # fmt: skip
        except ValueError:
            continue
    raise RuntimeError("could not generate a semantic-precision task in 20 draws")


def hint(task: SweTask) -> str:
    return (
        "Read the docstring of the function the issue calls and compare each "
        "comparison, bound and division with it; change only the wrong operator."
    )


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Touch the defective lines, keep their meaning (the operator or bound stays wrong)."""
    return emit_edits(
        seg, [(p, s, s.rstrip("\n") + "  # checked\n") for p, s, _ in oracle_triples(seg.task)]
    )


SPEC = single_turn_spec(
    id=ENV_ID,
    capability=CAPABILITY,
    description=(
        "Fix a boundary or operator mistake (>= for >, inclusive range, true division, "
        "page offset, batch rounding) in one function of a generated 300-600 line module "
        "with one SEARCH/REPLACE patch, graded by visible, target and hidden tests in a "
        "sandbox."
    ),
    tags=(
        "semantic_logic_precision",
        "swe",
        "code_repair",
        "boundary_conditions",
        "operator_precision",
        "wrong_algorithm",
    ),
    config=SemanticConfig,
    generate=generate_task,
    hint=hint,
    lapse=lapse,
    knob_rates=(
        # each knob is a function of the difficulty: every task at d = 0 and d = 1
        KnobRate("decoys", 0.0, 0.0, 0.0),
        KnobRate("decoys", 1.0, 1.0, 0.0, equals=2),
        KnobRate("n_functions", 0.0, 1.0, 0.0, equals=31),  # 30 fillers + the defect
        KnobRate("n_functions", 1.0, 1.0, 0.0, equals=49),
    ),
    template_floor=900,  # distinct masked templates per 1,000 seeds (1,000 measured at d = 0, 0.5, 1)
    env_name="SwePrecisionEnv",
)
SwePrecisionEnv = SPEC.env_class
