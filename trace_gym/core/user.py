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
    from trace_gym.core.episode import EpisodeState


@dataclass(frozen=True)
class UserReply:
    """What the user says, and whether the user ends the conversation with it."""

    text: str
    done: bool = False


class ScriptedUser:
    """Base class: the opening request plus a reply policy.

    :meth:`respond` answers what the user has something to say about (a question about their
    request, the work being done); it returns ``None`` otherwise, which also lets a composite
    user ask each of its sub-users in turn. :meth:`reply` falls back on the ``nudges`` in
    order; after ``patience`` replies without anything to say the user says ``goodbye`` and
    leaves (the episode terminates and is verified as it stands).
    """

    patience: int = 3
    nudges: tuple[str, ...] = ("Could you please take care of my request?",)
    goodbye: str = "I'll try again later. Goodbye."

    def __init__(self, opening: str) -> None:
        self.opening = opening
        self.replies_given = 0

    def respond(self, agent_text: str, episode: EpisodeState) -> UserReply | None:
        """A reply specific to the conversation, or ``None``; override in each environment."""
        return None

    def reply(self, agent_text: str, episode: EpisodeState) -> UserReply:
        """The user's answer to ``agent_text``."""
        answer = self.respond(agent_text, episode)
        if answer is not None:
            return answer
        self.replies_given += 1
        if self.replies_given >= self.patience:
            return UserReply(self.goodbye, done=True)
        return UserReply(self.nudges[min(self.replies_given, len(self.nudges)) - 1])
