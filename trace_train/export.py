"""Moved to ``trace_train.compose.export``; this module re-exports it for one release."""

from trace_train.compose.export import *  # noqa: F403
