"""Moved to ``trace_train.pipeline.report``; this module re-exports it for one release."""

from trace_train.pipeline.report import *  # noqa: F403
