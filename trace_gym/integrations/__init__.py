"""Adapters that let other agent harnesses play trace_gym environments.

Nothing here is imported by ``import trace_gym``: each adapter imports its harness when used.
"""
