"""Every documented ``trace run`` setting reaches the stage that uses it.

The documented keys are collected from where users read them: ``--set KEY=`` in the README,
``docs/`` and the docstrings of ``trace_train`` and ``benchmarks``, the fields of
``PipelineConfig`` and its sections, the section keys the pipeline docstrings name, and every
key of the shipped ``trace run`` configs. Each one is set alone, through the ``trace`` CLI, on a
run whose library calls are replaced by recorders (warm start, evaluation, diagnosis,
synthesis, GRPO, composition); the test then checks the value in what the stage that uses it
handed to the library. A documented key without a check here fails the test, so a new setting
cannot be documented and silently ignored (as ``warmstart.epochs`` once was: the flat
``warmstart_epochs`` default was written over it).
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from trace_train.pipeline import PipelineConfig, stages
from trace_train.pipeline.config import PRESET_SECTIONS, RENAMED, SECTIONS

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "trace_train" / "configs"
RUN_CONFIGS = [
    p for p in sorted(CONFIGS.glob("*.yaml")) if "target" in yaml.safe_load(p.read_text())
]
SECTION_NAMES = sorted({*SECTIONS, *PRESET_SECTIONS})
TRACE_RUN_PAGES = ("trace_run.md",)

TARGET = "trace/precondition-v0"
MATCHED, MISSING, THIRD = "precondition_verification", "loyalty_math", "tool_use"
"""The recorded diagnosis's core, in order: one capability the registry trains (matched to the
target and to clarify-v0, so the target must be filtered out), one no environment trains (it
is synthesised), and a third that only ``max_adapters: 3`` selects."""
MATCHES = {MATCHED: [TARGET, "trace/clarify-v0"], MISSING: [], THIRD: ["trace/tool-call-v0"]}
SYNTHESISED = "trace/loyalty-math-v0"


# ---------------------------------------------------------------------------------------------
# What is documented
# ---------------------------------------------------------------------------------------------
def _flatten(data: dict[str, Any]) -> set[str]:
    keys = set()
    for key, value in data.items():
        if key in SECTION_NAMES and isinstance(value, dict):
            keys |= {f"{key}.{name}" for name in value}
        else:
            keys.add(key)
    return keys


def documented_keys() -> set[str]:
    keys: set[str] = set()
    prose = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "benchmarks").glob("*.py")]
    prose += list((REPO / "trace_train").rglob("*.py"))
    sections = "|".join(SECTION_NAMES)
    for path in prose:
        text = path.read_text(encoding="utf-8")
        keys |= set(re.findall(r"--set[ =]['\"]?([a-z_]\w*(?:\.\w+)?)=", text))  # not KEY=VALUE
        # Pages about `trace run` name keys in backticks too (the README's loop section moved
        # to docs/trace_run.md); elsewhere a dotted name in backticks may be a file (`grpo.py`).
        if "pipeline" in path.parts or path.name in ("README.md", *TRACE_RUN_PAGES):
            keys |= set(re.findall(rf"`{{1,2}}((?:{sections})\.[a-z_]+)`{{1,2}}", text))
    keys |= {f.name for f in dataclasses.fields(PipelineConfig) if f.name not in SECTION_NAMES}
    keys |= {f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
    for path in RUN_CONFIGS:
        keys |= _flatten(yaml.safe_load(path.read_text()))
    return keys


# ---------------------------------------------------------------------------------------------
# A run whose library calls are recorded
# ---------------------------------------------------------------------------------------------
class Recorder:
    """What each stage handed to the libraries, in call order: ``(stage, kind, value)``."""

    def __init__(self) -> None:
        self.stage = ""
        self.calls: list[tuple[str, str, Any]] = []

    def add(self, kind: str, value: Any) -> None:
        self.calls.append((self.stage, kind, value))

    def get(self, kind: str, stage: str | None = None) -> list[Any]:
        return [v for s, k, v in self.calls if k == kind and stage in (None, s)]


def _diagnosis_folder(out: Path, core: list[str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"name": c, "mean_delta": 0.5, "mean_cov": 0.4, "verdict": "selected"} for c in core]
    analysis = {"core": core, "capabilities": rows, "totals": {"failed": 3, "passed": 3}}
    (out / "analysis.json").write_text(json.dumps(analysis))
    matches = [{"capability": c, "env_ids": MATCHES[c], "method": "tag"} for c in core]
    (out / "env_matches.json").write_text(json.dumps(matches))
    return analysis


@pytest.fixture
def recorded(monkeypatch):
    """The library calls of every stage replaced by recorders that write what the next stage
    reads; ``stages.STAGES`` wrapped so that each call knows its stage."""
    import trace_diagnose
    import trace_gym.synthesis.synthesize
    import trace_train.evaluate
    import trace_train.grpo
    import trace_train.stored_adapter
    import trace_train.warmstart
    from trace_train.pipeline import compositions

    rec = Recorder()

    def saved_adapter(output_dir: str) -> Path:
        # provenance.json hashes every adapter a run made: the fakes leave a weights file
        adapter = Path(output_dir) / "adapter"
        adapter.mkdir(parents=True, exist_ok=True)
        (adapter / "adapter_model.safetensors").write_bytes(output_dir.encode())
        return adapter

    def warmstart(cfg):
        rec.add("warmstart", cfg)
        return SimpleNamespace(adapter_dir=saved_adapter(cfg.output_dir))

    def grpo(cfg):
        rec.add("grpo", cfg)
        saved_adapter(cfg.output_dir)

    def evaluate(cfg, label=None):
        rec.add("eval", SimpleNamespace(cfg=cfg, label=label))
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "episodes.jsonl").write_text("")
        overall = {"episodes": cfg.episodes, "success_rate": 0.5, "success_ci95": [0.1, 0.9],
                   "mean_reward": 0.5, "mean_reward_ci95": [0.1, 0.9], "capabilities": {}}  # fmt: skip
        summary = {"policy": cfg.policy, "split": cfg.split, "overall": overall}
        (out / "summary.json").write_text(json.dumps(summary))
        return summary

    side_by_side = trace_train.evaluate.evaluate_side_by_side

    def evaluate_side_by_side(jobs, workers, finished=None):
        rec.add("side_by_side", workers)  # then in this process, where evaluate is recorded
        return side_by_side(jobs, 1, finished)

    def run_diagnosis(inputs, out, llm=None, n_runs=None, **kwargs):
        rec.add("diagnosis", SimpleNamespace(inputs=inputs, llm=llm, n_runs=n_runs, **kwargs))
        return _diagnosis_folder(Path(out), list(MATCHES))

    def synthesize(capability, definition, folder, complete, **kwargs):
        rec.add("synthesis", SimpleNamespace(capability=capability, folder=folder, **kwargs))
        attempt = SimpleNamespace(gates=[])
        return SimpleNamespace(accepted=True, env_id=SYNTHESISED, attempts=[attempt],
                               record_path=str(Path(folder) / "record.json"))  # fmt: skip

    def build_routed(base_model, adapters, out):
        rec.add("routed", SimpleNamespace(base_model=base_model, adapters=adapters))
        return out

    def routing_check(adapters, routed_dir, **kwargs):
        rec.add("routing_check", SimpleNamespace(**kwargs))
        return {"accuracy": 1.0, "tasks": kwargs["tasks_per_adapter"] * len(adapters)}

    def build_moe(base_model, adapters, out, **kwargs):
        rec.add("moe", SimpleNamespace(base_model=base_model, **kwargs))
        return out, 0.5

    def load_stored(folder, base_model):
        rec.add("stored", (Path(folder), base_model))
        return {"sha256": "0" * 64, "rebuild": "trace-train warmstart ..."}

    monkeypatch.setattr(trace_train.warmstart, "train", warmstart)
    monkeypatch.setattr(trace_train.stored_adapter, "load", load_stored)
    monkeypatch.setattr(stages, "_merge_adapter", lambda base, adapter, out: None)
    monkeypatch.setattr(trace_train.evaluate, "evaluate", evaluate)
    monkeypatch.setattr(trace_train.evaluate, "evaluate_side_by_side", evaluate_side_by_side)
    monkeypatch.setattr(trace_diagnose, "run_diagnosis", run_diagnosis)
    monkeypatch.setattr(trace_gym.synthesis.synthesize, "synthesize", synthesize)
    monkeypatch.setattr(
        trace_gym.synthesis.synthesize,
        "litellm_completion",
        lambda model, api_base=None: rec.add("completion", (model, api_base)),
    )
    monkeypatch.setattr(trace_train.grpo, "train", grpo)
    monkeypatch.setattr(compositions, "build_routed", build_routed)
    monkeypatch.setattr(compositions, "routing_check", routing_check)
    monkeypatch.setattr(compositions, "build_moe", build_moe)

    def tracked(stage):
        def fn(run, say):
            rec.stage = stage.name
            return stage.fn(run, say)

        return dataclasses.replace(stage, fn=fn)

    monkeypatch.setattr(stages, "STAGES", tuple(tracked(s) for s in stages.STAGES))
    return rec


PRESET = {
    "grpo": {"group_size": 2, "groups_per_step": 1, "steps": 1, "max_turns": 3,
             "max_new_tokens": 16, "max_completion_tokens": 256, "lora_rank": 4},
    "warmstart": {"demonstrations": 8, "epochs": 1, "batch_size": 2, "lora_rank": 4},
}  # fmt: skip
"""The base run's preset: small, valid, and different from every value the checks set."""


