"""Multi-turn trace_gym episodes played by a causal LM, token in, token out.

One engine serves training and evaluation, so a model is scored on exactly the text it was
trained on. An episode is kept as token ids:

* ``prompt_ids``: the chat template applied to the **hint-free** system prompt and the
  customer's opening message, ending with the assistant header;
* ``completion_ids``: every assistant turn as generated (``env_mask`` 1), with the
  environment's replies between them (tool results, the scripted customer, error notes) as a
  user turn (``env_mask`` 0, excluded from the loss by TRL).

Hinted rollouts are *generated* from the hinted system prompt (``gen_prompt_ids``) but report
the hint-free ``prompt_ids``: the GRPO update therefore learns the good actions conditioned on
the prompt the model sees at evaluation time (the released TRACE trainer's
``_swap_hint_prompts``, github.com/ScalingIntelligence/TRACE).

Environment turns are rendered through the model's own chat template (the pieces around a
user message are cut out of one template call with placeholders), so any ChatML-, Llama- or
Gemma-style template works. Tools reach the model through the system prompt, which also
serves templates that ignore ``tools=`` (SmolLM2's): ``tool_prompt="hermes"`` lists every tool's
full JSON schema (trace_gym's rendering, what Qwen-style models are tuned on);
``tool_prompt="compact"`` lists one ``name(arg: type, opt?: type): purpose`` line per tool and
the same ``<tool_call>`` convention, 3-4x fewer prompt tokens (service-desk: 5,142 -> ~1,500
for SmolLM2), which is what makes small models trainable on a CPU.

Environments are built in process (``gym.make``) or, given ``trace-gym serve`` endpoints
(:class:`ServedEnvs`), opened as OpenEnv sessions on them, round-robin, with the same
constructor arguments; the episode is the same either way. An episode whose environment fails
the harness rather than the agent (an endpoint lost mid-episode, or an environment's own
``internal_error`` / ``infra_error``) is a *harness fault* (``Rollout.fault``): training masks
it and evaluation leaves it out of the rates, instead of scoring it 0.

Generation (:func:`hf_generate`) keeps each sequence's KV cache between the turns of an episode
and shares it between rollouts that start alike (a GRPO group plays one prompt), so a turn
only encodes the environment's reply instead of the whole conversation again; the rows of a
batch (a group, an evaluation batch) then decode together (:mod:`trace_train.decoding`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import trace_gym  # noqa: F401  (registers the trace/* ids)
from trace_gym.core.prompts import (  # noqa: F401  (compact_tool_block: re-exported)
    TOOL_PROMPT_STYLES,
    compact_tool_block,
)
from trace_train.decoding import PhaseClock, decode_batch, prefill, resolve_phase_dtypes
from trace_train.quiet import quiet

#: ``(batch of token-id prefixes, max new tokens) -> [(new ids, their logprobs or None)]``
Generate = Callable[[list[list[int]], int], list[tuple[list[int], list[float] | None]]]

_S, _U, _A, _X = "\x02SYS\x02", "\x02USR\x02", "\x02AST\x02", "\x02ENV\x02"
MIN_TURN_TOKENS = 8
"""An episode whose remaining token budget is below this ends (the agent says nothing more)."""
ENDPOINT_LOST = "endpoint_lost"
"""``end_reason`` of an episode whose served environment stopped answering mid-episode."""
HARNESS_FAULTS = ("internal_error", "infra_error", ENDPOINT_LOST)
"""End reasons that are the harness's failure, not the agent's: masked, never scored 0."""


@dataclass(frozen=True)
class EpisodeSpec:
    """Which task one rollout plays."""

    env_id: str
    task_seed: int
    difficulty: float
    split: str = "train"
    hint: bool = False

    def key(self) -> str:
        """A stable text key (the GRPO dataset's ``prompt``): rollouts with equal keys form a
        group and play the same task."""
        return f"{self.env_id}|{self.split}|{self.difficulty:.4f}|{self.task_seed}"

    @classmethod
    def from_key(cls, key: str, hint: bool = False) -> EpisodeSpec:
        env_id, split, difficulty, seed = key.rsplit("|", 3)
        return cls(env_id, int(seed), float(difficulty), split, hint)


@dataclass
class Rollout:
    """One finished episode, as token ids and as a trace_gym episode record."""

    spec: EpisodeSpec
    prompt_ids: list[int]
    gen_prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    reward: float = 0.0
    success: bool = False
    record: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    """Why the harness failed this episode (:data:`HARNESS_FAULTS`), or ``None``."""

    @property
    def model_tokens(self) -> int:
        return sum(self.env_mask)

    @property
    def env_tokens(self) -> int:
        return len(self.env_mask) - sum(self.env_mask)


class ChatFormat:
    """Token-level pieces of a chat template: prompt, end of an assistant turn, an env turn."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        msgs = [
            {"role": "system", "content": _S},
            {"role": "user", "content": _U},
            {"role": "assistant", "content": _A},
            {"role": "user", "content": _X},
        ]
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        after_assistant = text[text.index(_A) + len(_A) :]
        # e.g. "<|im_end|>\n<|im_start|>user\n" and "<|im_end|>\n<|im_start|>assistant\n"
        self.close_and_open, self.after_env = after_assistant.split(_X)
        specials = sorted(
            {t for t in tokenizer.all_special_tokens if t}
            | {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()}
            | {tokenizer.eos_token},
            key=len,
            reverse=True,
        )
        # The token that ends an assistant turn (<|im_end|>, <end_of_turn>, ...): generation
        # stops there, and an env turn that follows a clean stop starts right after it.
        self.turn_end = next((t for t in specials if self.close_and_open.startswith(t)), None)
        stop = {tokenizer.eos_token_id}
        if self.turn_end is not None:
            stop.add(tokenizer.convert_tokens_to_ids(self.turn_end))
        self.stop_ids = sorted(i for i in stop if i is not None)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, system: str, user: str) -> list[int]:
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return self.encode(text)

    def env_turn_ids(self, content: str, ended_cleanly: bool) -> list[int]:
        """The environment's reply as a user turn, then the next assistant header. After a
        turn cut by the token limit the assistant turn is closed first."""
        prefix = self.close_and_open
        if ended_cleanly and self.turn_end is not None:
            prefix = prefix[len(self.turn_end) :]
        return self.encode(prefix + content + self.after_env)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def env_reply_text(messages: list[dict[str, Any]]) -> str:
    """What the model reads after its turn: tool results in Hermes ``<tool_response>`` blocks,
    the customer's reply and environment notes as plain text."""
    parts = []
    for m in messages:
        if m["role"] == "tool":
            parts.append(f"<tool_response>\n{m['content']}\n</tool_response>")
        else:
            parts.append(str(m.get("content") or ""))
    return "\n".join(parts)


