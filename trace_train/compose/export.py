"""Exports for people who serve with other tools (vLLM, TGI, plain peft).

* :func:`export_expert`: one expert of a saved mixture as a plain PEFT adapter folder (the
  mixture stores its experts unchanged, so this is a verified copy).
* :func:`static_merge`: one input-independent adapter from several, through peft's
  ``add_weighted_adapter`` (``linear``, ``ties``, ``cat``, ...); the static-merge baselines a
  routed mixture is compared with. ``linear``/``ties`` need equal ranks (peft's rule); ``cat``
  takes any ranks and is the exact weighted sum of the deltas.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trace_train.quiet import quiet

COMBINATIONS = ("linear", "ties", "cat", "svd", "dare_linear", "dare_ties", "magnitude_prune")


def export_expert(moe_dir: str | Path, name: str, out_dir: str | Path) -> Path:
    """Copy expert ``name`` of the mixture in ``moe_dir`` to ``out_dir`` as a PEFT adapter.

    The result loads with ``PeftModel.from_pretrained(base, out_dir)``.
    """
    root = Path(moe_dir)
    config = json.loads((root / "trace_moe_config.json").read_text())
    experts = {e["name"]: e for e in config["experts"]}
    if name not in experts:
        raise ValueError(f"no expert {name!r} in {root}; experts are {sorted(experts)}")
    source = root / experts[name]["adapter_dir"]
    if not (source / "adapter_config.json").is_file():
        raise ValueError(f"{source} has no adapter_config.json; the mixture folder is damaged")
    out = Path(out_dir)
    shutil.copytree(source, out, dirs_exist_ok=True)
    return out


def static_merge(
    base_model: str,
    adapters: dict[str, str],
    out_dir: str | Path,
    *,
    combination_type: str = "linear",
    weights: list[float] | None = None,
    density: float = 0.5,
) -> Path:
    """Merge ``adapters`` (name -> PEFT folder) into one PEFT adapter saved at ``out_dir``.

    ``weights`` default to ``1/K`` each; ``density`` is the kept fraction for ``ties``/``dare``
    variants. Uses ``PeftModel.add_weighted_adapter``; nothing is re-implemented here.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if combination_type not in COMBINATIONS:
        raise ValueError(f"combination_type={combination_type!r}; use one of {COMBINATIONS}")
    if not adapters:
        raise ValueError("adapters is empty; give at least one name -> PEFT folder")
    names = list(adapters)
    weights = weights if weights is not None else [1.0 / len(names)] * len(names)
    if len(weights) != len(names):
        raise ValueError(f"{len(weights)} weights for {len(names)} adapters; give one per adapter")
    with quiet():
        base = AutoModelForCausalLM.from_pretrained(base_model)
        model = PeftModel.from_pretrained(base, adapters[names[0]], adapter_name=names[0])
        for name in names[1:]:
            model.load_adapter(adapters[name], adapter_name=name)
    kwargs = (
        {"density": density} if combination_type in ("ties", "dare_linear", "dare_ties") else {}
    )
    if combination_type == "magnitude_prune":
        kwargs = {"density": density}
    model.add_weighted_adapter(
        names, weights, "merged", combination_type=combination_type, **kwargs
    )
    for name in names:
        model.delete_adapter(name)
    tmp = Path(out_dir).with_name(Path(out_dir).name + ".tmp")
    model.save_pretrained(tmp, selected_adapters=["merged"])
    saved = tmp / "merged" if (tmp / "merged").is_dir() else tmp
    shutil.copytree(saved, out_dir, dirs_exist_ok=True)
    shutil.rmtree(tmp)
    return Path(out_dir)
