"""``trace-gym synthesize`` against a stub model on 127.0.0.1 (offline).

The stub answers, in turn, with modules that each break one gate, then with the correct
loyalty-points spec. Every bad module must be rejected by the gate that guards against it,
with that gate's reason fed back in the next request; the correct one must be accepted,
written into a user environment folder and made with ``gym.make`` in a fresh process.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from tests.diagnose.stub_llm import StubLLM
from trace_gym.examples import loyalty_points
from trace_gym.synthesis.synthesize import litellm_completion, static_check, synthesize

CAPABILITY = "loyalty_points_calculation"
CORRECT = inspect.getsource(loyalty_points).replace(
    'id="trace/loyalty-points-v0"', 'id="trace/loyalty-points-calculation-v0"'
)
SOUNDNESS = importlib.util.find_spec("trace_gym.testing.soundness") is not None


def _replace(old: str, new: str, source: str = CORRECT) -> str:
    assert old in source, old
    return source.replace(old, new, 1)


FUTURE = "from __future__ import annotations\n"
VERIFY_RETURN = (
    "    return Verification(checks, required_capabilities=(CAPABILITY,), decided=bool(credits))"
)
READ_THEN_REFUSE = """    refusals = [c for c in ep.calls if c.ok and c.name == "refuse"]
    if refusals and not [c for c in ep.calls if c.name == CREDIT.name]:
        reads = [c for c in ep.calls if c.ok and c.name == "get_order"]
        if reads and reads[0].turn < refusals[0].turn:
            if refusals[0].arguments.get("reason_code") == "other":
                return Verification((Check("refused", CAPABILITY, 1.0),), (CAPABILITY,))
"""
# the most literal copy: the registered spec renamed (fingerprints compare what a task shows)
NEAR_DUPLICATE = textwrap.dedent(
    """
    import dataclasses

    from trace_gym.envs import precondition as base

    SPEC = dataclasses.replace(
        base.SPEC,
        id="trace/loyalty-points-calculation-v0",
        capability="loyalty_points_calculation",
        description="Loyalty points.",
        env_name="LoyaltyPointsEnv",
    )
    """
)

# (what the module does wrong, its source, the gate that must reject it, a phrase of the reason)
BAD = [
    ("fails to import", _replace(FUTURE, FUTURE + "from trace_gym.core.spec import Nope\n"),
     "loads", "ImportError"),
    ("imports os", _replace(FUTURE, FUTURE + "import os\n"), "static", "import of 'os'"),
    ("opens a socket", _replace(FUTURE, FUTURE + "import socket\n")
     + "\nsocket.create_connection(('127.0.0.1', 9))\n", "static", "import of 'socket'"),
    ("always-win verifier", _replace(VERIFY_RETURN,
     "    return Verification((Check('ok', CAPABILITY, 1.0),), (CAPABILITY,))"),
     "baselines", "doing nothing earned 1.0"),
    ("oracle-failing verifier", _replace("told_right = total in told", "told_right = total + 1 in told"),
     "oracle", "oracle"),
    # hidden state only (the order total is shown on reading): gymnasium's check_env, which
    # compares the first observations of two resets, cannot see it; the determinism gate can
    ("nondeterministic generator", _replace(
        '        order["points_credited"] = kind == "credited"\n',
        '        order["points_credited"] = kind == "credited"\n        order["total"] += next(_CALLS)\n',
        _replace(FUTURE, FUTURE + "import itertools\n_CALLS = itertools.count()\n")),
     "determinism", "not deterministic"),
    ("verifier won by read-then-refuse", _replace(
        'tools=("get_customer", "get_order", CREDIT)', 'tools=("get_customer", "get_order", CREDIT, "refuse")',
        _replace("    credits = [c for c in ep.calls if c.ok and c.name == CREDIT.name]\n",
                 READ_THEN_REFUSE + "    credits = [c for c in ep.calls if c.ok and c.name == CREDIT.name]\n")),
     "information_free", "refuse_with_reason"),
    ("near-duplicate of precondition", NEAR_DUPLICATE, "novel", "near-duplicate of trace/precondition-v0"),
]  # fmt: skip


class ScriptedModel(StubLLM):
    """Answers the n-th request with the n-th module; records every request's messages."""

    def __init__(self, modules: list[str]) -> None:
        super().__init__()
        self.modules = list(modules)
        self.requests: list[list[dict]] = []

    def _content(self, req: dict, fault: str | None) -> str:
        self.requests.append(req["messages"])
        return f"Here is the module.\n```python\n{self.modules[len(self.requests) - 1]}```\n"


def _synthesize(modules: list[str], out):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    model = ScriptedModel(modules).start()
    try:
        result = synthesize(
            CAPABILITY,
            "Compute loyalty points owed under a written earning policy and credit them.",
            out,
            litellm_completion("openai/stub", api_base=model.api_base, api_key="stub"),
            model="openai/stub",
            attempts=len(modules),
        )
    finally:
        model.stop()
    return result, model, out


@pytest.fixture(scope="module")
def accepted(tmp_path_factory):
    """A module importing os, then the correct spec: rejected statically, then accepted."""
    if not SOUNDNESS:
        pytest.skip("trace_gym.testing.soundness (the information-free gate) is not installed")
    return _synthesize([BAD[1][1], CORRECT], tmp_path_factory.mktemp("user_envs"))


@pytest.fixture(scope="module")
def synthesis(tmp_path_factory):
    """Every bad module in turn, then the correct spec (about 1.5 minutes)."""
    if not SOUNDNESS:
        pytest.skip("trace_gym.testing.soundness (the information-free gate) is not installed")
    modules = [src for _, src, _, _ in BAD] + [CORRECT]
    return _synthesize(modules, tmp_path_factory.mktemp("user_envs"))


