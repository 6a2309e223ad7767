"""Seeded, LLM-free generator of standard-library Python modules for the SWE environments.

A module belongs to a synthetic engineering domain (job scheduling, a ledger, sensor unit
conversion, PID loops, inventory, ...). The domain names the records and their fields; a
module is a docstring, a few constants and 10-30 functions drawn from templates (filters,
aggregates, boundaries, rounding, ranking, windows, interval overlap, ...) with the domain's
identifiers, shuffled, plus the units a capability environment plants its defect in.
Probe calls of each function become tests whose expected values the correct module computes.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from string import Template

from trace_gym.envs.helpers.swe_common import (
    Probe,
    SweTask,
    assemble_task,
    load_module,
    run_tests_in_process,
)
from trace_gym.primitives.seeding import StableRNG


@dataclass(frozen=True)
class Domain:
    name: str
    module: tuple[str, ...]
    record: str
    value: str
    group: str
    groups: tuple[str, ...]
    key: str
    count: str
    unit: str


DOMAINS = (
    Domain("job scheduling", ("scheduler", "job_queue", "dispatch"), "job", "duration_min",
           "queue", ("batch", "interactive", "nightly", "gpu"), "job_id", "retries", "minutes"),
    Domain("double-entry ledger", ("ledger", "bookkeeping", "journal"), "entry", "amount",
           "account", ("cash", "payables", "revenue", "escrow"), "entry_id", "lines", "EUR"),
    Domain("sensor unit conversion", ("units", "conversion", "sensor_units"), "reading",
           "value", "sensor", ("thermo", "baro", "hygro", "flow"), "reading_id", "samples",
           "SI units"),
    Domain("PID loop tuning", ("pid_tuning", "control_loop", "regulator"), "sample", "error",
           "loop", ("heater", "pump", "fan", "valve"), "sample_id", "step", "percent"),
    Domain("warehouse inventory", ("inventory", "stock", "warehouse"), "item", "stock",
           "warehouse", ("north", "south", "dock", "overflow"), "sku", "units", "pieces"),
    Domain("telemetry", ("telemetry", "metrics", "observability"), "metric", "latency_ms",
           "service", ("api", "auth", "search", "billing"), "metric_id", "hits", "ms"),
    Domain("payroll", ("payroll", "timesheets", "shifts"), "shift", "hours", "team",
           ("ops", "support", "field", "lab"), "shift_id", "breaks", "hours"),
    Domain("fleet routing", ("fleet", "routing", "dispatch_routes"), "trip", "distance_km",
           "depot", ("east", "west", "harbour", "airport"), "trip_id", "stops", "km"),
    Domain("energy metering", ("metering", "energy", "grid_meter"), "meter_read", "kwh",
           "feeder", ("f1", "f2", "f3", "f4"), "meter_id", "phases", "kWh"),
    Domain("help-desk queueing", ("helpdesk", "ticketing", "queues"), "ticket", "wait_s",
           "desk", ("level1", "level2", "vip", "night"), "ticket_id", "transfers", "seconds"),
    Domain("irrigation control", ("irrigation", "watering", "soil"), "zone_read", "moisture",
           "field", ("orchard", "greenhouse", "lawn", "vines"), "zone_id", "valves", "percent"),
    Domain("invoice billing", ("billing", "invoicing", "receivables"), "invoice", "total",
           "customer", ("acme", "globex", "initech", "umbrella"), "invoice_no", "items", "USD"),
)  # fmt: skip

VERBS = {
    "total": ("total", "sum", "aggregate"),
    "count": ("count", "tally", "number_of"),
    "find": ("find", "lookup", "locate"),
    "make": ("build", "make", "compose"),
}


@dataclass(frozen=True)
class Unit:
    """One function of a module: its source and probe calls (expressions on ``M``)."""

    name: str
    source: str
    calls: tuple[str | tuple[str, tuple], ...]
    """Probe calls: source text on ``M``, or ``(function name, arguments)``."""


def records(rng: StableRNG, d: Domain, n: int, spread: int = 50) -> list[dict]:
    """``n`` domain records (key, group, value, count)."""
    rows = []
    for i in range(n):
        key = f"{d.record[:2].upper()}{rng.integer(100, 999)}{i}"
        value = rng.integer(0, spread * 4) / 4
        rows.append({d.key: key, d.group: rng.choice(d.groups), d.value: value,
                     d.count: rng.integer(0, 6)})  # fmt: skip
    return rows


def _doc(rng: StableRNG, lines: list[str]) -> str:
    return "\n    ".join(lines)


def _t(text: str, **kw: str) -> str:
    return Template(text).substitute(**kw).strip("\n") + "\n"


# -- filler templates ---------------------------------------------------------------------
def _filter_group(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(${rec}s, $grp):
    """Return the ${rec}s that belong to one $grp, in their original order.

    A $rec without a $grp field never matches.
    """
    return [r for r in ${rec}s if r.get("$grp") == $grp]
''',
        fn=name,
        rec=d.record,
        grp=d.group,
    )
    calls = [(name, (records(rng, d, rng.integer(2, 6)), rng.choice(d.groups)))
             for _ in range(2)]  # fmt: skip
    return Unit(name, src, tuple(calls))


def _sum_values(rng: StableRNG, d: Domain, name: str) -> Unit:
    places = rng.choice((1, 2, 3))
    src = _t(
        '''
def $fn(${rec}s):
    """Total $val over ${rec}s in $unit, rounded to $places decimals.

    An empty list totals 0.
    """
    total = 0.0
    for r in ${rec}s:
        total += float(r["$val"])
    return round(total, $places)
''',
        fn=name,
        rec=d.record,
        val=d.value,
        unit=d.unit,
        places=str(places),
    )
    return Unit(name, src, tuple((name, (records(rng, d, rng.integer(0, 6)),)) for _ in range(2)))


def _count_over(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(${rec}s, limit):
    """How many ${rec}s have a $val strictly above ``limit``."""
    n = 0
    for r in ${rec}s:
        if r["$val"] > limit:
            n += 1
    return n
''',
        fn=name,
        rec=d.record,
        val=d.value,
    )
    return Unit(
        name,
        src,
        tuple((name, (records(rng, d, rng.integer(2, 7)), rng.integer(5, 45))) for _ in range(2)),
    )


def _group_totals(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(${rec}s):
    """Map each $grp to the sum of its $val (groups sorted by name).

    Used by the summary reports; the values are rounded to cents.
    """
    totals = {}
    for r in ${rec}s:
        totals[r["$grp"]] = totals.get(r["$grp"], 0.0) + r["$val"]
    return {k: round(totals[k], 2) for k in sorted(totals)}
''',
        fn=name,
        rec=d.record,
        val=d.value,
        grp=d.group,
    )
    return Unit(name, src, tuple((name, (records(rng, d, rng.integer(1, 7)),)) for _ in range(2)))


def _moving_average(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(values, size):
    """Trailing moving averages of ``values`` over windows of ``size`` (size >= 1).

    The first ``size - 1`` positions average what is available so far.
    """
    if size < 1:
        raise ValueError("size must be >= 1")
    out = []
    for i in range(len(values)):
        window = values[max(0, i - size + 1): i + 1]
        out.append(round(sum(window) / len(window), 3))
    return out
''',
        fn=name,
    )
    calls = []
    for _ in range(2):
        vals = [rng.integer(0, 40) for _ in range(rng.integer(1, 7))]
        calls.append((name, (vals, rng.integer(1, 4))))
    return Unit(name, src, tuple(calls))


def _rank(rng: StableRNG, d: Domain, name: str) -> Unit:
    desc = rng.bernoulli(0.5)
    src = _t(
        '''
def $fn(${rec}s, k):
    """The ``k`` ${rec}s with the $order $val; ties go to the smaller $key."""
    ordered = sorted(${rec}s, key=lambda r: ($sign r["$val"], r["$key"]))
    return [r["$key"] for r in ordered[:k]]
''',
        fn=name,
        rec=d.record,
        val=d.value,
        key=d.key,
        order="largest" if desc else "smallest",
        sign="-" if desc else "",
    )
    return Unit(
        name,
        src,
        tuple(
            (name, (records(rng, d, rng.integer(2, 7), spread=8), rng.integer(1, 3)))
            for _ in range(2)
        ),
    )


def _percent_change(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(before, after):
    """Relative change from ``before`` to ``after`` in percent, one decimal.

    A change from zero is reported as 0.0 rather than infinity.
    """
    if before == 0:
        return 0.0
    return round((after - before) / abs(before) * 100, 1)
''',
        fn=name,
    )
    return Unit(
        name,
        src,
        tuple((name, (rng.integer(-20, 60), rng.integer(-20, 80))) for _ in range(3)),
    )


def _split_evenly(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(amount_cents, parts):
    """Split an integer amount into ``parts`` shares that differ by at most one.

    The first shares take the remainder, so the shares always add up to the amount.
    """
    if parts <= 0:
        raise ValueError("parts must be positive")
    base, extra = divmod(amount_cents, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
''',
        fn=name,
    )
    return Unit(
        name, src, tuple((name, (rng.integer(0, 999), rng.integer(1, 6))) for _ in range(2))
    )


def _overlap(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(start_a, end_a, start_b, end_b):
    """Length of the overlap of two half-open intervals ``[start, end)`` (0 if none)."""
    lo = max(start_a, start_b)
    hi = min(end_a, end_b)
    return max(0, hi - lo)
''',
        fn=name,
    )
    calls = []
    for _ in range(3):
        a, b = rng.integer(0, 20), rng.integer(0, 20)
        calls.append((name, (a, a + rng.integer(1, 9), b, b + rng.integer(1, 9))))
    return Unit(name, src, tuple(calls))


def _median(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(values):
    """Median of a non-empty list (mean of the two middle values for even lengths)."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
