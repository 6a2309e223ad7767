"""``trace-gym validate TARGET``: every gate an environment must pass, one verdict.

``TARGET`` is a registered id (``trace/precondition-v0``) or an entry point
``module:callable`` returning an environment (a :class:`~trace_gym.core.spec.CapabilitySpec`
is such a callable). The gates run in a child process with CPU-time (``RLIMIT_CPU``), memory
(``RLIMIT_AS``) and wall-clock limits, and an audit hook that refuses network, process,
file-writing and deletion calls, so an environment under test (perhaps written by a model)
cannot reach anything. Each gate reports pass/fail and a reason:

=====================  ========================================================================
gate                   passes when
=====================  ========================================================================
``loads``              the target builds a trace_gym environment; observations, rewards and
                       ``info`` stay in their declared spaces
``novel``              (``--novelty``) its tasks are not a near-duplicate of a registered one
``determinism``        same seed, same task and oracle episode; same task hashes in processes
                       with other ``PYTHONHASHSEED`` values
``check_env``          ``gymnasium.utils.env_checker.check_env`` passes
``splits``             train, eval and test share no task
``oracle``             the oracle scores 1.0 on every sampled seed and difficulty
``reward_agrees``      the reward ``step`` returns equals the verification ``info`` reports
``baselines``          doing nothing scores 0; calling every tool fails; random rarely passes
``information_free``   the information-free policies stay under their bounds
``decision_balance``   each declared decision class is its declared share, and no
                       decision-blind policy wins another class's task, more than its share
                       or more than half; skipped, saying so, when it declares no decisions
``knob_rates``         the difficulty-knob rates the environment declares (``knob_rates``)
                       hold; skipped, saying so, when it declares none
``template_diversity`` distinct masked task templates reach the declared ``template_floor``;
                       skipped, saying so, when it declares none
``mutations``          every single-step mutation of the oracle plan fails or scores lower
``fuzzing``            arbitrary actions never raise from ``step``
``verifier_purity``    verifying twice agrees and mutates nothing
``replay``             offline re-scoring equals the online reward
``difficulty``         a fixed imperfect agent does not do better on harder tasks
``adversary``          (SWE environments) no attack of :mod:`trace_gym.validation.adversary` (forged
                       reports, files on the import path, escapes) wins; skipped, saying
                       so, for other environments
``calibration``        (``--policy SPEC``) the policy lands in the acceptance band
=====================  ========================================================================

The checks are those of :mod:`trace_gym.testing`, called as they are. Exit status 0 only when
every gate passes or is skipped for a stated reason; ``--json OUT`` writes the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GATES = (
    "loads",
    "novel",
    "determinism",
    "check_env",
    "splits",
    "oracle",
    "reward_agrees",
    "baselines",
    "information_free",
    "decision_balance",
    "knob_rates",
    "template_diversity",
    "mutations",
    "fuzzing",
    "verifier_purity",
    "replay",
    "difficulty",
    "adversary",
    "calibration",
)
DIFFICULTIES = (0.0, 0.5, 1.0)
MONOTONE_TOLERANCE = 0.1
"""How much better a fixed agent may do on a harder difficulty (sampling noise)."""
NEAR_DUPLICATE = 0.82
"""Fingerprint similarity at or above which a new environment duplicates a registered one
(over 16 seeds: a copy of precondition scores 0.92; the closest shipped pair, policy-pressure
and precondition, 0.72)."""
SMOKE_ROLLOUTS, SMOKE_MAX_SUCCESS = 10, 0.5
QUICK_RATE_SEEDS = 200
"""Resets per difficulty for the knob-rate and template gates under ``--quick`` (1,000
otherwise); knob tolerances widen by the extra sampling error, template floors scale down."""
DEFAULT_MEMORY_MB = 4096
CHILD_FLAG = "--child"


@dataclass
class Gate:
    """One gate's verdict: ``status`` is pass, fail, unavailable or skipped."""

    name: str
    status: str
    reason: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class Report:
    """Every gate of one target, plus what the child learnt about the environment."""

    target: str
    gates: list[Gate]
    env: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        # a gate skipped for a stated reason (nothing declared to check) does not fail the
        # report; one skipped after an earlier failure leaves that failure in the list
        return bool(self.gates) and all(g.passed or g.status == "skipped" for g in self.gates)

    def failed(self) -> list[Gate]:
        return [g for g in self.gates if not g.passed and g.status != "skipped"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "passed": self.passed,
            "seconds": round(self.seconds, 2),
            "env": self.env,
            "gates": [asdict(g) for g in self.gates],
        }

    def render(self) -> str:
        lines = [f"validate {self.target}"]
        for g in self.gates:
            mark = {"pass": "ok  ", "fail": "FAIL", "unavailable": "N/A ", "skipped": "skip"}
            lines.append(f"  [{mark[g.status]}] {g.name:<17} {g.seconds:6.1f}s  {g.reason}")
        verdict = "PASSED" if self.passed else "REJECTED"
        lines.append(f"{verdict} in {self.seconds:.1f}s")
        return "\n".join(lines)


