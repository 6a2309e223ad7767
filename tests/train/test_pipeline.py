"""``trace run`` end to end on a tiny random model: every stage, resume, and the report."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import trace_train.evaluate
from tests.browser import assert_self_contained, needs_chromium, render
from tests.train.conftest import make_random_adapter
from trace_train.pipeline import PipelineConfig, PipelineError, run_pipeline, stages

# A scripted base agent with planted gaps, so the diagnosis has a known answer while the
# tiny model keeps training cheap (why: a random model never succeeds, so its own rollouts
# would give every capability LACKING and no contrast).
PROFILE = "deficit:precondition=0.7,clarify=0.5:0"
PLANTED = {"precondition_verification", "information_gathering"}


def tiny_config(tmp_path, model_dir, **overrides) -> PipelineConfig:
    values = {
        "run_dir": str(tmp_path / "run"),
        "target": "trace/service-desk-v0",
        "model": model_dir,
        "diagnose": {"agent": PROFILE, "episodes": 120},
        "preset": "cpu_tiny",
        "grpo": {"steps": 1, "group_size": 2, "max_new_tokens": 8},  # the smallest real update
        "max_adapters": 1,
        "plain_grpo": True,  # the paper's baseline at the adapters' rollouts
        "compose": {"router_sequences": 2, "router_steps": 5},
        "evaluate": {"episodes": 2},
        "generation": {"max_turns": 3, "max_new_tokens": 8, "batch_size": 2},
        "tool_prompt": "compact",  # the CPU setting, passed to every stage
    }
    values.update(overrides)
    return PipelineConfig(**values)


def with_stages(table, **fns):
    """The stage table with some stages' functions replaced (names with '-' via **{...})."""
    return tuple(dataclasses.replace(st, fn=fns.get(st.name, st.fn)) for st in table)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir):
    """One interrupted-then-resumed run shared by the tests below (it is the slow part)."""
    tmp = tmp_path_factory.mktemp("pipeline")
    cfg = tiny_config(tmp, tiny_model_dir)
    calls = {"train": 0, "rollout": 0}
    real = {stage.name: stage.fn for stage in stages.STAGES}

    def counting_train(run, say):
        calls["train"] += 1
        return real["train"](run, say)

    def counting_rollout(run, say):
        calls["rollout"] += 1
        return real["rollout-base"](run, say)

    def crash(run, say):
        raise KeyboardInterrupt("killed during compose")

    counting = {"train": counting_train, "rollout-base": counting_rollout}
    saved = stages.STAGES
    try:
        stages.STAGES = with_stages(saved, **counting, compose=crash)
        with pytest.raises(KeyboardInterrupt):
            run_pipeline(cfg, say=lambda _: None)
        state = json.loads((tmp / "run" / "stages.json").read_text())
        assert state["compose"]["status"] == "started" and state["train"]["status"] == "done"
        stages.STAGES = with_stages(saved, **counting)
        log: list[str] = []
        report = run_pipeline(cfg, say=log.append)
    finally:
        stages.STAGES = saved
    return {"cfg": cfg, "report": report, "calls": calls, "log": log, "dir": tmp / "run"}


def test_rerun_skips_finished_stages_and_finishes(finished_run):
    assert finished_run["calls"] == {"train": 1, "rollout": 1}
    log = "\n".join(finished_run["log"])
    for stage in ("rollout-base", "diagnose", "select", "map-envs", "train"):
        assert f"{stage}: done earlier, skipped" in log
    state = json.loads((finished_run["dir"] / "stages.json").read_text())
    assert all(state[s.name]["status"] == "done" for s in stages.STAGES)


def test_ground_truth_diagnosis_finds_the_planted_gap_and_says_so(finished_run):
    log = "\n".join(finished_run["log"])
    report = json.loads((finished_run["dir"] / "report.json").read_text())
    assert report["diagnosis_method"] == "ground_truth"
    assert set(report["core"]) == PLANTED and report["core"][0] in PLANTED
    assert "No LLM was configured" in (finished_run["dir"] / "report.html").read_text()
    assert "skipped" in log  # the console of the rerun