''',
        fn=name,
    )
    return Unit(
        name,
        src,
        tuple((name, ([rng.integer(0, 30) for _ in range(rng.integer(1, 6))],)) for _ in range(3)),
    )


def _normalise_key(rng: StableRNG, d: Domain, name: str) -> Unit:
    sep = rng.choice(("-", "_", "."))
    src = _t(
        '''
def $fn(raw):
    """Canonical form of a $key: trimmed, upper case, inner spaces as '$sep'."""
    parts = [p for p in raw.strip().upper().split(" ") if p]
    return "$sep".join(parts)
''',
        fn=name,
        key=d.key,
        sep=sep,
    )
    words = ("ab", "x1", "core", "q9", "zed", "mid")
    return Unit(
        name,
        src,
        tuple(
            (name, (" " + " ".join(rng.sample(words, rng.integer(1, 3))) + "  ",)) for _ in range(2)
        ),
    )


def _counts_by(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(${rec}s):
    """Total $count per $grp, as a list of ``($grp, total)`` sorted by $grp."""
    acc = {}
    for r in ${rec}s:
        acc[r["$grp"]] = acc.get(r["$grp"], 0) + int(r["$count"])
    return sorted(acc.items())
''',
        fn=name,
        rec=d.record,
        grp=d.group,
        count=d.count,
    )
    return Unit(name, src, tuple((name, (records(rng, d, rng.integer(1, 6)),)) for _ in range(2)))


