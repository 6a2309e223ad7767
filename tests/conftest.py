"""Loads the hypothesis profile for this test suite (``HYPOTHESIS_PROFILE``, default ``trace-ci``).

``trace_gym.testing`` only registers the profiles, so that importing it from a user's own
tests leaves their hypothesis settings alone.
"""

from trace_gym.testing import load_profile_from_env

load_profile_from_env()