def base_settings(tmp: Path) -> dict[str, Any]:
    """A run that reaches every stage: a target, an LLM diagnosis, a warm start, one capability
    to synthesise."""
    preset = tmp / "preset.yaml"
    preset.write_text(yaml.safe_dump(PRESET))
    return {
        "run_dir": str(tmp / "run"),
        "target": TARGET,
        "model": str(tmp / "base"),
        "preset": str(preset),
        "llm": "openai/diagnoser",
        "warmstart.demonstrations": 2,
    }


def run_cli(settings: dict[str, Any]) -> int:
    from trace_train.pipeline.cli import main

    argv = ["run"]
    for key, value in settings.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]  # JSON is YAML: --set parses it back
    return main(argv)


# ---------------------------------------------------------------------------------------------
# Where each documented key must arrive
# ---------------------------------------------------------------------------------------------
def evals(rec: Recorder, stage: str) -> list[Any]:
    return [e.cfg for e in rec.get("eval", stage)]


def adapters_grpo(rec: Recorder) -> list[Any]:
    """The GRPO runs of capability adapters (plain GRPO trains on the target)."""
    return [g for g in rec.get("grpo") if g.env_id != TARGET]


def every(values: list[Any], check: Callable[[Any], bool]) -> bool:
    return bool(values) and all(check(v) for v in values)


