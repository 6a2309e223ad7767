"""Token-level top-1 mixture of frozen LoRA experts over a frozen base model (TRACE stage 4).

Every adapted linear of the base model becomes a :class:`RoutedLoRALinear` holding the K
experts' low-rank factors stacked side by side, plus an implicit "base" slot (no adapter). A
small linear router per decoder block (or one global router) reads the block's normalised input
and picks exactly one slot per token; all adapted linears of that block use it. The model stays
the transformers ``PreTrainedModel`` it was, so ``generate`` (with its KV cache) works unchanged:
a token's route depends only on its own hidden state, so caching cannot change it.

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
import copy
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

FORMAT = "trace_train.molora"
FORMAT_VERSION = "1"
BASE_SLOT_NAME = "base"
_BLOCK_RE = re.compile(r"\.layers\.(\d+)\.")


@dataclass
class ExpertSpec:
    """One frozen LoRA expert: a standard PEFT adapter folder plus what it is for."""

    name: str
    """Slot name (unique, also the folder name under ``experts/`` when saved)."""
    adapter_dir: str
    """PEFT adapter folder; relative to the MoE folder once saved."""
    description: str = ""
    """Natural-language capability description (model card; per-task routing prompt)."""
    capability: str = ""
    """Capability id or environment family the adapter was trained on."""
    rank: int = 0
    """LoRA rank r (filled in when loaded)."""
    target_modules: list[str] = field(default_factory=list)
    """Adapted module suffixes, e.g. ``["q_proj", "v_proj"]`` (filled in when loaded)."""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name == BASE_SLOT_NAME:
            raise ValueError(
                f"ExpertSpec.name={self.name!r} must be non-empty, contain no '/' and not be "
                f"{BASE_SLOT_NAME!r} (reserved for the no-adapter slot)"
            )


@dataclass
class RouterSpec:
    """How tokens are routed; top-1 always (one slot per token)."""

    granularity: Literal["per_block", "global"] = "per_block"
    """``per_block``: one router per decoder block, its choice used by that block's adapted
    linears. ``global``: one router at block ``router_layer`` whose choice every block from
    there on uses (one capability per token); blocks before it run the base model."""
    router_layer: int = 0
    """Block whose normalised input feeds the global router (``global`` only)."""
    include_base_slot: bool = True
    """Add slot 0 = no adapter, for tokens that no capability should edit."""
    kernel: Literal["concat_masked", "sorted_segments", "dense"] = "concat_masked"
    """Forward implementation (module docstring); all give the same result."""
    context: Literal["token", "causal_mean"] = "causal_mean"
    """Router input. ``token``: the token's normalised hidden state at the block.
    ``causal_mean``: that, concatenated with the mean of the block's normalised inputs over the
    sequence so far (causal, padding excluded, carried across cached decode steps). Measured on
    the tiny two-family check: ``token`` routes by token identity (shared template tokens are
    ambiguous, the first blocks see no context) and lost the reward; ``causal_mean`` kept it."""
    base_bias: float = 0.0
    """Initial router bias of the base slot; a large value makes an untrained MoE act as the
    base model. Ignored without a base slot."""

    def __post_init__(self) -> None:
        if self.granularity not in ("per_block", "global"):
            raise ValueError(f"granularity={self.granularity!r}; use 'per_block' or 'global'")
        if self.kernel not in ("concat_masked", "sorted_segments", "dense"):
            raise ValueError(
                f"kernel={self.kernel!r}; use 'concat_masked', 'sorted_segments' or 'dense'"
            )
        if self.context not in ("token", "causal_mean"):
            raise ValueError(f"context={self.context!r}; use 'token' or 'causal_mean'")
        if self.router_layer < 0:
            raise ValueError(f"router_layer={self.router_layer} must be >= 0")


@dataclass
class MoEConfig:
    """Everything needed to rebuild a mixture: saved as ``trace_moe_config.json``."""

    base_model_name_or_path: str
    """Base model id or folder the experts were trained on."""
    experts: list[ExpertSpec]
    """The K experts, in slot order (slot i+1 when the base slot is included, else slot i)."""
    router: RouterSpec = field(default_factory=RouterSpec)
    """Routing granularity and kernel."""
    stats: dict = field(default_factory=dict)
    """Routing statistics and rewards measured after router training (for the model card)."""
    format: str = FORMAT
    format_version: str = FORMAT_VERSION

    def __post_init__(self) -> None:
        if not self.experts:
            raise ValueError("experts is empty; give at least one PEFT adapter folder")
        names = [e.name for e in self.experts]
        if len(set(names)) != len(names):
            raise ValueError(f"experts have duplicate names {names}; give each a unique name")
        if self.format != FORMAT:
            raise ValueError(f"format={self.format!r} is not {FORMAT!r}; not a trace_train MoE")

    @property
    def slot_names(self) -> list[str]:
        """Slot names in router-output order (``base`` first when included)."""
        head = [BASE_SLOT_NAME] if self.router.include_base_slot else []
        return head + [e.name for e in self.experts]

    def to_dict(self) -> dict:
        """JSON-ready dict (dataclasses flattened)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MoEConfig:
        """Inverse of :meth:`to_dict`; rejects other formats and newer versions."""
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"format_version={data.get('format_version')!r} is not supported "
                f"(this trace_train reads {FORMAT_VERSION!r}); upgrade trace-rl"
            )
        data = dict(data)
        data["experts"] = [ExpertSpec(**e) for e in data["experts"]]
        data["router"] = RouterSpec(**data["router"])
        return cls(**data)


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
        self.carry: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # causal_mean state
        self.token_mask: torch.Tensor | None = None  # (batch, seq) 1 = real token, this forward
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
        """Called before every model forward: a forward with an empty cache starts new
        sequences (the causal-mean state is reset); ``attention_mask`` marks padding."""
        if past_length == 0:
            self.carry = {}
        self.token_mask = attention_mask

    def _causal_mean(self, block: int, normed: torch.Tensor) -> torch.Tensor:
        """Mean of the block's normalised inputs over each sequence's real tokens so far."""
        batch, seq, _ = normed.shape
        mask = self.token_mask
        weight = mask[:, -seq:].to(normed.dtype).unsqueeze(-1) if mask is not None else None
        total = torch.cumsum(normed * weight if weight is not None else normed, dim=1)
        if weight is not None:
            count = torch.cumsum(weight, dim=1)
        else:
            count = torch.arange(1, seq + 1, dtype=normed.dtype, device=normed.device)
            count = count.view(1, seq, 1).expand(batch, seq, 1)
        if block in self.carry:
            prev_total, prev_count = self.carry[block]
            total, count = total + prev_total.unsqueeze(1), count + prev_count.unsqueeze(1)
        self.carry[block] = (total[:, -1].detach(), count[:, -1].detach())
        return total / count.clamp(min=1.0)

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


