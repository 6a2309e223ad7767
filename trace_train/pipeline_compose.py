"""Moved to ``trace_train.pipeline.compose``; this module re-exports it for one release."""

from trace_train.pipeline.compose import *  # noqa: F403
