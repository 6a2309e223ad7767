"""Shopping and travel tools of the shared vocabulary (search, book, bags, payments).

They join :data:`trace_gym.world.tools.VOCABULARY` when that module loads.
"""

from __future__ import annotations

from trace_gym.core.tools import Tool

TOOLS: dict[str, Tool] = {}