TOOL_PROMPTS = tuple(s for s in TOOL_PROMPT_STYLES if s != "none")
"""Tool listings a model's prompt can carry (trace_gym renders both)."""


def make_env(
    env_id: str,
    *,
    max_turns: int | None,
    reward_mode: str,
    env_kwargs: dict,
    tool_prompt: str = "hermes",
) -> gym.Env:
    """A trace_gym environment whose system prompt lists the tools in ``tool_prompt``'s
    style (:mod:`trace_gym.core.prompts`)."""
    if tool_prompt not in TOOL_PROMPTS:
        raise ValueError(f"tool_prompt={tool_prompt!r}; use one of {TOOL_PROMPTS}")
    kwargs = {"tool_prompt": tool_prompt, "reward_mode": reward_mode, **env_kwargs}
    if max_turns is not None:
        kwargs["max_turns"] = max_turns
    return gym.make(env_id, disable_env_checker=True, **kwargs)


class ServedEnvs:
    """Environments from ``trace-gym serve`` endpoints, one OpenEnv session per episode.

    ``urls`` may serve different environment ids (each server says which in ``/metadata``);
    :meth:`open` takes the endpoints serving the episode's id in turn (round-robin). An
    endpoint that does not answer is skipped, and tried again at the next episode (a restarted
    server rejoins by itself); when none answers for ``reconnect_s`` seconds, one error names
    them. The shared token comes from ``$TRACE_GYM_SERVE_TOKEN``. Needs ``openenv-core`` (the
    ``serve`` extra)."""

    def __init__(self, urls: Sequence[str], reconnect_s: float = 30.0) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.reconnect_s = reconnect_s
        self.serves: dict[str, str] = {}  # url -> env id, learnt from /metadata
        self.turn = 0

    def open(self, env_id: str, env_kwargs: dict[str, Any], seed: int, options: dict) -> Any:
        """A reset session of ``env_id`` on the next endpoint that answers:
        ``(env, (obs, info))``."""
        import time

        from trace_gym.serving.client import RemoteEnv, server_metadata
        from trace_gym.serving.protocol import ServeError

        deadline, errors = time.monotonic() + self.reconnect_s, {}
        while True:
            for url in self._rotation(env_id, server_metadata, errors):
                try:
                    env = RemoteEnv(url, env_kwargs=env_kwargs)
                except ServeError as exc:
                    errors[url] = str(exc)
                    continue
                try:
                    return env, env.reset(seed=seed, options=options)
                except ServeError as exc:
                    errors[url] = str(exc)
                    env.close()
            if time.monotonic() > deadline:
                raise ServeError(
                    f"no endpoint serving {env_id} answered within {self.reconnect_s:.0f} s: "
                    + "; ".join(f"{u}: {e}" for u, e in errors.items())
                )
            time.sleep(0.5)

    def _rotation(self, env_id: str, metadata: Callable, errors: dict[str, str]) -> list[str]:
        for url in self.urls:
            if url not in self.serves:
                try:
                    self.serves[url] = metadata(url, timeout_s=5.0)["name"]
                except Exception as exc:  # an endpoint down now is asked again next time
                    errors[url] = str(exc)
        mine = [u for u in self.urls if self.serves.get(u) == env_id]
        if not mine and len(self.serves) == len(self.urls):
            raise ValueError(
                f"none of the endpoints serves {env_id}: "
                + ", ".join(f"{u} serves {e}" for u, e in self.serves.items())
            )
        self.turn += 1
        start = self.turn % len(mine) if mine else 0
        return mine[start:] + mine[:start]