def test_report_compares_every_policy_with_intervals(finished_run):
    report = json.loads((finished_run["dir"] / "report.json").read_text())
    names = [p["name"] for p in report["policies"]]
    (adapter,) = report["adapters"]
    assert names == ["base", f"adapter:{adapter['capability']}", "plain-grpo", "routed", "moe"]
    assert adapter["rollouts"] == 2 and adapter["steps"] == 1
    # Plain GRPO trained on the target itself, with exactly the adapters' rollouts.
    plain = report["plain_grpo"]
    assert plain["env_id"] == "trace/service-desk-v0" and plain["rollouts"] == 2
    assert plain["steps"] == 1 and (finished_run["dir"] / plain["log"]).is_file()
    against_plain = {p["name"]: p["vs_plain_grpo"] for p in report["policies"]}
    assert against_plain["base"] is None and against_plain["plain-grpo"] is None
    for name in names[1:2] + names[3:]:
        v = against_plain[name]
        assert v["lo"] <= v["diff"] <= v["hi"]
    for p in report["policies"]:
        assert (
            p["episodes"] == 2 and 0.0 <= p["success_lo"] <= p["success"] <= p["success_hi"] <= 1.0
        )
    assert report["policies"][0]["vs_base"] is None  # the base is what the others are against
    for p in report["policies"][1:]:
        v = p["vs_base"]
        assert v["lo"] <= v["diff"] <= v["hi"] and v["verdict"] in (
            "improved", "worse", "no measurable change"
        )  # fmt: skip
        assert v["interval"] == "paired"  # every policy plays the same held-out tasks
    # The console ends with the same comparison (random tiny policies: nothing changes).
    log = finished_run["log"]
    start = max(i for i, line in enumerate(log) if line.startswith("held-out success on "))
    closing, versus_plain = log[start + 1 : start + 1 + len(names)], log[start + 1 + len(names) :]
    assert all(name in line for name, line in zip(names, closing, strict=True))
    assert all("vs base" in line and "no measurable change" in line for line in closing[1:])
    assert versus_plain[0] == ("TRACE against plain GRPO on the target, both at 2 rollouts:")
    assert [line.split()[0] for line in versus_plain[1:]] == names[1:2] + names[3:]
    html = finished_run["report"].read_text()
    assert "success vs base" in html and "success vs plain GRPO, equal rollouts" in html
    # the service desk's requests by decision class: a table exactly when any was drawn
    decided = report["decision_table"]["rows"]
    assert ("Success per decision" in html) == bool(decided)
    assert len(report["decision_table"]["balanced"]) == len(names)
    assert (
        "<svg" in html
        and "<script" not in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )


def test_rediagnosis_tabulates_lacking_rates_before_and_after(finished_run):
    run_dir = finished_run["dir"]
    report = json.loads((run_dir / "report.json").read_text())
    table = report["rediagnosis"]
    names = [p["name"] for p in report["policies"]]
    assert table["method"] == "ground_truth" and table["policies"] == names
    rows = {r["capability"]: r for r in table["rows"]}
    (adapter,) = report["adapters"]
    assert (
        table["rows"][0]["capability"] == adapter["capability"]
        and rows[adapter["capability"]]["trained"]
    )
    for cap in PLANTED:  # the planted lapses show in the diagnosed agent's rate
        before = rows[cap]["before"]
        assert 0.0 < before["rate"] < 1.0 and before["judged"] > 0
    for row in rows.values():
        assert set(row["after"]) == set(names)
        for cell in row["after"].values():
            assert cell is None or cell["judged"] <= report["policies"][0]["episodes"]
    for name in names:
        labels = run_dir / "rediagnose" / name.replace(":", "__") / "labels" / "run_01.json"
        assert labels.exists(), name
    assert "Re-diagnosis" in finished_run["report"].read_text()
    assert any(line.startswith("rediagnose: ") for line in finished_run["log"])


def test_provenance_names_every_adapter_with_its_hash_seeds_and_dtypes(finished_run):
    from trace_train.provenance import sha256_file

    record = json.loads((finished_run["dir"] / "provenance.json").read_text())
    assert record["config"]["target"] == "trace/service-desk-v0"
    assert len(record["base_model"]["sha256"]) == 64 and "dirty" in record["git"]
    phases = record["phases"]
    assert "plain-grpo" in phases and any(name.startswith("train:") for name in phases)
    for phase in phases.values():
        weights = Path(phase["adapter"]) / "adapter_model.safetensors"
        assert phase["sha256"] == sha256_file(weights)
        assert phase["seeds"]["tasks"]["phase"] == "grpo" and phase["dtypes"]["weights"]
    assert record["machine"]["cpu"]["logical_cores"] >= 1


