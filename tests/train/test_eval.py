"""Evaluation harness: policies, summaries with intervals, episode logs, CLI (offline)."""

from __future__ import annotations

import json

import pytest

import trace_gym
from trace_train.cli import main
from trace_train.config import EvalConfig
from trace_train.evaluate import evaluate, summarize
from trace_train.policies import PolicyError, parse_policy

ENV = "trace/precondition-v0"


def test_oracle_succeeds_and_log_replays(tmp_path):
    summary = evaluate(
        EvalConfig(policy="oracle", episodes=3, out_dir=str(tmp_path)), progress=False
    )
    s = summary["envs"][ENV]
    assert s["episodes"] == 3 and s["success_rate"] == 1.0 and s["mean_reward"] == 1.0
    assert s["success_ci95"][0] < 1.0 == s["success_ci95"][1]  # Wilson: not [1, 1] from 3 wins
    assert s["capabilities"]["precondition_verification"]["success_rate"] == 1.0
    records = list(trace_gym.read_episodes(tmp_path / "episodes.jsonl"))
    assert [r["task_seed"] for r in records] == [0, 1, 2]
    assert all(r["split"] == "eval" for r in records)
    assert all(trace_gym.rescore(r).matches for r in records)
    assert json.loads((tmp_path / "summary.json").read_text())["policy"] == "oracle"


class _Counting:
    """An oracle policy that records which task seeds it was asked to play."""

    def __init__(self) -> None:
        self.inner, self.name, self.played = parse_policy("oracle"), "oracle", []

    def play(self, specs, settings):
        self.played += [s.task_seed for s in specs]
        return self.inner.play(specs, settings)


def test_an_interrupted_evaluation_resumes_where_it_stopped(tmp_path, monkeypatch):
    import trace_train.policies

    built: list[_Counting] = []

    def parse(spec, settings=None):  # the policy evaluate builds from its spec, counting
        built.append(_Counting())
        return built[-1]

    monkeypatch.setattr(trace_train.policies, "parse_policy", parse)
    cfg = EvalConfig(policy="oracle", episodes=6, batch_size=2, out_dir=str(tmp_path))
    whole = evaluate(cfg, progress=False)
    episodes = tmp_path / "episodes.jsonl"
    lines = episodes.read_text().splitlines()
    # stopped while writing the third batch: two batches and a torn line remain
    episodes.write_text("\n".join(lines[:4]) + "\n" + lines[4][:40])
    again = evaluate(cfg, progress=False)
    assert built[-1].played == [4, 5]  # only what was missing, the torn episode included
    assert again["overall"] == whole["overall"]
    # each invocation says which machine played from which episode on
    machines = [json.loads(line) for line in (tmp_path / "machines.jsonl").read_text().splitlines()]
    assert [m["first_episode"] for m in machines] == [0, 4] and again["machines"] == machines
    assert machines[1]["model_name"] == machines[0]["model_name"] and "flags" in machines[1]
    assert [r["task_seed"] for r in trace_gym.read_episodes(episodes)] == list(range(6))
    # a rerun of the finished evaluation plays nothing and adds no machine line
    evaluate(cfg, progress=False)
    assert built[-1].played == [] and (tmp_path / "machines.jsonl").read_text().count("\n") == 2
    # anything that decides an episode changed: nothing is kept
    evaluate(EvalConfig(**{**cfg.__dict__, "max_turns": 3}), progress=False)
    assert built[-1].played == list(range(6))
    assert (tmp_path / "machines.jsonl").read_text().count("\n") == 1  # started over
    # a policy handed in built (any in-memory model) is not known by its files: starts over
    handed = _Counting()
    evaluate(EvalConfig(**{**cfg.__dict__, "max_turns": 3}), policy=handed, progress=False)
    assert handed.played == list(range(6))


