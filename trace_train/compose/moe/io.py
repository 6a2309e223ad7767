"""Save and load a token-routed mixture: config JSON, router weights, the unchanged expert
adapters, a model card and the tokenizer, in one folder."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch
from transformers import PreTrainedModel

from trace_train.compose.moe.attach import attach_experts
from trace_train.compose.moe.config import FORMAT, FORMAT_VERSION, MoEConfig
from trace_train.compose.moe.layers import moe_state
from trace_train.quiet import quiet

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
    with quiet():
        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype).eval()
        attach_experts(model, config)
    state = moe_state(model)
    state.source_dir = str(root)
    tensors = load_file(str(root / ROUTER_NAME))
    routers = {k[len("routers.") :]: v for k, v in tensors.items()}
    state.routers.load_state_dict(routers, strict=True)
    tok_source = root if (root / "tokenizer_config.json").is_file() else base
    with quiet():
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
        f"kernel `{config.router.kernel}`. Load with `trace_train.compose.moe.load_moe(dir)`.",
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
