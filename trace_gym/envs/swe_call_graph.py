"""``trace/swe-call-graph-v0``: fix the root helper, several calls below the symptom.

## Capability
*Deep call-graph traversal* (16 % of the paper's unresolved SWE-bench instances): the issue
shows a wrong result from a public function, but the defect lives in a helper 1-5 calls
further down. Patching the symptom site makes the issue's test pass and leaves every other
caller of the helper wrong; hidden tests call the helper through another path.

## Task
A generated module (see :mod:`trace_gym.envs.helpers.swe_codegen`) with a chain
``public -> hop_1 -> ... -> root``; each hop rescales the value and calls the next. The root
helper rounds money half up to cents or rounds a quantity up to a billing step, and its
planted defect truncates instead. A sibling function also calls the root.

## Observation and Action, Reward, Episode End
As for every single-turn SWE environment (:mod:`trace_gym.envs.helpers.swe_common`).

## Difficulty
| knob | d = 0 | d = 1 |
|---|---|---|
| hops between the public function and the root | 1 | 5 |
| filler functions (module size) | 30 | 48 |

The knobs are declared in ``SweCallGraphEnv.knob_rates`` and hold on every task.

## Version History
* v0: initial version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trace_gym.core.config import apply_overrides
from trace_gym.core.plans import Segment
from trace_gym.core.spec import KnobRate, SpecConfig
from trace_gym.envs.helpers import swe_codegen as cg
from trace_gym.envs.helpers.swe_common import SweTask, emit_edits, oracle_triples, single_turn_spec
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG

CAPABILITY = "deep_call_graph_traversal"
ENV_ID = "trace/swe-call-graph-v0"
ROOTS = ("round_half_up", "ceil_to_step")
HOP_WORDS = ("adjust", "normalise", "weight", "apply_fee_to", "project", "settle", "carry")


@dataclass(frozen=True)
class CallGraphConfig(SpecConfig):
    depth: int = 3
    """Calls between the public function and the root helper (1..5)."""
    n_fillers: int = 38

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= 5:
            raise ConfigError(f"depth must be in 1..5, got {self.depth}")
        if not 8 <= self.n_fillers <= 60:
            raise ConfigError(f"n_fillers must be in 8..60, got {self.n_fillers}")

    @classmethod
    def from_difficulty(cls, d: float, overrides: dict[str, Any]) -> CallGraphConfig:
        base = cls(depth=1 + round(4 * d), n_fillers=30 + round(18 * d))
        return apply_overrides(base, overrides, "swe-call-graph")


def plan(rng: StableRNG, d: cg.Domain, cfg: CallGraphConfig) -> tuple:
    kind = rng.choice(ROOTS)
    val, rec = d.value, d.record
    if kind == "round_half_up":
        root = f"_{rng.choice(('quantize', 'to_cents', 'settle_round'))}_{val}"
        root_src = (
            f'def {root}(x):\n    """Round ``x`` half up to two decimals (cents); every '
            f'reported {val} goes through here."""\n'
            f"    return math.floor(x * 100 + 0.5) / 100\n"
        )
        good, bad = "math.floor(x * 100 + 0.5) / 100", "math.floor(x * 100) / 100"
    else:
        step = rng.choice((5, 10, 15, 25))
        root = f"_{rng.choice(('billable', 'round_up', 'step'))}_{val}"
        root_src = (
            f'def {root}(x, step={step}):\n    """Round ``x`` up to the next multiple of '
            f'``step`` (a started step is billed in full)."""\n'
            f"    return math.ceil(x / step) * step\n"
        )
        good, bad = "math.ceil(x / step) * step", "math.floor(x / step) * step"
    hops, nxt = [], root
    words = rng.sample(HOP_WORDS, cfg.depth)
    for i, word in enumerate(words):
        name = f"_{word}_{val}" if i < cfg.depth - 1 else f"{word}_{rec}_{val}"
        mult = rng.choice(("1.0", "1.1", "0.9", "1.25", "0.75"))
        add = rng.choice(("0", "0.5", "1.5", "2"))
        hops.append(
            cg.Unit(
                name,
                (
                    f'def {name}(x):\n    """Scale by {mult} and add {add} before the next stage."""\n'
                    f"    adjusted = x * {mult} + {add}\n    return {nxt}(adjusted)\n"
                ),
                (),
            )
        )
        nxt = name
    public = f"report_{rec}_{val}"
    hops.append(
        cg.Unit(
            public,
            (
                f'def {public}({rec}s):\n    """The reported {val} of a list of {rec}s."""\n'
                f'    total = sum(r["{val}"] for r in {rec}s)\n    return {nxt}(total)\n'
            ),
            (),
        )
    )
    sibling = f"{val}_quote"
    sib = cg.Unit(
        sibling,
        (
            f'def {sibling}(x):\n    """A quoted {val}: 1.5 times ``x``, '
            f'rounded like every reported figure."""\n'
            f"    return {root}(x * 1.5)\n"
        ),
        (),
    )
    units = (cg.Unit(root, root_src, ()), *hops, sib)
    if kind == "round_half_up":
        target = (f"M.{public}([{{'{val}': 3.37}}, {{'{val}': 4.018}}])",)
        hidden = (f"M.{root}(2.006)", f"M.{root}(7.3)", f"M.{sibling}(1.003)",
                  f"M.{sibling}(4.21)", f"M.{public}([{{'{val}': 11.111}}])")  # fmt: skip
        visible = (f"M.{root}(20)", f"M.{sibling}(2)", f"M.{public}([])")
    else:  # values several steps apart, so that no single constant passes
        target = (f"M.{public}([{{'{val}': {step * 1.3}}}, {{'{val}': {step * 2.1}}}])",)
        hidden = (
            f"M.{root}({step * 3 + 1})",
            f"M.{root}({step * 5 - 0.5})",
            f"M.{sibling}({step * 2 + 1})",
            f"M.{public}([{{'{val}': {step * 7.7}}}])",
        )
        visible = (f"M.{root}({step * 2})", f"M.{root}({step * 6})", f"M.{public}([])")
    p = cg.DefectPlan(units, ((good, bad),), target, hidden, visible,
                      constants="import math\n", keep_order=False)  # fmt: skip
    intro = f"The reported {val} is off for some {rec}s."
    return (
        p,
        {"root": root, "kind": kind},
        {"depth": cfg.depth, "root_kind": kind},
        cg.call_issue(intro)(p),
    )


