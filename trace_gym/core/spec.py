"""The environment contract: one :class:`CapabilitySpec` per capability, one engine to run it.

Read this module first when you write an environment (by hand or by synthesis). An
environment is a spec, a value of plain functions over a *task* (a frozen dataclass the
generator returns; it is hashed, so keep it JSON data):

==================  =============================================================================
field               what it is
==================  =============================================================================
``id``              gymnasium id, ``trace/<name>-v<N>``; a version freezes what a seed means
``capability``      the snake_case capability the environment trains (one per environment)
``description``     one line (the registry's description)
``config``          a frozen dataclass subclassing :class:`SpecConfig`; fields declared with
                    :func:`knob` (default, bounds) and ``knobs(difficulty) -> {field: value}``
``generate``        ``(rng: StableRNG, config) -> task``; pure: the same rng state gives the
                    same task. Draw everything from ``rng``; never from ``random``/time/``hash``.
                    Derived when only ``generate_into`` is given (see *Derived hooks*)
``world``           ``(task) -> World``: the records the tools act on (default: ``task.world``)
``tools``           tool names from :data:`trace_gym.world.tools.VOCABULARY`, or :class:`Tool`
                    objects for tools the vocabulary lacks
``instructions``    ``(task) -> str``: what the system prompt says after the shared preamble
                    (the policy, what is known, how to finish)
``hint``            ``(task) -> str``: abstract advice (no tool arguments, no answers)
``user``            ``(task) -> ScriptedUser``: the deterministic customer
``verify``          ``(task, episode) -> Verification``: pure; weighted named checks, gates for
                    forbidden actions, ``decided=False`` when the episode reached no decision
``oracle``          ``(task) -> [action, ...]``: assistant turns that score 1.0; or give
``world_oracle``    ``(task, world) -> [action, ...]``, the oracle reading the records it needs
                    from ``world`` (a fresh ``world(task)``, the world the tools start from)
``features``        ``(task) -> dict``: what the task contains (for difficulty analysis)
``lapse``           optional ``(segment, rng) -> actions``: how an agent lacking the capability
                    gets the task wrong (the deficit agent uses it)
``listed_rules``    optional ``(task) -> [rule code]``: codes the system prompt lists
``requested_call``  optional ``(task) -> {"name", "arguments"} | None``: the write the
                    customer asks for, with arguments exactly as the customer states them
``information_free_exempt``  policy name -> why that information-free policy does not apply
``preamble``        the system prompt's first sentence (default: the shared Tracewell one)
``knob_rates``      :class:`KnobRate` values: how often a difficulty knob
                    shows in the task features, checked over 1,000 seeds
``template_floor``  distinct opening templates per 1,000 seeds the generator must reach
``generate_into``   optional ``(world, rng, config) -> task``: adds the task's records to a
                    shared world (the task's ``owned`` lists them); with ``verify_scoped``
                    (``(task, episode) -> Verification`` over the calls and diffs touching
                    ``owned`` only) the spec can be a member of a composite. A ``verify``
                    accepting ``scoped=`` gives ``verify_scoped`` (see *Derived hooks*)
``oracle_segments`` optional ``(task) -> [Segment]``: a composite's oracle per member
``decisions``       for an environment whose verifier judges a categorical decision (grant /
                    refuse / ask / decline ...): each decision class and its declared share of
                    the tasks at every difficulty (the shares sum to 1)
``decision``        ``(task) -> str``: the class of the decision the task needs (goes into
                    ``info["decision"]``, so reports can group success by it)
``decision_plan``   optional ``(task, decision) -> [action, ...]``: read what the oracle reads,
                    then take ``decision`` carried out as well as it can be without knowing
                    which decision the task needs (the decision-blind policies play it)
``request_decisions`` optional, composites: ``(task) -> {member: class}``, the decision class
                    of each request whose member declares decisions
                    (``info["request_decisions"]``)
``env_name``        the engine class's name (a module aliasing ``XxxEnv = SPEC.env_class``)
``engine``          the engine that runs the spec: :class:`SpecEnv` (default), or a subclass
                    for a family of environments that needs more of the episode loop (the
                    SWE environments' :class:`~trace_gym.envs.helpers.swe_common.SweEngine` runs
                    agent code in the sandbox and reports it in ``info``)
==================  =============================================================================

Derived hooks
-------------
A module defines each piece once; the spec wires the rest (give a hook explicitly to
override its derivation):

* ``generate`` (none given) = draw ``World(draw_now(rng))``, ``generate_into`` it, and store
  that world as the task's ``world``;
* ``oracle`` (none given) = ``world_oracle(task, world(task))``;
* ``verify_scoped`` (none given, ``generate_into`` given) = ``verify(task, episode,
  scoped=True)``, when ``verify`` takes a ``scoped`` keyword.

``SPEC(**kwargs)`` builds the environment (so ``"module:SPEC"`` is a gymnasium entry point),
and ``trace-gym validate module:SPEC`` runs every gate on it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trace_gym.core.config import apply_overrides
from trace_gym.core.env import EpisodeState, TraceEnv
from trace_gym.core.plans import LAPSES, Segment
from trace_gym.core.prompts import AGENT_PREAMBLE, agent_prompt
from trace_gym.core.user import ScriptedUser
from trace_gym.core.verify import Verification
from trace_gym.errors import ConfigError
from trace_gym.primitives.seeding import StableRNG
from trace_gym.primitives.tools import Tool, ToolSet
from trace_gym.world.model import World

ID_PATTERN = re.compile(r"^[a-z0-9_.-]+/[a-z0-9_.-]+-v(\d+)$")
CAPABILITY_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


# -- config ------------------------------------------------------------------------------------
def knob(
    default: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    choices: tuple[Any, ...] | None = None,
    doc: str = "",
) -> Any:
    """A config field with its bounds: ``low <= value <= high`` for numbers, and for
    ``choices`` the value (or every member of a tuple value, at least one) is a choice."""
    return field(
        default=default, metadata={"low": low, "high": high, "choices": choices, "doc": doc}
    )


def check_knobs(config: Any) -> None:
    """Raise :class:`ConfigError` naming the field when a value breaks its declared bounds."""
    what = type(config).__name__
    for f in dataclasses.fields(config):
        meta, value = f.metadata, getattr(config, f.name)
        if meta.get("choices") is not None:
            members = value if isinstance(value, tuple) else (value,)
            bad = [m for m in members if m not in meta["choices"]]
            if bad or not members:
                raise ConfigError(
                    f"{what}.{f.name} must be {'a non-empty tuple of ' if isinstance(value, tuple) else ''}"
                    f"{list(meta['choices'])}, got {value!r}"
                )
        low, high = meta.get("low"), meta.get("high")
        if low is None and high is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{what}.{f.name} must be a number, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ConfigError(f"{what}.{f.name} must be in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class SpecConfig:
    """Base of generator configs: bounds are checked once, here, for every :func:`knob`."""

    def __post_init__(self) -> None:
        check_knobs(self)

    @classmethod
    def knobs(cls, difficulty: float) -> dict[str, Any]:
        """Field values at ``difficulty`` in [0, 1] (fields left out keep their default)."""
        return {}

    @classmethod
    def from_difficulty(cls, difficulty: float, overrides: Mapping[str, Any]) -> Any:
        """The config at ``difficulty`` with the user's ``reset(options={"config": ...})``."""
        return apply_overrides(cls(**cls.knobs(difficulty)), dict(overrides), cls.__name__)