def _index_by_key(rng: StableRNG, d: Domain, name: str) -> Unit:
    src = _t(
        '''
def $fn(${rec}s):
    """Index ${rec}s by $key; a later duplicate replaces an earlier one."""
    index = {}
    for r in ${rec}s:
        index[r["$key"]] = r["$val"]
    return index
''',
        fn=name,
        rec=d.record,
        key=d.key,
        val=d.value,
    )
    return Unit(name, src, tuple((name, (records(rng, d, rng.integer(1, 4)),)) for _ in range(2)))


def _scale(rng: StableRNG, d: Domain, name: str) -> Unit:
    factor = rng.choice(("0.5", "1.25", "2.0", "0.75", "1.5"))
    src = _t(
        '''
def $fn(${rec}s):
    """A copy of the ${rec}s with $val scaled by the review factor $factor.

    The input list and its records are left unchanged.
    """
    out = []
    for r in ${rec}s:
        copy = dict(r)
        copy["$val"] = round(r["$val"] * $factor, 2)
        out.append(copy)
    return out
''',
        fn=name,
        rec=d.record,
        val=d.value,
        factor=factor,
    )
    return Unit(name, src, ((name, (records(rng, d, rng.integer(1, 3)),)),))


FILLERS: tuple[Callable[[StableRNG, Domain, str], Unit], ...] = (
    _filter_group, _sum_values, _count_over, _group_totals, _moving_average, _rank,
    _percent_change, _split_evenly, _overlap, _median, _normalise_key, _counts_by,
    _index_by_key, _scale,
)  # fmt: skip
_FILLER_NAMES = (
    "{rec}s_in_{grp}", "{t}_{val}", "{c}_{rec}s_over", "{val}_by_{grp}", "rolling_{val}",
    "top_{rec}s", "{val}_change_pct", "split_{val}_cents", "{rec}_overlap", "median_{val}",
    "normalise_{key}", "{count}_by_{grp}", "{rec}s_by_{key}", "scaled_{rec}s",
)  # fmt: skip