def test_a_restored_run_resumes_without_the_tokenizer_copies_a_snapshot_leaves_out(
    tmp_path, capsys
):
    from trace_train.evaluate import earlier_episodes, episode_specs

    spec = "hf:runs/r/base_model+adapter:runs/r/plain-grpo/adapter"
    played = {
        "settings": {"policy": spec, "max_turns": 8},
        "policy": spec,
        "files": {
            "runs/r/base_model/model.safetensors": "m",
            "runs/r/base_model/tokenizer.json": "t",
            "runs/r/plain-grpo/adapter/adapter_model.safetensors": "a",
            "runs/r/plain-grpo/adapter/tokenizer.json": "t",  # a copy of the base's
            "runs/r/plain-grpo/adapter/chat_template.jinja": "c",
        },
    }
    cfg = EvalConfig(policy="oracle", episodes=3, out_dir=str(tmp_path))
    wanted = [(ENV, s) for s in episode_specs(ENV, cfg)]
    evaluate(cfg, progress=False)
    log = (tmp_path / "episodes.jsonl").read_text()
    (tmp_path / "episodes.resume.json").write_text(json.dumps(played))

    def kept(files):
        (tmp_path / "episodes.jsonl").write_text(log)
        return len(earlier_episodes(tmp_path, {**played, "files": files}, wanted))

    restored = {k: v for k, v in played["files"].items() if "adapter/tokenizer" not in k}
    restored.pop("runs/r/plain-grpo/adapter/chat_template.jinja")
    assert kept(restored) == 3  # the snapshot dropped the copies: all three episodes resume
    assert capsys.readouterr().err == ""
    # the base's own tokenizer, or any other file, decides the episodes
    assert kept({**played["files"], "runs/r/base_model/tokenizer.json": "other"}) == 0
    assert "other file runs/r/base_model/tokenizer.json" in capsys.readouterr().err
    (tmp_path / "episodes.resume.json").write_text(json.dumps(played))
    retrained = {"runs/r/plain-grpo/adapter/adapter_model.safetensors": "b"}
    assert kept({**played["files"], **retrained}) == 0
    assert "adapter/adapter_model.safetensors" in capsys.readouterr().err


def test_policies_evaluated_side_by_side_play_the_same_episodes(tmp_path):
    from trace_train.evaluate import evaluate_side_by_side

    def jobs(folder):
        return {
            name: EvalConfig(policy=spec, env_ids=[ENV], episodes=4, out_dir=str(tmp_path / folder / name))
            for name, spec in (("oracle", "oracle"), ("random", "random:3"))
        }  # fmt: skip

    ended: list[str] = []
    apart = evaluate_side_by_side(jobs("one"), workers=1)
    together = evaluate_side_by_side(jobs("two"), 2, finished=lambda name, _: ended.append(name))
    assert list(together) == ["oracle", "random"] and sorted(ended) == ["oracle", "random"]
    # the same outcomes; each summary also says where it ran (threads may differ by process)
    assert [together[n].pop("machines")[0]["first_episode"] for n in together] == [0, 0]
    assert together == {
        n: {k: v for k, v in s.items() if k != "machines"} for n, s in apart.items()
    }
    assert together["oracle"]["overall"]["success_rate"] == 1.0
    for name in ("oracle", "random"):
        logs = [(tmp_path / f / name / "episodes.jsonl").read_text() for f in ("one", "two")]
        assert logs[0] == logs[1] and len(logs[0].splitlines()) == 4
    # a worker's error reaches the caller, naming the policy it was evaluating
    broken = {**jobs("bad"), "typo": EvalConfig(policy="oracel", out_dir=str(tmp_path / "typo"))}
    with pytest.raises(PolicyError) as raised:
        evaluate_side_by_side(broken, workers=2)
    assert "'typo'" in "".join(raised.value.__notes__)
    with pytest.raises(ValueError, match="workers=0"):
        evaluate_side_by_side(jobs("none"), workers=0)


def test_null_agent_fails(tmp_path):
    s = evaluate(EvalConfig(policy="null", episodes=2, out_dir=str(tmp_path)), progress=False)
    assert s["overall"]["success_rate"] == 0.0


def test_progress_bar_is_labelled_by_the_caller(tmp_path, capsys):
    cfg = EvalConfig(policy="null", env_ids=["trace/tool-call-v0"], episodes=1, out_dir=str(tmp_path))  # fmt: skip
    evaluate(cfg, label="routed")
    assert "eval routed" in capsys.readouterr().err
    evaluate(cfg)
    assert "eval null" in capsys.readouterr().err  # no label: the policy's own name