Check = Callable[[Recorder, Any, Path], bool]
EXPECTED: dict[str, tuple[Any, Check]] = {
    "run_dir": ("{tmp}/elsewhere", lambda r, v, tmp: every(
        [e.out_dir for e in evals(r, "rollout-base") + evals(r, "evaluate")]
        + [g.output_dir for g in r.get("grpo")] + [w.output_dir for w in r.get("warmstart")],
        lambda path: Path(path).is_relative_to(v))),
    "target": ("trace/clarify-v0", lambda r, v, tmp: (
        every(evals(r, "rollout-base") + evals(r, "evaluate"), lambda e: e.env_ids == [v])
        and every(r.get("warmstart"), lambda w: w.env_id == v)
        and {g.env_id for g in r.get("grpo")} == {TARGET, SYNTHESISED})),  # matched: not the target
    "trajectories": (["{tmp}/given.jsonl"], lambda r, v, tmp: (
        not evals(r, "rollout-base") and r.get("diagnosis", "diagnose")[0].inputs == v)),
    "model": ("{tmp}/other-base", lambda r, v, tmp: every(r.get("warmstart"), lambda w: w.model == v)),
    "warm_start_adapter": ("{tmp}/kept", lambda r, v, tmp: (
        not r.get("warmstart") and r.get("stored") == [(Path(v), str(tmp / "base"))]
        and f"sha256 <code>{'0' * 64}</code>" in (tmp / "run" / "report.html").read_text())),
    "difficulty": (0.35, lambda r, v, tmp: every(
        evals(r, "rollout-base") + evals(r, "evaluate") + r.get("grpo"), lambda c: c.difficulty == v)),
    "tool_prompt": ("compact", lambda r, v, tmp: every(
        evals(r, "rollout-base") + evals(r, "evaluate") + r.get("grpo") + r.get("warmstart")
        + r.get("routing_check") + r.get("moe"), lambda c: c.tool_prompt == v)),
    "llm": ("openai/other", lambda r, v, tmp: (
        every(r.get("diagnosis"), lambda d: d.llm.model == v)  # diagnose and rediagnose
        and every(r.get("completion"), lambda c: c[0] == v))),  # synthesis defaults to it
    "llm_api_base": ("http://127.0.0.1:9/v1", lambda r, v, tmp: (
        every(r.get("diagnosis"), lambda d: d.llm.api_base == v)
        and every(r.get("completion"), lambda c: c[1] == v))),
    "env_urls": (["http://127.0.0.1:9"], lambda r, v, tmp: (
        every(r.get("grpo"), lambda g: g.env_urls == v)
        and every(evals(r, "evaluate"), lambda e: e.env_urls == v))),  # model policies only
    "train": (False, lambda r, v, tmp: (
        r.get("diagnosis", "diagnose") and not r.get("grpo") and not r.get("warmstart")
        and not r.get("routed") and not evals(r, "evaluate"))),
    "max_adapters": (3, lambda r, v, tmp: len(r.get("grpo")) == 3),
    "plain_grpo": (True, lambda r, v, tmp: [g.steps for g in r.get("grpo") if g.env_id == TARGET]
                   == [PRESET["grpo"]["steps"] * 2]),  # two adapters' rollouts
    "preset": ("{tmp}/other-preset.yaml", lambda r, v, tmp: (
        every(r.get("grpo"), lambda g: g.lora_rank == 5)
        and every(r.get("warmstart"), lambda w: w.lora_rank == 5))),
    "report_note": ("demo budgets <b>only</b>", lambda r, v, tmp: (
        "demo budgets &lt;b&gt;only&lt;/b&gt;" in (tmp / "run" / "report.html").read_text())),
    "diagnose.agent": ("deficit:precondition=0.5:1", lambda r, v, tmp: every(
        evals(r, "rollout-base"), lambda e: e.policy == v and e.max_turns is None)),
    "diagnose.episodes": (17, lambda r, v, tmp: every(evals(r, "rollout-base"), lambda e: e.episodes == v)),
    "diagnose.split": ("train", lambda r, v, tmp: every(  # grpo.seed 0's GRPO part
        evals(r, "rollout-base"), lambda e: e.split == v and e.seed_start == 500_000)),
    "diagnose.label_runs": (4, lambda r, v, tmp: every(r.get("diagnosis"), lambda d: d.n_runs == v)),
    "diagnose.max_cost": (1.5, lambda r, v, tmp: every(r.get("diagnosis"), lambda d: d.llm.max_cost == v)),
    "synthesize.llm": ("openai/writer", lambda r, v, tmp: (
        every(r.get("synthesis"), lambda s: s.model == v)
        and every(r.get("completion"), lambda c: c[0] == v))),
    "synthesize.attempts": (2, lambda r, v, tmp: every(r.get("synthesis"), lambda s: s.attempts == v)),
    "compose.kinds": (["moe"], lambda r, v, tmp: not r.get("routed") and len(r.get("moe")) == 1),
    "compose.router_sequences": (5, lambda r, v, tmp: every(
        r.get("moe"), lambda m: m.router_sequences_per_adapter == v)),
    "compose.router_steps": (9, lambda r, v, tmp: every(r.get("moe"), lambda m: m.router_steps == v)),
    "compose.routing_check_tasks": (4, lambda r, v, tmp: every(
        r.get("routing_check"), lambda c: c.tasks_per_adapter == v)),
    "evaluate.episodes": (7, lambda r, v, tmp: every(evals(r, "evaluate"), lambda e: e.episodes == v)),
    "evaluate.split": ("eval", lambda r, v, tmp: every(evals(r, "evaluate"), lambda e: e.split == v)),
    "evaluate.adapters": (False, lambda r, v, tmp: (
        {e.label for e in r.get("eval", "evaluate")} == {"base", "routed", "moe"})),
    "evaluate.workers": (2, lambda r, v, tmp: r.get("side_by_side", "evaluate") == [v]),
    "generation.max_turns": (6, lambda r, v, tmp: (
        every(evals(r, "evaluate"), lambda e: e.max_turns == v)
        and every(r.get("moe"), lambda m: m.max_turns == v))),
    "generation.max_new_tokens": (33, lambda r, v, tmp: (
        every(evals(r, "evaluate"), lambda e: e.max_new_tokens == v)
        and every(r.get("moe"), lambda m: m.max_new_tokens == v))),
    "generation.batch_size": (3, lambda r, v, tmp: every(
        evals(r, "rollout-base") + evals(r, "evaluate"), lambda e: e.batch_size == v)),
}  # fmt: skip

