"""Token-level top-1 mixture of frozen LoRA experts over a frozen base model (TRACE stage 4).

Every adapted linear of the base model becomes a :class:`RoutedLoRALinear` holding the K
experts' low-rank factors stacked side by side, plus an implicit "base" slot (no adapter). A
small linear router per decoder block (or one global router) reads the block's normalised input
and picks exactly one slot per token; all adapted linears of that block use it. The model stays
the transformers ``PreTrainedModel`` it was, so ``generate`` (with its KV cache) works unchanged:
a token's route depends only on its own hidden state, so caching cannot change it.

By concern:

* ``config``: ``ExpertSpec``, ``RouterSpec``, ``MoEConfig`` (plain dataclasses, no torch);
* ``layers``: ``MoEState`` (routers and the per-forward routing context),
  ``RoutedLoRALinear`` and its forward kernels;
* ``attach``: ``attach_experts`` (read the adapters with peft, replace the linears, hook the
  routers) and ``router_parameters``;
* ``io``: ``save_moe`` / ``load_moe`` and the model card.
"""

from trace_train.compose.moe.attach import attach_experts, router_parameters
from trace_train.compose.moe.config import (
    BASE_SLOT_NAME,
    FORMAT,
    FORMAT_VERSION,
    ExpertSpec,
    MoEConfig,
    RouterSpec,
)
from trace_train.compose.moe.io import CONFIG_NAME, ROUTER_NAME, load_moe, model_card, save_moe
from trace_train.compose.moe.layers import BlockRoute, MoEState, RoutedLoRALinear, moe_state

__all__ = [
    "BASE_SLOT_NAME",
    "CONFIG_NAME",
    "FORMAT",
    "FORMAT_VERSION",
    "ROUTER_NAME",
    "BlockRoute",
    "ExpertSpec",
    "MoEConfig",
    "MoEState",
    "RoutedLoRALinear",
    "RouterSpec",
    "attach_experts",
    "load_moe",
    "model_card",
    "moe_state",
    "router_parameters",
    "save_moe",
]
