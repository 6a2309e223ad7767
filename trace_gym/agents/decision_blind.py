"""Decision-blind policies: read everything, then always take the same decision, done well.

An environment whose verifier judges a categorical decision (grant or refuse, ask or act or
decline) declares its decision classes with the share of tasks each should be (the spec's
``decisions``), the class each task needs (``decision(task)``, ``info["decision"]``), and
``decision_plan(task, decision)``: the oracle's reads, then that decision carried out as well
as a policy can carry it out without knowing which decision the task needs (the right write
when granting; a refusal, which cannot know the violated rule).

``decision_blind:<class>`` plays that plan on every task. A verifier that judges the decision
lets it win only tasks of its own class, so it wins at most that class's share; if one class
were most of the tasks, a policy that never makes the decision would win most of them, and a
success rate would hide that the decision is missing.
:func:`trace_gym.testing.soundness.check_decision_balance` holds every such policy to its class's
declared share and to at most half of the tasks.
"""

from __future__ import annotations

from typing import Any

from trace_gym.agents.information_free import ScriptAgent
from trace_gym.core.env import TraceEnv

PREFIX = "decision_blind:"


class DecisionBlind(ScriptAgent):
    """Plays ``env.decision_plan(task, decision)`` on every task, whatever the task needs."""

    def __init__(self, decision: str) -> None:
        super().__init__(PREFIX + decision)
        self.decision = decision

    def build(self, env: TraceEnv) -> list[Any]:
        plan = env.decision_plan(env.task, self.decision)
        if plan is None:
            raise ValueError(
                f"{env.env_id} declares decisions but no decision_plan(task, decision): "
                "the decision-blind policies cannot be built"
            )
        return plan


def declared_decisions(env: Any) -> dict[str, float]:
    """Decision class -> declared share of ``env`` (an environment or its wrapper); empty when
    it declares none."""
    return dict(getattr(type(env.unwrapped), "decisions", {}) or {})


def decision_blind_policies(env: Any) -> list[tuple[str, DecisionBlind]]:
    """``(name, agent)`` for every decision ``env`` declares, in declaration order."""
    return [(PREFIX + d, DecisionBlind(d)) for d in declared_decisions(env)]
