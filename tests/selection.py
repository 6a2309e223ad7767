"""What ``make test`` leaves to ``make test-long``: the ``long`` marker.

``tests/conftest.py`` deselects ``long`` tests unless pytest runs with ``--long`` (``make
test-long`` does), to bring ``make test`` toward a quarter of an hour on a 2-core machine. A
test is ``long`` when it repeats, at minutes of cost, what a faster test in ``make test``
already covers: a benchmark script's end-to-end run, the fifth SWE environment of a sweep.

The SWE environments build, patch and run whole Python modules in the sandbox, so a slow
check costs them 5-20 s each where the commerce environments take well under one. A sweep's
slow checks run on one SWE environment in ``make test`` (``trace/swe-repair-v0`` where the
sweep has it); every other SWE environment still runs the fast checks there, and every check
in ``make test-long``.
"""

from __future__ import annotations

import pytest

SWE_REPRESENTATIVE = "trace/swe-repair-v0"


def is_swe(env_id: str) -> bool:
    return env_id.startswith("trace/swe-")


def swe_kept_in_make_test(env_ids) -> str | None:
    """The one SWE id of ``env_ids`` whose slow checks ``make test`` runs."""
    swe = [e for e in env_ids if is_swe(e)]
    if SWE_REPRESENTATIVE in swe:
        return SWE_REPRESENTATIVE
    return swe[0] if swe else None


def one_swe_env_in_make_test(env_ids) -> list:
    """``env_ids`` as parameters, the SWE ones but one marked ``long``."""
    keep = swe_kept_in_make_test(env_ids)
    return [
        pytest.param(e, marks=pytest.mark.long) if is_swe(e) and e != keep else e for e in env_ids
    ]