def test_summary_per_capability_and_intervals():
    def rec(success, reward, required, lacking):
        return {"final_reward": reward, "is_success": success, "turns": 2, "capability": "x",
                "verification": {"required_capabilities": required, "lacking_capabilities": lacking}}  # fmt: skip

    s = summarize([rec(True, 1.0, ["a", "b"], []), rec(False, 0.5, ["a", "b"], ["b"])])
    assert s["capabilities"]["a"]["success_rate"] == 1.0
    assert s["capabilities"]["b"] == {"n": 2, "lacking": 1, "success_rate": 0.5}
    lo, hi = s["mean_reward_ci95"]
    assert lo < 0.75 < hi
    lo, hi = summarize([rec(False, 0.0, ["a"], ["a"])] * 10)["success_ci95"]
    assert lo == 0.0 and 0 < hi < 0.35  # Wilson: informative at zero successes


def test_summary_per_decision_and_balanced_accuracy():
    def rec(success, decision, **extra):
        return {"final_reward": float(success), "is_success": success, "turns": 2,
                "capability": "x", "decision": decision, "verification": {}, **extra}  # fmt: skip

    # always granting: every grant won, every refusal lost
    records = [rec(True, "grant")] * 4 + [rec(False, "refuse")] * 6
    s = summarize(records)
    assert s["success_rate"] == 0.4
    assert s["decisions"]["grant"]["success_rate"] == 1.0
    refuse = s["decisions"]["refuse"]
    assert (refuse["n"], refuse["successes"], refuse["success_rate"]) == (6, 0, 0.0)
    lo, hi = refuse["success_ci95"]
    assert lo == pytest.approx(0.0) and 0.3 < hi < 0.5  # Wilson over six tasks: 0.39
    assert s["balanced_accuracy"] == 0.5
    assert summarize([rec(True, None)])["decisions"] == {}  # no declared decisions
    assert summarize([rec(True, None)])["balanced_accuracy"] is None
    # a composite: one class per request, judged by that request's own checks
    checks = [
        {"name": "precondition.granted_write", "passed": False, "hard": True, "gate": True},
        {"name": "clarify.granted_write", "passed": True, "hard": True, "gate": False},
    ]
    desk = rec(False, None, request_decisions={"precondition": "grant", "clarify": "ask"},
               verification={"checks": checks})  # fmt: skip
    s = summarize([desk])
    assert {d: v["success_rate"] for d, v in s["decisions"].items()} == {
        "clarify:ask": 1.0,
        "precondition:grant": 0.0,
    }


def test_evaluate_reports_each_class_of_a_decision_environment(tmp_path):
    cfg = EvalConfig(policy="oracle", env_ids=["trace/precondition-v0"], episodes=6,
                     out_dir=str(tmp_path))  # fmt: skip
    s = evaluate(cfg, progress=False)
    per = s["envs"]["trace/precondition-v0"]["decisions"]
    assert set(per) <= {"grant", "refuse"} and sum(v["n"] for v in per.values()) == 6
    assert s["overall"]["balanced_accuracy"] == 1.0
    logged = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["decision"] for r in logged) == sorted(
        d for d, v in per.items() for _ in range(v["n"])
    )


def test_litellm_policy_through_a_custom_provider(tmp_path):
    litellm = pytest.importorskip("litellm")
    from litellm import CustomLLM
    from litellm.types.utils import ModelResponse

    seen = []

    class Stub(CustomLLM):
        def completion(
            self, model, messages, *args, optional_params=None, model_response=None, **kw
        ):
            seen.append({"messages": messages, "tools": (optional_params or {}).get("tools")})
            mr = model_response or ModelResponse()
            mr.choices[0].message.content = "I'm sorry, I cannot help with that."
            return mr

    old = litellm.custom_provider_map
    litellm.custom_provider_map = [{"provider": "stubllm", "custom_handler": Stub()}]
    try:
        cfg = EvalConfig(
            policy="litellm:stubllm/any", episodes=1, out_dir=str(tmp_path), max_turns=2
        )
        summary = evaluate(cfg, progress=False)
    finally:
        litellm.custom_provider_map = old
    assert seen and seen[0]["messages"][0]["role"] == "system"
    assert seen[0]["tools"] and seen[0]["tools"][0]["type"] == "function"
    assert summary["envs"][ENV]["success_rate"] == 0.0
    (record,) = trace_gym.read_episodes(tmp_path / "episodes.jsonl")
    assert record["agent"] == "litellm:stubllm/any"
    assert record["messages"][2]["content"].startswith("I'm sorry")


