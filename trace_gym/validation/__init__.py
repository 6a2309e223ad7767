"""Tooling: proving that an environment trains the capability it names, and reporting on it.

* :mod:`~trace_gym.validation.validate`: ``trace-gym validate``, every gate (the property
  suite's checks, soundness, near duplicates, the SWE adversary) on one environment, each in a
  child process, with a report;
* :mod:`~trace_gym.validation.adversary`: the attacks a SWE environment's verifier must
  reject (forged test output, tampering with the runner);
* :mod:`~trace_gym.validation.calibrate`: ``trace-gym calibrate``, success rates, pass@k and
  the reward band of a policy per difficulty;
* :mod:`~trace_gym.validation.decisions`: success per decision class beside the overall rate.

Nothing here is imported by ``import trace_gym``.
"""
