"""Supervised warm start on oracle demonstrations (tiny random model, offline)."""

from __future__ import annotations

import json

import torch

from tests.train.envtiny import build_env_tiny
from trace_train.config import WarmstartConfig
from trace_train.rollout import ChatFormat
from trace_train.warmstart import demonstrations, supervised_demonstrations, train


def test_demonstrations_mask_environment_tokens(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_env_tiny(tmp_path_factory.getbasetemp()))
    cfg = WarmstartConfig(model="unused", demonstrations=3, max_turns=8)
    rows = demonstrations(cfg, ChatFormat(tok))
    assert len(rows) == 3
    for row in rows:
        ids, mask = torch.tensor(row["input_ids"]), torch.tensor(row["assistant_masks"])
        supervised = tok.decode(ids[mask.bool()].tolist())
        ignored = tok.decode(ids[~mask.bool()].tolist())
        assert "<tool_call>" in supervised and '"name"' in supervised
        assert "<|im_start|>user" not in supervised and "<tool_response>" in ignored
        assert "expert_guidance" not in tok.decode(row["input_ids"])


def test_warmstart_trains_an_adapter_and_logs_before_after(tmp_path, tmp_path_factory):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = build_env_tiny(tmp_path_factory.getbasetemp())
    cfg = WarmstartConfig(
        model=base, output_dir=str(tmp_path), demonstrations=4, epochs=1, batch_size=2,
        learning_rate=1e-2, lora_rank=2, lora_alpha=4, lora_targets=["q_proj", "v_proj"],
        eval_episodes=1, max_turns=6, max_new_tokens=8, max_completion_tokens=200,
    )  # fmt: skip
    result = train(cfg)
    lines = [json.loads(x) for x in result.log_path.read_text().splitlines()]
    assert lines[0]["event"] == "eval_before" and "heldout/success" in lines[0]
    assert lines[-1]["event"] == "train_end" and "heldout/success" in lines[-1]
    assert any("train/loss" in x for x in lines)
    steps = [x for x in lines if "train/loss" in x]
    assert all(0 < x["time/backward_share"] <= 1 for x in steps)  # supervised: no generation
    lora_b = [p for n, p in result.model.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # B starts at zero
    reloaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base), result.adapter_dir
    )
    assert any("lora_B" in n for n, _ in reloaded.named_parameters())


def test_warmstart_bf16_autocasts_and_keeps_float32_weights(tmp_path, tmp_path_factory):
    from transformers import TrainerCallback

    seen = {}

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            seen["bf16"] = args.bf16
            seen["dtypes"] = {p.dtype for p in model.parameters()}

    cfg = WarmstartConfig(
        model=build_env_tiny(tmp_path_factory.getbasetemp()), output_dir=str(tmp_path),
        demonstrations=2, epochs=1, batch_size=2, eval_episodes=0, bf16=True, max_turns=6,
        max_new_tokens=8, max_completion_tokens=200,
    )  # fmt: skip
    train(cfg, callbacks=[Record()])
    assert seen == {"bf16": True, "dtypes": {torch.float32}}


def test_micro_batches_and_checkpointing_take_the_same_first_step(tmp_path, tmp_path_factory):
    """Accumulating two passes of one conversation, or recomputing activations, is the same
    optimizer step as one pass of two: same loss, same gradient norm."""
    import pytest
    from transformers import TrainerCallback

    from trace_train.config import ConfigError

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            passes.append((args.per_device_train_batch_size, args.gradient_accumulation_steps,
                           model.is_gradient_checkpointing))  # fmt: skip

    base = build_env_tiny(tmp_path_factory.getbasetemp())
    first_steps, passes = [], []
    for name, variant in (
        ("batch", {"micro_batch_size": 0}),  # 0: the whole batch in one pass
        ("micro", {}),  # the default: one conversation per pass
        ("checkpointed", {"micro_batch_size": 1, "gradient_checkpointing": True}),
    ):
        cfg = WarmstartConfig(
            model=base, output_dir=str(tmp_path / name), demonstrations=2, epochs=1,
            batch_size=2, eval_episodes=0, max_turns=6, max_new_tokens=8,
            max_completion_tokens=200, **variant,
        )  # fmt: skip
        result = train(cfg, callbacks=[Record()])
        lines = [json.loads(x) for x in result.log_path.read_text().splitlines()]
        first_steps.append(next(x for x in lines if "train/loss" in x))
    assert passes == [(2, 1, False), (1, 2, False), (1, 2, True)]
    losses = [x["train/loss"] for x in first_steps]
    norms = [x["train/grad_norm"] for x in first_steps]
    assert losses == pytest.approx([losses[0]] * 3, rel=1e-4)
    assert norms == pytest.approx([norms[0]] * 3, rel=1e-3)

    with pytest.raises(ConfigError, match="must divide batch_size"):
        WarmstartConfig(model=base, batch_size=4, micro_batch_size=3)


