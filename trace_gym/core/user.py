"""Deterministic scripted users: no LLM, same reply for the same conversation.

A scripted user is a small state machine over the episode. Subclasses implement
:meth:`ScriptedUser.reply`; the environment calls it after every assistant turn that talks to
the user (a turn without tool calls). Replies are drawn from fixed templates chosen by the
task's seeded RNG at generation time, never at reply time, so a replay gives the same text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trace_gym.core.env import EpisodeState


@dataclass(frozen=True)
class UserReply:
    """What the user says, and whether the user ends the conversation with it."""

    text: str
    done: bool = False


class ScriptedUser:
    """Base class: the opening request plus a reply policy.

    ``patience`` bounds how many times the user answers an agent that talks without acting;
    after that the user leaves (the episode terminates and is verified as it stands).
    """

    patience: int = 3

    def __init__(self, opening: str) -> None:
        self.opening = opening
        self.replies_given = 0

    def reply(self, agent_text: str, episode: EpisodeState) -> UserReply:
        """The user's answer to ``agent_text``; override in each environment."""
        self.replies_given += 1
        if self.replies_given >= self.patience:
            return UserReply("I'll try again later. Goodbye.", done=True)
        return UserReply("Could you please take care of my request?")
