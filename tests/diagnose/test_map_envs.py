"""map-envs: lexical matching over the registry's texts, runner-ups, thresholds, user folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import trace_diagnose as td
from trace_diagnose.cli import main
from trace_diagnose.errors import ConfigError
from trace_diagnose.map_envs import LexicalMatcher, describe, load_registry, terms
from trace_diagnose.schema import Capability

from .paths import REPO

CANCELLATION = Capability(
    name="cancellation_eligibility_verification",
    definition="The agent verifies that a reservation is eligible for cancellation under the "
    "policy (booking age, travel insurance, cabin) before calling cancel_reservation.",
)
UNRELATED = Capability(
    name="image_caption_generation",
    definition="The agent writes a one-sentence caption describing an uploaded photograph.",
)


def test_terms_split_stem_and_fold_synonyms():
    assert terms("cancellation_eligibility_verification") == ["cancel", "elig", "verifi"]
    assert terms("eligibilityChecking") == terms("eligible check") == ["elig", "verifi"]
    assert terms("the agent must ask the user") == terms("clarification")
    assert terms("multistep") == terms("multi_step")


@pytest.mark.parametrize("definition", [CANCELLATION.definition, "cancellation eligibility"])
def test_the_issue_example_matches_precondition_with_runner_ups(definition):
    cap = CANCELLATION.model_copy(update={"definition": definition})
    [row] = td.map_envs([cap])
    assert row["env_ids"] == ["trace/precondition-v0"] and row["method"] == "lexical"
    assert not row["needs_new_environment"] and row["score"] >= 0.3
    scores = [c["score"] for c in row["candidates"]]
    assert row["candidates"][0] == {"env_id": "trace/precondition-v0", "score": row["score"]}
    assert scores == sorted(scores, reverse=True) and len(scores) >= 2
    # the environment about refusing under pressure shares "eligibility" and "verification"
    # but is not the one that trains checking before a write
    assert row["candidates"][1]["env_id"] == "trace/policy-pressure-v0"
    assert 0 < scores[1] < scores[0]
    line = describe(row)
    assert line.startswith(f"{cap.name}: trace/precondition-v0 (lexical score {scores[0]:.2f})")
    assert f"runner-up: trace/policy-pressure-v0 {scores[1]:.2f}" in line


def test_an_unrelated_capability_needs_a_new_environment():
    [row] = td.map_envs([UNRELATED])
    assert row["env_ids"] == [] and row["needs_new_environment"] and row["method"] == "none"
    assert row["score"] < 0.3 and "needs a new environment" in row["rationale"]
    assert describe(row).startswith("image_caption_generation: needs a new environment (")


def test_threshold_decides_and_is_checked():
    [strict] = td.map_envs([CANCELLATION], min_score=0.95)
    assert strict["needs_new_environment"] and strict["candidates"][0]["env_id"] == (
        "trace/precondition-v0"
    )
    assert "closest: trace/precondition-v0" in describe(strict)
    with pytest.raises(ConfigError, match="--min-score"):
        td.map_envs([CANCELLATION], min_score=1.5)


def test_rare_words_weigh_more_than_common_ones():
    registry = load_registry()
    matcher = LexicalMatcher(registry)
    # "policy" appears in several environments' texts, "refund" in one: a capability named
    # after both goes to the environment holding the rare word
    ranked = matcher.rank(Capability(name="policy_refund", definition="policy refund"))
    assert ranked[0][0] == "trace/payment-calc-v0"
    assert matcher.idf[terms("refund")[0]] > matcher.idf[terms("policy")[0]]


def test_cli_map_envs_prints_runner_ups(tmp_path, capsys):
    rd = tmp_path / "run"
    rd.mkdir()
    analysis = {
        "core": [CANCELLATION.name, UNRELATED.name],
        "capabilities": [
            {"name": c.name, "description": c.definition} for c in (CANCELLATION, UNRELATED)
        ],
    }
    (rd / "analysis.json").write_text(json.dumps(analysis))
    assert main(["map-envs", str(rd)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{CANCELLATION.name}: trace/precondition-v0 (lexical score")
    assert "runner-up: trace/policy-pressure-v0" in out[0]
    assert out[1].startswith(f"{UNRELATED.name}: needs a new environment")
    matches = json.loads((rd / "env_matches.json").read_text())
    assert matches[0]["candidates"][1]["env_id"] == "trace/policy-pressure-v0"


def test_user_environment_folders_are_matched_without_torch(tmp_path):
    folder = tmp_path / "my_envs"
    folder.mkdir()
    (folder / "loyalty_points_user.py").write_text(
        "import dataclasses\n"
        "from trace_gym.examples import loyalty_points\n"
        "SPEC = dataclasses.replace(\n"
        "    loyalty_points.SPEC,\n"
        "    description='Credit each eligible order exactly the loyalty points the earning '\n"
        "    'policy gives and tell the customer the total.',\n"
        "    tags=('loyalty_points_calculation', 'points_crediting'),\n"
        ")\n"
    )
    (folder / "registry.yaml").write_text(
        "version: 2\nenvironments:\n  trace/loyalty-points-v0: loyalty_points_user:SPEC\n"
    )
    code = (
        "import sys, json, trace_diagnose as td\n"
        "rows = td.map_envs(['loyalty_points_crediting', 'cancellation_eligibility_verification'])\n"
        "print(json.dumps([[r['env_ids'], r['method']] for r in rows] + ['torch' in sys.modules]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACE_GYM_PATH": str(folder)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [
        [["trace/loyalty-points-v0"], "lexical"],
        [["trace/precondition-v0"], "lexical"],
        False,
    ]
    # without the variable the folder's environment is not a candidate, and trace_gym's
    # loader (gymnasium, numpy) still brings no torch
    env.pop("TRACE_GYM_PATH")
    code = (
        "import sys, trace_diagnose as td\n"
        "rows = td.map_envs(['loyalty_points_crediting'])\n"
        "print(rows[0]['needs_new_environment'], 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.stdout.split() == ["True", "False"], proc.stderr[-2000:]


def test_a_broken_user_folder_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACE_GYM_PATH", str(tmp_path / "missing"))
    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "analysis.json").write_text(json.dumps({"core": [], "capabilities": []}))
    assert main(["map-envs", str(rd)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TRACE_GYM_PATH" in err and "registry.yaml" in err


def test_with_a_model_the_choice_is_the_llm_s_and_candidates_stay(stub, tmp_path):
    from .test_pipeline import llm

    rows = td.map_envs(
        [CANCELLATION, Capability(name="multistep_ordering", definition="multistep ordering")],
        llm=llm(stub),
        cache=tmp_path / "c.sqlite",
    )
    # the stub picks the first enum id sharing a word with the name: none for the first
    assert rows[0]["method"] == "llm" and rows[0]["needs_new_environment"]
    assert rows[0]["candidates"][0]["env_id"] == "trace/precondition-v0"
    assert "closest: trace/precondition-v0" in describe(rows[0])
    assert rows[1]["method"] == "llm" and rows[1]["env_ids"] == ["trace/multistep-v0"]
    assert isinstance(rows[1]["score"], float) and "chosen by the model" in describe(rows[1])