def _block_of(name: str) -> int:
    match = _BLOCK_RE.search("." + name + ".")
    if match is None:
        raise ValueError(
            f"adapted module {name!r} is not inside a decoder block (model.layers.N); "
            "token routing supports block linears only, retrain without it in target_modules"
        )
    return int(match.group(1))


def _decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    inner = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__} has no decoder .layers; unsupported architecture")
    return layers


def _read_experts(model: PreTrainedModel, experts: list[ExpertSpec]) -> dict[str, list]:
    """Load each adapter with peft, copy its (A, B·scaling) per module, then unload peft.

    Returns ``{module_name: [(A, B_scaled) or None per expert]}``; fills rank/targets in specs.
    """
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    peft_model = PeftModel.from_pretrained(model, experts[0].adapter_dir, adapter_name="e0")
    for i, spec in enumerate(experts[1:], start=1):
        peft_model.load_adapter(spec.adapter_dir, adapter_name=f"e{i}")
    factors: dict[str, list] = {}
    prefix = "base_model.model."
    for name, module in peft_model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        key = name[len(prefix) :] if name.startswith(prefix) else name
        entry = [None] * len(experts)
        for i, spec in enumerate(experts):
            adapter = f"e{i}"
            if adapter not in module.lora_A:
                continue
            if module.use_dora.get(adapter) or not isinstance(module.get_base_layer(), nn.Linear):
                raise ValueError(
                    f"expert {spec.name!r} module {key}: only plain LoRA on nn.Linear can be "
                    "token-routed (no DoRA, no embedding/conv LoRA)"
                )
            a = module.lora_A[adapter].weight.detach().clone()
            b = module.lora_B[adapter].weight.detach() * module.scaling[adapter]
            entry[i] = (a, b.clone())
            spec.rank = int(a.shape[0])
            suffix = key.rsplit(".", 1)[-1]
            if suffix not in spec.target_modules:
                spec.target_modules.append(suffix)
        factors[key] = entry
    peft_model.unload()  # restores the original nn.Linear modules in place
    return factors


