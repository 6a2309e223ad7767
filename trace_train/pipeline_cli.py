"""Moved to ``trace_train.pipeline.cli``; this module re-exports it for one release."""

from trace_train.pipeline.cli import *  # noqa: F403
from trace_train.pipeline.cli import main  # noqa: F401