# ---------------------------------------------------------------------------------------------
# Generation backends
# ---------------------------------------------------------------------------------------------
class _KVStore:
    """KV caches of sequences already encoded, keyed by their token ids.

    A request reuses the entry sharing its longest prefix: an episode's next turn extends its
    own cache (taken without a copy, the extension replaces it), a rollout whose prompt another
    one already encoded gets a cropped copy. Only "leaves" are kept (an entry that is a prefix
    of a newer one is dropped: the newer one serves every request it would), so memory stays
    at about one cache per live episode. A store lives for one batch of episodes, i.e. one set
    of weights."""

    def __init__(self, max_entries: int = 64) -> None:
        self.entries: list[tuple[list[int], Any]] = []
        self.max_entries = max_entries

    def best(self, ids: list[int]) -> tuple[int, int]:
        """Index and shared length of the entry sharing the longest prefix with ``ids``, capped
        to leave one token to encode; ``(-1, 0)`` when none shares anything."""
        best, best_len = -1, 0
        for i, (key, _) in enumerate(self.entries):
            n = _common_prefix(key, ids)
            if n > best_len:
                best, best_len = i, n
        usable = min(best_len, len(ids) - 1)
        return (best, usable) if best >= 0 and usable >= 1 else (-1, 0)

    def take(self, ids: list[int], *, copy_only: bool = False) -> tuple[Any, int]:
        """A cache of a prefix of ``ids`` (leaving at least one token to encode) and its
        length; ``(None, 0)`` when nothing is shared. With ``copy_only`` the entry stays (it
        is still in use elsewhere) and a copy is returned."""
        best, usable = self.best(ids)
        if best < 0:
            return None, 0
        key, cache = self.entries[best]
        if usable == len(key) and not copy_only:  # own continuation: hand the cache over
            del self.entries[best]
        else:
            cache = copy.deepcopy(cache)
            cache.crop(usable - cache.get_seq_length())  # negative: tokens to drop
        return cache, usable

    def put(self, ids: list[int], cache: Any) -> None:
        self.entries = [(k, c) for k, c in self.entries if _common_prefix(k, ids) < len(k)]
        self.entries.append((ids, cache))
        del self.entries[: -self.max_entries]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def supports_cache_reuse(model: Any) -> bool:
    """Whether a stored KV cache can be handed to a later ``generate`` call of this model.

    Not for sliding-window attention (Gemma 3, Mistral): such a cache keeps only the last
    window of tokens and cannot be cropped back to a shared prefix, so keying it by the
    sequence it saw would be wrong. (A token-level mixture's routing state rides in the cache
    as extra layers, ``trace_train.compose.moe.layers``, so its caches are reused too.)
    """
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return not any("sliding" in str(kind) for kind in layer_types)
    return not (
        getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    )


