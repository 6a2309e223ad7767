"""Moved to ``trace_train.compose.routing``; this module re-exports it for one release."""

from trace_train.compose.routing import *  # noqa: F403
from trace_train.compose.routing import CONFIG_NAME, task_routing_accuracy  # noqa: F401

routing_accuracy = task_routing_accuracy
