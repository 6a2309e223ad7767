"""What a token-routed mixture is made of: experts, router settings, the saved config.

Plain dataclasses (no torch), so a mixture's config can be read and written without loading
a model; ``trace_moe_config.json`` is ``MoEConfig.to_dict()``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

FORMAT = "trace_train.molora"
FORMAT_VERSION = "1"
BASE_SLOT_NAME = "base"


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