def hf_generate(
    model: Any,
    tokenizer: Any,
    stop_ids: list[int],
    *,
    temperature: float,
    top_p: float = 1.0,
    reuse_cache: bool | None = None,
    batch_decode: bool = True,
    prefill_dtype: str = "auto",
    decode_dtype: str = "auto",
    clock: PhaseClock | None = None,
    with_logprobs: bool = False,
) -> Generate:
    """A :data:`Generate` over the model that stops at the turn end.

    ``with_logprobs``: also return each new token's log-probability under the distribution it
    was sampled from (temperature, ``top_p``): the behaviour policy's, which an importance
    ratio for hinted rollouts divides by (``trace_train.grpo``).

    With ``reuse_cache`` (default: :func:`supports_cache_reuse`) each sequence starts from the
    longest cached prefix (:class:`_KVStore`) and only encodes what is new: on a CPU,
    encoding the whole conversation again every turn costs far more than anything else
    (SmolLM2-135M, one thread: ~3.5 ms per prompt token, and a service-desk prompt is ~1,500
    tokens). The rows are then decoded together (:func:`trace_train.decoding.decode_batch`;
    ``batch_decode=False`` decodes them one at a time, for comparison). Without it, the batch
    is left-padded and handed to ``model.generate``.

    ``prefill_dtype`` / ``decode_dtype``: ``auto``, ``float32`` or ``bfloat16`` per phase
    (:func:`trace_train.decoding.resolve_phase_dtypes`); the choice is in ``clock.notes``.
    """
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    if reuse_cache is None:
        reuse_cache = supports_cache_reuse(model)
    clock = clock if clock is not None else PhaseClock()
    dtypes = resolve_phase_dtypes(prefill_dtype, decode_dtype, model.device)
    clock.notes.update({"prefill_dtype": dtypes["prefill"], "decode_dtype": dtypes["decode"]})
    store = _KVStore()
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
        if temperature > 0
        else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    )

    def plain(batch: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list]]:
        width = max(len(x) for x in batch)
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in batch])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch])
        with clock.time("decode"), quiet():  # e.g. "exceeded the model's maximum length"
            out = model.generate(
                input_ids=ids.to(model.device),
                attention_mask=mask.to(model.device),
                max_new_tokens=max_new_tokens,
                eos_token_id=stop_ids,
                pad_token_id=pad,
                return_dict_in_generate=True,
                output_scores=with_logprobs,  # after the temperature and top-p processors
                **sampling,
            )
        new = out.sequences[:, width:]
        if not with_logprobs:
            return [(row, []) for row in new.tolist()]
        scores = torch.stack(out.scores, 1).float().log_softmax(-1)  # (B, new, V)
        chosen = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return list(zip(new.tolist(), chosen.tolist(), strict=True))

    def start(ids: list[int], shared: _KVStore) -> tuple[Any, Any]:
        # Rows of this batch share prefixes too (a group's prompt): take the longer of what
        # the store and the batch's own prefills offer; the batch's entries are only copied.
        if shared.best(ids)[1] > store.best(ids)[1]:
            cache, cached = shared.take(ids, copy_only=True)
        else:
            cache, cached = store.take(ids)
        with clock.time("prefill"):
            logits, cache = prefill(model, ids, cache, cached, dtypes["prefill"])
        shared.put(ids, cache)
        return logits, cache

    def cached(batch: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list]]:
        shared = _KVStore(max_entries=len(batch))
        groups = [list(range(len(batch)))] if batch_decode else [[i] for i in range(len(batch))]
        rows: list[tuple[list[int], list]] = [([], []) for _ in batch]
        finished: list[tuple[list[int], Any]] = []
        for group in groups:
            starts = [start(batch[i], shared) for i in group]
            logprobs: list[list[float]] | None = [] if with_logprobs else None
            decoded = decode_batch(
                model,
                [batch[i] for i in group],
                starts,
                max_new_tokens,
                stop_ids,
                temperature=temperature,
                top_p=top_p,
                dtype=dtypes["decode"],
                clock=clock,
                sampled_logprobs=logprobs,
            )
            for k, (i, (new, cache, key)) in enumerate(zip(group, decoded, strict=True)):
                finished.append((key, cache))
                rows[i] = (new, logprobs[k] if logprobs is not None else [])
        # Stored only now: a handed-over cache is extended in place, and this batch's own
        # prefills (``shared``) must stay as they were until every row has started.
        for key, cache in finished:
            store.put(key, cache)
        return rows

    def generate(
        batch: list[list[int]], max_new_tokens: int
    ) -> list[tuple[list[int], list[float] | None]]:
        was_training = model.training
        model.eval()  # generation with the KV cache; restore train mode for the update
        try:
            with torch.inference_mode():
                rows = (
                    cached(batch, max_new_tokens) if reuse_cache else plain(batch, max_new_tokens)
                )
        finally:
            model.train(was_training)
        results = []
        for row, logprobs in rows:
            cut = next((i + 1 for i, t in enumerate(row) if t in stop_ids), len(row))
            results.append((row[:cut], logprobs[:cut] if with_logprobs else None))
        return results

    return generate


