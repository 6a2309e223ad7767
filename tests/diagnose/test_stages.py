"""propose and map-envs pieces: sampling, outcome-restating rejection, registry matching."""

from __future__ import annotations

import json

import pytest

import trace_diagnose as td
from trace_diagnose.errors import ConfigError
from trace_diagnose.map_envs import load_registry, match_by_tags
from trace_diagnose.propose import read_capabilities, restates_outcome, select_sample
from trace_diagnose.schema import Capability

from .paths import FIXTURES, TRACE_SELECTION, need
from .test_pipeline import llm

# Two environments of the registry's form (id: module:SPEC) whose specs are shipped ones with
# the ids, descriptions and tags these tests match against.
SPEC_MODULE = """
import dataclasses
from trace_gym.envs import multistep, structured_data
ALPHA = dataclasses.replace(
    structured_data.SPEC, id="trace/alpha-v0", description="read nested records",
    tags=("structured_data_reasoning", "record_lookup"),
)
BETA = dataclasses.replace(
    multistep.SPEC, id="trace/beta-v0", description="finish every sub-task",
    tags=("multistep_completion",),
)
"""
REGISTRY = """
version: 2
environments:
  trace/alpha-v0: map_envs_test_specs:ALPHA
  trace/beta-v0: map_envs_test_specs:BETA
"""


def test_sample_takes_same_task_pairs_first():
    trajs = td.ingest(FIXTURES / "tau2_single.json") + td.ingest(FIXTURES / "openai_chat.jsonl")
    sample = select_sample(trajs, n_sample=3)
    assert [t.traj_id for t in sample[:2]] == [
        "airline:0#1",
        "airline:0#0",
    ]  # failure, success of one task
    assert sample[2].traj_id == "oa-2"  # then other failures
    assert all(t.usable for t in select_sample(trajs, 50))


@pytest.mark.parametrize(
    ("name", "definition", "rejected"),
    [
        ("task_success", "x", True),
        ("solves_problem", "x", True),
        ("goal_achievement", "x", True),
        ("careful_checking", "The agent checks whether the task was completed successfully.", True),
        ("careful_checking", "The agent reads the record before writing.", False),
        ("multistep_completion", "Finishes every sub-request.", False),
        ("error_recovery_communication", "Explains tool errors to the user.", False),
    ],
)
def test_outcome_restating_capabilities(name, definition, rejected):
    assert (restates_outcome(Capability(name=name, definition=definition)) is not None) is rejected


def test_paper_candidates_are_readable_as_capabilities():
    caps = read_capabilities(need(TRACE_SELECTION) / "candidate_capabilities.json")
    assert len(caps) == 9 and caps[0].name == "policy_constraint_enforcement"
    assert caps[0].definition.startswith("The agent must recognize")


def test_bad_capabilities_file(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"capabilities": [{"name": "Not Snake", "definition": "x"}]}))
    with pytest.raises(ConfigError, match="not snake_case"):
        read_capabilities(bad)


def test_map_envs_tags_then_llm_enum_then_new_environment(stub, tmp_path, monkeypatch):
    (tmp_path / "map_envs_test_specs.py").write_text(SPEC_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = tmp_path / "envs_registry.yaml"
    reg.write_text(REGISTRY)
    assert match_by_tags("record-lookup", load_registry(reg)) == ["trace/alpha-v0"]
    caps = ["record_lookup", "beta_style_reasoning", "tone_and_empathy"]
    out = td.map_envs(caps, registry=reg, llm=llm(stub), cache=tmp_path / "c.sqlite")
    assert out[0] == {**out[0], "env_ids": ["trace/alpha-v0"], "method": "tag"}
    assert out[1]["method"] == "llm" and out[1]["env_ids"] == [
        "trace/beta-v0"
    ]  # the stub picks an id sharing a word
    assert out[2]["needs_new_environment"] and "needs a new environment" in out[2]["rationale"]
    offline = td.map_envs(caps, registry=reg)
    assert [m["needs_new_environment"] for m in offline] == [False, True, True]


def test_default_registry_is_the_repository_file():
    ids = [e["id"] for e in load_registry()]
    assert ids and all(i.startswith("trace/") for i in ids)


def test_broken_registry_names_the_file(tmp_path):
    reg = tmp_path / "r.yaml"
    reg.write_text("environments: 3")
    with pytest.raises(ConfigError, match=r"r\.yaml: expected a top-level 'environments' mapping"):
        load_registry(reg)
