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
``gym.register_envs(trace_gym)``) registers every id in ``envs_registry.yaml``, and
``gym.make("trace_gym:trace/precondition-v0")`` works without the import.

An environment is one module with one ``SPEC = CapabilitySpec(...)``; everything its author
needs is exported here (see ``docs/adding_an_environment.md``):

>>> from trace_gym import CapabilitySpec, SpecConfig, knob
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