def vllm_generate(trainer: Any) -> Generate:
    """A :data:`Generate` over TRL's vLLM backend (``trainer.vllm_generation``, colocate or
    ``trl vllm-serve``). TRL has already pushed the current LoRA weights to vLLM before calling
    the rollout function.

    * Each call is one turn: vLLM is asked for at most ``max_new_tokens`` (TRL's per-call limit,
      ``max_completion_length``, is set for the call and restored), and stops at the turn end
      (``GRPOConfig.generation_kwargs["stop_token_ids"]``, set by ``trace_train.grpo``).
    * Server mode under several processes: TRL gathers every process's prompts into one request
      and hands each process back an equal slice, so every process must call it equally often
      with equally many prompts. Processes then advance their episodes in lockstep
      (:func:`play_episodes` asks ``keep_going`` once per turn) and pad their batch to the
      largest; the padding rows' output is dropped.
    """
    backend = trainer.vllm_generation
    lockstep = backend.mode == "server" and trainer.accelerator.num_processes > 1

    def generate(batch: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], list]]:
        rows = list(batch)
        if lockstep:
            from accelerate.utils import gather_object

            width = max(gather_object([len(rows)]))
            rows += [rows[0] if rows else [trainer.processing_class.eos_token_id]] * (
                width - len(rows)
            )
        limit = backend.max_completion_length
        backend.max_completion_length = max_new_tokens
        try:
            _, completions, logprobs, _ = backend.generate(rows, None, 1)
        finally:
            backend.max_completion_length = limit
        out = []
        for ids, lps in list(zip(completions, logprobs, strict=True))[: len(batch)]:
            flat = [lp[0] if isinstance(lp, list) else lp for lp in lps]
            out.append((list(ids)[:max_new_tokens], flat[:max_new_tokens]))
        return out

    if lockstep:

        def keep_going(local_active: bool) -> bool:
            from accelerate.utils import gather_object

            return any(gather_object([local_active]))

        generate.keep_going = keep_going  # type: ignore[attr-defined]
    return generate


# ---------------------------------------------------------------------------------------------
# The episode loop
# ---------------------------------------------------------------------------------------------
@dataclass
class _Live:
    env: gym.Env
    rollout: Rollout
    n_messages: int
    done: bool = False


def play_episodes(
    generate: Generate,
    fmt: ChatFormat,
    specs: Sequence[EpisodeSpec],
    *,
    max_turns: int | None,
    max_new_tokens: int,
    max_completion_tokens: int,
    reward_mode: str = "partial",
    env_kwargs: dict | None = None,
    agent_name: str = "model",
    tool_prompt: str = "hermes",
    clock: PhaseClock | None = None,
    served: ServedEnvs | None = None,
) -> list[Rollout]:
    """Play ``specs`` side by side, one ``generate`` call per turn; return rollouts in the
    order of ``specs``. Time spent in the environments (reset, step, verification) goes to
    ``clock`` as ``env``. With ``served``, the environments are sessions on its endpoints."""
    clock = clock if clock is not None else PhaseClock()
    with clock.time("env"):
        live = [
            _start(s, fmt, max_turns, reward_mode, env_kwargs or {}, tool_prompt, served)
            for s in specs
        ]
    # A generator shared by several processes (vLLM server mode) runs until every process is
    # done: it says so through ``keep_going``; any other one stops with the last live episode.
    keep_going = getattr(generate, "keep_going", bool)
    while keep_going(bool(active := [x for x in live if not x.done])):
        budgets = [max_completion_tokens - len(x.rollout.completion_ids) for x in active]
        n_new = max(1, min(max_new_tokens, max(budgets, default=1)))
        outputs = generate(
            [x.rollout.gen_prompt_ids + x.rollout.completion_ids for x in active], n_new
        )
        with clock.time("env"):
            for x, (ids, lps), budget in zip(active, outputs, budgets, strict=True):
                try:
                    _advance(x, fmt, ids[: min(budget, max_new_tokens)], lps, budget, agent_name)
                except Exception as exc:
                    if not _lost_endpoint(x.env, exc):
                        raise
                    _harness_fault(x, agent_name, str(exc))
    for x in live:
        x.env.close()
    return [x.rollout for x in live]