def test_adapter_and_compositions_are_loadable_folders(finished_run):
    run_dir = finished_run["dir"]
    (adapter_dir,) = list((run_dir / "train").glob("*/adapter"))
    assert (adapter_dir / "adapter_config.json").exists()
    assert (run_dir / "compose" / "moe" / "router.safetensors").exists()
    check = json.loads((run_dir / "compose" / "routing_check.json").read_text())
    assert check["tasks"] == 3 and 0.0 <= check["accuracy"] <= 1.0  # 3 tasks of 1 adapter
    assert any((run_dir / "compose" / "routed").iterdir())


@needs_chromium
def test_report_renders_in_headless_chromium(finished_run, tmp_path):
    page = finished_run["report"]
    rendered = render(page, tmp_path)
    assert_self_contained(page.read_text(), rendered)
    dom = rendered.dom
    assert dom.count("<table") >= 3 and "<svg" in dom and "Held-out results" in dom
    assert 'aria-label="success rate per policy"' in dom and "<rect" in dom  # the bars


def test_bad_config_is_one_clear_error(tmp_path):
    with pytest.raises(PipelineError, match="unknown config key"):
        PipelineConfig.load(None, {"eval_episdoes": 3})
    with pytest.raises(PipelineError, match=r"compose.kinds=\['soup'\]: unknown"):
        PipelineConfig(compose={"kinds": ["soup"]})
    from trace_train.pipeline.cli import main

    assert main(["run", "--set", "difficulty=3", "--run-dir", str(tmp_path / "r")]) == 2
    with pytest.raises(PipelineError, match="grpo.stepz: unknown setting; did you mean 'steps'"):
        PipelineConfig.load(None, {"grpo.stepz": 3})
    with pytest.raises(PipelineError, match="evaluate.episdoes: unknown setting; did you mean"):
        PipelineConfig.load(None, {"evaluate.episdoes": 3})
    with pytest.raises(PipelineError, match="'eval' is not a section; sections: "):
        PipelineConfig.load(None, {"eval.episodes": 3})


