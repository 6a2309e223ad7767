"""Loads the hypothesis profile for this test suite (``HYPOTHESIS_PROFILE``, default ``trace-ci``).

``trace_gym.testing`` only registers the profiles, so that importing it from a user's own
tests leaves their hypothesis settings alone.

Tests marked ``long`` run only with ``--long`` (``make test-long``): tests/selection.py says why.
"""

from trace_gym.testing import load_profile_from_env

load_profile_from_env()


# Agent code runs only in a working bubblewrap sandbox (trace_gym.sandbox refuses otherwise).
# Where it cannot run, the tests that grade SWE episodes skip, saying why; the refusal path is
# tested everywhere (tests/gym/test_sandbox.py).
SANDBOX_FILES = {"test_swe_envs.py", "test_swe_repair.py", "test_swe_deficit.py",
                 "test_mini_swe_agent.py", "test_adversary.py", "test_pipeline_swe.py"}  # fmt: skip


def pytest_addoption(parser):
    parser.addoption(
        "--long",
        action="store_true",
        help="also run the tests marked long (make test-long does; tests/selection.py says which)",
    )


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--long"):
        long = [item for item in items if item.get_closest_marker("long")]
        if long:  # reported as "N deselected"
            items[:] = [item for item in items if not item.get_closest_marker("long")]
            config.hook.pytest_deselected(items=long)
    skip_sandboxed_tests_without_bubblewrap(items)


def skip_sandboxed_tests_without_bubblewrap(items):
    import pytest

    from tests.selection import is_swe
    from trace_gym.sandbox import sandbox_available

    reason = sandbox_available("bwrap")
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs the bubblewrap sandbox: {reason.split('. ')[0]}")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        swe = any(isinstance(v, str) and is_swe(v) for v in params.values())
        if swe or item.path.name in SANDBOX_FILES or item.get_closest_marker("sandbox"):
            item.add_marker(skip)
