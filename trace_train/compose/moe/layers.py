"""The routed layers of the token-level top-1 mixture of frozen LoRA experts over a frozen base model (TRACE stage 4).

Every adapted linear of the base model becomes a :class:`RoutedLoRALinear` holding the K
experts' low-rank factors stacked side by side, plus an implicit "base" slot (no adapter). A
small linear router per decoder block (or one global router) reads the block's normalised input
and picks exactly one slot per token; all adapted linears of that block use it. The model stays
the transformers ``PreTrainedModel`` it was, so ``generate`` (with its KV cache) works unchanged:
a token's route depends on its own hidden state and, with the ``causal_mean`` context, on a
running sum over the sequence so far, which rides in the KV cache itself (one extra cache layer
per router: cumulative sums, cropped, padded, stacked and split with the keys and values), so a
stored cache resumes the routing exactly (``trace_train.rollout`` reuses caches across turns).

Forward kernels (``RouterSpec.kernel``; ``benchmarks/moe_overhead.py`` times them):

* ``concat_masked`` (default): ``z = x A_catᵀ`` (E·r columns), zero the r-blocks of the
  experts a token did not pick, ``y = Wx + z B_catᵀ``. Two dense GEMMs, static shapes, exact.
* ``sorted_segments``: sort tokens by expert, two small GEMMs per expert, scatter back.
* ``dense``: every expert computed in full and weighted by the one-hot route; a baseline
  for the benchmark (what PEFT's Arrow/X-LoRA do), not for serving.

No kernel gathers a weight matrix per token. Experts are loaded with peft (so every adapter
peft can read is read the same way) and saved unchanged; see ``save_moe`` / ``load_moe``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trace_train.compose.moe.config import MoEConfig


@dataclass
class BlockRoute:
    """A block's routing decision for the current forward pass (shared by its linears)."""

    slots: torch.Tensor
    """Chosen slot per token, shape ``(batch, seq)``."""
    mask: torch.Tensor
    """``(batch, seq, E*r)`` keep-mask over the stacked rank columns (times a gate in training)."""
    gate: torch.Tensor | None = None
    """Per-token multiplier used by the ``dense``/``sorted_segments`` kernels in training."""


