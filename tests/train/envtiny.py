"""A tiny random model whose tokenizer was trained on trace_gym text (for trace_train tests).

The shared ``tiny_model_dir`` tokenizer is trained on a ten-line corpus, so a trace_gym system
prompt (tool list included) costs ~3,000 tokens and a GRPO step ~15 s on one thread. Training
the byte-level BPE on a few environment prompts and oracle turns cuts that several-fold;
everything else (random Qwen2 weights, ChatML template, tool tokens) comes from
``trace_train.tiny``.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

ENV_ID = "trace/precondition-v0"
_BUILT: dict[str, str] = {}


def env_corpus(n: int = 12) -> list[str]:
    import trace_gym  # noqa: F401
    from trace_train.rollout import action_text

    env = gym.make(ENV_ID, tool_prompt="hermes", disable_env_checker=True)
    texts = []
    for seed in range(n):
        for hint in (False, True):
            _, info = env.reset(seed=seed, options={"difficulty": seed / n, "hint": hint})
            texts += [m["content"] for m in info["messages"]]
        for action in env.unwrapped.oracle_actions():
            texts.append(action_text(action))
            _, _, term, trunc, info = env.step(action)
            texts += [str(m.get("content")) for m in info["messages"][-3:]]
            if term or trunc:
                break
    return texts


def build_env_tiny(root: Path) -> str:
    """Build once per session (cached by ``root``); returns the model folder."""
    if str(root) in _BUILT:
        return _BUILT[str(root)]
    from trace_train.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer

    tok = build_tiny_tokenizer(env_corpus(), vocab_size=3000)
    model = build_tiny_model(tok, TinyModelConfig(vocab_size=3000, max_position_embeddings=4096))
    out = root / "env_tiny"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    _BUILT[str(root)] = str(out)
    return str(out)
