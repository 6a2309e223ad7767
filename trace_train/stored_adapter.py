"""Adapters kept in the repository, so that a reported result does not depend on a run folder.

A stored adapter is a PEFT adapter folder whose weights are bfloat16 safetensors (half the
bytes of the float32 training copy; LoRA weights lose nothing a 135M model's results notice)
with a ``provenance.json`` beside them:

* ``sha256``: of the stored ``adapter_model.safetensors``, checked on every load, so an edited
  or truncated file is refused rather than trained on;
* ``training``: the training run's own record (``trace_train.json``: commit, seeds, full
  config, the base model's hash, the machine);
* ``converted_from_sha256``: the float32 weights training wrote;
* ``rebuild``: the one command that trains it again.

:func:`store` writes one; :func:`load` checks one against the base model it is about to be
merged into (an adapter trained on other base weights is refused, naming both hashes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from trace_train import provenance

RECORD = "provenance.json"
"""The stored adapter's record file."""
ADAPTER_FILES = ("adapter_config.json", provenance.ADAPTER_WEIGHTS)
"""What PEFT needs to load an adapter (the tokenizer is the base model's)."""


class StoredAdapterError(ValueError):
    """A stored adapter that is missing, altered, or made for other base weights."""


def store(source: str | Path, dest: str | Path, *, rebuild: str) -> dict[str, Any]:
    """Copy the adapter at ``source`` (a training run's ``adapter/`` folder, with its
    ``trace_train.json``) to ``dest`` in bfloat16, with its record; returns the record."""
    import torch
    from safetensors.torch import load_file, save_file

    source, dest = Path(source), Path(dest)
    training = source / "trace_train.json"
    for needed in (*ADAPTER_FILES, training.name):
        if not (source / needed).is_file():
            raise StoredAdapterError(f"{source / needed} is missing: not a trace_train adapter")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "adapter_config.json", dest / "adapter_config.json")
    weights = load_file(str(source / provenance.ADAPTER_WEIGHTS))
    save_file(
        {name: tensor.to(torch.bfloat16).contiguous() for name, tensor in weights.items()},
        str(dest / provenance.ADAPTER_WEIGHTS),
        metadata={"format": "pt"},
    )
    record = {
        "sha256": provenance.sha256_file(dest / provenance.ADAPTER_WEIGHTS),
        "dtype": "bfloat16",
        "converted_from_sha256": provenance.sha256_file(source / provenance.ADAPTER_WEIGHTS),
        "rebuild": rebuild,
        "training": json.loads(training.read_text()),
    }
    (dest / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record


def load(folder: str | Path, base_model: str | Path) -> dict[str, Any]:
    """The record of the stored adapter at ``folder``, after checking that its weights are the
    ones stored and that it was trained on ``base_model``'s weights."""
    folder = Path(folder)
    for needed in (*ADAPTER_FILES, RECORD):
        if not (folder / needed).is_file():
            raise StoredAdapterError(f"{folder / needed} is missing: not a stored adapter")
    record = json.loads((folder / RECORD).read_text())
    actual = provenance.sha256_file(folder / provenance.ADAPTER_WEIGHTS)
    if actual != record.get("sha256"):
        raise StoredAdapterError(
            f"{folder}: the weights' sha256 is {actual[:12]}, its record says "
            f"{str(record.get('sha256'))[:12]}: the file changed after it was stored "
            f"(rebuild it: {record.get('rebuild')})"
        )
    training = record.get("training", {}).get("provenance", {})
    trained_on = (training.get("base_model") or {}).get("sha256")
    base = provenance.model_hash(base_model)["sha256"]
    if trained_on != base:
        raise StoredAdapterError(
            f"{folder} was trained on base weights {str(trained_on)[:12]}, but {base_model} has "
            f"{str(base)[:12]}: it would not be the same model (rebuild it: "
            f"{record.get('rebuild')})"
        )
    return record