def test_a_dotted_override_sets_one_key_of_a_section(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("target: trace/service-desk-v0\ngrpo: {steps: 1, group_size: 2}\n")
    cfg = PipelineConfig.load(path, {"grpo.steps": 4, "warmstart.epochs": 3})
    assert cfg.grpo == {"steps": 4, "group_size": 2} and cfg.warmstart == {"epochs": 3}


def test_evaluate_adapters_false_leaves_single_adapters_out_of_the_evaluation(tmp_path):
    train = {"adapters": {"precondition_verification": {"adapter": "a", "env_id": "e"}},
             "plain_grpo": {"adapter": "p"}}  # fmt: skip
    state = {"train": {"status": "done", "output": train},
             "compose": {"status": "done", "output": {"routed": "r"}}}  # fmt: skip
    (tmp_path / "stages.json").write_text(json.dumps(state))
    every = stages.policies(stages.Run(PipelineConfig(run_dir=str(tmp_path), model="m")))
    assert set(every) == {"base", "adapter:precondition_verification", "plain-grpo", "routed"}
    cfg = PipelineConfig(run_dir=str(tmp_path), model="m", evaluate={"adapters": False})
    assert set(stages.policies(stages.Run(cfg))) == {"base", "plain-grpo", "routed"}


def _targeted_vs_plain():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "targeted_vs_plain.py"
    spec = importlib.util.spec_from_file_location("targeted_vs_plain", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize(("hinted_rollouts", "informative"), [("drop", 0), ("importance_weighted", 1)])  # fmt: skip
def test_a_group_informative_only_through_dropped_hinted_rollouts_teaches_nothing(
    tmp_path, hinted_rollouts, informative
):
    """Hinted rollouts succeeded, the hint-free ones all failed: under ``drop`` nothing of the
    group trains (zero advantage), so the verdict's "informative group" must not count it."""
    (tmp_path / "config.yaml").write_text(
        f"group_size: 4\nhint_ratio: 0.25\nhinted_rollouts: {hinted_rollouts}\n"
    )
    step = {"step": 1, "rollouts/step": 4, "group/informative_share": 1.0,
            "group/informative_share_no_hint": 0.0, "reward/mean": 0.25}  # fmt: skip
    (tmp_path / "training_log.jsonl").write_text(json.dumps(step) + "\n")
    signal = _targeted_vs_plain().training_signal(tmp_path)
    assert signal["groups"] == 1 and signal["informative_groups"] == informative


def test_targeted_vs_plain_benchmark_records_equal_budgets_and_paired_comparisons(
    finished_run, tmp_path
):
    bench = _targeted_vs_plain()
    record = bench.summarize(finished_run["cfg"], "python benchmarks/targeted_vs_plain.py")
    by_name = {p["name"]: p for p in record["policies"]}
    assert {"base", "plain-grpo", "routed", "moe"} <= set(by_name)
    assert record["trace_rollouts"] == by_name["plain-grpo"]["rollouts"] > 0  # the same budget
    assert by_name["base"]["rollouts"] == 0 and by_name["routed"]["rollouts"] > 0
    for arm in record["adapters"]:  # a single adapter spends only its own rollouts
        assert by_name[f"adapter:{arm['capability']}"]["rollouts"] == arm["rollouts"]
    routed = by_name["routed"]
    assert routed["vs_plain_grpo"]["gained"] + routed["vs_plain_grpo"]["lost"] <= 2
    assert routed["vs_base"]["mcnemar_exact_p"] <= 1.0 and by_name["base"]["vs_base"] is None
    assert record["selected_capabilities"] and record["wall_seconds"] > 0
    for arm in (*record["adapters"], record["plain_grpo"]):
        assert 0 <= arm["informative_groups"] <= arm["groups"] == arm["steps"]  # one group a step
    # success per decision class of the service desk's requests, as the run report has it
    report = json.loads((finished_run["dir"] / "report.json").read_text())
    for row in report["policies"]:
        mine = by_name[row["name"]]
        assert mine["balanced_accuracy"] == row["balanced_accuracy"]
        assert {d: v["n"] for d, v in mine["per_decision"].items()} == {
            d: v["n"] for d, v in row["decisions"].items()
        }
        assert all(":" in d for d in mine["per_decision"])  # <member>:<class>
    # per policy, its outcome on every test task in one order: any paired statistic rebuilds
    per_task = record["per_task"]
    assert set(per_task["outcomes"]) == set(by_name)
    for name, outcomes in per_task["outcomes"].items():
        assert len(outcomes) == len(per_task["task_ids"]) == by_name[name]["episodes"]
        assert sum(outcomes) == by_name[name]["successes"]
        # and where its episodes ran (one invocation here: one machine from episode 0)
        assert [m["first_episode"] for m in by_name[name]["machines"]] == [0]
    # what each arm spent beside the equal rollouts
    costs = record["arm_costs"]
    assert costs["trace"]["rollouts"] == costs["plain-grpo"]["rollouts"] == record["trace_rollouts"]
    for arm in costs.values():
        assert arm["tokens_model"] > 0 and arm["train_cpu_seconds"] > 0
    trace_seconds = sum(a["train_seconds"] for a in record["adapters"])
    assert costs["trace"]["train_seconds"] == pytest.approx(trace_seconds, abs=0.1)
    assert bench._total([1.5, None]) is None  # an unknown share leaves the total unknown
    assert record["stage_cpu_seconds"]["train"] > 0
    # the pre-registered rule: which verdict the primary comparison earns
    plan = {"primary": {"policy": "routed", "against": "plain-grpo", "alpha": 0.05}}
    verdict = bench.preregistered_verdict(plan, record, finished_run["dir"])
    if all(a["informative_groups"] for a in (*record["adapters"], record["plain_grpo"])):
        assert verdict["verdict"] == "null"  # two tasks cannot show a difference
        assert verdict["ci95_paired_newcombe"] == routed["vs_plain_grpo"]["ci95_paired_newcombe"]
    else:
        assert verdict["verdict"] == "invalid" and "no informative GRPO group" in verdict["why"]
    nothing_selected = {**record, "adapters": []}
    verdict = bench.preregistered_verdict(plan, nothing_selected, finished_run["dir"])
    assert verdict["verdict"] == "invalid" and "selected no capability" in verdict["why"]
    bench.plot(record, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_a_preregistration_names_its_replicates_and_its_commit(tmp_path):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "targeted_vs_plain.py"
    spec = importlib.util.spec_from_file_location("targeted_vs_plain", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    plan = tmp_path / "plan.yaml"
    plan.write_text("config: c.yaml\nsettings: {}\nprimary: {policy: moe, against: plain-grpo}\n")
    with pytest.raises(SystemExit, match="missing replicates"):
        bench.load_plan(plan, "seed0")
    plan.write_text(plan.read_text() + "replicates: [{name: seed0, run_dir: r, out: o}]\n")
    with pytest.raises(SystemExit, match=r"give --replicate, one of \['seed0'\]"):
        bench.load_plan(plan, "seed1")
    assert bench.load_plan(plan, "seed0")[1]["run_dir"] == "r"
    registered = "trace_train/configs/demo_cpu.yaml"
    plan.write_text(
        plan.read_text().replace("config: c.yaml", f"config: {registered}\nconfig_sha256: beef")
    )
    with pytest.raises(SystemExit, match="demo_cpu.yaml changed since the plan was registered"):
        bench.load_plan(plan, "seed0")
    # outside the repository's history: not pre-registered, and the record says so
    assert bench.plan_registration(plan)["added_in_commit"] is None


def _recording_stages(monkeypatch) -> tuple[list[str], tuple]:
    """Every stage replaced by one that records its name; returns the record and the table."""
    calls: list[str] = []

    def recorder(name):
        def fn(run, say):
            calls.append(name)
            return {"html": str(run.path("report.html"))} if name == "report" else {}

        return fn

    table = with_stages(stages.STAGES, **{st.name: recorder(st.name) for st in stages.STAGES})
    monkeypatch.setattr(stages, "STAGES", table)
    return calls, table


def test_redo_runs_a_finished_stage_again_with_the_stages_after_it(tmp_path, monkeypatch):
    calls, table = _recording_stages(monkeypatch)
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model="m")
    run_pipeline(cfg, say=lambda _: None)
    assert calls == [st.name for st in table]
    calls.clear()
    run_pipeline(cfg, say=lambda _: None)
    assert calls == []  # a plain rerun resumes: everything finished
    log: list[str] = []
    run_pipeline(cfg, say=log.append, redo="evaluate")
    assert calls == ["evaluate", "rediagnose", "report"]
    assert "redo: evaluate, rediagnose, report" in log
    with pytest.raises(PipelineError, match="'evaluation': not a stage; stages are warmstart"):
        run_pipeline(cfg, redo="evaluation")


def test_until_stops_after_a_stage_and_a_rerun_goes_on(tmp_path, monkeypatch):
    """``--until compose``: a pre-registered comparison's arms train before its plan fixes the
    test, and no held-out result exists until the rerun without it."""
    calls, table = _recording_stages(monkeypatch)
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model="m")
    names = [st.name for st in table]
    log: list[str] = []
    assert run_pipeline(cfg, say=log.append, until="compose") is None  # no report yet
    assert calls == names[: names.index("compose") + 1]
    assert "stopped after compose (--until); rerun without it to go on" in log
    calls.clear()
    assert run_pipeline(cfg, say=lambda _: None) is not None
    assert calls == names[names.index("evaluate") :]
    with pytest.raises(PipelineError, match="--until 'evaluation': not a stage"):
        run_pipeline(cfg, until="evaluation")
    # a training stage a config skips still ends the run there
    calls.clear()
    no_training = PipelineConfig(run_dir=str(tmp_path / "other"), model="m", train=False)
    assert run_pipeline(no_training, say=lambda _: None, until="train") is None
    assert "evaluate" not in calls


def test_a_stage_s_cpu_seconds_count_its_worker_processes(tmp_path, monkeypatch):
    """The evaluation runs its episodes in worker processes; their CPU time is the stage's."""
    calls, table = _recording_stages(monkeypatch)

    def evaluate_in_a_worker(run, say):
        code = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
        subprocess.run([sys.executable, "-c", code], check=True)
        return {}

    monkeypatch.setattr(stages, "STAGES", with_stages(table, evaluate=evaluate_in_a_worker))
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model="m")
    run_pipeline(cfg, say=lambda _: None)
    recorded = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert recorded["evaluate"]["cpu_seconds"] >= 0.5
    assert recorded["compose"]["cpu_seconds"] < 0.5


def test_a_stage_interrupted_and_resumed_records_the_time_of_both_invocations(
    tmp_path, monkeypatch, capsys
):
    """A session that ends mid-evaluation: the stage that finishes on the rerun cost both."""
    calls, table = _recording_stages(monkeypatch)
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"

    def evaluate_interrupted_once(run, say):
        subprocess.run([sys.executable, "-c", burn], check=True)
        if not run.path("evaluate").exists():
            run.path("evaluate").mkdir()
            raise KeyboardInterrupt  # ^C, or the end of a session
        return {}

    monkeypatch.setattr(stages, "STAGES", with_stages(table, evaluate=evaluate_interrupted_once))
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"), model="m")
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(cfg, say=lambda _: None)
    run_pipeline(cfg, say=lambda _: None)
    recorded = json.loads((tmp_path / "run" / "stages.json").read_text())
    assert recorded["evaluate"]["invocations"] == 2
    assert recorded["evaluate"]["cpu_seconds"] >= 0.6
    assert recorded["rediagnose"]["invocations"] == 1
    from trace_train.pipeline.cli import main

    main(["status", str(tmp_path / "run")])
    assert "over 2 invocations)" in capsys.readouterr().out
    # a finished stage's time is in stages.json: no running clock is left behind
    assert json.loads((tmp_path / "run" / "stage-clock.json").read_text()) == {}


def test_a_saved_evaluation_of_another_size_is_evaluated_again(tmp_path, monkeypatch):
    cfg = PipelineConfig(run_dir=str(tmp_path), model="m", evaluate={"episodes": 3})
    run = stages.Run(cfg)
    saved = run.path("evaluate", "base")
    saved.mkdir(parents=True)  # from a run with evaluate.episodes=2, interrupted in evaluate
    summary = {"split": cfg.evaluate.split, "overall": {"episodes": 2, "success_rate": 0.5}}
    (saved / "summary.json").write_text(json.dumps(summary))
    evaluated = []

    def fake_eval(cfg, label):
        evaluated.append((label, cfg.episodes))
        summary = {"split": cfg.split, "overall": {"episodes": cfg.episodes, "success_rate": 0.0}}
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out_dir) / "summary.json").write_text(json.dumps(summary))
        return summary

    monkeypatch.setattr(trace_train.evaluate, "evaluate", fake_eval)
    stages.stage_evaluate(run, say=lambda _: None)
    assert evaluated == [("base", 3)]
    stages.stage_evaluate(run, say=lambda _: None)  # now it is the configured size: kept
    assert evaluated == [("base", 3)]


