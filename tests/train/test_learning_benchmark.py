"""benchmarks/learning_cpu.py end to end on a tiny model: every phase, the report, resuming."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.train.envtiny import build_env_tiny

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location(
        "learning_cpu", ROOT / "benchmarks/learning_cpu.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.long  # 40 s of warm start, GRPO and evaluation subprocesses
def test_learning_benchmark_runs_every_phase_and_resumes(tmp_path, tmp_path_factory):
    bench = load_benchmark()
    model = build_env_tiny(tmp_path_factory.getbasetemp())
    run, out = tmp_path / "run", tmp_path / "results" / "learning.json"
    argv = ["--model", model, "--demos", "2", "--epochs", "1", "--heldout", "3", "--steps", "1",
            "--group", "2", "--threads", "1", "--run-dir", str(run), "--out", str(out)]  # fmt: skip
    report = bench.main(argv)

    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report))
    for key in ("env_id", "difficulty", "model", "heldout_tasks", "before_successes",
                "after_successes", "rollouts", "grpo_steps", "wall_seconds", "command"):  # fmt: skip
        assert key in saved, key
    assert saved["heldout_tasks"] == 3 and saved["grpo_steps"] == 1 and saved["rollouts"] == 2
    lo, hi = saved["gain_ci95_newcombe"]
    assert -1 <= lo <= saved["gain"] <= hi <= 1
    assert saved["gain_is_real_unpaired"] == (lo > 0)
    assert saved["gain_is_real"] == (saved["gain_ci95_paired_newcombe"][0] > 0)
    assert set(saved["comparisons"]) == {
        "grpo_vs_warmstart",
        "warmstart_vs_base",
        "trained_vs_base",
    }
    grpo_only = saved["comparisons"]["grpo_vs_warmstart"]
    assert grpo_only["gain"] == saved["gain"] and grpo_only["ci95_newcombe"] == [lo, hi]
    assert 0 < grpo_only["mcnemar_exact_p"] <= 1
    assert 0 <= saved["base_successes"] <= 3
    assert saved["training_log"] and "group/informative_share" in saved["training_log"][0]
    assert "--heldout 3" in saved["command"]
    # tool-call declares no decisions: the per-class breakdown is there, and empty
    assert saved["per_decision"]["after"] == {"per_decision": {}, "balanced_accuracy": None}
    assert out.with_suffix(".png").stat().st_size > 1000

    # An interrupted evaluation continues after the last episode written; finished phases
    # are not run again (their markers, and the episodes they wrote, stay as they were).
    episodes = run / "eval_after.episodes.jsonl"
    first = episodes.read_text().splitlines()
    episodes.write_text(first[0] + "\n")
    (run / "eval_after.done.json").unlink()
    markers = {p.name: p.read_text() for p in run.glob("*.done.json")}
    bench.main(argv)

    def untimed(lines: list[str]) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in lines]

    assert untimed(episodes.read_text().splitlines()) == untimed(first)
    assert {p.name: p.read_text() for p in run.glob("*.done.json") if p.name in markers} == markers
    for phase in ("eval_before", "eval_base"):
        assert len((run / f"{phase}.episodes.jsonl").read_text().splitlines()) == 3

    # A confirmation run: the same warm start, held-out seeds no earlier run was judged on,
    # the untrained model skipped. Other seeds in the old run folder are refused, not mixed.
    other_seeds = ["--heldout-first-seed", "5", "--skip-base"]
    with pytest.raises(SystemExit, match="not for seeds 5..7"):
        bench.main([*argv, *other_seeds])
    confirm = tmp_path / "confirm"
    argv = [*argv, *other_seeds, "--init-adapter", saved["warmstart"]["adapter"],
            "--run-dir", str(confirm), "--out", str(tmp_path / "confirm.json")]  # fmt: skip
    report = bench.main(argv)
    seeds = [json.loads(x)["seed"] for x in (confirm / "eval_after.episodes.jsonl").open()]
    assert seeds == [5, 6, 7] and report["heldout_split"] == "eval, seeds 5..7, greedy"
    assert set(report["comparisons"]) == {"grpo_vs_warmstart"} and "base_successes" not in report
    assert report["phase_seconds"]["eval_base"] is None
    assert not (confirm / "eval_base.episodes.jsonl").exists()

    # An intermediate adapter is one more point of the held-out curve, on the same tasks.
    with pytest.raises(SystemExit, match="STEP=PATH"):
        bench.main([*argv, "--eval-adapter", f"half={report['warmstart']['adapter']}"])
    report = bench.main([*argv, "--eval-adapter", f"1={saved['warmstart']['adapter']}"])
    assert [x["step"] for x in report["heldout_by_step"]] == [0, 1]  # step 1 is also the end
    assert "step1_vs_warmstart" in report["comparisons"]
    assert (confirm / "eval_step1.episodes.jsonl").read_text().count("\n") == 3

    # More held-out tasks later: the finished evaluations are extended, not rerun.
    kept = (confirm / "eval_after.episodes.jsonl").read_text().splitlines()
    report = bench.main([*argv, "--heldout", "4"])
    grown = (confirm / "eval_after.episodes.jsonl").read_text().splitlines()
    assert grown[:3] == kept and json.loads(grown[3])["seed"] == 8
    assert report["heldout_tasks"] == 4 and report["grpo_steps"] == 1


def test_a_given_warm_start_is_described_from_its_trainer_state(tmp_path):
    bench = load_benchmark()
    with pytest.raises(SystemExit, match="no adapter_config.json"):
        bench.given_adapter(str(tmp_path))
    (tmp_path / "adapter_config.json").write_text("{}")
    state = {"epoch": 0.75, "global_step": 24, "max_steps": 64,
             "log_history": [{"loss": 1.1}, {"loss": 0.16}, {"train_runtime": 9.0}]}  # fmt: skip
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    record = bench.given_adapter(str(tmp_path))
    assert record["adapter"] == str(tmp_path) and record["steps"] == "24 of 64"
    assert record["epochs"] == 0.75 and (record["loss_first"], record["loss_last"]) == (1.1, 0.16)