@dataclass(frozen=True)
class KnobRate:
    """A documented rate of a difficulty knob.

    ``feature`` names a key of ``info["difficulty_features"]``; a task counts when the value
    is truthy (a positive number, a non-empty list, True), or equals ``equals`` when given.
    At ``difficulty``, the fraction of tasks that count must be ``rate`` +- ``tolerance``.
    """

    feature: str
    difficulty: float
    rate: float
    tolerance: float = 0.05
    equals: Any = None

    def counts(self, features: dict[str, Any]) -> bool:
        if self.feature not in features:
            raise AssertionError(
                f"knob {self.feature!r} is not in difficulty_features {sorted(features)}"
            )
        value = features[self.feature]
        if self.equals is not None:
            return bool(value == self.equals)
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return value > 0
        return bool(value)


# -- the spec ----------------------------------------------------------------------------------
def task_world(task: Any) -> World:
    """The default ``world`` hook: a fresh copy of ``task.world``."""
    return World.from_dict(task.world)


def no_features(task: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True, kw_only=True)
class CapabilitySpec:
    """One environment, declared (see the module docstring for every field)."""

    id: str
    capability: str
    description: str
    config: type
    verify: Callable[..., Verification]
    user: Callable[[Any], ScriptedUser]
    instructions: Callable[[Any], str]
    hint: Callable[[Any], str]
    tools: tuple[str | Tool, ...]
    generate: Callable[[StableRNG, Any], Any] | None = None
    """``(rng, config) -> task``; None: derived from ``generate_into``."""
    oracle: Callable[[Any], list[Any]] | None = None
    """``(task) -> [action, ...]``; None: derived from ``world_oracle``."""
    world_oracle: Callable[[Any, World], list[Any]] | None = None
    """``(task, world) -> [action, ...]``: the oracle over a fresh ``world(task)``."""
    features: Callable[[Any], dict[str, Any]] = no_features
    world: Callable[[Any], World] = task_world
    max_turns: int = 12
    tags: tuple[str, ...] = ()
    preamble: str = AGENT_PREAMBLE
    lapse: Callable[[Any, StableRNG], list[Any]] | None = None
    listed_rules: Callable[[Any], list[str]] | None = None
    requested_call: Callable[[Any], dict[str, Any] | None] | None = None
    information_free_exempt: Mapping[str, str] = field(default_factory=dict)
    knob_rates: tuple[KnobRate, ...] = ()
    template_floor: int | None = None
    generate_into: Callable[[World, StableRNG, Any], Any] | None = None
    verify_scoped: Callable[[Any, EpisodeState], Verification] | None = None
    oracle_segments: Callable[[Any], list[Segment]] | None = None
    """A composite's oracle, one :class:`~trace_gym.core.plans.Segment` per member request
    (the deficit agent lapses per segment); None: the whole oracle is one segment."""
    decisions: Mapping[str, float] = field(default_factory=dict)
    """Decision class -> its declared share of the tasks (at every difficulty; the shares sum
    to 1). Empty: the verifier judges no categorical decision."""
    decision: Callable[[Any], str] | None = None
    """``(task) -> str``: the class (a key of ``decisions``) of the decision the task needs."""
    decision_plan: Callable[[Any, str], list[Any]] | None = None
    """``(task, decision) -> [action, ...]``: the oracle's reads, then ``decision`` carried out
    without knowing which decision the task needs (a grant writes what granting writes; a
    refusal cannot know the violated rule); the decision-blind policies play it."""
    request_decisions: Callable[[Any], dict[str, str]] | None = None
    """A composite's ``(task) -> {member short name: class}`` for the requests whose member
    declares decisions (reports group each request's success by it)."""
    initial_world_from_task: bool = False
    """True when the verifier only reads ``episode.initial_world`` (it is then a view of
    ``task.world``, not a second copy); needs the default ``world`` hook."""
    env_name: str = ""
    """The engine class's name (default: the capability in CamelCase + ``Env``); a module
    that binds ``XxxEnv = SPEC.env_class`` names it ``XxxEnv`` so instances pickle."""
    engine: type[SpecEnv] | None = None
    """The engine class (None: :class:`SpecEnv`); it must subclass :class:`SpecEnv`."""
    env_class: type[SpecEnv] = field(init=False, repr=False, compare=False)

    metadata: ClassVar[dict[str, Any]] = TraceEnv.metadata

    def __post_init__(self) -> None:
        match = ID_PATTERN.match(self.id)
        if match is None:
            raise ConfigError(f"spec id must look like 'trace/<name>-v<N>', got {self.id!r}")
        if not CAPABILITY_PATTERN.match(self.capability):
            raise ConfigError(f"capability must be snake_case, got {self.capability!r}")
        if not (isinstance(self.config, type) and hasattr(self.config, "from_difficulty")):
            raise ConfigError(f"{self.id}: config must be a class with from_difficulty()")
        derive_hooks(self)
        hooks = ("generate", "verify", "oracle", "user", "instructions", "hint", "features")
        for name in hooks + ("world",):
            if not callable(getattr(self, name)):
                raise ConfigError(f"{self.id}: {name} must be callable")
        if int(self.max_turns) < 2:
            raise ConfigError(f"{self.id}: max_turns must be >= 2, got {self.max_turns!r}")
        if self.initial_world_from_task and self.world is not task_world:
            raise ConfigError(f"{self.id}: initial_world_from_task needs the default world hook")
        check_decisions(self)
        toolset = ToolSet(resolve_tools(self.tools))
        if not len(toolset):
            raise ConfigError(f"{self.id}: a spec needs at least one tool")
        engine = SpecEnv if self.engine is None else self.engine
        if not (isinstance(engine, type) and issubclass(engine, SpecEnv)):
            raise ConfigError(f"{self.id}: engine must be a SpecEnv subclass, got {engine!r}")
        object.__setattr__(self, "env_class", engine.for_spec(self, toolset, int(match[1])))
        if self.lapse is not None:  # the deficit agents find it by capability
            LAPSES.setdefault(self.capability, self.lapse)

    def __call__(self, **kwargs: Any) -> SpecEnv:
        """The environment (gymnasium calls this through the entry point ``module:SPEC``)."""
        return self.env_class(**kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # A module's SPEC pickles by reference (a live environment's user may hold specs).
        module = sys.modules.get(self.module)
        if module is not None and getattr(module, "SPEC", None) is self:
            return _module_spec, (module.__name__,)
        return super().__reduce_ex__(protocol)

    @property
    def module(self) -> str:
        """The module that defines the spec: where its own (not derived) generator lives."""
        own = self.generate_into if isinstance(self.generate, Derived) else self.generate
        return str(getattr(own, "__module__", __name__))

    @property
    def short(self) -> str:
        """The id's name in snake_case (:func:`short_of`)."""
        return short_of(self.id)

    @property
    def composable(self) -> bool:
        """Whether a composite can use the spec (it has ``generate_into``)."""
        return self.generate_into is not None

    def now(self, task: Any) -> str:
        """The task's current time (without copying the world when it is ``task.world``)."""
        if self.world is task_world:
            return str(task.world["now"])
        return self.world(task).now

    def system_prompt(self, task: Any) -> str:
        """The preamble, the current time and the instructions: the whole system prompt."""
        return agent_prompt(self.preamble, self.now(task), self.instructions(task))


# -- derived hooks -----------------------------------------------------------------------------
class Derived(functools.partial):  # type: ignore[type-arg]
    """A hook the spec derived from the module's own (so a copy of the spec derives it again
    from the copy's hooks instead of keeping the original's)."""


def generate_in_fresh_world(
    generate_into: Callable[[World, StableRNG, Any], Any], rng: StableRNG, config: Any
) -> Any:
    """The derived ``generate``: a world of its own at a drawn time, the task generated into
    it, and that world as the task's ``world``."""
    from trace_gym.world.generate import draw_now

    world = World(draw_now(rng))
    task = generate_into(world, rng, config)
    # no copy: nothing else holds this world (a snapshot costs ~10 % of a reset)
    return dataclasses.replace(task, world=world.to_dict())


def oracle_on_task_world(
    world_oracle: Callable[[Any, World], list[Any]],
    world: Callable[[Any], World],
    task: Any,
) -> list[Any]:
    """The derived ``oracle``: ``world_oracle`` over the world the agent's tools start from
    (a fresh one, so an oracle that simulates its writes cannot change the task)."""
    return world_oracle(task, world(task))


def takes_scoped(verify: Callable[..., Any]) -> bool:
    """Whether ``verify`` accepts the ``scoped`` keyword (a composite's member verifier)."""
    try:
        parameters = inspect.signature(verify).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    scoped = parameters.get("scoped")
    return scoped is not None and scoped.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def derive_hooks(spec: CapabilitySpec) -> None:
    """Fill in ``generate``, ``oracle`` and ``verify_scoped`` from the hooks the module wrote
    (see *Derived hooks* in the module docstring); raise :class:`ConfigError` when neither
    form of a required hook is given."""

    def put(name: str, value: Any) -> None:
        object.__setattr__(spec, name, value)

    if spec.generate is None or isinstance(spec.generate, Derived):
        if spec.generate_into is None:
            raise ConfigError(
                f"{spec.id}: give generate(rng, config) or generate_into(world, rng, config)"
            )
        put("generate", Derived(generate_in_fresh_world, spec.generate_into))
    if spec.oracle is None or isinstance(spec.oracle, Derived):
        if spec.world_oracle is None:
            raise ConfigError(f"{spec.id}: give oracle(task) or world_oracle(task, world)")
        put("oracle", Derived(oracle_on_task_world, spec.world_oracle, spec.world))
    if spec.verify_scoped is None or isinstance(spec.verify_scoped, Derived):
        scoped = spec.generate_into is not None and takes_scoped(spec.verify)
        put("verify_scoped", Derived(spec.verify, scoped=True) if scoped else None)
    if (spec.generate_into is None) != (spec.verify_scoped is None):
        raise ConfigError(
            f"{spec.id}: generate_into and verify_scoped go together (a verify(task, episode, "
            "*, scoped=False) gives verify_scoped)"
        )


SHARE_TOLERANCE = 1e-6
"""How far the declared decision shares may sum from 1 (rounding in hand-written shares)."""


def check_decisions(spec: CapabilitySpec) -> None:
    """Raise :class:`ConfigError` when the declared decisions do not fit together: classes and
    the ``decision`` hook come together, every share is in (0, 1] and they sum to 1."""
    declared = dict(spec.decisions)
    if bool(declared) != (spec.decision is not None):
        raise ConfigError(f"{spec.id}: decisions (class -> share) and decision(task) go together")
    if spec.decision_plan is not None and not declared:
        raise ConfigError(f"{spec.id}: decision_plan needs declared decisions")
    for name, share in declared.items():
        if not (isinstance(name, str) and CAPABILITY_PATTERN.match(name)):
            raise ConfigError(f"{spec.id}: decision class must be snake_case, got {name!r}")
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ConfigError(
                f"{spec.id}: share of decision {name!r} must be in (0, 1], got {share!r}"
            )
    if declared and abs(sum(declared.values()) - 1.0) > SHARE_TOLERANCE:
        raise ConfigError(
            f"{spec.id}: decision shares must sum to 1, got {sum(declared.values()):.4f} "
            f"({declared})"
        )


def short_of(env_id: str) -> str:
    """An id's name in snake_case (``trace/tool-call-v0`` -> ``tool_call``): the module name
    of a shipped environment, the deficit profiles' short key and the composite's check
    prefix."""
    return env_id.split("/", 1)[-1].rsplit("-v", 1)[0].replace("-", "_")


def _module_spec(module: str) -> CapabilitySpec:
    return importlib.import_module(module).SPEC


def resolve_tools(tools: tuple[str | Tool, ...]) -> list[Tool]:
    """Vocabulary names and :class:`Tool` objects as tools, in order."""
    from trace_gym.world.tools import pick_tools

    out = []
    for t in tools:
        if isinstance(t, Tool):
            out.append(t)
        else:
            try:
                out.extend(pick_tools(str(t)))
            except KeyError as exc:
                raise ConfigError(str(exc.args[0])) from None
    return out


# -- the engine --------------------------------------------------------------------------------
class SpecEnv(TraceEnv):
    """Runs any :class:`CapabilitySpec`: every hook of :class:`TraceEnv` is the spec's."""

    capability_spec: ClassVar[CapabilitySpec]
    information_free_exempt: ClassVar[Mapping[str, str]] = {}
    knob_rates: ClassVar[tuple[Any, ...]] = ()
    template_floor: ClassVar[int | None] = None

    @classmethod
    def for_spec(cls, spec: CapabilitySpec, tools: ToolSet, version: int) -> type[SpecEnv]:
        """A subclass bound to ``spec`` (class attributes are what TRL and the suite read)."""
        name = spec.env_name or "".join(p.title() for p in spec.capability.split("_")) + "Env"
        attrs = {
            "capability_spec": spec,
            "env_id": spec.id,
            "capability": spec.capability,
            "version": version,
            "tools": tools,
            "default_max_turns": int(spec.max_turns),
            "information_free_exempt": dict(spec.information_free_exempt),
            "knob_rates": tuple(spec.knob_rates),
            "template_floor": spec.template_floor,
            "decisions": dict(spec.decisions),
            "initial_world_from_task": bool(spec.initial_world_from_task),
            **({"oracle_segments": _oracle_segments} if spec.oracle_segments else {}),
            "__doc__": spec.description,
            "__module__": spec.module,
        }
        return type(name, (cls,), attrs)

    def generate(self, rng: StableRNG, difficulty: float, config: dict[str, Any]) -> Any:
        spec = self.capability_spec
        return spec.generate(rng, spec.config.from_difficulty(difficulty, config))

    def build_world(self, task: Any) -> World:
        return self.capability_spec.world(task)

    def make_user(self, task: Any) -> ScriptedUser:
        return self.capability_spec.user(task)

    def system_prompt(self, task: Any) -> str:
        return self.capability_spec.system_prompt(task)

    def hint(self, task: Any) -> str:
        return self.capability_spec.hint(task)

    def verify(self, task: Any, episode: EpisodeState) -> Verification:
        return self.capability_spec.verify(task, episode)

    def oracle(self, task: Any) -> list[Any]:
        return self.capability_spec.oracle(task)

    def difficulty_features(self, task: Any) -> dict[str, Any]:
        return self.capability_spec.features(task)

    def listed_rules(self, task: Any) -> list[str]:
        fn = self.capability_spec.listed_rules
        return list(fn(task)) if fn is not None else []

    def requested_call(self, task: Any) -> dict[str, Any] | None:
        fn = self.capability_spec.requested_call
        return fn(task) if fn is not None else None

    def expected_decision(self, task: Any) -> str | None:
        fn = self.capability_spec.decision
        return fn(task) if fn is not None else None

    def decision_plan(self, task: Any, decision: str) -> list[Any] | None:
        fn = self.capability_spec.decision_plan
        return list(fn(task, decision)) if fn is not None else None

    def request_decisions(self, task: Any) -> dict[str, str] | None:
        fn = self.capability_spec.request_decisions
        return dict(fn(task)) if fn is not None else None


def _oracle_segments(self: SpecEnv, task: Any) -> list[Segment]:
    """Per-member parts of a composite's oracle (the engine method of ``oracle_segments``)."""
    return list(self.capability_spec.oracle_segments(task))  # type: ignore[misc]
