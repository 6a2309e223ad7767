"""GRPO-LoRA on a multi-turn trace_gym environment with a tiny random model (offline).

Hinted rollouts play the oracle's turns (``tests/train/oracle_hints.py``), so rewards differ
within each group, advantages are non-zero and the LoRA must move.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import TrainerCallback

from tests.train.envtiny import ENV_ID, build_env_tiny
from tests.train.oracle_hints import HINT_MARKER, train_with_oracle_hints
from trace_train import grpo, runlog
from trace_train.config import GRPORunConfig


@pytest.fixture(scope="module")
def env_tiny(tmp_path_factory) -> str:
    return build_env_tiny(tmp_path_factory.getbasetemp())


class Recorder(TrainerCallback):
    """Snapshots weights at the start and hooks the embedding to see every forward's input."""

    def __init__(self) -> None:
        self.lora0: dict[str, torch.Tensor] = {}
        self.base0: dict[str, torch.Tensor] = {}
        self.grad_inputs: list[torch.Tensor] = []
        self.nograd_inputs: list[torch.Tensor] = []

    def on_train_begin(self, args, state, control, model=None, **kw):
        for name, p in model.named_parameters():
            (self.lora0 if "lora_" in name else self.base0)[name] = p.detach().clone()

        def hook(_module, inputs):
            bucket = self.grad_inputs if torch.is_grad_enabled() else self.nograd_inputs
            bucket.append(inputs[0].detach().clone())

        model.get_input_embeddings().register_forward_pre_hook(hook)


@pytest.fixture(scope="module")
def trained(env_tiny, tmp_path_factory):
    """Two GRPO steps; records weights, forward inputs and the tensors the loss used."""
    loss_inputs: list[dict] = []
    generated: list[tuple[int, ...]] = []
    out = tmp_path_factory.mktemp("grpo_run")
    cfg = GRPORunConfig(
        model=env_tiny, output_dir=str(out), group_size=4, groups_per_step=1, steps=2,
        max_turns=4, max_new_tokens=96, max_completion_tokens=1024, learning_rate=1e-2,
        lora_rank=4, lora_alpha=8, lora_targets=["q_proj", "v_proj"], hint_ratio=0.5,
        hinted_rollouts="importance_weighted", difficulty=0.0, save_steps=10, seed=0,
    )  # fmt: skip
    recorder = Recorder()
    result = train_with_oracle_hints(cfg, [recorder], loss_inputs, generated)
    return {"result": result, "rec": recorder, "loss_inputs": loss_inputs, "cfg": cfg,
            "generated": set(generated)}  # fmt: skip


def test_two_steps_change_lora_only(trained):
    model, rec = trained["result"].model, trained["rec"]
    assert trained["result"].global_step == 2
    now = dict(model.named_parameters())
    changed = [n for n, p0 in rec.lora0.items() if not torch.equal(now[n].detach(), p0)]
    assert changed, "no LoRA tensor changed"
    assert any("lora_B" in n for n in changed)
    for name, p0 in rec.base0.items():
        assert torch.equal(now[name].detach(), p0), f"base weight {name} changed"
    assert all(not now[n].requires_grad for n in rec.base0)


def test_rewards_differ_within_groups_and_log_has_every_field(trained):
    lines = [json.loads(x) for x in trained["result"].log_path.read_text().splitlines()]
    steps = [x for x in lines if "event" not in x]
    assert [x["step"] for x in steps] == [1, 2]
    for x in steps:
        assert x["rollouts/step"] == 4 and x["group/reward_variance"] > 0
        assert x["env/success_hint"] == 1.0 and x["env/success_no_hint"] == 0.0
        for key in ("reward/mean", "env/success", "tokens/model", "tokens/env", "rollouts/total"):
            assert key in x
        # Where the step's wall time went: every phase ran, and the shares fit in the step.
        shares = [x[f"time/{p}_share"] for p in ("prefill", "decode", "backward", "env")]
        assert all(0 < s <= 1 for s in shares) and sum(shares) <= 1, shares
        assert x["time/step_seconds"] > 0 and x["time/step_cpu_seconds"] > 0
        assert x["gen/prefill_dtype"] in ("float32", "bfloat16")
        assert x["gen/decode_dtype"] in ("float32", "bfloat16")
    assert steps[-1]["rollouts/total"] == 8
    assert lines[-1]["event"] == "train_end"


