"""Loads the hypothesis profile for this test suite (``HYPOTHESIS_PROFILE``, default ``ci``).

``trace_gym.testing`` only registers the profiles, so that importing it from a user's own
tests leaves their hypothesis settings alone.
"""

import os

from hypothesis import settings

import trace_gym.testing  # noqa: F401  (registers the ci / long / dev profiles)

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