def test_rediagnosis_of_an_earlier_evaluation_is_done_again(tmp_path, monkeypatch):
    import os

    run = stages.Run(PipelineConfig(run_dir=str(tmp_path), model="m"))
    evaluated = run.path("evaluate", "base")
    evaluated.mkdir(parents=True)
    episodes = evaluated / "episodes.jsonl"
    episodes.write_text("")
    run.mark("diagnose", "done", {"method": "ground_truth"})
    run.mark("evaluate", "done", {"summaries": {"base": str(evaluated / "summary.json")}})
    diagnosed = []

    def fake_diagnose(run, inputs, out):
        diagnosed.append(inputs)
        out.mkdir(parents=True, exist_ok=True)
        (out / "analysis.json").write_text("{}")

    monkeypatch.setattr(stages, "_diagnose_like_the_base", fake_diagnose)
    monkeypatch.setattr(stages, "_lacking", lambda folder: {})
    stages.stage_rediagnose(run, say=lambda _: None)
    stages.stage_rediagnose(run, say=lambda _: None)  # up to date: kept
    assert diagnosed == [[str(episodes)]]
    later = episodes.stat().st_mtime + 10  # the policy evaluated again (trace run --redo)
    os.utime(episodes, (later, later))
    stages.stage_rediagnose(run, say=lambda _: None)
    assert diagnosed == [[str(episodes)]] * 2


