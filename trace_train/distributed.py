"""Several training processes (``accelerate launch --num_processes N``): what our code adds.

The distribution itself is TRL's and accelerate's: ``GRPOTrainer`` samples every group's
rollouts across the processes (its ``RepeatSampler``), gathers the rewards to compute each
group's advantages over the whole group, and accelerate wraps the model in DDP, so one
optimizer step averages the gradients of every process (gloo on CPUs, NCCL on GPUs). What is
ours, and lives here:

* **Global positions in a group.** A rollout function sees only its process's slice of the
  generation batch (TRL: "the list of prompts allocated to the current process"), so which
  rollouts of a group carry the hint is decided over the gathered list of every process, and
  each process takes its own part (:func:`global_hints`).
* **One log, one adapter.** Files are written by the main process only (:func:`is_main`);
  what the rollouts of every process did is gathered to it for the training log
  (:func:`gather_to_all`).

Outside ``accelerate launch`` (``WORLD_SIZE`` unset) every helper is the single-process
identity and imports nothing heavy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any


def world_size() -> int:
    """Processes of this run (``WORLD_SIZE``, set by ``accelerate launch`` / ``torchrun``)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's index among them (``RANK``); 0 outside a launcher."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Whether this process writes the run's files (the one of rank 0)."""
    return rank() == 0


def gather_to_all(trainer: Any, items: Sequence[Any]) -> list[Any]:
    """Every process's ``items``, concatenated in process order, on every process
    (accelerate's ``gather_object``); ``items`` itself when there is one process."""
    if trainer.accelerator.num_processes == 1:
        return list(items)
    from accelerate.utils import gather_object

    return list(gather_object(list(items)))


def own_slice(trainer: Any, gathered: Sequence[Any], mine: int) -> list[Any]:
    """This process's part of a list gathered with :func:`gather_to_all`, given that it
    contributed ``mine`` items (processes may contribute different numbers)."""
    if trainer.accelerator.num_processes == 1:
        return list(gathered)
    counts = gather_to_all(trainer, [mine])
    start = sum(counts[: trainer.accelerator.process_index])
    return list(gathered[start : start + mine])


def global_hints(
    trainer: Any, keys: Sequence[str], assign: Callable[[list[str]], list[bool]]
) -> list[bool]:
    """``assign`` (which rollouts of each group get the hint, by position in the group)
    applied to the group as a whole rather than to this process's part of it."""
    everyone = gather_to_all(trainer, keys)
    return own_slice(trainer, assign(everyone), len(keys))


def wait_for_everyone(trainer: Any) -> None:
    """A barrier across the run's processes (no-op for one)."""
    if trainer.accelerator.num_processes > 1:
        trainer.accelerator.wait_for_everyone()


def barrier() -> None:
    """A barrier across the launched processes, outside a trainer (``trace run``'s stages):
    joins the launcher's process group through accelerate on first use; no-op for one."""
    if world_size() > 1:
        import torch
        from accelerate import PartialState

        # cpu=True where there is no GPU: otherwise accelerate sees no distributed setup on a
        # CPU machine and the barrier would silently be a no-op (gloo then, as in the trainer).
        PartialState(cpu=not torch.cuda.is_available()).wait_for_everyone()