# -- the parent: a sandboxed child per target --------------------------------------------------
def validate(
    target: str,
    *,
    quick: bool = False,
    policy: str | None = None,
    novelty: bool = False,
    stop_on_fail: bool = False,
    search_path: str | Path | None = None,
    timeout_s: float | None = None,
    cpu_s: int | None = None,
    memory_mb: int = DEFAULT_MEMORY_MB,
) -> Report:
    """Run every gate on ``target`` in a limited child process and return the verdicts.

    ``search_path`` is a folder the child imports the target from (never this process).
    ``stop_on_fail`` skips the gates after the first failure (synthesis retries sooner).
    """
    timeout_s = timeout_s or (240.0 if quick else 1800.0)
    cpu_s = cpu_s or int(timeout_s)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trace-validate-") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "trace_gym.validation.validate",
            CHILD_FLAG,
            target,
            "--out",
            str(out),
        ]
        cmd += ["--quick"] * quick + ["--novelty"] * novelty + ["--stop-on-fail"] * stop_on_fail
        cmd += ["--policy", policy] if policy else []
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
        if not quick:  # more hypothesis examples per property than the ci profile's 8
            env.setdefault("HYPOTHESIS_PROFILE", "trace-dev")
        if search_path is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(search_path), env.get("PYTHONPATH", "")) if p
            )
        try:
            proc = subprocess.run(
                cmd,
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                preexec_fn=_limits(cpu_s, memory_mb),
            )
            finished = proc.returncode == 0 and _read(out)
            crash = None if finished else _tail(proc.stderr) or f"exit status {proc.returncode}"
            if crash is not None and proc.returncode < 0:
                crash = f"killed by signal {-proc.returncode} (CPU {cpu_s}s / memory {memory_mb} MB limit?): {crash}"
        except subprocess.TimeoutExpired:
            crash = f"exceeded the wall-clock limit of {timeout_s:.0f}s"
        if crash is not None:
            gates = [Gate("sandbox", "fail", f"the validation process failed: {crash}")]
            # a partial report (written as gates finish) still tells a lot
            gates = _gates_from(_read(out)) + gates
            return Report(target, gates, seconds=time.monotonic() - started)
        data = _read(out)
    return Report(target, _gates_from(data), data.get("env", {}), time.monotonic() - started)


