"""Moved to ``trace_train.compose.cli``; this module re-exports it for one release."""

from trace_train.compose.cli import *  # noqa: F403
