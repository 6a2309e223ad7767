"""Batched decoding from reused KV caches, with per-phase precision and a phase clock.

The rollout engine keeps each sequence's KV cache between the turns of an episode and shares
a prompt's cache between the rollouts of a GRPO group (:class:`trace_train.rollout._KVStore`).
:func:`decode_batch` then generates for a whole batch of such sequences at once:

1. **prefill**, one row at a time: each row encodes only the tokens its cached prefix lacks
   (an environment reply, or one token when another row of the group already encoded the
   prompt). Rows differ in cached and new lengths, and a prefill is a matrix product over
   its tokens already, so batching it would only add padding;
2. **decode**, all rows together: the rows' caches are left-padded to one length and stacked,
   an attention mask hides the padding and explicit position ids keep each row's positions,
   so a row's tokens are those it would get alone (greedy: identical, tested). A row leaves
   the batch at its stop token or token limit, and its cache (padding stripped) goes back to
   the store for its next turn.

On a CPU decoding one token reads every weight once whatever the batch, so a batch of 8 costs
little more than a batch of 1 (SmolLM2-135M, one thread: ~16 tokens/s at batch 1, 59-70 at
batch 8; ``benchmarks/decode_speed.py``).

Precision is chosen per phase (:func:`resolve_phase_dtypes`): a prefill is compute-bound and
runs ~1.8x faster in bfloat16 on CPUs with AVX512-BF16/AMX, while a small-batch decode is
bound by memory traffic and ran slower in bfloat16 (casting the float32 weights every step).
``auto`` picks bfloat16 for the prefill where the CPU supports it and float32 for the decode.
The weights stay float32 (they are being trained); bfloat16 runs under ``torch.autocast``
and the cache is kept in float32.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

log = logging.getLogger("trace_train")

PHASE_DTYPES = ("auto", "float32", "bfloat16")
PHASES = ("prefill", "decode", "env")


class PhaseClock:
    """Seconds spent per phase (``prefill``, ``decode``, ``env``, ``backward``) since the last
    :meth:`flush`; the training log turns them into shares of a step's wall time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.notes: dict[str, Any] = {}

    @contextlib.contextmanager
    def time(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def flush(self) -> dict[str, float]:
        out, self.seconds = dict(self.seconds), defaultdict(float)
        return out


def bf16_supported(device: Any = "cpu") -> bool:
    """Whether bfloat16 matrix products are native here (CUDA with bf16, or a CPU with
    AVX512-BF16 or AMX); elsewhere they are emulated and slower than float32."""
    import torch

    if str(device).startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def resolve_phase_dtypes(
    prefill: str = "auto", decode: str = "auto", device: Any = "cpu"
) -> dict[str, str]:
    """``{"prefill": ..., "decode": ...}`` as ``float32`` or ``bfloat16``.

    ``auto``: bfloat16 prefill where :func:`bf16_supported`, float32 decode on a CPU (measured
    faster there at batch 1-8), bfloat16 decode on a GPU. An explicit ``bfloat16`` falls back
    to float32, with a log line, where bfloat16 is not native."""
    for name, value in (("prefill_dtype", prefill), ("decode_dtype", decode)):
        if value not in PHASE_DTYPES:
            raise ValueError(f"{name}={value!r}; use one of {PHASE_DTYPES}")
    native = bf16_supported(device)
    gpu = str(device).startswith("cuda")
    choice = {
        "prefill": ("bfloat16" if native else "float32") if prefill == "auto" else prefill,
        "decode": ("bfloat16" if native and gpu else "float32") if decode == "auto" else decode,
    }
    for phase, value in choice.items():
        if value == "bfloat16" and not native:
            log.info("%s in bfloat16 is not native on %s: using float32", phase, device)
            choice[phase] = "float32"
    return choice


def _autocast(model: Any, dtype: str) -> Any:
    """bfloat16 autocast for a float32 model; nothing otherwise (a bfloat16 model already
    runs in bfloat16, and float32 means the model's own precision)."""
    import torch

    if dtype != "bfloat16" or model.dtype != torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(model.device.type, dtype=torch.bfloat16)


def sampling_logits(logits: Any, temperature: float, top_p: float) -> Any:
    """The logits :func:`pick` samples from at ``temperature > 0``: scaled by the temperature,
    tokens outside the nucleus (``top_p``) at ``-inf``."""
    import torch

    logits = logits.float() / temperature
    if top_p < 1.0:
        ordered, order = logits.sort(-1, descending=True)
        cum = ordered.softmax(-1).cumsum(-1)
        drop = cum - ordered.softmax(-1) >= top_p  # keep the smallest set reaching top_p
        ordered = ordered.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)
    return logits


