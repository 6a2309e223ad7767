"""The CPU speed-ups of the rollout engine keep behaviour: the compact tool list and the KV
cache kept across turns (greedy tokens equal to plain batched generation)."""

from __future__ import annotations

from trace_train.rollout import (
    ChatFormat,
    EpisodeSpec,
    _KVStore,
    compact_tool_block,
    hf_generate,
    make_env,
    play_episodes,
)

ENV = "trace/precondition-v0"


def test_compact_tool_prompt_lists_every_tool_in_fewer_characters():
    env = make_env(ENV, max_turns=None, reward_mode="partial", env_kwargs={}, tool_prompt="compact")
    _, info = env.reset(seed=0, options={"split": "eval", "difficulty": 0.0})
    block = compact_tool_block(info["tools"])
    hermes = make_env(ENV, max_turns=None, reward_mode="partial", env_kwargs={})
    _, full = hermes.reset(seed=0, options={"split": "eval", "difficulty": 0.0})
    assert "<tools>" not in info["system_prompt"] and "<tool_call>" in block
    assert info["system_prompt"].endswith(block)  # the environment renders the compact list
    assert all(t["function"]["name"] + "(" in block for t in info["tools"])
    # The instructions are the same in both; only the tool listing differs.
    hermes_listing = len(full["system_prompt"]) - (len(info["system_prompt"]) - len(block))
    assert len(block) < hermes_listing / 2


def test_kv_store_hands_over_own_continuation_and_copies_shared_prefix():
    import torch
    from transformers import DynamicCache

    def cache(n: int) -> DynamicCache:
        c = DynamicCache()
        c.update(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2), 0)
        return c

    store = _KVStore()
    store.put([1, 2, 3], cache(3))
    shared, n = store.take([1, 2, 9])  # another rollout of the same prompt: a cropped copy
    assert n == 2 and shared.get_seq_length() == 2 and len(store.entries) == 1
    own, n = store.take([1, 2, 3, 4, 5])  # the episode's next turn: the entry itself
    assert n == 3 and own.get_seq_length() == 3 and not store.entries
    store.put([1, 2], cache(2))
    store.put([1, 2, 3, 4], cache(4))  # supersedes its prefix
    assert [k for k, _ in store.entries] == [[1, 2, 3, 4]]


def test_cached_generation_matches_batched_generation(tiny_model_dir):
    from trace_train.policies import load_hf

    model, tok = load_hf(tiny_model_dir)
    fmt = ChatFormat(tok)
    specs = [EpisodeSpec(ENV, i % 2, 0.0, "eval") for i in range(3)]  # two share a prompt
    kw = {"max_turns": 3, "max_new_tokens": 6, "max_completion_tokens": 256}
    outs = []
    for reuse in (False, True):
        gen = hf_generate(
            model, tok, fmt.stop_ids, temperature=0.0, reuse_cache=reuse, prefill_dtype="float32"
        )
        outs.append([r.completion_ids for r in play_episodes(gen, fmt, specs, **kw)])
    assert outs[0] == outs[1]
