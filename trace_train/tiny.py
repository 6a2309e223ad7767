"""Tiny random causal LMs with an in-process tokenizer, for tests and offline demos.

Nothing is downloaded: a byte-level BPE tokenizer is trained in a few milliseconds on a small
built-in corpus (or one you pass), wrapped in transformers' ``PreTrainedTokenizerFast``, and a
Qwen2- or Qwen3-style model with random weights is built from a config sized to it. The tokenizer carries a chat template and the
tool-call marker tokens (``<tool_call>`` ...) as ordinary added tokens, so TRL's tool-calling
paths can parse what the model emits; with ``chat_template="qwen3"`` it gets TRL's bundled Qwen3
template, which TRL's ``environment_factory`` recognises.

Example::

    model, tok = build_tiny_model_and_tokenizer("/tmp/tiny")   # also saved there
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                  add_generation_prompt=True, return_tensors="pt")
    model.generate(ids, max_new_tokens=8)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

#: Special tokens of the ChatML family; ``<|im_end|>`` ends an assistant turn (the EOS).
SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>")

#: Tool-call markers added as ordinary (non-special) tokens so that decoding keeps them in
#: the text and TRL's response parser can find them.
TOOL_TOKENS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<tools>",
    "</tools>",
)

#: Minimal ChatML template: one block per message, then the assistant header on request.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_DEFAULT_CORPUS: tuple[str, ...] = (
    "<|im_start|>system\nYou are a helpful assistant that uses tools.<|im_end|>\n",
    "<|im_start|>user\nBook a flight from Paris to Rome on Monday.<|im_end|>\n",
    "<|im_start|>assistant\n<tool_call>\n"
    '{"name": "search_flights", "arguments": {"origin": "Paris", "destination": "Rome"}}\n'
    "</tool_call><|im_end|>\n",
    "<|im_start|>user\n<tool_response>\n"
    '{"flights": [{"id": 12, "price": 99}]}\n</tool_response><|im_end|>\n',
    "Check the precondition before you act: is the account verified? Is the order cancellable?",
    "Read the table, count the rows, compare the totals and report the answer.",
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { } : ; , .",
    "def get_order(order_id: int) -> dict: return orders[order_id]",
    "Plan the steps: first look up the user, then the reservation, then update the payment.",
    "yes no true false null ok error done answer result status name arguments tool call",
)


@dataclass
class TinyModelConfig:
    """Size and flavour of a tiny random causal LM.

    Defaults give a ~100k-parameter model that builds in well under a second on one CPU thread.
    """

    vocab_size: int = 512
    """Target BPE vocabulary size (special and tool tokens included); the trained vocabulary can
    be smaller on a small corpus. At least 300 (256 bytes plus specials and a few merges)."""
    hidden_size: int = 64
    """Model width; must be divisible by ``num_attention_heads``."""
    intermediate_size: int = 128
    """MLP width."""
    num_hidden_layers: int = 2
    """Number of decoder blocks."""
    num_attention_heads: int = 4
    """Query heads."""
    num_key_value_heads: int = 2
    """Key/value heads (grouped-query attention); must divide ``num_attention_heads``."""
    max_position_embeddings: int = 1024
    """Longest sequence the rotary embedding is configured for."""
    architecture: Literal["qwen2", "qwen3"] = "qwen2"
    """``qwen2`` (Qwen2ForCausalLM) or ``qwen3`` (Qwen3ForCausalLM, with q/k norms)."""
    chat_template: Literal["chatml", "qwen3"] = "chatml"
    """``chatml``: a minimal ChatML template. ``qwen3``: TRL's bundled Qwen3 template (tools,
    thinking blocks), which TRL's ``environment_factory`` can parse tool calls with."""
    seed: int = 0
    """Seed for the random weights (a local generator; the global RNG is restored)."""

    def __post_init__(self) -> None:
        if self.vocab_size < 300:
            raise ValueError(f"vocab_size={self.vocab_size} is too small; use at least 300")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_hidden_layers < 1:
            raise ValueError(f"num_hidden_layers={self.num_hidden_layers}; use at least 1")
        if self.architecture not in ("qwen2", "qwen3"):
            raise ValueError(f"architecture={self.architecture!r}; use 'qwen2' or 'qwen3'")
        if self.chat_template not in ("chatml", "qwen3"):
            raise ValueError(f"chat_template={self.chat_template!r}; use 'chatml' or 'qwen3'")


def qwen3_chat_template() -> str:
    """Return TRL's bundled Qwen3 chat template text (``trl/chat_templates/qwen3.jinja``)."""
    import trl

    path = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    return path.read_text(encoding="utf-8")


def build_tiny_tokenizer(
    corpus: Iterable[str] | None = None,
    *,
    vocab_size: int = 512,
    chat_template: Literal["chatml", "qwen3"] = "chatml",
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer in process and wrap it for transformers.

    Byte-level means every string encodes (no unknown token) and decodes back exactly.
    EOS and the chat-turn end are ``<|im_end|>``; padding is ``<pad>`` on the left, as GRPO
    generation needs.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) if corpus is not None else _DEFAULT_CORPUS, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>", padding_side="left"
    )
    hf.add_tokens(list(TOOL_TOKENS))  # ordinary tokens: kept by decode(skip_special_tokens=True)
    hf.chat_template = qwen3_chat_template() if chat_template == "qwen3" else CHATML_TEMPLATE
    return hf


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast, config: TinyModelConfig | None = None
) -> PreTrainedModel:
    """Build a random Qwen2/Qwen3 causal LM sized to ``tokenizer`` (fp32, eval mode).

    Word embeddings are tied to the LM head (fewer parameters); generation stops at
    ``<|im_end|>`` and pads with ``<pad>``.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cfg = config or TinyModelConfig()
    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    if cfg.architecture == "qwen3":
        model_config = Qwen3Config(head_dim=cfg.hidden_size // cfg.num_attention_heads, **kwargs)
        model_cls = Qwen3ForCausalLM
    else:
        model_config = Qwen2Config(**kwargs)
        model_cls = Qwen2ForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = model_cls(model_config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model.eval()


def build_tiny_model_and_tokenizer(
    out_dir: str | Path | None = None,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 64,
    layers: int = 2,
    corpus: Iterable[str] | None = None,
    architecture: Literal["qwen2", "qwen3"] = "qwen2",
    chat_template: Literal["chatml", "qwen3"] = "chatml",
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Build a tiny random model and its tokenizer; save both to ``out_dir`` if given.

    The saved folder loads with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
    ``AutoTokenizer.from_pretrained(out_dir)``, offline. Same arguments give identical weights.
    """
    cfg = TinyModelConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        architecture=architecture,
        chat_template=chat_template,
        seed=seed,
    )
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=cfg.vocab_size, chat_template=chat_template)
    model = build_tiny_model(tokenizer, cfg)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    return model, tokenizer