QUALIFIERS = ("", "_daily", "_weekly", "_for_audit", "_for_report", "_legacy", "_batch")


def filler_units(rng: StableRNG, d: Domain, n: int, taken: set[str]) -> list[Unit]:
    """``n`` filler functions; a template recurs with another qualifier (``_daily``,
    ``_for_audit``, ...) and its own parameters, as duplicated helpers do in real code."""
    out: list[Unit] = []
    while len(out) < n:
        for i in rng.sample(list(range(len(FILLERS))), len(FILLERS)):
            if len(out) >= n:
                break
            base = _FILLER_NAMES[i].format(
                rec=d.record,
                grp=d.group,
                val=d.value,
                key=d.key.removesuffix("_id"),
                count=d.count,
                t=rng.choice(VERBS["total"]),
                c=rng.choice(VERBS["count"]),
            )
            for q in rng.shuffle(QUALIFIERS):
                if base + q not in taken:
                    taken.add(base + q)
                    out.append(FILLERS[i](rng, d, base + q))
                    break
    return out


def module_header(rng: StableRNG, d: Domain, module: str) -> str:
    owner = rng.choice(("platform", "operations", "reliability", "finance-tools", "controls"))
    return (
        f'"""{module}: helpers for {d.name} ({d.record} records).\n\n'
        f"Records are dicts with a ``{d.key}``, a ``{d.group}``, a ``{d.value}`` in {d.unit} "
        f"and a ``{d.count}`` count.\nMaintained by the {owner} team; standard library only.\n"
        '"""\n\nfrom __future__ import annotations\n'
    )


def call_text(call: str | tuple) -> str:
    """A probe call as source: strings are already source, ``(name, args)`` is rendered."""
    if isinstance(call, str):
        return call
    name, args = call
    return f"M.{name}({', '.join(repr(a) for a in args)})"


def probe_tests(module_src: str, units: list[Unit], prefix: str = "test") -> list[Probe]:
    """One test per probe call, expecting what the (correct) ``module_src`` returns.

    ``(name, args)`` calls run directly, without compiling their (long) literal arguments;
    source-text calls are compiled together, as thunks, so that one that raises skips alone.
    """
    mod = load_module(module_src)
    calls = [(f"{prefix}_{u.name}_{i}", c) for u in units for i, c in enumerate(u.calls)]
    texts = [c for _, c in calls if isinstance(c, str)]
    thunks = iter(eval("[" + ", ".join(f"lambda: {c}" for c in texts) + "]", {"M": mod}))  # noqa: S307
    tests = []
    for name, call in calls:
        if isinstance(call, str):
            run = next(thunks)
        else:
            fn, args = getattr(mod, call[0]), copy.deepcopy(call[1])
            run = functools.partial(fn, *args)
        try:
            expected = run()
        except Exception:
            continue
        tests.append(Probe(name, [f"assert {call_text(call)} == {expected!r}"]))
    return tests


def expected_of(module_src: str, call: str) -> object:
    """What ``call`` returns on ``module_src`` (the exception type's name if it raises)."""
    try:
        return eval(call, {"M": load_module(module_src)})  # noqa: S307 - our own call
    except Exception as exc:
        return type(exc).__name__


@dataclass(frozen=True)
class DefectPlan:
    """What a capability environment plants: its functions (correct), the textual defect(s),
    the calls the target test asserts, hidden probe calls and visible probe calls."""

    units: tuple[Unit, ...]
    replacements: tuple[tuple[str, str], ...]
    """``(correct snippet, defective snippet)``; each snippet is unique in its module and
    the reverse pair is the reference fix."""
    target_calls: tuple[str, ...]
    hidden_calls: tuple[str, ...]
    visible_calls: tuple[str, ...] = ()
    constants: str = ""
    keep_order: bool = True
    """Keep the planted units in their given order (near-duplicates must follow their model)."""


