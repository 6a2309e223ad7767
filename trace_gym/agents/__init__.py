"""Policies that play trace_gym environments without a model: the oracle, fixed plans and
the baselines the property suite requires to fail (null, random, call-every-tool)."""

from trace_gym.agents.baselines import (
    Agent,
    CallEveryToolAgent,
    NullAgent,
    OracleAgent,
    RandomAgent,
    arguments_from_schema,
    make_agent,
)
from trace_gym.agents.plan import PlanAgent

__all__ = [
    "Agent",
    "CallEveryToolAgent",
    "NullAgent",
    "OracleAgent",
    "PlanAgent",
    "RandomAgent",
    "arguments_from_schema",
    "make_agent",
]
