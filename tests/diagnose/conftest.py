"""Fixtures: an OpenAI-compatible stub LLM on 127.0.0.1 and the planted dataset."""

from __future__ import annotations

import os

import pytest

from .planted import stub_config, write_planted
from .stub_llm import StubLLM

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
def stub():
    """A well-behaved stub that knows the planted markers."""
    server = StubLLM(stub_config()).start()
    yield server
    server.stop()


@pytest.fixture
def make_stub():
    """Factory for stubs with custom behaviour (faults, latency, blocking)."""
    servers = []

    def make(**kwargs):
        server = StubLLM(stub_config(**kwargs)).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def planted(tmp_path):
    """40 planted trajectories (20 tasks x 2 trials) as OpenAI JSONL."""
    return write_planted(tmp_path / "planted.jsonl")