@pytest.mark.long  # 2 minutes; the `accepted` tests cover a rejection, its feedback, acceptance
def test_each_bad_module_is_rejected_by_its_gate(synthesis):
    result, _, _ = synthesis
    for (what, _, gate, phrase), attempt in zip(BAD, result.attempts, strict=False):
        failed = [g for g in attempt.gates if g["status"] not in ("pass", "skipped")]
        assert not attempt.accepted, what
        assert failed and failed[0]["name"] == gate, (what, failed)
        assert failed[0]["status"] == "fail", (what, failed[0])
        assert phrase in failed[0]["reason"], (what, failed[0]["reason"])


@pytest.mark.long  # 2 minutes; the `accepted` tests cover a rejection, its feedback, acceptance
def test_each_rejection_is_fed_back_to_the_model(synthesis):
    result, model, _ = synthesis
    assert len(model.requests) == len(BAD) + 1
    for i, (what, _, gate, phrase) in enumerate(BAD):
        feedback = model.requests[i + 1][-1]["content"]
        assert model.requests[i + 1][-1]["role"] == "user"
        assert f"- {gate} (fail):" in feedback and phrase in feedback, (what, feedback[:400])
        assert model.requests[i + 1][-2]["role"] == "assistant"


def test_the_prompt_carries_contract_reference_and_vocabulary(accepted):
    _, model, _ = accepted
    first = model.requests[0][1]["content"]
    assert "class CapabilitySpec" in first and "def credit_loyalty_points" in first
    assert "[write] cancel_order(order_id, reason, refund_to)" in first
    assert CAPABILITY in first


def test_the_correct_spec_is_accepted_and_recorded(accepted):
    result, model, out = accepted
    feedback = model.requests[1][-1]["content"]
    assert "- static (fail):" in feedback and "import of 'os'" in feedback
    assert result.accepted and result.env_id == "trace/loyalty-points-calculation-v0"
    last = result.attempts[-1]
    assert last.accepted and {g["name"] for g in last.gates} >= {
        "static", "loads", "novel", "oracle", "information_free", "replay", "contract"
    }  # fmt: skip
    record = json.loads((out / "synthesis" / f"{CAPABILITY}.json").read_text())
    assert record["model"] == "openai/stub" and len(record["prompt_sha256"]) == 64
    assert len(record["attempts"]) == 2 and not record["attempts"][0]["accepted"]
    registry = yaml.safe_load((out / "registry.yaml").read_text())  # the one-line row form
    assert registry == {
        "version": 2,
        "environments": {"trace/loyalty-points-calculation-v0": f"trace_env_{CAPABILITY}:SPEC"},
    }


def test_the_accepted_env_is_made_in_a_fresh_process(accepted):
    _, _, out = accepted
    code = (
        "import gymnasium as gym, trace_gym, json\n"
        "env = gym.make('trace/loyalty-points-calculation-v0')\n"
        "obs, info = env.reset(seed=3)\n"
        "from trace_gym.episodes import run_episode\n"
        "from trace_gym.agents import OracleAgent\n"
        "rec = run_episode(env, OracleAgent(), seed=3)\n"
        "print(json.dumps([info['capability'], rec['is_success'], "
        "'trace/loyalty-points-calculation-v0' in trace_gym.registered_ids()]))\n"
    )
    env = dict(os.environ, TRACE_GYM_PATH=str(out))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [CAPABILITY, True, True]


def test_static_check_catches_escapes_without_running_them():
    sneaky = {
        "x = __import__('os')\nSPEC = 1": "__import__",
        "SPEC = ().__class__.__base__.__subclasses__()": "__class__",
        "f = open('/etc/passwd')\nSPEC = 1": "open",
        "from trace_gym.episodes import write_episodes\nSPEC = 1": "trace_gym.episodes",
        "import importlib\nSPEC = 1": "importlib",
        "SPEC = eval('1')": "eval",
        "def f(:\n": "does not parse",
        "x = 1": "does not assign SPEC",
    }
    for source, phrase in sneaky.items():
        problems = static_check(source)
        assert any(phrase in p for p in problems), (source, problems)
    assert static_check(CORRECT) == []


@pytest.mark.parametrize(
    "rubric",
    [
        {"format": 1, "capabilities": [{"name": CAPABILITY, "definition": "Credit points."}]},
        [{"name": CAPABILITY, "definition": "Credit points."}],
        {"candidates": [{"name": CAPABILITY, "description": "Credit points."}]},  # the paper's
    ],
    ids=["trace_diagnose", "bare_list", "paper_candidates"],
)
def test_diagnosed_capability_reads_every_rubric_shape(tmp_path, rubric):
    from trace_gym.synthesis.synthesize import diagnosed_capability, evidence_from_diagnosis

    (tmp_path / "capabilities.json").write_text(json.dumps(rubric))
    row = diagnosed_capability(tmp_path, CAPABILITY)
    assert row is not None and row["definition"] == "Credit points."
    assert diagnosed_capability(tmp_path, "other_capability") is None
    assert evidence_from_diagnosis(tmp_path, CAPABILITY) == "definition: Credit points."


def test_diagnosed_capability_without_a_rubric_or_with_a_broken_one(tmp_path):
    from trace_gym.errors import ConfigError
    from trace_gym.synthesis.synthesize import diagnosed_capability

    assert diagnosed_capability(tmp_path, CAPABILITY) is None
    (tmp_path / "capabilities.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the capability rubric"):
        diagnosed_capability(tmp_path, CAPABILITY)