GRPO_VALUES = {
    "steps": 3, "group_size": 6, "groups_per_step": 3, "micro_batch_size": 2, "eval_episodes": 1,
    "max_turns": 7, "max_new_tokens": 40, "max_completion_tokens": 300, "difficulty_max": 0.9,
    "env_kwargs": {"config": {"n_fillers": 8}}, "difficulty": 0.75, "seed": 3, "save_steps": 4,
    "learning_rate": 3e-5,
}  # fmt: skip
"""A valid value, different from the base run's, for each documented ``grpo.`` setting."""
WARMSTART_VALUES = {
    "demonstrations": 5, "epochs": 3, "save_steps": 7, "max_length": 999, "max_turns": 9,
    "batch_size": 4,
}  # fmt: skip
"""The same for ``warmstart.``; ``epochs`` is the one the old flat default overwrote."""
for _name, _value in GRPO_VALUES.items():
    EXPECTED[f"grpo.{_name}"] = (_value, lambda r, v, tmp, n=_name: every(
        adapters_grpo(r), lambda g: getattr(g, n) == v))  # fmt: skip
for _name, _value in WARMSTART_VALUES.items():
    EXPECTED[f"warmstart.{_name}"] = (_value, lambda r, v, tmp, n=_name: every(
        r.get("warmstart"), lambda w: getattr(w, n) == v))  # fmt: skip