def generate(rng: StableRNG, cfg: CallGraphConfig) -> SweTask:
    return cg.draw_task(rng, cfg.n_fillers, lambda r, d: plan(r, d, cfg), "call_graph")


def hint(task: SweTask) -> str:
    return (
        "Follow the failing function's calls down to the helper that computes the "
        "wrong value and fix it there; other callers share that helper."
    )


def lapse(seg: Segment, rng: StableRNG) -> list[Any]:
    """Make the issue's call return the expected value in the public function itself (the
    symptom), leaving the root helper as it is."""
    task: SweTask = seg.task
    found = re.search(r"assert M\.(\w+)\((.*)\) == (.*)", task.target_test)
    path = f"{task.module}.py"
    if found is None:
        return emit_edits(seg, [(p, s, s) for p, s, _ in oracle_triples(task)])
    fn, args, expected = found.groups()
    start = task.source.index(f"def {fn}(")
    header = task.source[start : task.source.index("\n", start) + 1]
    arg = header[header.index("(") + 1 : header.index(")")].split(",")[0].strip()
    special = f"{header}    if {arg} == {args}:\n        return {expected}\n"
    return emit_edits(seg, [(path, header, special)])


SPEC = single_turn_spec(
    id=ENV_ID,
    capability=CAPABILITY,
    description=(
        "Trace a wrong result from a public function down 1-5 calls to the root helper "
        "that computes it and fix the helper, not the symptom; hidden tests reach the "
        "helper through other callers."
    ),
    tags=(
        "deep_call_graph_traversal",
        "swe",
        "code_repair",
        "root_cause_analysis",
        "call_chain",
        "symptom_vs_cause",
    ),
    config=CallGraphConfig,
    generate=generate,
    hint=hint,
    lapse=lapse,
    knob_rates=(
        # each knob is a function of the difficulty: every task at d = 0 and d = 1
        KnobRate("depth", 0.0, 1.0, 0.0, equals=1),
        KnobRate("depth", 1.0, 1.0, 0.0, equals=5),
        KnobRate("n_functions", 0.0, 1.0, 0.0, equals=34),  # 30 fillers + the chain
        KnobRate("n_functions", 1.0, 1.0, 0.0, equals=56),
    ),
    template_floor=900,
    # Distinct masked task templates per 1,000 seeds (1,000 of 1,000 measured at d = 0, 0.5 and 1).
    env_name="SweCallGraphEnv",
)
SweCallGraphEnv = SPEC.env_class
