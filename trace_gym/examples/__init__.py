"""Example environments written as :class:`~trace_gym.core.spec.CapabilitySpec` values.

They are not registered: ``loyalty_points`` is the reference spec that ``trace-gym
synthesize`` shows the model, and the correct answer its tests' stub model returns.
"""