def _read(path: Path) -> dict[str, Any]:
    """The child's report, or {} when it wrote none (or was killed while writing)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _gates_from(data: dict[str, Any]) -> list[Gate]:
    return [Gate(**g) for g in data.get("gates", [])]


def _limits(cpu_s: int, memory_mb: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return apply


def _tail(text: str, n: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


# -- the child: load the target, run the gates -------------------------------------------------
def load_target(target: str) -> tuple[str, Callable[[], Any]]:
    """``(gymnasium id, factory)`` of a registered id or a ``module:callable`` entry point.

    An entry point is registered under a fresh id, so that replay and re-scoring (which
    rebuild environments by id) work for it too.
    """
    import gymnasium as gym

    import trace_gym  # noqa: F401  (registers the shipped and user environments)

    if target in gym.registry:
        return target, lambda: gym.make(target, disable_env_checker=True)
    module, colon, attr = target.partition(":")
    if not colon or not module or not attr:
        from trace_gym.errors import UnknownEnvError

        raise UnknownEnvError(target, list(gym.registry))
    import importlib

    factory = getattr(importlib.import_module(module), attr)
    env_id = "validate/" + re.sub(r"[^A-Za-z0-9_]", "_", target) + "-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=factory, disable_env_checker=True)
    return env_id, lambda: gym.make(env_id, disable_env_checker=True)


def task_hashes_of(target: str, n_seeds: int) -> list[list[str]]:
    """Task hashes of seeds ``0..n-1`` at three difficulties (for the cross-process gate)."""
    from trace_gym.testing import task_hashes

    env_id, _ = load_target(target)
    return [task_hashes(env_id, list(range(n_seeds)), d) for d in DIFFICULTIES]


def _cross_process(target: str, n_seeds: int) -> None:
    expected = task_hashes_of(target, n_seeds)
    for hash_seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        cmd = [
            sys.executable,
            "-m",
            "trace_gym.validation.validate",
            "--hashes",
            target,
            str(n_seeds),
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"hashing in a new process failed: {_tail(out.stderr, 500)}"
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got == expected, f"task hashes differ in a process with PYTHONHASHSEED={hash_seed}"


class _Gates:
    """The gates, each a method raising AssertionError (or anything) with the reason."""

    def __init__(self, target: str, quick: bool, policy: str | None) -> None:
        self.target, self.quick, self.policy = target, quick, policy
        self.n = 60 if quick else 200
        self.env_id = ""
        self.info: dict[str, Any] = {}

    def loads(self) -> str:
        from trace_gym.core.env import TraceEnv

        self.env_id, factory = load_target(self.target)
        env = factory()
        inner = env.unwrapped
        assert isinstance(inner, TraceEnv), f"{type(inner).__name__} is not a TraceEnv"
        spec = getattr(inner, "capability_spec", None)
        self.info = {
            "id": inner.env_id,
            "capability": inner.capability,
            "max_turns": inner.max_turns,
            "tools": [t.name for t in inner.tools],
            "is_spec": spec is not None,
            "description": getattr(spec, "description", (type(inner).__doc__ or "").strip()),
            "tags": list(getattr(spec, "tags", ())),
        }
        from trace_gym.agents.baselines import OracleAgent, RandomAgent

        for d in DIFFICULTIES:
            for agent in (OracleAgent(), RandomAgent(0)):
                obs, info = env.reset(seed=0, options={"difficulty": d})
                agent.reset(inner, obs, info)
                done = False
                while not done:
                    obs, reward, term, trunc, info = env.step(agent.act(obs, info))
                    assert inner.observation_space.contains(obs), "observation outside its space"
                    assert isinstance(reward, float), f"reward {reward!r} is not a float"
                    json.dumps(info)
                    done = term or trunc
        env.close()
        return f"{inner.env_id} ({inner.capability}), {len(inner.tools)} tools"

    def novel(self) -> str:
        import trace_gym

        mine = fingerprint(self.env_id)
        best, closest = 0.0, ""
        for row in trace_gym.load_registry():
            if row.id in (self.env_id, self.info.get("id")):
                continue
            score = similarity(mine, fingerprint(row.id))
            if score > best:
                best, closest = score, row.id
        assert best < NEAR_DUPLICATE, (
            f"near-duplicate of {closest} (task fingerprint similarity {best:.2f} >= "
            f"{NEAR_DUPLICATE}): train a different capability, not a copy of that environment"
        )
        return f"closest {closest} at {best:.2f}"

    def determinism(self) -> str:
        from trace_gym.testing import check_determinism

        check_determinism(self.env_id)
        _cross_process(self.target, 3 if self.quick else 5)
        return "same tasks and episodes per seed, and across processes"

    def check_env(self) -> str:
        from trace_gym.testing import check_gymnasium_env_checker

        check_gymnasium_env_checker(self.env_id)
        return "gymnasium's env checker passes"

    def splits(self) -> str:
        from trace_gym.testing import check_split_disjointness

        n = 50 if self.quick else 200
        check_split_disjointness(self.env_id, n=n)
        return f"{n} seeds per split, no task shared"

    def oracle(self) -> str:
        from trace_gym.agents.baselines import OracleAgent
        from trace_gym.testing import check_oracle, make_env

        check_oracle(self.env_id)
        env = make_env(self.env_id)
        n = self.n // 4
        for d in (0.0, 0.25, 0.5, 0.75, 1.0):
            for seed in range(n):
                rec = _play(env, OracleAgent(), seed, d, "eval")
                v = rec["verification"]
                failed = [c["name"] for c in v["checks"] if not c["passed"]]
                assert rec["is_success"] and abs(v["score"] - 1.0) < 1e-9, (
                    f"the oracle scored {v['score']:.2f} (failed checks {failed}) on eval "
                    f"seed {seed} at difficulty {d}"
                )
        env.close()
        return f"1.0 on {5 * n} sampled tasks plus the property examples"

    def reward_agrees(self) -> str:
        from trace_gym.agents.baselines import make_agent
        from trace_gym.testing import make_env

        n = 0
        for mode in ("partial", "binary", "shaped"):
            env = make_env(self.env_id, reward_mode=mode)
            inner = env.unwrapped
            for name in ("oracle", "random", "null", "call_every_tool"):
                for seed in range(3):
                    agent = make_agent(name if name != "random" else f"random:{seed}")
                    obs, info = env.reset(seed=seed)
                    agent.reset(inner, obs, info)
                    rewards, done = [], False
                    while not done:
                        obs, r, term, trunc, info = env.step(agent.act(obs, info))
                        rewards.append(r)
                        done = term or trunc
                    v = inner.verification()
                    expected = v.reward(mode)
                    got = sum(rewards) if mode == "shaped" else rewards[-1]
                    where = f"{name} seed {seed} reward_mode {mode}"
                    assert abs(got - expected) < 1e-9, (
                        f"step returned {got} but the verification says {expected} ({where})"
                    )
                    assert info["is_success"] == v.passed, f"info is_success disagrees ({where})"
                    assert info["verification"] == v.to_dict(), (
                        f"info verification differs ({where})"
                    )
                    n += 1
            env.close()
        return f"{n} episodes in three reward modes"

    def baselines(self) -> str:
        from trace_gym.testing import check_baselines_fail

        check_baselines_fail(self.env_id)
        return "null scores 0, call-every-tool fails, random <= 5 %"

    def information_free(self) -> str:
        try:
            from trace_gym.testing.soundness import check_information_free
        except ImportError as exc:
            raise _Unavailable(
                f"trace_gym.testing.soundness.check_information_free is not importable ({exc})"
            ) from None
        result = check_information_free(self.env_id, n_seeds=30 if self.quick else 100)
        ok = getattr(result, "passed", result if isinstance(result, bool) else None)
        if isinstance(result, dict):
            ok = result.get("passed", ok)
        assert ok is not False, f"information-free policies beat their bounds: {result}"
        return "every information-free policy under its bound"

    def decision_balance(self) -> str:
        from trace_gym.testing.soundness import DECISION_SEEDS, RATE_SEEDS, check_decision_balance

        if not self._declared("decisions"):
            raise _Skip("the environment declares no decisions (no categorical decision)")
        # a class that is most of the tasks needs about 60 of its tasks for the blind policy's
        # wins to be judged (see check_decision_balance): never fewer than DECISION_SEEDS
        n = DECISION_SEEDS if self.quick else 2 * DECISION_SEEDS
        shares = QUICK_RATE_SEEDS if self.quick else RATE_SEEDS
        rows = check_decision_balance(self.env_id, n_seeds=n, share_seeds=shares)
        return decision_balance_line(rows)

    def _declared(self, attribute: str) -> Any:
        from trace_gym.testing import make_env

        env = make_env(self.env_id)
        try:
            return getattr(type(env.unwrapped), attribute, None)
        finally:
            env.close()

    def knob_rates(self) -> str:
        from trace_gym.testing.soundness import RATE_SEEDS, check_knob_rates

        if not self._declared("knob_rates"):
            raise _Skip("the environment declares no knob_rates (documented knob rates)")
        n = QUICK_RATE_SEEDS if self.quick else RATE_SEEDS
        rows = check_knob_rates(self.env_id, n_seeds=n)
        return f"{len(rows)} declared knob rates hold over {n} seeds"

    def template_diversity(self) -> str:
        from trace_gym.testing.soundness import RATE_SEEDS, check_template_diversity

        floor = self._declared("template_floor")
        if floor is None:
            raise _Skip("the environment declares no template_floor (templates per 1,000 seeds)")
        n = QUICK_RATE_SEEDS if self.quick else RATE_SEEDS
        counts = check_template_diversity(self.env_id, n_seeds=n)
        shown = ", ".join(f"d={d:g}: {c}" for d, c in counts.items())
        return f"distinct templates per {n} seeds {shown} (floor {floor} per 1,000)"

    def mutations(self) -> str:
        from trace_gym.testing import check_mutations

        check_mutations(self.env_id)
        return "every single-step mutation of the oracle plan fails or scores lower"

    def fuzzing(self) -> str:
        from trace_gym.testing import check_garbage_actions

        check_garbage_actions(self.env_id)
        return "garbage actions never raised; rewards in range"

    def verifier_purity(self) -> str:
        from trace_gym.testing import check_verifier_purity

        check_verifier_purity(self.env_id)
        return "verification repeatable and side-effect free"

    def replay(self) -> str:
        from trace_gym.testing import check_replay

        check_replay(self.env_id)
        return "re-scoring equals the online reward"

    def difficulty(self) -> str:
        from trace_gym.agents.baselines import RandomAgent
        from trace_gym.agents.deficit import DeficitAgent
        from trace_gym.testing import make_env

        env = make_env(self.env_id)
        deficit = DeficitAgent({})
        # the capability may be new (not a deficit profile key); lapse it directly
        deficit.profile = {env.unwrapped.capability: 0.5}
        n = self.n
        rows = []
        for name, agent in (("deficit", deficit), ("random", RandomAgent(0))):
            means = []
            for d in DIFFICULTIES:
                scores = [_play(env, agent, s, d, "eval")["final_reward"] for s in range(n)]
                means.append(sum(scores) / n)
            rows.append(f"{name} " + "/".join(f"{m:.2f}" for m in means))
            for k in range(1, len(DIFFICULTIES)):
                (d0, m0), (d1, m1) = (
                    (DIFFICULTIES[k - 1], means[k - 1]),
                    (DIFFICULTIES[k], means[k]),
                )
                assert m1 <= m0 + MONOTONE_TOLERANCE, (
                    f"the {name} agent scores {m1:.2f} at difficulty {d1} but {m0:.2f} at {d0} "
                    f"({n} seeds): harder tasks must not be easier"
                )
        env.close()
        return f"mean score at d={DIFFICULTIES}: " + "; ".join(rows)

    def adversary(self) -> str:
        from trace_gym.validation.adversary import run_adversary

        _, factory = load_target(self.target)
        seeds = (0,) if self.quick else (0, 1)
        results = run_adversary(factory, seeds)
        if not results:
            raise _Skip("not an SWE environment (no sandboxed agent code to attack)")
        won = [r for r in results if r.won]
        assert not won, "; ".join(
            f"{r.attack} (seed {r.seed}): {', '.join(r.why)}" for r in won[:5]
        )
        names = sorted({r.attack for r in results})
        return f"{len(names)} attacks x {len(seeds)} seeds, none won"

    def calibration(self) -> str:
        if not self.policy:
            raise _Skip("no --policy given")
        from trace_gym.testing import make_env
        from trace_gym.validation.calibrate import agent_for_rollout, summarize

        env = make_env(self.env_id)
        seeds, group = (5, 4) if self.quick else (25, 8)
        agents = [agent_for_rollout(self.policy, r) for r in range(group)]
        rewards, successes = [], []
        for seed in range(seeds):
            recs = [_play(env, a, seed, 0.5, "eval") for a in agents]
            rewards.append([float(r["final_reward"]) for r in recs])
            successes.append([bool(r["is_success"]) for r in recs])
        env.close()
        flat = [s for group_ in successes for s in group_]
        smoke = sum(flat[:SMOKE_ROLLOUTS]) / SMOKE_ROLLOUTS
        assert smoke <= SMOKE_MAX_SUCCESS, (
            f"{self.policy} already succeeds on {smoke:.0%} of the first {SMOKE_ROLLOUTS} "
            "rollouts: the environment is too easy to teach it anything"
        )
        report = summarize(
            rewards, successes, env_id=self.env_id, agent=self.policy, difficulty=0.5, split="eval"
        )
        assert report.accepted, "; ".join(report.flags)
        return f"mean reward {report.mean_reward:.2f}, success {report.success_rate:.0%}"


def decision_balance_line(rows: list[dict[str, Any]]) -> str:
    """The gate's verdict line: per difficulty, each class's measured share and its
    decision-blind policy's success (``d=0: grant 0.40 (blind 0.37), refuse 0.60 (0.04)``)."""
    parts = []
    for difficulty in sorted({r["difficulty"] for r in rows}):
        cells = [
            f"{r['decision']} {r['share']:.2f} (blind {r.get('blind_success', 0.0):.2f})"
            for r in rows
            if r["difficulty"] == difficulty
        ]
        parts.append(f"d={difficulty:g}: " + ", ".join(cells))
    n, share_n = (rows[0].get("n", 0), rows[0]["share_n"]) if rows else (0, 0)
    return f"share of {share_n} tasks (decision-blind success over {n}) " + "; ".join(parts)