def attach_experts(model: PreTrainedModel, config: MoEConfig) -> PreTrainedModel:
    """Turn ``model`` (frozen base) into a routed mixture of ``config.experts``, in place.

    Loads each expert with peft, replaces every adapted linear by a :class:`RoutedLoRALinear`,
    adds routers (zero-initialised: all slots tie, so the base slot wins via ``base_bias`` or
    the lowest index) and hooks them on each block's ``input_layernorm``. Returns ``model``;
    its routing state is ``model.trace_moe``. Every base and expert weight is frozen.
    """
    if hasattr(model, "trace_moe"):
        raise ValueError("model already has experts attached; load a fresh base model")
    for p in model.parameters():
        p.requires_grad_(False)
    factors = _read_experts(model, config.experts)
    layers = _decoder_layers(model)
    if config.router.granularity == "global" and config.router.router_layer >= len(layers):
        raise ValueError(
            f"router_layer={config.router.router_layer} but the model has {len(layers)} blocks"
        )
    r_max = max(a.shape[0] for entry in factors.values() for f in entry if f for a in [f[0]])
    dtype = next(model.parameters()).dtype
    state = MoEState(config, model.config.hidden_size, len(layers), r_max).to(dtype)
    k = len(config.experts)
    for key, entry in factors.items():
        parent_name, _, child = key.rpartition(".")
        parent = model.get_submodule(parent_name)
        base: nn.Linear = getattr(parent, child)
        a_cat = torch.zeros(k * r_max, base.in_features, dtype=dtype)
        b_cat_t = torch.zeros(k * r_max, base.out_features, dtype=dtype)
        for e, pair in enumerate(entry):
            if pair is not None:
                r = pair[0].shape[0]
                a_cat[e * r_max : e * r_max + r] = pair[0]
                b_cat_t[e * r_max : e * r_max + r] = pair[1].T
        routed = RoutedLoRALinear(base, a_cat, b_cat_t, _block_of(key), state, config.router.kernel)
        setattr(parent, child, routed.to(base.weight.device))
    model.trace_moe = state.to(next(model.parameters()).device)
    model.register_forward_pre_hook(_forward_start_hook(state), with_kwargs=True)
    for block, layer in enumerate(layers):
        norm = getattr(layer, "input_layernorm", None)
        if norm is None:
            raise ValueError(f"block {block} has no input_layernorm; unsupported architecture")
        norm.register_forward_hook(_router_hook(state, block))
    return model


def _forward_start_hook(state: MoEState):  # noqa: ANN202 - returns a torch hook
    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = int(cache.get_seq_length()) if cache is not None else 0
        state.start_forward(past, kwargs.get("attention_mask"))

    return hook


