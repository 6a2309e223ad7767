"""trace_gym: one gymnasium environment per agent capability (TRACE stage 2).

Tasks are generated from a seed, tools act on an in-memory world, and an algorithmic
verifier grades the episode; no LLM judge, no human labels.

>>> import gymnasium as gym
>>> import trace_gym
>>> env = gym.make("trace/precondition-v0")
>>> obs, info = env.reset(seed=0)
>>> sorted(info)[:3]
['action_format', 'capability', 'difficulty']

Gymnasium 1.x has no plugin auto-loading: ``import trace_gym`` (or
``gym.register_envs(trace_gym)``) registers every id in ``envs_registry.yaml`` (see :mod:`trace_gym.registration`), and
``gym.make("trace_gym:trace/precondition-v0")`` works without the import.

The package has two halves. The library, which ``import trace_gym`` loads and every
environment is built from: ``core`` (the environment contract, ``CapabilitySpec``, tools,
verification), ``world`` (the shared in-memory world and its tools), ``envs`` (one module per
capability), ``agents`` (reference and baseline policies), ``registration`` (the registry
loader), ``episodes`` (the episode log format), ``errors``, ``primitives`` (seeding and tool declarations, the lowest layer) and ``sandbox`` (the isolation the
SWE environments run agent code in). The tooling, imported only by
the command line and by whoever uses it: ``testing`` (the property suite, public API),
``validation`` (``trace-gym validate`` / ``calibrate``), ``synthesis`` (``trace-gym
synthesize``), ``serving`` (``trace-gym serve``), ``integrations`` (TRL, mini-swe-agent),
``examples`` and ``cli``.
"""

from trace_gym.core.actions import ParsedTurn, ToolCall, parse_action
from trace_gym.core.env import CallRecord, EpisodeState, TraceEnv
from trace_gym.core.plans import Segment
from trace_gym.core.spaces import AnyText
from trace_gym.core.spec import (
    CapabilitySpec,
    KnobRate,
    SpecConfig,
    SpecEnv,
    knob,
    task_world,
)
from trace_gym.core.user import ScriptedUser, UserReply
from trace_gym.core.verify import REWARD_MODES, Check, Verification, fraction
from trace_gym.episodes import read_episodes, rescore, run_episode, write_episodes
from trace_gym.errors import ErrorCode, TraceGymError, UnknownEnvError
from trace_gym.primitives.seeding import SPLITS, StableRNG
from trace_gym.primitives.tools import Tool, ToolRefusal, ToolSet, object_schema
from trace_gym.registration import load_registry, make, register_envs, registered_ids
from trace_gym.world.model import World

__version__ = "0.1.0"

register_envs()

__all__ = [
    "REWARD_MODES",
    "SPLITS",
    "AnyText",
    "CallRecord",
    "CapabilitySpec",
    "Check",
    "EpisodeState",
    "ErrorCode",
    "KnobRate",
    "ParsedTurn",
    "ScriptedUser",
    "Segment",
    "SpecConfig",
    "SpecEnv",
    "StableRNG",
    "Tool",
    "ToolCall",
    "ToolRefusal",
    "ToolSet",
    "TraceEnv",
    "TraceGymError",
    "UnknownEnvError",
    "UserReply",
    "Verification",
    "World",
    "fraction",
    "knob",
    "load_registry",
    "make",
    "object_schema",
    "parse_action",
    "read_episodes",
    "register_envs",
    "registered_ids",
    "rescore",
    "run_episode",
    "task_world",
    "write_episodes",
]
