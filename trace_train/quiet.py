"""A quiet console while models load and train.

Loading a model or building a trainer makes the libraries underneath talk: transformers'
"Loading weights" progress bars and notices, FutureWarnings about arguments that the
libraries themselves pass to each other (``is_gradient_checkpointing``, ...), TRL's
"experimental" notices. None of it is something a trace-rl user can act on, and it buries the
one progress display per stage. :func:`quiet` silences that for the duration of a block and
restores the previous settings afterwards; the trainers' own step progress bars and our
messages (the ``trace_train`` logger) still show, and :func:`step_bar_only` keeps a trainer
from printing a metrics dictionary under its bar at every step.

    with quiet():
        model = AutoModelForCausalLM.from_pretrained(path)
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import warnings
from collections.abc import Iterator

#: Libraries whose loggers are lowered to errors inside :func:`quiet`.
LIBRARY_LOGGERS = ("transformers", "peft", "trl", "accelerate", "datasets", "huggingface_hub")


def silence_trl_notices() -> None:
    """TRL prints a notice when its experimental modules are imported unless this is set;
    it is read at import time, so set it before ``import trl``."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence library warnings, notices and loading bars inside the block."""
    silence_trl_notices()
    levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    switches = _library_bars()
    with warnings.catch_warnings():
        # Deprecation notices raised inside the libraries (one library calling another's
        # renamed API): nothing in trace-rl's calls to fix, and users cannot act on them.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        for bars in switches:
            bars.disable_progress_bar()
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            for bars in switches:
                if bars.was_enabled:
                    bars.enable_progress_bar()


def step_bar_only(trainer) -> None:  # noqa: ANN001
    """Keep a trainer's step progress bar (with its time remaining) but show the loss and
    reward on it instead of printing every logged metrics dictionary as a new line; the
    metrics are all in ``training_log.jsonl``."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class StepBar(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs) -> None:  # noqa: ANN001
            if self.training_bar is not None and logs:
                shown = {k: f"{logs[k]:.3g}" for k in ("loss", "reward")
                         if isinstance(logs.get(k), int | float)}  # fmt: skip
                self.training_bar.set_postfix(shown, refresh=False)

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(StepBar())


class _Bars:
    def __init__(self, module) -> None:  # noqa: ANN001
        self.module = module
        self.was_enabled = module.is_progress_bar_enabled()

    def disable_progress_bar(self) -> None:
        self.module.disable_progress_bar()

    def enable_progress_bar(self) -> None:
        self.module.enable_progress_bar()


def _library_bars() -> list[_Bars]:
    """Progress-bar switches that follow a library's own logging module rather than the logger
    level: transformers' ("Loading weights", "Writing model shards") and datasets' (the
    dataset preparation a trainer runs: "Building labels", "Truncating", ...)."""
    switches = []
    for module in ("transformers.utils.logging", "datasets.utils.logging"):
        try:
            switches.append(_Bars(importlib.import_module(module)))
        except ImportError:
            continue
    return switches
