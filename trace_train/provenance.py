"""What a training run was made from, for its record file (``trace_train.json``, a trace run's
``provenance.json``, a benchmark's result).

A result can only be rebuilt if its record names everything it depended on: the code (git
commit, and whether the checkout had uncommitted changes), the seeds, the full resolved
config, the exact base weights and every adapter (sha256 of their files), the precision each
phase ran in, and the machine (CPU model and instruction-set features, which decide bfloat16
speed and can change floating-point results, plus torch and library versions). One function
per item; :func:`run_record` puts them together. Hashing is cached per file (path, size,
modification time), so a run that records the same base model several times reads it once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""The file an adapter's hash is taken of (PEFT's weights file)."""
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
"""Files of a model folder that hold weights (the hash covers these, not tokenizer files)."""
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy",
             "safetensors", "tokenizers", "vllm")  # fmt: skip
"""Libraries whose installed versions are recorded (absent ones are left out)."""
CPU_FLAG_PATTERN = re.compile(r"^(avx|amx|fma|f16c|sse4|avx_vnni|bf16)")
"""The /proc/cpuinfo flags recorded: the vector extensions torch's CPU kernels choose among."""

_HASHES: dict[tuple[str, int, int], str] = {}


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes (cached by path, size and modification time)."""
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def adapter_hash(adapter_dir: str | Path) -> dict[str, Any]:
    """``{"path", "sha256"}`` of a PEFT adapter folder's ``adapter_model.safetensors``."""
    weights = Path(adapter_dir) / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing: {adapter_dir} is not a saved PEFT adapter")
    return {"path": str(adapter_dir), "sha256": sha256_file(weights)}


def model_hash(model: str | Path) -> dict[str, Any]:
    """The base model's weights: per weight file its sha256, and one sha256 over them all
    (name and hash of each file, in name order). A name that is not a local folder (a hub id
    not yet resolved) is recorded as such, without a hash."""
    folder = Path(model)
    if not folder.is_dir():
        return {"path": str(model), "sha256": None, "why": "not a local folder"}
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    if not files:
        return {"path": str(model), "sha256": None, "why": "no weight files in the folder"}
    per_file = {p.name: sha256_file(p) for p in files}
    combined = hashlib.sha256("".join(f"{n}:{h}\n" for n, h in per_file.items()).encode())
    return {"path": str(model), "sha256": combined.hexdigest(), "files": per_file}


def state_dict_hash(model: Any) -> str:
    """sha256 over a model's parameters and buffers (name, dtype, shape, bytes, in name
    order): the weights actually in memory, for a model that has no folder of its own."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def git_state(where: str | Path | None = None) -> dict[str, Any]:
    """The commit of the checkout the code runs from and whether it had uncommitted changes
    (``dirty``; the changed paths are listed, at most 20). Outside a git checkout (an installed
    wheel) both are ``None`` with the reason."""
    root = Path(where) if where else Path(__file__).resolve().parent.parent
    try:
        commit = _git(root, "rev-parse", "HEAD").strip()
        # porcelain lines are "XY path": the status column may start with a space, keep it
        changed = [line[3:] for line in _git(root, "status", "--porcelain").splitlines() if line]
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": None, "dirty": None, "why": f"no git checkout at {root}: {exc}"}
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:20]}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=True
    )
    return done.stdout


def machine() -> dict[str, Any]:
    """CPU model, cores, the vector-extension flags, torch's chosen CPU kernels, GPUs, and the
    Python and library versions."""
    import torch

    cpu = machine_cpu()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": cpu,
        "gpus": gpus,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": library_versions(),
    }


def machine_cpu() -> dict[str, Any]:
    """CPU model, cores, the vector-extension flags and, where torch is installed, its thread
    count and chosen CPU kernels (None without torch: scripted policies play without it)."""
    cpu: dict[str, Any] = {
        "model_name": None,
        "flags": [],
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": None,
        "torch_cpu_capability": None,
        "architecture": platform.machine(),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        cpu["torch_threads"] = torch.get_num_threads()
        cpu["torch_cpu_capability"] = _torch_cpu_capability()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        text = info.read_text(errors="replace")
        name = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        cpu["model_name"] = name.group(1).strip() if name else None
        cpu["flags"] = sorted(f for f in (flags.group(1).split() if flags else [])
                              if CPU_FLAG_PATTERN.match(f))  # fmt: skip
    return cpu


def _torch_cpu_capability() -> str | None:
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return None


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def run_record(
    config: Any,
    *,
    phase: str,
    base_model: str | Path,
    adapters: dict[str, str | Path] | None = None,
    dtypes: dict[str, str] | None = None,
    seeds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One run's provenance: ``config`` (a dataclass or a mapping, recorded in full),
    the base model's hash, each named adapter's hash, the precision of each phase
    (``dtypes``), the seeds, the code's commit and the machine."""
    resolved = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return {
        "phase": phase,
        "git": git_state(),
        "seeds": seeds or {},
        "config": resolved,
        "base_model": model_hash(base_model),
        "adapters": {name: adapter_hash(path) for name, path in (adapters or {}).items()},
        "dtypes": dtypes or {},
        "machine": machine(),
    }
