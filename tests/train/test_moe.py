"""Exactness of the routed mixture: forced routes reproduce peft and the base model exactly."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from trace_train.compose.moe import (
    ExpertSpec,
    MoEConfig,
    RoutedLoRALinear,
    RouterSpec,
    attach_experts,
    load_moe,
    moe_state,
    router_parameters,
    save_moe,
)

TOL = 1e-5


def _base(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _moe(tiny_model_dir, adapters, **router):
    experts = [ExpertSpec(name=n, adapter_dir=d) for n, d in adapters.items()]
    cfg = MoEConfig(tiny_model_dir, experts, RouterSpec(**router))
    return attach_experts(_base(tiny_model_dir), cfg)


def _ids(seed=0, batch=2, seq=12, vocab=400):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, vocab, (batch, seq), generator=g)


@pytest.fixture(scope="module")
def reference_logits(tiny_model_dir, random_adapters):
    """Logits of the plain base and of peft with each adapter active, on the same ids."""
    ids = _ids()
    out = {}
    with torch.no_grad():
        out["base"] = _base(tiny_model_dir)(ids).logits
        for name, path in random_adapters.items():
            peft_model = PeftModel.from_pretrained(_base(tiny_model_dir), path).eval()
            out[name] = peft_model(ids).logits
    return ids, out


@pytest.mark.parametrize("kernel", ["concat_masked", "sorted_segments", "dense"])
@pytest.mark.parametrize("granularity", ["per_block", "global"])
def test_forced_slot_equals_peft_adapter_and_base(
    tiny_model_dir, random_adapters, reference_logits, kernel, granularity
):
    ids, ref = reference_logits
    model = _moe(tiny_model_dir, random_adapters, kernel=kernel, granularity=granularity)
    state = moe_state(model)
    with torch.no_grad():
        for slot in ["base", *random_adapters]:
            with state.forced(slot):
                logits = model(ids).logits
            torch.testing.assert_close(logits, ref[slot], atol=TOL, rtol=0)
    # experts really differ from each other and from the base, so the check above can fail
    assert (ref["alpha"] - ref["base"]).abs().max() > 1e-2
    assert (ref["alpha"] - ref["beta"]).abs().max() > 1e-2


def test_without_base_slot_slots_shift(tiny_model_dir, random_adapters, reference_logits):
    ids, ref = reference_logits
    model = _moe(tiny_model_dir, random_adapters, include_base_slot=False)
    state = moe_state(model)
    assert state.config.slot_names == ["alpha", "beta", "gamma"]
    with torch.no_grad(), state.forced(1):
        torch.testing.assert_close(model(ids).logits, ref["beta"], atol=TOL, rtol=0)


def test_every_adapted_linear_replaced_and_all_weights_frozen(tiny_model_dir, random_adapters):
    model = _moe(tiny_model_dir, random_adapters)
    routed = [m for m in model.modules() if isinstance(m, RoutedLoRALinear)]
    assert len(routed) == 2 * 7  # union of targets covers all 7 linears in 2 blocks
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert set(map(id, trainable)) == set(map(id, router_parameters(model)))
    specs = {e.name: e for e in moe_state(model).config.experts}
    assert specs["beta"].rank == 8 and "gate_proj" in specs["beta"].target_modules


def _learned_router(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    for r in router_parameters(model):
        r.data = torch.randn(r.shape, generator=g)
    return model


def test_learned_routing_mixes_experts_per_token_and_kernels_agree(tiny_model_dir, random_adapters):
    ids = _ids(seq=24)
    outs = {}
    for kernel in ["concat_masked", "sorted_segments", "dense"]:
        model = _learned_router(_moe(tiny_model_dir, random_adapters, kernel=kernel))
        state = moe_state(model)
        state.record = True
        with torch.no_grad():
            outs[kernel] = model(ids).logits
        slots = torch.cat([s.flatten() for s in state.recorded[0]])
    assert len(slots.unique()) >= 3  # random routers really mix slots within a sequence
    torch.testing.assert_close(outs["sorted_segments"], outs["concat_masked"], atol=TOL, rtol=0)
    torch.testing.assert_close(outs["dense"], outs["concat_masked"], atol=TOL, rtol=0)


def test_save_load_round_trip_identical_logits(tiny_model_dir, random_adapters, tmp_path):
    from transformers import AutoTokenizer

    model = _learned_router(_moe(tiny_model_dir, random_adapters))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    save_moe(model, tmp_path / "moe", tokenizer=tok)
    assert (tmp_path / "moe" / "experts" / "beta" / "adapter_model.safetensors").is_file()
    card = (tmp_path / "moe" / "README.md").read_text()
    assert "| 2 | beta |" in card
    loaded, tok2 = load_moe(tmp_path / "moe")
    ids = _ids(seq=20)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert tok2("hello").input_ids == tok("hello").input_ids
    # saving the loaded model again (experts already in place) keeps it loadable
    save_moe(loaded, tmp_path / "moe")
    again, _ = load_moe(tmp_path / "moe")
    with torch.no_grad():
        assert torch.equal(again(ids).logits, loaded(ids).logits)


def test_kv_cached_generation_equals_uncached(tiny_model_dir, random_adapters):
    model = _learned_router(_moe(tiny_model_dir, random_adapters), seed=3)
    ids = _ids(batch=1, seq=10)
    kw = dict(max_new_tokens=12, do_sample=False, min_new_tokens=12)
    with torch.no_grad():
        cached = model.generate(ids, use_cache=True, **kw)
        uncached = model.generate(ids, use_cache=False, **kw)
        assert torch.equal(cached, uncached)
        # and step logits: incremental decoding with a cache equals one full forward
        full = model(cached).logits[:, -1]
        out = model(cached[:, :-1], use_cache=True)
        step = model(cached[:, -1:], cache=out.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, full, atol=TOL, rtol=0)


def test_straight_through_gate_keeps_output_and_trains_router(tiny_model_dir, random_adapters):
    model = _learned_router(_moe(tiny_model_dir, random_adapters))
    ids = _ids()
    with torch.no_grad():
        hard = model(ids).logits
    state = moe_state(model)
    state.straight_through = True
    out = model(ids, labels=ids)
    torch.testing.assert_close(out.logits, hard, atol=TOL, rtol=0)
    out.loss.backward()
    grads = [p.grad for p in router_parameters(model)]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="kernel"):
        RouterSpec(kernel="gather")
    with pytest.raises(ValueError, match="base"):
        ExpertSpec(name="base", adapter_dir="x")
    with pytest.raises(ValueError, match="duplicate"):
        MoEConfig("m", [ExpertSpec("a", "x"), ExpertSpec("a", "y")])


def test_left_padded_batch_generates_like_single_rows(tiny_model_dir, random_adapters):
    """The causal-mean router context ignores padding and survives cached decoding."""
    model = _learned_router(_moe(tiny_model_dir, random_adapters), seed=4)
    short, long = _ids(batch=1, seq=6, seed=5), _ids(batch=1, seq=11, seed=6)
    pad = 3
    ids = torch.cat([torch.cat([torch.full((1, 5), pad), short], 1), long])
    mask = (torch.arange(11) >= torch.tensor([[5], [0]])).long()
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=pad)
    with torch.no_grad():
        batch = model.generate(ids, attention_mask=mask, **kw)
        for row, single in enumerate([short, long]):
            alone = model.generate(single, **kw)
            assert torch.equal(batch[row, -8:], alone[0, -8:])


@pytest.mark.parametrize("granularity", ["per_block", "global"])
def test_stored_caches_resume_routing_exactly(tiny_model_dir, random_adapters, granularity):
    """Episodes of a mixture played from KV caches reused across turns, shared by a group's
    rollouts and decoded as a left-padded batch give the tokens of encoding every turn afresh:
    the causal-mean routing state rides in the cache, so resuming it changes no route."""
    from transformers import AutoTokenizer

    from trace_train.rollout import (
        ChatFormat,
        EpisodeSpec,
        hf_generate,
        play_episodes,
        supports_cache_reuse,
    )

    model = _learned_router(_moe(tiny_model_dir, random_adapters, granularity=granularity), 5)
    assert supports_cache_reuse(model)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.padding_side = "left"
    tok.pad_token = tok.pad_token or tok.eos_token
    fmt = ChatFormat(tok)
    # rows 0 and 2 play one task (a group sharing its prompt's cache), row 1 another
    specs = [EpisodeSpec("trace/precondition-v0", s, 0.0, "eval") for s in (0, 1, 0)]
    kw = {"max_turns": 3, "max_new_tokens": 6, "max_completion_tokens": 256}
    outs = {}
    for reuse, batched in ((False, True), (True, False), (True, True)):
        gen = hf_generate(model, tok, fmt.stop_ids, temperature=0.0, reuse_cache=reuse,
                          batch_decode=batched, prefill_dtype="float32", decode_dtype="float32")  # fmt: skip
        outs[reuse, batched] = [r.completion_ids for r in play_episodes(gen, fmt, specs, **kw)]
    assert outs[True, True] == outs[True, False] == outs[False, True]
    assert len(outs[True, True][0]) > 2 * 6  # several turns, each resumed from its cache
    assert len({tuple(c) for c in outs[True, True]}) >= 2  # the rows differ: tokens say something


def test_a_cache_without_the_routing_state_is_refused(tiny_model_dir, random_adapters):
    model = _learned_router(_moe(tiny_model_dir, random_adapters))
    ids = _ids(batch=1, seq=8)
    with torch.no_grad():
        plain = _base(tiny_model_dir)(ids, use_cache=True).past_key_values
        with pytest.raises(ValueError, match="cannot resume token routing"):
            model(ids[:, -1:], cache=plain)
