"""Tooling: ``trace-gym synthesize``, a model writes a new environment module (one
``CapabilitySpec``) for a capability, and :mod:`trace_gym.validation` decides whether it is
kept (:mod:`~trace_gym.synthesis.synthesize`).

Nothing here is imported by ``import trace_gym``.
"""