def test_an_adapter_is_reused_only_if_trained_with_the_same_settings(tmp_path):
    from trace_train.config import GRPORunConfig, save_config

    out = tmp_path / "train" / "precondition_verification"
    cfg = GRPORunConfig(model="m", env_id="trace/precondition-v0", steps=2, output_dir=str(out))
    (out / "adapter").mkdir(parents=True)
    save_config(cfg, out / "config.yaml")  # what grpo.train writes
    assert not stages._trained_as_configured(out, cfg)  # no adapter saved: interrupted
    (out / "adapter" / "adapter_config.json").write_text("{}")
    assert stages._trained_as_configured(out, cfg)
    more = dataclasses.replace(cfg, steps=4)  # --set grpo.steps=4 --redo train: GRPO resumes
    assert not stages._trained_as_configured(out, more)


def test_report_shows_success_per_decision_and_balanced_accuracy(tmp_path):
    """From the evaluate stage's summaries: a class per row, a policy per column; the closing
    lines add the balanced accuracy. (The tiny run above may draw no decision task.)"""
    from trace_train.pipeline.report import _decision_table, _policy_rows, closing_summary

    def summary(name: str, grant: float, refuse: float) -> str:
        per = {"grant": {"n": 4, "successes": round(4 * grant), "success_rate": grant},
               "refuse": {"n": 6, "successes": round(6 * refuse), "success_rate": refuse}}  # fmt: skip
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        overall = {"episodes": 10, "success_rate": 0.4 * grant + 0.6 * refuse,
                   "success_ci95": [0.1, 0.7], "mean_reward": 0.5, "mean_reward_ci95": [0.3, 0.7],
                   "decisions": per, "balanced_accuracy": (grant + refuse) / 2}  # fmt: skip
        (folder / "summary.json").write_text(json.dumps({"policy": name, "overall": overall}))
        return str(folder / "summary.json")

    class FakeRun:
        dir = tmp_path
        config = SimpleNamespace(
            target="trace/precondition-v0", evaluate=SimpleNamespace(split="eval")
        )

        def output(self, stage: str) -> dict:
            if stage == "evaluate":
                return {"summaries": {"base": summary("base", 1.0, 0.0),
                                      "routed": summary("routed", 0.75, 0.5)}}  # fmt: skip
            return {}

    run = FakeRun()
    rows = _policy_rows(run)
    table = _decision_table(rows)
    assert table["columns"] == ["base", "routed"]
    assert [r["decision"] for r in table["rows"]] == ["grant", "refuse"]
    assert [c["rate"] for c in table["rows"][1]["cells"]] == [0.0, 0.5]
    assert table["balanced"] == [0.5, 0.625]
    lines = closing_summary(run)
    assert "balanced accuracy 50%" in lines[1] and "balanced accuracy 62%" in lines[2]


