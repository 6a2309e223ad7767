"""Which audit events are the sandbox's own work.

``trace-gym validate`` runs an environment under an audit policy that forbids files, processes
and sockets; the sandbox itself must still write its task folder, start bubblewrap and manage
control groups. It marks that work with :func:`_trusted_section`, and a caller's policy asks
:func:`audit_allows`. A module of its own so that every part of the sandbox can mark its work
without importing the package back.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

_trusted = threading.local()


@contextlib.contextmanager
def _trusted_section() -> Any:
    """Marks the sandbox's own file, process and control-group work (see :func:`audit_allows`)."""
    depth = getattr(_trusted, "depth", 0)
    _trusted.depth = depth + 1
    try:
        yield
    finally:
        _trusted.depth = depth


def audit_allows(event: str, args: tuple) -> bool:
    """Whether an audit event is the sandbox's own work in progress (starting bubblewrap or
    the launcher, writing its task folder or control groups, killing a run's processes), for
    a caller's audit policy (``trace-gym validate``) to let through."""
    return getattr(_trusted, "depth", 0) > 0
