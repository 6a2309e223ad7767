"""Moved to ``trace_train.compose.moe``; this module re-exports it for one release."""

from trace_train.compose.moe import *  # noqa: F403
from trace_train.compose.moe import __all__  # noqa: F401
