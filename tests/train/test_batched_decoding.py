"""Batched decoding from reused KV caches gives the tokens one-at-a-time decoding gives, and
generation prints no deprecation warnings."""

from __future__ import annotations

import warnings

import pytest

from trace_train.decoding import PhaseClock, pick, resolve_phase_dtypes
from trace_train.rollout import ChatFormat, EpisodeSpec, hf_generate, play_episodes

FP32 = {"prefill_dtype": "float32", "decode_dtype": "float32"}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    import torch

    from trace_train.policies import load_hf

    model, tok = load_hf(tiny_model_dir)
    # The tiny random model repeats one token per prompt; noise on its matrices makes
    # greedy continuations vary, so equal outputs say something.
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.add_(torch.randn_like(p) * 0.3)
    return model, tok


def _prompts(tok) -> list[list[int]]:
    texts = [
        "Check the order",
        "Read the table, count the rows and report the answer.",
        "Plan the steps: first look up the user, then the reservation, then pay.",
        "Check the order",  # a GRPO group repeats its prompt: shared prefill
    ]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _gen(model, tok, stops, batch, n, **kw):
    gen = hf_generate(model, tok, stops, temperature=0.0, **{**FP32, **kw})
    return [ids for ids, _ in gen(batch, n)]


def test_batched_greedy_equals_one_at_a_time_with_different_lengths_and_stops(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    assert len({len(p) for p in prompts}) == 3  # different prompt lengths
    free = _gen(model, tok, [-1], prompts, 12, batch_decode=False)
    # Stop tokens taken from the free-running outputs make rows end at different steps.
    stops = sorted({free[0][3], free[1][7]})
    one = _gen(model, tok, stops, prompts, 12, batch_decode=False)
    both = _gen(model, tok, stops, prompts, 12, batch_decode=True)
    plain = _gen(model, tok, stops, prompts, 12, reuse_cache=False)
    assert both == one == plain
    assert len({len(r) for r in one}) >= 2, "rows should stop at different points"
    assert any(r[-1] in stops for r in one)


def test_batched_episodes_equal_unbatched_across_turns(tiny):
    model, tok = tiny
    fmt = ChatFormat(tok)
    # Rows 0 and 2 play one task (a group), row 1 another: prompts of different lengths, and
    # later turns start from each row's cache kept between turns.
    specs = [EpisodeSpec("trace/precondition-v0", s, 0.0, "eval") for s in (0, 1, 0)]
    kw = {"max_turns": 3, "max_new_tokens": 6, "max_completion_tokens": 256}
    outs = []
    for batched in (False, True):
        gen = hf_generate(model, tok, fmt.stop_ids, temperature=0.0, batch_decode=batched, **FP32)
        outs.append([r.completion_ids for r in play_episodes(gen, fmt, specs, **kw)])
    assert outs[0] == outs[1]
    assert len(outs[0][0]) > 2 * 6  # several turns were played


def test_sampled_batched_generation_respects_limits_and_clock(tiny):
    model, tok = tiny
    clock = PhaseClock()
    gen = hf_generate(model, tok, [-1], temperature=1.0, top_p=0.9, clock=clock)
    out = gen(_prompts(tok), 5)
    assert [len(ids) for ids, _ in out] == [5, 5, 5, 5]
    seconds = clock.flush()
    assert seconds["prefill"] > 0 and seconds["decode"] > 0
    assert clock.notes["decode_dtype"] in ("float32", "bfloat16")


def test_top_p_keeps_only_the_nucleus():
    import torch

    logits = torch.tensor([[5.0, 4.0, -10.0, -10.0]])
    draws = {int(pick(logits, 1.0, 0.5)) for _ in range(50)}
    assert draws == {0}  # token 0 alone holds > 50 % of the mass
    assert int(pick(logits, 0.0, 1.0)) == 0


def test_phase_dtypes_validate_and_fall_back(monkeypatch):
    import trace_train.decoding as decoding

    with pytest.raises(ValueError, match="prefill_dtype"):
        resolve_phase_dtypes("half", "auto")
    monkeypatch.setattr(decoding, "bf16_supported", lambda device="cpu": False)
    assert resolve_phase_dtypes("bfloat16", "auto") == {"prefill": "float32", "decode": "float32"}
    monkeypatch.setattr(decoding, "bf16_supported", lambda device="cpu": True)
    assert resolve_phase_dtypes("auto", "auto") == {"prefill": "bfloat16", "decode": "float32"}


def test_bf16_prefill_generates_and_keeps_a_float32_cache(tiny, monkeypatch):
    import torch

    import trace_train.decoding as decoding

    model, tok = tiny
    monkeypatch.setattr(decoding, "bf16_supported", lambda device="cpu": True)
    with torch.inference_mode():
        _, cache = decoding.prefill(model, _prompts(tok)[1], None, 0, "bfloat16")
    assert all(k.dtype == torch.float32 for k, _ in decoding._kv(cache))
    out = _gen(model, tok, [-1], _prompts(tok), 4, prefill_dtype="bfloat16")
    assert [len(r) for r in out] == [4, 4, 4, 4]


def test_generation_emits_no_deprecation_warnings(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for reuse in (True, False):
            gen = hf_generate(model, tok, [-1], temperature=0.0, reuse_cache=reuse)
            gen(prompts, 3)
            gen([p + [5, 6] for p in prompts], 3)  # the cached continuation path
    bad = [w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    assert not bad, [str(w.message) for w in bad]


def test_dtype_settings_are_checked_in_configs():
    from trace_train.config import ConfigError, EvalConfig, GRPORunConfig

    with pytest.raises(ConfigError, match="prefill_dtype"):
        GRPORunConfig(prefill_dtype="half")
    with pytest.raises(ConfigError, match="decode_dtype"):
        EvalConfig(decode_dtype="fp8")
    assert GRPORunConfig(decode_dtype="bfloat16").decode_dtype == "bfloat16"