class _Unavailable(Exception):
    pass


class _Skip(Exception):
    pass


def _play(env: Any, agent: Any, seed: int, difficulty: float, split: str) -> dict[str, Any]:
    from trace_gym.episodes import run_episode

    return run_episode(env, agent, seed=seed, options={"difficulty": difficulty, "split": split})


def run_gates(
    target: str,
    *,
    quick: bool,
    policy: str | None,
    novelty: bool,
    stop_on_fail: bool,
    on_gate: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the gates in this process (the child calls it; use :func:`validate` instead)."""
    gates = _Gates(target, quick, policy)
    out: dict[str, Any] = {"target": target, "gates": [], "env": {}}
    broken = False
    for name in GATES:
        if name == "novel" and not novelty:
            continue
        started = time.monotonic()
        if broken:
            status, reason = "skipped", "an earlier gate failed"
        else:
            try:
                status, reason = "pass", getattr(gates, name)()
            except _Skip as exc:
                status, reason = "skipped", str(exc)
            except _Unavailable as exc:
                status, reason = "unavailable", str(exc)
            except AssertionError as exc:
                status, reason = "fail", _first_line(exc) or "assertion failed"
            except Exception as exc:  # noqa: BLE001  (the environment's bug is the verdict)
                status, reason = "fail", f"raised {type(exc).__name__}: {exc}" + _where(exc)
        if name == "calibration" and status == "skipped" and not policy:
            continue
        out["gates"].append(
            {
                "name": name,
                "status": status,
                "reason": reason,
                "seconds": time.monotonic() - started,
            }
        )
        out["env"] = gates.info
        if on_gate is not None:
            on_gate(out)
        broken |= status != "pass" and (name == "loads" or stop_on_fail) and status != "skipped"
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # hypothesis appends "Falsifying example: ..." after the message; keep both, briefly
    return text if len(text) <= 800 else text[:800] + "..."


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


# -- near-duplicate fingerprints --------------------------------------------------------------
_MASKS = (
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2})?\b"), " date "),
    (re.compile(r"\b[A-Z]{1,4}-[A-Z0-9]+(?:-\d+)?\b"), " id "),
    (re.compile(r"\$?\d[\d,.]*"), " num "),
)


def fingerprint(env_id: str, seeds: tuple[int, ...] = tuple(range(16))) -> dict[str, Any]:
    """What a task looks like with its particulars masked: tool names and word 3-grams of the
    system prompt and the opening request (ids, numbers, dates and names masked)."""
    from trace_gym.testing import make_env
    from trace_gym.world.generate import FIRST_NAMES, LAST_NAMES

    names = re.compile(r"\b(?:" + "|".join(FIRST_NAMES + LAST_NAMES) + r")\b")
    env = make_env(env_id)
    # Tasks are drawn from the same randomness for every id (the generator seed is keyed by the
    # env id): a copied generator then shows exactly the original's tasks, not 16 fresh draws
    # whose 3-grams overlap only as much as a sibling environment's do.
    env.unwrapped.env_id = "trace/fingerprint"
    grams: set[str] = set()
    for seed in seeds:
        obs, info = env.reset(seed=seed, options={"difficulty": 0.5})
        text = names.sub(" name ", info["system_prompt_no_hint"] + "\n" + obs)
        for pattern, mask in _MASKS:
            text = pattern.sub(mask, text)
        words = re.findall(r"[a-z_]+", text.lower())
        grams |= {" ".join(words[i : i + 3]) for i in range(len(words) - 2)}
    tools = sorted(t.name for t in env.unwrapped.tools)
    env.close()
    return {"tools": tools, "grams": sorted(grams)}


def similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Mean of the Jaccard similarities of the tool sets and of the masked-text 3-grams."""

    def jaccard(x: list[str], y: list[str]) -> float:
        sx, sy = set(x), set(y)
        return len(sx & sy) / len(sx | sy) if sx | sy else 1.0

    return 0.5 * jaccard(a["tools"], b["tools"]) + 0.5 * jaccard(a["grams"], b["grams"])


# -- sandbox -----------------------------------------------------------------------------------
_BLOCKED_EVENTS = ("socket.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.kill", "os.remove", "os.unlink", "os.rmdir", "os.rename", "os.truncate",
                   "os.chmod", "os.chown", "shutil.", "ctypes.", "urllib.", "http.", "ftplib.",
                   "smtplib.", "webbrowser.", "pty.")  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def install_sandbox() -> None:
    """Refuse network, processes (other than this module's hashing child), deleting and
    writing files from here on (an audit hook cannot be removed once added).

    One exception, kept narrow: environments that grade code (the SWE environments) run it
    through :class:`trace_gym.sandbox.Sandbox`, which starts bubblewrap and its launcher,
    creates and removes its control groups (and, unisolated, its task folders) and kills its
    runs' processes; what it does while it does that
    (:func:`trace_gym.sandbox.audit_allows`) is allowed."""
    from trace_gym import sandbox as sbx

    allowed_child = [sys.executable, "-m", "trace_gym.validation.validate", "--hashes"]

    def hook(event: str, args: tuple) -> None:
        if sbx.audit_allows(event, args):  # the code sandbox's own launch, files and groups
            return
        if event == "subprocess.Popen":
            argv = [str(a) for a in (args[1] or [])]
            if argv[:4] != allowed_child:
                raise PermissionError(f"validate sandbox: starting {argv[:3]} is not allowed")
        elif event == "open":
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writes = (
                any(c in mode for c in "wax+")
                if isinstance(mode, str)
                else bool((flags or 0) & _WRITE_FLAGS)
            )
            if writes and str(args[0]) not in ("/dev/null",):
                raise PermissionError(f"validate sandbox: writing {args[0]!r} is not allowed")
        elif event.startswith(_BLOCKED_EVENTS):
            raise PermissionError(f"validate sandbox: {event} is not allowed")

    sys.dont_write_bytecode = True
    sys.addaudithook(hook)


# -- command line ------------------------------------------------------------------------------
def add_validate_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "validate",
        help="run every gate on an environment (sandboxed) and print the verdicts",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("target", help="registered id or module:callable returning an environment")
    p.add_argument("--quick", action="store_true", help="reduced budget (under a minute)")
    p.add_argument("--json", metavar="OUT", help="write the verdicts as JSON to OUT")
    p.add_argument("--policy", metavar="SPEC", help="agent spec for the calibration gate")
    p.add_argument("--novelty", action="store_true", help="also reject near-duplicates")
    p.add_argument("--timeout", type=float, default=None, help="wall-clock limit in seconds")
    p.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB, help="memory limit")
    p.set_defaults(fn=validate_command)
    return p


