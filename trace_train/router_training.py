"""Moved to ``trace_train.compose.router_training``; this module re-exports it for one release."""

from trace_train.compose.router_training import *  # noqa: F403
from trace_train.compose.router_training import IGNORE, token_routing_accuracy  # noqa: F401

routing_accuracy = token_routing_accuracy
