"""Tooling: adapters between trace_gym environments and other harnesses and trainers.

* :mod:`~trace_gym.integrations.trl`: dataset rows and an ``environment_factory`` class for
  TRL's ``GRPOTrainer``;
* :mod:`~trace_gym.integrations.mini_swe_agent`: the SWE environments as a mini-swe-agent
  environment.

Nothing here is imported by ``import trace_gym``: each adapter imports its harness when used.
"""
