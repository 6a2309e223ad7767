"""Loads the hypothesis profile for this test suite (``HYPOTHESIS_PROFILE``, default ``trace-ci``).

``trace_gym.testing`` only registers the profiles, so that importing it from a user's own
tests leaves their hypothesis settings alone.
"""

from trace_gym.testing import load_profile_from_env

load_profile_from_env()


# Agent code runs only in a working bubblewrap sandbox (trace_gym.sandbox refuses otherwise).
# Where it cannot run, the tests that grade SWE episodes skip, saying why; the refusal path is
# tested everywhere (tests/gym/test_sandbox.py).
SANDBOX_FILES = {"test_swe_envs.py", "test_swe_repair.py", "test_swe_deficit.py",
                 "test_mini_swe_agent.py", "test_adversary.py", "test_pipeline_swe.py"}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    import pytest

    from trace_gym.sandbox import sandbox_available

    reason = sandbox_available("bwrap")
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs the bubblewrap sandbox: {reason.split('. ')[0]}")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        swe = any(isinstance(v, str) and v.startswith("trace/swe-") for v in params.values())
        if swe or item.path.name in SANDBOX_FILES or item.get_closest_marker("sandbox"):
            item.add_marker(skip)
