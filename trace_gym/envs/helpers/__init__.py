"""Helpers of the environments in :mod:`trace_gym.envs`: code two or more capability modules
share (request families, option constraints, payment rules, the SWE engine and code
generator). Every module of ``trace_gym/envs/`` itself is one capability with one ``SPEC``."""
