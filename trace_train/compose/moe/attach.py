"""Attach frozen LoRA experts to a base model as a token-routed mixture (in place).

Each expert is read with peft (so every adapter peft can read is read the same way), its
factors are stacked into :class:`RoutedLoRALinear` modules, and routers are hooked on each
decoder block's ``input_layernorm``.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers import PreTrainedModel

from trace_train.compose.moe.config import ExpertSpec, MoEConfig
from trace_train.compose.moe.layers import MoEState, RoutedLoRALinear, moe_state

_BLOCK_RE = re.compile(r"\.layers\.(\d+)\.")


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
    # the first block sees the forward's cache even when the model made it (a first forward)
    layers[0].register_forward_pre_hook(_cache_hook(state), with_kwargs=True)
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


def _cache_hook(state: MoEState):  # noqa: ANN202 - returns a torch hook
    def hook(_module: nn.Module, _args: tuple, kwargs: dict) -> None:
        state.cache = kwargs.get("cache", kwargs.get("past_key_values"))

    return hook


def _router_hook(state: MoEState, block: int):  # noqa: ANN202 - returns a torch hook
    def hook(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        state.route_block(block, output)

    return hook


def router_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable router parameters (everything else is frozen)."""
    return list(moe_state(model).routers.parameters())