def _router_hook(state: MoEState, block: int):  # noqa: ANN202 - returns a torch hook
    def hook(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        state.route_block(block, output)

    return hook


def router_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable router parameters (everything else is frozen)."""
    return list(moe_state(model).routers.parameters())


# ---- save / load ----------------------------------------------------------------------------
CONFIG_NAME = "trace_moe_config.json"
ROUTER_NAME = "router.safetensors"


def save_moe(model: PreTrainedModel, out_dir: str | Path, tokenizer: object | None = None) -> Path:
    """Write the mixture to ``out_dir``: config JSON, ``router.safetensors``, the unchanged PEFT
    adapter folders under ``experts/<name>/``, a model card ``README.md`` and the tokenizer.

    The base model itself is not copied; the config names it (``base_model_name_or_path``).
    """
    from safetensors.torch import save_file

    state = moe_state(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(state.config)
    for spec in config.experts:
        target = out / "experts" / spec.name
        source = Path(spec.adapter_dir)
        if not source.is_absolute():
            source = Path(state.source_dir or ".") / source
        if source.resolve() != target.resolve():
            shutil.copytree(source, target, dirs_exist_ok=True)
        spec.adapter_dir = f"experts/{spec.name}"
    tensors = {
        f"routers.{b}.{n}": p.detach().contiguous().cpu()
        for b, r in state.routers.items()
        for n, p in r.named_parameters()
    }
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION}
    meta["granularity"] = config.router.granularity
    save_file(tensors, str(out / ROUTER_NAME), metadata=meta)
    (out / CONFIG_NAME).write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    (out / "README.md").write_text(model_card(config))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def load_moe(
    moe_dir: str | Path, base_model: str | None = None, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, object]:
    """Load a saved mixture: ``(model, tokenizer)`` ready for ``model.generate``.

    ``base_model`` overrides the base named in the config (e.g. a local copy). The tokenizer
    comes from ``moe_dir`` when saved there, else from the base model.
    """
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = Path(moe_dir)
    if not (root / CONFIG_NAME).is_file():
        raise ValueError(f"{root} has no {CONFIG_NAME}; is it a folder written by save_moe?")
    config = MoEConfig.from_dict(json.loads((root / CONFIG_NAME).read_text()))
    base = base_model or config.base_model_name_or_path
    for spec in config.experts:
        spec.adapter_dir = str(root / spec.adapter_dir)
        spec.rank, spec.target_modules = 0, []
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype).eval()
    attach_experts(model, config)
    state = moe_state(model)
    state.source_dir = str(root)
    tensors = load_file(str(root / ROUTER_NAME))
    routers = {k[len("routers.") :]: v for k, v in tensors.items()}
    state.routers.load_state_dict(routers, strict=True)
    tok_source = root if (root / "tokenizer_config.json").is_file() else base
    return model, AutoTokenizer.from_pretrained(tok_source)


def model_card(config: MoEConfig) -> str:
    """Markdown model card: capabilities, routing statistics and rewards from ``config.stats``."""
    lines = [
        "---",
        "library_name: trace-rl",
        "tags: [trace, lora, mixture-of-experts, token-routing]",
        f"base_model: {config.base_model_name_or_path}",
        "---",
        "",
        "# Token-routed mixture of LoRA experts (trace_train)",
        "",
        f"Base model: `{config.base_model_name_or_path}`. Router: {config.router.granularity}, "
        f"top-1, base slot {'included' if config.router.include_base_slot else 'absent'}, "
        f"kernel `{config.router.kernel}`. Load with `trace_train.moe.load_moe(dir)`.",
        "",
        "## Capabilities",
        "",
        "| slot | expert | capability | rank | targets | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    offset = 1 if config.router.include_base_slot else 0
    if offset:
        lines.append("| 0 | base | (no adapter) | - | - | the frozen base model |")
    for i, e in enumerate(config.experts):
        targets = ", ".join(e.target_modules)
        lines.append(
            f"| {i + offset} | {e.name} | {e.capability} | {e.rank} | {targets} | {e.description} |"
        )
    if config.stats:
        lines += ["", "## Routing statistics and rewards", "", "```json"]
        lines += [json.dumps(config.stats, indent=2), "```"]
    return "\n".join(lines) + "\n"