def test_demonstrations_cut_before_any_assistant_turn_are_a_clear_error(tmp_path_factory):
    import pytest
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_env_tiny(tmp_path_factory.getbasetemp()))
    # the prompt is ~2,190 tokens, the oracle's turns and the replies ~760: the episode fits
    # the budget, and every demonstration is cut before its first assistant token
    cfg = WarmstartConfig(model="unused", demonstrations=2, max_turns=8, max_length=1000)
    with pytest.raises(
        RuntimeError, match=r"cut off before its first assistant turn by max_length=1000"
    ):
        supervised_demonstrations(cfg, ChatFormat(tok))
    rows = demonstrations(cfg, ChatFormat(tok))  # all of them, for the router's training
    assert rows and not any(any(row["assistant_masks"]) for row in rows)


def test_demonstrations_lost_to_the_turn_or_length_limit_are_counted_and_said(
    tmp_path_factory,
):
    import pytest
    from transformers import AutoTokenizer

    from trace_train.warmstart import demonstration_shortfall

    tok = AutoTokenizer.from_pretrained(build_env_tiny(tmp_path_factory.getbasetemp()))
    counts: dict[str, int] = {}
    cfg = WarmstartConfig(model="unused", demonstrations=3, max_turns=2, max_length=100_000)
    with pytest.raises(RuntimeError, match="no oracle demonstration"):  # they need 3+ turns
        demonstrations(cfg, ChatFormat(tok), counts)
    assert counts == {"requested": 3, "unfinished": 3, "truncated": 0}
    said = demonstration_shortfall(cfg, {**counts, "used": 0})
    assert "3 did not finish within max_turns=2" in said
    full = demonstrations(
        WarmstartConfig(model="unused", demonstrations=3, max_turns=8), ChatFormat(tok)
    )
    cut_at = max(len(r["input_ids"]) for r in full) - 1  # the longest loses its last token
    cfg = WarmstartConfig(model="unused", demonstrations=3, max_turns=8, max_length=cut_at)
    rows = demonstrations(cfg, ChatFormat(tok), counts)
    assert len(rows) == 3 and counts["truncated"] >= 1 and counts["unfinished"] == 0
    said = demonstration_shortfall(cfg, {**counts, "used": 3})
    assert f"cut at max_length={cut_at}" in said and "dropped" not in said
    # Cut before its first assistant turn, a demonstration has nothing to learn: dropped, and
    # the message accounts for it, so used + dropped = requested.
    first_turns = [row["assistant_masks"].index(1) for row in full]
    cut_at = max(first_turns)  # the latest-starting ones lose every assistant token
    assert min(first_turns) < cut_at  # the task seeds give prompts of different lengths
    cfg = WarmstartConfig(model="unused", demonstrations=3, max_turns=8, max_length=cut_at)
    kept = supervised_demonstrations(cfg, ChatFormat(tok), counts)
    dropped = first_turns.count(cut_at)
    assert counts["cut_before_first_turn"] == dropped == 3 - len(kept)
    said = demonstration_shortfall(cfg, {**counts, "used": len(kept)})
    assert f"learning from {3 - dropped} of 3" in said
    assert f"{dropped} of them before the first (dropped)" in said