def compose(
    rng: StableRNG, d: Domain, module: str, plan: DefectPlan, n_fillers: int
) -> tuple[str, list[Unit]]:
    """The correct module's source and its filler units."""
    taken = {u.name for u in plan.units}
    fillers = filler_units(rng, d, n_fillers, taken)
    body: list[Unit] = list(fillers)
    slots = sorted(rng.integer(0, len(body)) for _ in plan.units)
    planted = list(plan.units) if plan.keep_order else rng.shuffle(plan.units)
    for offset, (slot, unit) in enumerate(zip(slots, planted, strict=True)):
        body.insert(slot + offset, unit)
    parts = [module_header(rng, d, module)]
    if plan.constants:
        parts.append(plan.constants.strip("\n") + "\n")
    parts += [u.source for u in body]
    return "\n\n".join(parts), fillers


def build(
    rng: StableRNG,
    d: Domain,
    module: str,
    plan: DefectPlan,
    n_fillers: int,
    issue: Callable[[str, str], str],
    defect: dict,
    features: dict,
    capability: str,
) -> SweTask:
    """Compose the module, plant the defect and package the task (``ValueError`` when the
    tests do not pin the defect; callers draw again)."""
    correct, fillers = compose(rng, d, module, plan, n_fillers)
    defective = correct
    for good, bad in plan.replacements:
        if defective.count(good) != 1:
            raise ValueError(f"snippet not unique in the module: {good[:60]!r}")
        defective = defective.replace(good, bad, 1)
    # Planted units call only each other and the constants, and fillers are the same code in
    # both modules: so the planted part alone (small, quick to compile) decides what breaks.
    head = "import math\n" + plan.constants
    good_part = head + "\n\n".join(u.source for u in plan.units)
    bad_part = good_part
    for good, bad in plan.replacements:
        bad_part = bad_part.replace(good, bad, 1)
    mod = load_module(good_part)
    target_lines = []
    for call in plan.target_calls:
        target_lines.append(f"assert {call} == {eval(call, {'M': mod})!r}")  # noqa: S307
    target = Probe(f"test_{capability}_issue", target_lines)
    visible = probe_tests(correct, fillers)
    planted = probe_tests(good_part, [Unit("planted", "", plan.visible_calls)])
    hidden = probe_tests(good_part, [Unit("hidden", "", plan.hidden_calls)], prefix="test_hidden")
    passes = run_tests_in_process(bad_part, [target, *planted, *hidden])
    broken = {name for name, ok in passes.items() if not ok}
    hidden += [t for t in planted if t.name in broken]
    visible += [t for t in planted if t.name not in broken]
    hidden += visible[-2:]  # two previously passing tests the agent never sees
    visible = visible[:-2]
    issue_text = issue(good_part, bad_part)
    return assemble_task(
        module=module, domain=d.name, correct=correct, defective=defective, visible=visible,
        target=target, hidden=hidden, issue=issue_text,
        oracle_edits=[(bad, good) for good, bad in plan.replacements],
        defect=defect, features=features, broken=broken,
    )  # fmt: skip


def call_issue(intro: str = "") -> Callable[[DefectPlan], Callable[[str, str], str]]:
    """An issue text naming the target's first call, what it returns and what is expected."""

    def for_plan(plan: DefectPlan) -> Callable[[str, str], str]:
        def issue(correct: str, defective: str) -> str:
            lines = []
            for call in plan.target_calls:
                got, want = expected_of(defective, call), expected_of(correct, call)
                if got != want:
                    lines.append(
                        f"`{call.replace('M.', '', 1)}` gives `{got!r}`, expected `{want!r}`."
                    )
            return (
                (intro + " " if intro else "")
                + " ".join(lines)
                + (" `test_target.py` reproduces the problem.")
            )

        return issue

    return for_plan


PlanFn = Callable[[StableRNG, Domain], tuple[DefectPlan, dict, dict, Callable[[str, str], str]]]


def draw_task(rng: StableRNG, n_fillers: int, plan_fn: PlanFn, short: str) -> SweTask:
    """A task from the first of up to 20 draws whose tests pin the planted defect."""
    for _ in range(20):
        d = rng.choice(DOMAINS)
        plan, defect, features, issue = plan_fn(rng, d)
        try:
            return build(rng, d, rng.choice(d.module), plan, n_fillers, issue, defect,
                         {**features, "domain": d.name, "n_functions": n_fillers + len(plan.units)},
                         short)  # fmt: skip
        except ValueError:
            continue
    raise RuntimeError(f"could not generate a {short} task in 20 draws")