def test_only_model_tokens_carry_loss(trained, env_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(env_tiny)
    inputs = trained["loss_inputs"]
    assert inputs and all("tool_mask" in x for x in inputs)
    user_header = "<|im_start|>user"
    generated = trained["generated"]
    env_tokens = model_tokens = 0
    for x in inputs:
        loss_mask = x["completion_mask"] * x["tool_mask"]
        for ids, lm, cm in zip(x["completion_ids"], loss_mask, x["completion_mask"], strict=True):
            # every run of tokens in the loss is one model turn exactly as generated (the last
            # may be cut by the completion budget); a random model may itself emit chat
            # markers such as <|im_start|>user, so the test compares ids, not text
            runs = _runs(ids.tolist(), lm.tolist())
            for k, run in enumerate(runs):
                last = k == len(runs) - 1
                assert run in generated or (last and any(g[: len(run)] == run for g in generated))
            masked = tok.decode(ids[(cm.bool()) & (~lm.bool())].tolist())
            assert masked == "" or user_header in masked
            env_tokens += int(((cm == 1) & (lm == 0)).sum())
            model_tokens += int(lm.sum())
    logged = [json.loads(x) for x in trained["result"].log_path.read_text().splitlines()[:2]]
    assert env_tokens == sum(x["tokens/env"] for x in logged) > 0
    assert model_tokens == sum(x["tokens/model"] for x in logged)


def _runs(ids: list[int], mask: list[int]) -> list[tuple[int, ...]]:
    """The maximal runs of ``ids`` where ``mask`` is 1."""
    runs, current = [], []
    for token, m in zip(ids, mask, strict=True):
        if m:
            current.append(token)
        elif current:
            runs.append(tuple(current))
            current = []
    return runs + ([tuple(current)] if current else [])


def test_update_never_sees_the_hint(trained, env_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(env_tiny)
    rec = trained["rec"]
    # Generation did see the hint (half of each group was hinted) ...
    assert any(HINT_MARKER in tok.decode(x[0].tolist()) for x in rec.nograd_inputs)
    # ... but no forward pass with gradients, and no tensor handed to the loss, contains it.
    assert rec.grad_inputs
    for x in rec.grad_inputs:
        for row in x:
            assert HINT_MARKER not in tok.decode(row.tolist())
    for x in trained["loss_inputs"]:
        for row in x["prompt_ids"]:
            assert HINT_MARKER not in tok.decode(row.tolist())


def test_adapter_reloads_and_evaluates(trained, env_tiny, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    import trace_gym
    from trace_train.config import EvalConfig
    from trace_train.evaluate import evaluate

    adapter = trained["result"].adapter_dir
    assert (adapter / "adapter_config.json").is_file()
    assert (adapter / "adapter_model.safetensors").is_file()
    meta = json.loads((adapter / "trace_train.json").read_text())
    assert meta["env_id"] == ENV_ID and meta["capability"] == "precondition_verification"
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(env_tiny), adapter)
    trained_params = dict(trained["result"].model.named_parameters())
    for name, p in reloaded.named_parameters():
        if "lora_" in name:
            assert torch.equal(p, trained_params[name].detach())
    cfg = EvalConfig(
        policy=f"hf:{env_tiny}+adapter:{adapter}", episodes=2, max_turns=2,
        max_new_tokens=8, out_dir=str(tmp_path), batch_size=2,
    )  # fmt: skip
    summary = evaluate(cfg, progress=False)
    records = list(trace_gym.read_episodes(tmp_path / "episodes.jsonl"))
    assert len(records) == 2 and summary["envs"][ENV_ID]["episodes"] == 2
    assert all(r["split"] == "eval" and r["agent"] == cfg.policy for r in records)


class Killed(Exception):
    pass


class KillAfterSave(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kw):
        if state.global_step == self.step:
            raise Killed(f"killed after saving step {self.step}")


def test_kill_and_resume_continues_from_checkpoint(env_tiny, tmp_path, monkeypatch):
    played: list[list[str]] = []
    real_play = grpo.play_episodes

    def play(generate, fmt, specs, **kw):
        played.append(sorted({s.key() for s in specs}))
        return real_play(generate, fmt, specs, **kw)

    monkeypatch.setattr(grpo, "play_episodes", play)
    cfg = GRPORunConfig(
        model=env_tiny, output_dir=str(tmp_path), group_size=2, groups_per_step=1, steps=3,
        max_turns=2, max_new_tokens=8, max_completion_tokens=200, learning_rate=1e-2,
        lora_rank=2, lora_alpha=4, lora_targets=["q_proj"], save_steps=1, hint_ratio=0.5,
    )  # fmt: skip
    keys = grpo.task_keys(cfg)
    with pytest.raises(Killed):
        grpo.train(cfg, callbacks=[KillAfterSave(2)])
    assert played == [[keys[0]], [keys[1]]]
    assert (tmp_path / "checkpoints" / "checkpoint-2").is_dir()
    # resumed from what benchmarks/run_snapshot.py save --resume-point keeps: the newest
    # checkpoint, without its copies of the tokenizer
    shutil.rmtree(tmp_path / "checkpoints" / "checkpoint-1", ignore_errors=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):  # fmt: skip
        (tmp_path / "checkpoints" / "checkpoint-2" / name).unlink(missing_ok=True)
    played.clear()
    result = grpo.train(cfg)  # the restart
    assert played == [[keys[2]]], "the resumed run must not repeat finished steps"
    assert result.global_step == 3
    lines = [json.loads(x) for x in (tmp_path / "training_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "event" not in x] == [1, 2, 3]
    assert lines[-2]["rollouts/total"] == 6
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    # the cost of the run is every step's, not only the restart's (which timed one step)
    steps = [x for x in lines if "event" not in x]
    spent = runlog.training_time(lines)
    assert spent["train_seconds"] == round(sum(x["time/step_seconds"] for x in steps), 1)
    assert spent["train_seconds"] > lines[-1]["seconds"]
    assert spent["train_cpu_seconds"] == round(sum(x["time/step_cpu_seconds"] for x in steps), 1)


def test_a_resumed_log_without_step_cpu_seconds_has_unknown_cpu_cost():
    """Logs written before ``time/step_cpu_seconds``: ``train_end`` times the last invocation
    only, so its CPU seconds stand for the run only when that invocation ran every step."""
    steps = [{"step": i, "time/step_seconds": 100.0} for i in (1, 2, 3)]
    resumed = [*steps, {"event": "train_end", "seconds": 101.0, "seconds_per_step": 101.0, "cpu_seconds": 99.0}]  # fmt: skip
    assert runlog.training_time(resumed) == {"train_seconds": 300.0, "train_cpu_seconds": None}
    whole = [*steps, {"event": "train_end", "seconds": 303.0, "seconds_per_step": 101.0, "cpu_seconds": 290.0}]  # fmt: skip
    assert runlog.training_time(whole) == {"train_seconds": 300.0, "train_cpu_seconds": 290.0}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU default")
def test_one_rollout_per_pass_is_the_same_update_as_one_group(env_tiny, tmp_path):
    """On a CPU a step passes one rollout at a time by default (less memory, faster there):
    accumulated over the group it must be the update one pass of the whole group makes."""
    runs = {}
    for name, micro in (("group", 4), ("default", None)):
        cfg = GRPORunConfig(
            model=env_tiny, output_dir=str(tmp_path / name), group_size=4, groups_per_step=1,
            steps=1, micro_batch_size=micro, max_turns=4, max_new_tokens=96,
            max_completion_tokens=1024, learning_rate=1e-2, lora_rank=4, lora_alpha=8,
            lora_targets=["q_proj", "v_proj"], hint_ratio=0.5, difficulty=0.0, seed=0,
            hinted_rollouts="importance_weighted",  # the hinted oracle turns are the signal
        )  # fmt: skip
        args = grpo.trl_config(cfg, tmp_path / name)
        passes = (args.per_device_train_batch_size, args.gradient_accumulation_steps)
        result = train_with_oracle_hints(cfg, [])
        (step,) = [json.loads(x) for x in result.log_path.read_text().splitlines()][:1]
        lora = {n: p.detach().clone() for n, p in result.model.named_parameters() if "lora_" in n}
        runs[name] = (passes, step, lora)
    (group_passes, group_step, group_lora), (passes, step, lora) = runs["group"], runs["default"]
    assert group_passes == (4, 1) and passes == (1, 4)
    assert step["tokens/model"] == group_step["tokens/model"]  # the same rollouts
    assert step["group/reward_variance"] > 0  # so the update is not zero
    assert step["train/loss"] == pytest.approx(group_step["train/loss"], rel=1e-4, abs=1e-6)
    assert step["train/grad_norm"] == pytest.approx(group_step["train/grad_norm"], rel=1e-3)
    for name, tensor in lora.items():
        torch.testing.assert_close(tensor, group_lora[name], rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU meaning of bf16")
def test_bf16_on_cpu_autocasts_the_update_and_keeps_float32_weights(env_tiny, tmp_path):
    cfg = GRPORunConfig(model=env_tiny, env_id=ENV_ID, bf16=True, output_dir=str(tmp_path))
    model, _, _ = grpo.load_policy_model(cfg, tmp_path)
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # decoding stays float32
    assert grpo.trl_config(cfg, tmp_path).bf16  # the trainer autocasts forward and backward