def pick(logits: Any, temperature: float, top_p: float, generator: Any = None) -> Any:
    """Next tokens from last-position logits ``(B, V)``: argmax at temperature 0, else nucleus
    sampling (``top_p``) at ``temperature``."""
    import torch

    if temperature <= 0:
        return logits.float().argmax(-1)
    probs = sampling_logits(logits, temperature, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def token_logprobs(logits: Any, tokens: Any, temperature: float, top_p: float) -> list[float]:
    """Log-probability of each picked token under the distribution it was sampled from (the
    behaviour policy's, for an importance ratio); at temperature 0, of the raw logits."""
    scaled = sampling_logits(logits, temperature, top_p) if temperature > 0 else logits.float()
    return scaled.log_softmax(-1).gather(-1, tokens.view(-1, 1)).squeeze(-1).tolist()


def _kv(cache: Any) -> list[tuple[Any, Any]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _new_cache(kv: Sequence[tuple[Any, Any]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=list(kv))


def _forward(model: Any, ids: Any, mask: Any, positions: Any, cache: Any, dtype: str) -> Any:
    with _autocast(model, dtype):
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
    return out.logits[:, -1], getattr(out, "cache", None) or out.past_key_values


def prefill(
    model: Any, ids: list[int], cache: Any, cached: int, dtype: str = "float32"
) -> tuple[Any, Any]:
    """Encode ``ids[cached:]`` on top of ``cache`` (``cached`` tokens of ``ids``, or None);
    returns the next-token logits ``(V,)`` and the cache of all of ``ids`` (model precision)."""
    import torch

    device = model.device
    new = torch.tensor([ids[cached:]], device=device)
    mask = torch.ones(1, len(ids), dtype=torch.long, device=device)
    positions = torch.arange(cached, len(ids), device=device).unsqueeze(0)
    logits, cache = _forward(model, new, mask, positions, cache, dtype)
    if dtype == "bfloat16" and model.dtype == torch.float32:
        # autocast left bfloat16 keys and values: keep the cache in the model's precision
        cache = _new_cache([(k.float(), v.float()) for k, v in _kv(cache)])
    return logits[0], cache


def decode_batch(
    model: Any,
    rows: Sequence[list[int]],
    starts: Sequence[tuple[Any, Any]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    dtype: str = "float32",
    clock: PhaseClock | None = None,
    sampled_logprobs: list[list[float]] | None = None,
) -> list[tuple[list[int], Any, list[int]]]:
    """Generate for every row at once from its prefill (``starts[i] = (logits, cache)``).

    Returns per row ``(new tokens, the row's own cache, the token ids that cache covers)``;
    the new tokens end at the first stop token or after ``max_new_tokens``.
    ``sampled_logprobs``, when given (an empty list), receives per row the log-probability of
    each new token under the distribution it was sampled from (:func:`token_logprobs`)."""
    import torch

    clock = clock or PhaseClock()
    stops = set(stop_ids)
    device = model.device
    n = len(rows)
    first_logits = torch.stack([s[0] for s in starts])
    first = pick(first_logits, temperature, top_p)
    generated = [[int(t)] for t in first.tolist()]
    if sampled_logprobs is not None:
        sampled_logprobs[:] = [
            [lp] for lp in token_logprobs(first_logits, first, temperature, top_p)
        ]
    lengths = [len(r) for r in rows]  # tokens each row's cache holds
    results: list[Any] = [None] * n

    def done(i: int) -> bool:
        return generated[i][-1] in stops or len(generated[i]) >= max_new_tokens

    alive = [i for i in range(n) if not done(i)]
    for i in range(n):
        if i not in alive:
            results[i] = (generated[i], starts[i][1], rows[i])
    if not alive:
        return results
    with clock.time("decode"):
        width = max(lengths[i] for i in alive)
        layers = len(starts[alive[0]][1].layers)
        padded = []
        for layer in range(layers):
            ks, vs = [], []
            for i in alive:
                k, v = _kv(starts[i][1])[layer]
                pad = width - k.shape[-2]
                ks.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
                vs.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
            padded.append((torch.cat(ks), torch.cat(vs)))
        cache = _new_cache(padded)
        for i in alive:
            starts[i] = (None, None)  # the stacked copy replaces them: free the memory
        while alive:
            width += 1
            ids = torch.tensor([[generated[i][-1]] for i in alive], device=device)
            mask = torch.zeros(len(alive), width, dtype=torch.long, device=device)
            for row, i in enumerate(alive):
                mask[row, width - lengths[i] - 1 :] = 1
            positions = torch.tensor([[lengths[i]] for i in alive], device=device)
            logits, cache = _forward(model, ids, mask, positions, cache, dtype)
            picked = pick(logits, temperature, top_p)
            for row, token in zip(alive, picked.tolist(), strict=True):
                lengths[row] += 1
                generated[row].append(int(token))
            if sampled_logprobs is not None:
                chosen = token_logprobs(logits, picked, temperature, top_p)
                for row, lp in zip(alive, chosen, strict=True):
                    sampled_logprobs[row].append(lp)
            finished = [row for row, i in enumerate(alive) if done(i)]
            if not finished:
                continue
            kv = _kv(cache)
            for row in finished:
                i = alive[row]
                own = [
                    (
                        k[row : row + 1, :, width - lengths[i] :].clone(),
                        v[row : row + 1, :, width - lengths[i] :].clone(),
                    )
                    for k, v in kv
                ]
                results[i] = (generated[i], _new_cache(own), (rows[i] + generated[i])[: lengths[i]])
            keep = [row for row in range(len(alive)) if row not in finished]
            alive = [alive[row] for row in keep]
            if alive:  # drop finished rows and the padding columns no live row needs
                index = torch.tensor(keep, device=device)
                width_now = max(lengths[i] for i in alive)
                cache = _new_cache(
                    [
                        (k[index, :, width - width_now :], v[index, :, width - width_now :])
                        for k, v in kv
                    ]
                )
                width = width_now
    return results