def test_hf_policy_batched(tmp_path_factory, tmp_path):
    from tests.train.envtiny import build_env_tiny

    base = build_env_tiny(tmp_path_factory.getbasetemp())
    cfg = EvalConfig(policy=f"hf:{base}", episodes=3, batch_size=2, max_turns=2, max_new_tokens=6,
                     out_dir=str(tmp_path))  # fmt: skip
    summary = evaluate(cfg, progress=False)
    records = list(trace_gym.read_episodes(tmp_path / "episodes.jsonl"))
    assert len(records) == 3 and summary["envs"][ENV]["episodes"] == 3
    assert all(r["turns"] >= 1 for r in records)


@pytest.mark.parametrize("spec", ["nope", "hf:", "litellm:no-provider", "random:x"])
def test_bad_policy_specs_fail_clearly(spec):
    with pytest.raises((PolicyError, ValueError)):
        parse_policy(spec)


def test_cli_eval_and_known_errors(tmp_path, capsys):
    rc = main(
        ["eval", "--policy", "oracle", "--env", ENV, "--episodes", "2", "--out-dir", str(tmp_path)]
    )
    assert rc == 0 and "success 1.000" in capsys.readouterr().out
    assert main(["grpo", "--config", "no-such-preset"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "presets:" in err
    assert (
        main(["eval", "--policy", "oracle", "--env", "trace/nope-v0", "--out-dir", str(tmp_path)])
        == 2
    )
    assert main(["grpo", "--group-size", "1"]) == 2  # a __post_init__ check, one line


def test_versus_base_says_improved_only_when_the_interval_excludes_zero():
    from trace_train.pipeline.report import versus

    def row(k, n):
        return {"success": k / n, "episodes": n}

    assert versus(row(30, 100), row(50, 100))["verdict"] == "improved"
    assert versus(row(0, 2), row(1, 2))["verdict"] == "no measurable change"
    assert versus(row(0, 2), row(2, 2))["verdict"] == "improved"  # 0/2 -> 2/2 just excludes 0
    assert versus(row(50, 100), row(30, 100))["verdict"] == "worse"
    v = versus(row(48, 80), row(56, 70))  # Newcombe (1998), method 10: 0.0524 to 0.3339
    assert abs(v["lo"] - 0.0524) < 1e-3 and abs(v["hi"] - 0.3339) < 1e-3
    assert v["interval"] == "unpaired"


def test_versus_pairs_policies_that_played_the_same_tasks():
    from trace_diagnose.stats import newcombe_paired
    from trace_train.pipeline.report import versus

    # Newcombe (1998b)'s example as tasks: 36 solved by both, 12 only after, 2 only before.
    kinds = [(True, True)] * 36 + [(False, True)] * 12 + [(True, False)] * 2 + [(False, False)] * 0
    before = {f"t{i}": b for i, (b, _) in enumerate(kinds)}
    after = {f"t{i}": a for i, (_, a) in enumerate(kinds)}
    rows = [{"success": sum(o.values()) / len(o), "episodes": len(o)} for o in (before, after)]
    v = versus(*rows, (before, after))
    assert v["interval"] == "paired" and abs(v["diff"] - 0.2) < 1e-9
    assert (v["lo"], v["hi"]) == newcombe_paired(36, 12, 2, 0)
    assert abs(v["lo"] - 0.0569) < 1e-3 and abs(v["hi"] - 0.3404) < 1e-3
    # Policies that mostly agree (run 2 of the learning benchmark: 19 both, 11 gained, 3 lost,
    # 67 neither): the paired interval is the tighter one, and here only it excludes zero.
    kinds = [(True, True)] * 19 + [(False, True)] * 11 + [(True, False)] * 3 + [(False, False)] * 67
    before = {f"t{i}": b for i, (b, _) in enumerate(kinds)}
    after = {f"t{i}": a for i, (_, a) in enumerate(kinds)}
    rows = [{"success": sum(o.values()) / len(o), "episodes": len(o)} for o in (before, after)]
    paired, unpaired = versus(*rows, (before, after)), versus(*rows)
    assert paired["verdict"] == "improved" and unpaired["verdict"] == "no measurable change"
    assert paired["hi"] - paired["lo"] < unpaired["hi"] - unpaired["lo"]
    # Different tasks, or an unknown pairing: the two-sample interval.
    renamed = {f"u{i}": a for i, a in enumerate(after.values())}
    assert versus(*rows, (before, renamed))["interval"] == "unpaired"
    assert versus(*rows, (before, None))["interval"] == "unpaired"