def validate_command(args: argparse.Namespace) -> int:
    report = validate(
        args.target,
        quick=args.quick,
        policy=args.policy,
        novelty=args.novelty,
        timeout_s=args.timeout,
        memory_mb=args.memory_mb,
    )
    print(report.render())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0 if report.passed else 1


def _child_main(argv: list[str]) -> int:
    if argv[:1] == ["--hashes"]:
        install_sandbox()
        print(json.dumps(task_hashes_of(argv[1], int(argv[2]))))
        return 0
    p = argparse.ArgumentParser(prog="trace_gym.validation.validate")
    p.add_argument(CHILD_FLAG, dest="target", required=True)
    p.add_argument("--out", required=True)
    for flag in ("--quick", "--novelty", "--stop-on-fail"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--policy")
    args = p.parse_args(argv)
    out = open(args.out, "w", encoding="utf-8")  # opened before the sandbox forbids writing
    from trace_gym.testing import load_profile_from_env

    load_profile_from_env()  # the parent's HYPOTHESIS_PROFILE sizes the property gates

    def save(report: dict[str, Any]) -> None:
        out.seek(0)
        out.truncate()
        out.write(json.dumps(report))
        out.flush()

    install_sandbox()
    run_gates(
        args.target,
        quick=args.quick,
        policy=args.policy,
        novelty=args.novelty,
        stop_on_fail=args.stop_on_fail,
        on_gate=save,
    )
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