ALONGSIDE = {"warm_start_adapter": {"warmstart.demonstrations": 0}}
"""What a key needs changed with it (a stored warm start replaces the trained one)."""


def _concrete(value: Any, tmp: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{tmp}", str(tmp))
    if isinstance(value, list):
        return [_concrete(v, tmp) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------
def test_every_documented_key_has_a_check():
    keys = documented_keys()
    assert {"grpo.steps", "warmstart.epochs", "evaluate.episodes", "plain_grpo"} <= keys
    unchecked = sorted(k for k in keys if RENAMED.get(k, k) not in EXPECTED)
    assert not unchecked, f"documented but not checked here: {unchecked}"


@pytest.mark.parametrize("key", sorted(documented_keys()))
def test_a_documented_key_reaches_the_stage_that_uses_it(key, recorded, tmp_path):
    value, check = EXPECTED[RENAMED.get(key, key)]
    value = _concrete(value, tmp_path)
    (tmp_path / "given.jsonl").write_text("")
    (tmp_path / "kept").mkdir()  # a stored adapter (its loading is recorded)
    (tmp_path / "kept" / "adapter_model.safetensors").write_bytes(b"weights")
    other = {**PRESET, "grpo": {**PRESET["grpo"], "lora_rank": 5},
             "warmstart": {**PRESET["warmstart"], "lora_rank": 5}}  # fmt: skip
    (tmp_path / "other-preset.yaml").write_text(yaml.safe_dump(other))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # an old key, documented somewhere
        assert run_cli({**base_settings(tmp_path), **ALONGSIDE.get(key, {}), key: value}) == 0
    assert check(recorded, value, tmp_path), (key, value, recorded.calls)


def test_the_base_run_differs_from_every_checked_value(recorded, tmp_path):
    """Without the key set, each check fails: the value comes from the key, not the base."""
    (tmp_path / "given.jsonl").write_text("")
    assert run_cli(base_settings(tmp_path)) == 0
    passing = [key for key, (value, check) in EXPECTED.items()
               if check(recorded, _concrete(value, tmp_path), tmp_path)]  # fmt: skip
    assert passing == []


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_an_old_flat_key_loads_as_its_new_key_with_a_warning(old):
    value = {"diagnose.agent": "oracle", "synthesize.llm": "openai/x", "diagnose.max_cost": 2.0,
             "evaluate.split": "eval", "evaluate.adapters": False}.get(RENAMED[old], 3)  # fmt: skip
    with pytest.warns(FutureWarning, match=f"'{old}' is deprecated; use '{RENAMED[old]}'"):
        old_cfg = PipelineConfig.load(None, {old: value})
    assert old_cfg == PipelineConfig.load(None, {RENAMED[old]: value})


def test_warmstart_epochs_from_the_command_line_wins_over_the_file(tmp_path):
    """The bug this file guards against, in both spellings."""
    old_file, new_file = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old_file.write_text("warmstart_demonstrations: 4\nwarmstart_epochs: 1\n")
    new_file.write_text("warmstart: {demonstrations: 4, epochs: 1}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for path in (old_file, new_file):
            for key in ("warmstart.epochs", "warmstart_epochs"):
                cfg = PipelineConfig.load(path, {key: 3})
                assert cfg.warmstart_config("m", tmp_path).epochs == 3, (path.name, key)


def test_an_old_key_beside_its_new_one_in_one_file_is_an_error(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text("eval_episodes: 3\nevaluate: {episodes: 4}\n")
    from trace_train.pipeline import PipelineError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(PipelineError, match="eval_episodes and evaluate.episodes set the same"):
            PipelineConfig.load(path)


def test_the_cli_prints_an_old_key_as_one_warning_line(tmp_path, recorded, capsys):
    assert run_cli({**base_settings(tmp_path), "eval_episodes": 7}) == 0
    err = capsys.readouterr().err
    assert "trace: warning: --set: config key 'eval_episodes' is deprecated; use " in err
    assert every(evals(recorded, "evaluate"), lambda e: e.episodes == 7)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("evaluate.episodes", "ten", "evaluate.episodes='ten': expected int"),
        ("compose.kinds", "moe", "compose.kinds='moe': expected list[str]"),
        ("grpo.env_id", "trace/clarify-v0", "grpo.env_id is set by the run: the run picks"),
        ("warmstart.tool_prompt", "compact", "warmstart.tool_prompt is set by the run: warm"),
        ("grpo.micro_batch_size", 3, "micro_batch_size=3 must divide group_size*groups_per_step"),
        ("grpo.difficulty_max", 0.1, "grpo (preset cpu_smollm2 with this run's settings): "),
        ("diagnose.split", "test", "diagnose.split='test'; use eval (default) or train"),
        ("evaluate.episdoes", 3, "evaluate.episdoes: unknown setting; did you mean 'episodes'?"),
    ],
)
def test_a_bad_setting_is_one_line_before_any_stage_runs(key, value, message, tmp_path, capsys):
    from trace_train.pipeline.cli import main

    argv = ["run", "--run-dir", str(tmp_path / "run"), "--set", f"{key}={json.dumps(value)}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("trace: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()  # nothing ran


def test_a_null_in_grpo_clears_the_presets_value(tmp_path):
    """gpu_paper trains over a difficulty curriculum; ``difficulty_max: null`` turns it off."""
    cfg = PipelineConfig.load(None, {"preset": "gpu_paper"})
    assert cfg.grpo_config("m", TARGET, tmp_path).difficulty_max == 0.8
    cfg = PipelineConfig.load(None, {"preset": "gpu_paper", "grpo.difficulty_max": None})
    assert cfg.grpo_config("m", TARGET, tmp_path).difficulty_max is None


def test_run_help_lists_every_setting_with_its_default_and_docstring(capsys):
    from trace_train.pipeline.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    keys = [f.name for f in dataclasses.fields(PipelineConfig) if f.name not in SECTIONS]
    keys += [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    assert [k for k in keys if not re.search(rf"^ *{re.escape(k)} \(", out, re.M)] == []
    assert "  evaluate.episodes (20): Held-out episodes per policy.\n" in out


def test_trace_status_lists_every_stage_of_a_finished_run(recorded, tmp_path, capsys):
    from trace_train.pipeline.cli import main

    settings = base_settings(tmp_path)
    assert run_cli(settings) == 0
    capsys.readouterr()
    assert main(["status", settings["run_dir"]]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()]
    assert rows == [[stage.name, "done"] for stage in stages.STAGES]
    assert main(["status", str(tmp_path / "no-run")]) == 2
    assert "is not a trace run folder" in capsys.readouterr().err


def test_an_empty_section_in_a_file_is_its_defaults(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("grpo:\nevaluate:\n  # episodes: 50\n")  # every key commented out
    cfg = PipelineConfig.load(path)
    assert cfg.grpo == {} and cfg.evaluate == PipelineConfig().evaluate
