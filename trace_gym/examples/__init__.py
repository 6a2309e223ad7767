"""Examples: an environment written as a :class:`~trace_gym.core.spec.CapabilitySpec`, and
a tour of the shipped ones.

* ``loyalty_points`` is not registered: it is the reference spec that ``trace-gym
  synthesize`` shows the model, and the correct answer its tests' stub model returns;
* ``demo`` (``python -m trace_gym.examples.demo``) plays seeded episodes of every registered
  environment with the oracle and the baseline agents.
"""