def test_paired_outcomes_survive_a_line_separator_the_model_wrote(tmp_path):
    from trace_gym.episodes import EPISODE_FORMAT, write_episodes
    from trace_train.pipeline.report import _outcomes

    records = [
        {"format": EPISODE_FORMAT, "task_id": f"t{i}", "is_success": i == 1,
         "messages": [{"role": "assistant", "content": "done\u2028really"}]}
        for i in range(3)
    ]  # fmt: skip
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, records, append=False)
    assert "\u2028" in path.read_text(encoding="utf-8")  # written raw, not escaped
    assert _outcomes(path) == {"t0": False, "t1": True, "t2": False}


def test_a_run_folder_without_its_merged_base_merges_it_again(tmp_path, tiny_model_dir):
    from trace_train.pipeline.run_folder import Run

    # a run folder committed to resume elsewhere: warm start done, base_model/ left out
    cfg = tiny_config(tmp_path, tiny_model_dir)
    adapter = tmp_path / "adapter"
    make_random_adapter(tiny_model_dir, adapter, seed=3, r=4, targets=["q_proj", "v_proj"])
    run = Run(cfg)
    merged = run.path("base_model")
    run.mark("warmstart", "done", {"adapter": str(adapter), "base_model": str(merged)})
    said: list[str] = []
    stages.restore_base_model(run, said.append)
    assert (merged / "config.json").exists() and "merged" in said[0]
    first = (merged / "model.safetensors").read_bytes()
    (merged / "model.safetensors").unlink()
    (merged / "config.json").unlink()
    stages.restore_base_model(run, said.append)
    assert (merged / "model.safetensors").read_bytes() == first  # the same base, bit for bit
    stages.restore_base_model(run, said.append)  # present: nothing to do
    assert len(said) == 2
    shutil.rmtree(merged)
    shutil.rmtree(adapter)
    with pytest.raises(PipelineError, match="base is missing and so is its adapter"):
        stages.restore_base_model(run, said.append)