def test_every_checkpoint_is_kept_and_the_record_hashes_the_adapter(tmp_path, tmp_path_factory):
    """A later run (GRPO from the warm start, a rebuild of a reported number) may start from
    any checkpoint: none is rotated away, and the final adapter lives outside the rotation."""
    from trace_train.provenance import sha256_file

    cfg = WarmstartConfig(
        model=build_env_tiny(tmp_path_factory.getbasetemp()), output_dir=str(tmp_path),
        demonstrations=4, epochs=1, batch_size=1, save_steps=1, eval_episodes=0, max_turns=6,
        max_new_tokens=8, max_completion_tokens=200, seed=3,
    )  # fmt: skip
    assert cfg.save_total_limit is None
    result = train(cfg)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint-*"))
    assert kept == [f"checkpoint-{i}" for i in range(1, 5)]  # the default limit was 2
    weights = result.adapter_dir / "adapter_model.safetensors"
    assert result.adapter_dir == tmp_path / "adapter" and weights.is_file()
    record = json.loads((result.adapter_dir / "trace_train.json").read_text())["provenance"]
    assert record["phase"] == "warmstart"
    assert record["adapters"]["adapter"]["sha256"] == sha256_file(weights)
    assert record["base_model"]["sha256"] and record["config"]["demonstrations"] == 4
    tasks = record["seeds"]["tasks"]
    assert (tasks["phase"], tasks["first"], tasks["last"]) == ("warmstart", 3_000_000, 3_000_003)
    assert record["dtypes"]["weights"] == "float32" and record["dtypes"]["update"] == "float32"
    assert {"model_name", "flags", "logical_cores"} <= set(record["machine"]["cpu"])
    assert "dirty" in record["git"]


def test_mixed_in_demonstrations_come_from_each_ids_warmstart_seeds(tmp_path, tmp_path_factory):
    """A composite target's warm start can add its members' own episodes; each id draws the
    warm start's seeds (never GRPO's), and the target's env_kwargs stay with the target."""
    from transformers import AutoTokenizer

    from trace_train import task_seeds
    from trace_train.config import load_config
    from trace_train.warmstart import demonstration_specs

    cfg = WarmstartConfig(
        model="unused", env_id="trace/desk-lite-v0", demonstrations=2, difficulty=0.0,
        difficulty_spread=False, max_turns=10, env_kwargs={"config": {"max_requests": 2}},
        mix_demonstrations={"trace/tool-call-v0": 3, "trace/clarify-v0": 1},
    )  # fmt: skip
    specs = demonstration_specs(cfg)
    assert [s.env_id for s in specs] == ["trace/desk-lite-v0"] * 2 + ["trace/tool-call-v0"] * 3 + [
        "trace/clarify-v0"
    ]
    assert [s.task_seed for s in specs[2:5]] == task_seeds.phase_seeds("warmstart", 0, 3)
    assert not set(s.task_seed for s in specs) & set(task_seeds.phase_seeds("grpo", 0, 100))
    tok = AutoTokenizer.from_pretrained(build_env_tiny(tmp_path_factory.getbasetemp()))
    counts: dict[str, int] = {}
    # tool-call-v0 has no max_requests knob: the target's config reaching it would fail
    rows = demonstrations(cfg, ChatFormat(tok), counts, show_progress=False)
    assert counts["requested"] == 6 and len(rows) + counts["unfinished"] == 6
    texts = [tok.decode(r["input_ids"]) for r in rows]
    assert any("## Request 2" in t for t in texts)  # a desk-lite episode
    assert any("one precise tool call" in t for t in texts)  # a tool-call-v0 one

    path = tmp_path / "ws.yaml"
    path.write_text("warmstart:\n  mix_demonstrations:\n    trace/tool-call-v0: 4\n")
    assert load_config(WarmstartConfig, str(path)).mix_demonstrations == {"trace/tool-call-v0": 4}


def test_mixed_in_demonstrations_are_checked(tmp_path_factory):
    import pytest

    from trace_train.config import ConfigError

    for mix, message in [
        ({"trace/tool-call-v0": 0}, r"must be a count in \[1, "),
        ({"trace/tool-call-v0": "4"}, r"must be a count"),
        ({"trace/precondition-v0": 2}, "names env_id"),
        (["trace/tool-call-v0"], "mapping of environment id to count"),
    ]:
        with pytest.raises(ConfigError, match=message):
            WarmstartConfig(model="unused", mix_demonstrations=mix)
    with pytest.raises(ValueError, match=r"unknown env id\(s\) \['trace/no-such-v0'\]"):
        demonstrations(
            WarmstartConfig(model="unused", mix_demonstrations={"trace/no-such-v0": 2}), None
        )