def _start(
    spec: EpisodeSpec,
    fmt: ChatFormat,
    max_turns: int | None,
    reward_mode: str,
    env_kwargs: dict,
    tool_prompt: str = "hermes",
    served: ServedEnvs | None = None,
) -> _Live:
    options = {"difficulty": spec.difficulty, "split": spec.split, "hint": spec.hint}
    if served is None:
        env = make_env(
            spec.env_id,
            max_turns=max_turns,
            reward_mode=reward_mode,
            env_kwargs=env_kwargs,
            tool_prompt=tool_prompt,
        )
        _, info = env.reset(seed=spec.task_seed, options=options)
    else:  # the same constructor arguments, on the server's side
        kwargs = {"tool_prompt": tool_prompt, "reward_mode": reward_mode, **env_kwargs}
        if max_turns is not None:
            kwargs["max_turns"] = max_turns
        env, (_, info) = served.open(spec.env_id, kwargs, spec.task_seed, options)
    opening = info["messages"][1]["content"]
    prompt = fmt.prompt_ids(info["system_prompt_no_hint"], opening)
    gen_prompt = fmt.prompt_ids(info["system_prompt"], opening) if spec.hint else prompt
    rollout = Rollout(spec, prompt, gen_prompt, logprobs=[])
    return _Live(env, rollout, n_messages=len(info["messages"]))


def _advance(
    x: _Live, fmt: ChatFormat, ids: list[int], lps: list[float] | None, budget: int, agent: str
) -> None:
    r = x.rollout
    r.completion_ids += ids
    r.env_mask += [1] * len(ids)
    if r.logprobs is not None:  # ids may have been cut to the budget: cut the logprobs alike
        r.logprobs = r.logprobs + list(lps)[: len(ids)] if lps is not None else None
    _, reward, terminated, truncated, info = x.env.step(fmt.decode(ids))
    if not (terminated or truncated):
        new_messages = info["messages"][x.n_messages + 1 :]  # skip the assistant's own turn
        x.n_messages = len(info["messages"])
        ended_cleanly = bool(ids) and ids[-1] in fmt.stop_ids
        env_ids = fmt.env_turn_ids(env_reply_text(new_messages), ended_cleanly)
        if budget - len(ids) - len(env_ids) >= MIN_TURN_TOKENS:
            r.completion_ids += env_ids
            r.env_mask += [0] * len(env_ids)
            if r.logprobs is not None:
                r.logprobs += [0.0] * len(env_ids)
            return
        # Out of tokens: the agent says nothing more. Empty turns are errors, so the
        # environment ends the episode (error or turn limit) and verifies what was done.
        while not (terminated or truncated):
            _, reward, terminated, truncated, info = x.env.step("")
    x.done = True
    r.record = x.env.unwrapped.episode_record(agent=agent)
    r.reward = float(r.record["final_reward"])  # the verifier's score, whatever the reward mode
    r.success = bool(r.record["is_success"])
    if r.record.get("end_reason") in HARNESS_FAULTS:
        r.fault = r.record["end_reason"]


def _lost_endpoint(env: Any, exc: Exception) -> bool:
    """Whether ``exc`` is a served environment's session failing (not a bug of ours)."""
    if not hasattr(env, "base_url"):
        return False
    from trace_gym.serving.protocol import ServeError

    return isinstance(exc, ServeError)


def _harness_fault(x: _Live, agent: str, reason: str) -> None:
    """End an episode the harness failed: no verdict exists, so no reward is claimed for it;
    the record says why, for the episode log."""
    r, spec = x.rollout, x.rollout.spec
    x.done = True
    r.fault = ENDPOINT_LOST
    r.reward, r.success = 0.0, False  # placeholders: a fault is masked, never scored
    r.record = {
        "format": "trace_gym.episode.v1",
        "env_id": spec.env_id, "task_seed": spec.task_seed, "split": spec.split,
        "difficulty": spec.difficulty, "agent": agent, "turns": 0, "messages": [],
        "end_reason": ENDPOINT_LOST, "harness_error": reason, "final_reward": None,
        "is_success": False,
    }  # fmt: skip
    x.env.close()


def action_text(action: Any) -> str:
    """An oracle action as the text a model should write: Hermes ``<tool_call>`` blocks for
    calls (one per call), the message itself for plain text. Used for demonstrations."""
    from trace_gym import parse_action

    turn = parse_action(action)
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in turn.calls
    ]
    return "\n".join([turn.content.strip(), *blocks] if turn.content.strip() else blocks)