class MoEState(nn.Module):
    """Routers plus the per-forward routing context, attached to the model as ``trace_moe``.

    Holds the routers (trainable parameters), the mask table that turns a slot into a keep-mask
    over the stacked rank columns, and the current ``BlockRoute`` per block. Supports forced
    routing (tests, oracle rollouts), recording routes (statistics, router data) and a
    straight-through gate for training routers through the LM loss.
    """

    def __init__(self, config: MoEConfig, hidden_size: int, num_blocks: int, r_max: int) -> None:
        super().__init__()
        self.config = config
        self.num_blocks = num_blocks
        self.r_max = r_max
        spec = config.router
        n_slots = len(config.slot_names)
        self.offset = 1 if spec.include_base_slot else 0
        blocks = range(num_blocks) if spec.granularity == "per_block" else [spec.router_layer]
        width = hidden_size * (2 if spec.context == "causal_mean" else 1)
        self.routers = nn.ModuleDict({str(b): nn.Linear(width, n_slots) for b in blocks})
        for router in self.routers.values():
            nn.init.zeros_(router.weight)
            nn.init.zeros_(router.bias)
            if spec.include_base_slot:
                router.bias.data[0] = spec.base_bias
        k = len(config.experts)
        table = torch.zeros(n_slots, k * r_max)
        for e in range(k):
            table[e + self.offset, e * r_max : (e + 1) * r_max] = 1.0
        self.register_buffer("mask_table", table, persistent=False)
        self.routes: dict[int, BlockRoute | None] = {}
        self.forced_slot: int | None = None
        self.straight_through = False
        self.record = False
        self.recorded: dict[int, list[torch.Tensor]] = {}
        self.token_mask: torch.Tensor | None = None  # (batch, seq) 1 = real token, this forward
        # causal_mean state lives in the forward's KV cache, after the model's own layers: one
        # layer per router holding each position's running (sum of inputs, count of real tokens)
        self.cache = None  # the cache of the current forward (None: no cache, nothing before)
        self.past_length = 0
        self.context_layers = {b: num_blocks + i for i, b in enumerate(sorted(map(int, blocks)))}
        self.capture: dict[int, list[torch.Tensor]] | None = None  # router inputs, when set
        self.source_dir: str | None = None  # folder relative adapter_dir values resolve against
        self.logits: dict[int, torch.Tensor] = {}

    # ---- routing ------------------------------------------------------------------------
    def slot_index(self, name: str) -> int:
        """Router output index of slot ``name`` (``base`` or an expert name)."""
        names = self.config.slot_names
        if name not in names:
            raise ValueError(f"unknown slot {name!r}; slots are {names}")
        return names.index(name)

    @contextlib.contextmanager
    def forced(self, slot: int | str) -> Iterator[None]:
        """Route every token of every block to ``slot`` inside the ``with`` body."""
        index = self.slot_index(slot) if isinstance(slot, str) else int(slot)
        if not 0 <= index < len(self.config.slot_names):
            raise ValueError(f"slot {index} out of range 0..{len(self.config.slot_names) - 1}")
        previous, self.forced_slot = self.forced_slot, index
        try:
            yield
        finally:
            self.forced_slot = previous

    def _make_route(self, slots: torch.Tensor, probs: torch.Tensor | None, dtype: torch.dtype):
        mask = self.mask_table.to(dtype)[slots]
        gate = None
        if probs is not None:
            # Straight-through (Switch-style) gate: forward value exactly 1, so the output equals
            # hard top-1 routing, while the gradient of the chosen slot's softmax probability
            # flows into the router. Experts stay frozen; only the router learns.
            p = probs.gather(-1, slots.unsqueeze(-1))
            gate = (p - p.detach() + 1.0).squeeze(-1)
            mask = mask * gate.unsqueeze(-1)
        return BlockRoute(slots=slots, mask=mask, gate=gate)

    def route_block(self, block: int, normed: torch.Tensor) -> None:
        """Compute (or force) block ``block``'s route from its normalised input ``normed``."""
        spec = self.config.router
        lead = normed.shape[:-1]
        has_router = str(block) in self.routers
        if has_router and spec.context == "causal_mean":
            features = torch.cat([normed, self._causal_mean(block, normed)], dim=-1)
        else:
            features = normed
        if self.capture is not None and has_router:
            self.capture.setdefault(block, []).append(features.detach().reshape(lead.numel(), -1))
        if self.forced_slot is not None:
            slots = torch.full(lead, self.forced_slot, dtype=torch.long, device=normed.device)
            self.routes[block] = self._make_route(slots, None, normed.dtype)
            return
        if spec.granularity == "global":
            if block < spec.router_layer:
                self.routes[block] = None
                return
            if block > spec.router_layer:
                return  # reuse the route computed at router_layer
        router = self.routers[str(block)]
        logits = router(features.to(router.weight.dtype))
        slots = logits.argmax(-1)
        probs = logits.softmax(-1) if self.straight_through else None
        route = self._make_route(slots, probs, normed.dtype)
        if self.straight_through:
            self.logits[block] = logits
        if self.record:
            self.recorded.setdefault(block, []).append(slots.detach().cpu())
        targets = [block] if spec.granularity == "per_block" else range(block, self.num_blocks)
        for b in targets:
            self.routes[b] = route

    def start_forward(self, past_length: int, attention_mask: torch.Tensor | None) -> None:
        """Called before every model forward: ``past_length`` tokens are cached already and
        ``attention_mask`` marks padding; the first decoder block then hands over the cache."""
        self.past_length, self.token_mask, self.cache = past_length, attention_mask, None

    def _causal_mean(self, block: int, normed: torch.Tensor) -> torch.Tensor:
        """Mean of the block's normalised inputs over each sequence's real tokens so far.

        Sums run in float32 (a bfloat16 sum over thousands of tokens drifts). With a cache, the
        running sums of the tokens before this forward are its last position of this block's
        context layer, and this forward's are appended: padding and cropping keep them exact
        (left padding adds zeros before the last position; a cropped cache keeps the sums of
        the prefix it keeps)."""
        batch, seq, _ = normed.shape
        mask = self.token_mask
        if mask is not None:
            weight = mask[:, -seq:].to(torch.float32).unsqueeze(-1)
        else:
            weight = normed.new_ones(batch, seq, 1, dtype=torch.float32)
        running = torch.cumsum(torch.cat([normed.float() * weight, weight], dim=-1), dim=1)
        layer = self._context_layer(block)
        if layer is not None:
            if self.past_length:
                running = running + layer.keys[:, 0, -1:].to(running.dtype)
            stored = running.detach().unsqueeze(1)
            layer.update(stored, stored.new_zeros(*stored.shape[:-1], 0))
        total, count = running[..., :-1], running[..., -1:]
        return (total / count.clamp(min=1.0)).to(normed.dtype)

    def _context_layer(self, block: int):  # noqa: ANN202 - a transformers cache layer
        """This forward's cache layer of ``block``'s running sums (appended after the model's
        own layers on first use); ``None`` without a cache."""
        if self.cache is None:
            return None
        from transformers.cache_utils import DynamicLayer

        index = self.context_layers[block]
        layers = self.cache.layers
        while len(layers) <= index:
            layers.append(DynamicLayer())
        layer = layers[index]
        held = layer.keys.shape[-2] if layer.is_initialized else 0
        if held != self.past_length:
            raise ValueError(
                f"the KV cache holds {self.past_length} tokens but the mixture's routing state "
                f"for block {block} covers {held}: a cache made without the mixture (or edited "
                "apart from its keys and values) cannot resume token routing"
            )
        return layer

    def current(self, block: int) -> BlockRoute | None:
        """The route the block's linears should use now (``None``: base only)."""
        return self.routes.get(block)


class RoutedLoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus K stacked frozen LoRA experts, one picked per token.

    ``A_cat`` is ``(E*r_max, d_in)`` and ``B_cat_t`` is ``(E*r_max, d_out)`` with each expert's
    ``lora_alpha / r`` scaling folded in; ranks below ``r_max`` and experts that did not adapt
    this module are zero-padded, which is exact.
    """

    def __init__(
        self,
        base: nn.Linear,
        a_cat: torch.Tensor,
        b_cat_t: torch.Tensor,
        block: int,
        state: MoEState,
        kernel: str,
    ) -> None:
        super().__init__()
        self.base = base
        self.block = block
        self.kernel = kernel
        self.num_experts = a_cat.shape[0] // state.r_max
        self.r_max = state.r_max
        self.offset = state.offset
        self.register_buffer("A_cat", a_cat, persistent=False)
        self.register_buffer("B_cat_t", b_cat_t, persistent=False)
        object.__setattr__(self, "_state", state)  # shared, not a submodule of every linear

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``W x + b`` plus the chosen expert's ``B A x`` for every token."""
        y = self.base(x)
        route = self._state.current(self.block)
        if route is None:
            return y
        if self.kernel == "concat_masked":
            z = F.linear(x, self.A_cat) * route.mask
            shape = y.shape
            out = torch.addmm(y.reshape(-1, shape[-1]), z.reshape(-1, z.shape[-1]), self.B_cat_t)
            return out.view(shape)
        if self.kernel == "sorted_segments":
            return self._sorted_segments(x, y, route)
        return self._dense(x, y, route)

    def _expert(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = e * self.r_max, (e + 1) * self.r_max
        return self.A_cat[lo:hi], self.B_cat_t[lo:hi]

    def _sorted_segments(self, x: torch.Tensor, y: torch.Tensor, route: BlockRoute) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        y2 = y.reshape(-1, y.shape[-1]).clone()
        slots = route.slots.reshape(-1)
        order = torch.argsort(slots, stable=True)
        counts = torch.bincount(slots, minlength=self.num_experts + self.offset).tolist()
        gate = None if route.gate is None else route.gate.reshape(-1)
        start = counts[0] if self.offset else 0
        for e in range(self.num_experts):
            n = counts[e + self.offset]
            if n:
                idx = order[start : start + n]
                a, b_t = self._expert(e)
                delta = (x2[idx] @ a.T) @ b_t
                if gate is not None:
                    delta = delta * gate[idx].unsqueeze(-1)
                y2 = y2.index_add(0, idx, delta)
            start += n
        return y2.view(y.shape)

    def _dense(self, x: torch.Tensor, y: torch.Tensor, route: BlockRoute) -> torch.Tensor:
        weights = F.one_hot(route.slots, self.num_experts + self.offset).to(x.dtype)
        if route.gate is not None:
            weights = weights * route.gate.unsqueeze(-1)
        for e in range(self.num_experts):
            a, b_t = self._expert(e)
            y = y + weights[..., e + self.offset].unsqueeze(-1) * ((x @ a.T) @ b_t)
        return y


def moe_state(model: nn.Module) -> MoEState:
    """The ``MoEState`` attached to ``model`` by :func:`attach_experts`."""
    state = getattr(model, "trace_moe", None)
    if not isinstance(state, MoEState):
        raise ValueError("model has no trace_moe state; build it with attach_experts or load_moe")
    return state
