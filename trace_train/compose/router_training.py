"""Train the token routers of a mixture with every base and expert weight frozen.

Recipe:

1. **Features.** Teacher-force each labelled sequence (a rollout of capability k, labelled by
   the environment it came from) with *oracle* routing, i.e. every token forced to slot k, and
   capture each router's input (the block's normalised hidden state). These are the inputs the
   router sees at inference when it routes correctly.
2. **Initialise** each router from the mean hidden state per slot (nearest-centroid form:
   ``logit_s = scale * <x - mean, unit(mean_s - mean)>``), which already routes well.
3. **Supervised token classification**: class-balanced cross-entropy with label smoothing, a
   small Switch-Transformer load-balancing loss and a router z-loss, on the cached features.
   Because the features are cached and the experts are frozen, each router is a small linear
   classifier trained on its own; the hard top-1 choice needs no gradient estimator here. (For
   training routers through the LM loss instead, ``MoEState.straight_through`` gives a
   straight-through gate: forward value 1, gradient of the chosen slot's probability.)
4. **Closed-loop check** (:func:`closed_loop_check`): generate under learned routing and
   compare each family's reward with its own expert forced everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from trace_train.compose.moe import moe_state

IGNORE = -100


@dataclass
class LabelledSequence:
    """Token ids of one rollout and the slot (expert name, or ``"base"``) that should serve it."""

    input_ids: list[int]
    """Prompt, model turns and environment turns, as the model saw them."""
    slot: str
    """Expert name (the capability whose environment produced it) or ``"base"``."""
    label_mask: list[bool] | None = None
    """Tokens whose route is supervised (default all); e.g. drop shared template tokens."""

    def __post_init__(self) -> None:
        if not self.input_ids:
            raise ValueError("input_ids is empty; give the rollout's token ids")
        if self.label_mask is not None and len(self.label_mask) != len(self.input_ids):
            raise ValueError(
                f"label_mask has {len(self.label_mask)} entries for {len(self.input_ids)} "
                "input_ids; give one bool per token"
            )


@dataclass
class RouterTrainingConfig:
    """Hyper-parameters of supervised router training (defaults suit small models)."""

    steps: int = 200
    """Optimiser steps per router (full batch of cached features when it fits)."""
    lr: float = 1e-2
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    label_smoothing: float = 0.05
    """Cross-entropy label smoothing (shared tokens are genuinely ambiguous)."""
    balance_coef: float = 0.01
    """Weight of the Switch load-balancing loss ``E * sum_i f_i * P_i``; 0 disables it."""
    z_loss_coef: float = 1e-3
    """Weight of the router z-loss ``mean(logsumexp(logits)^2)``; 0 disables it."""
    init: str = "centroid"
    """``centroid`` (mean hidden state per slot) or ``keep`` (start from current weights)."""
    centroid_scale: float = 10.0
    """Logit scale of the centroid initialisation."""
    dagger_rounds: int = 2
    """Rounds of DAgger-style relabelling: re-collect the router inputs under the *learned*
    routing (same sequences, same labels), add them to the data, refit. Early misroutes shift
    deeper blocks' inputs away from the oracle features; without this, the deep routers of the
    tiny two-family check fell to ~55 % held-out accuracy (100 % on oracle features)."""
    max_tokens: int = 8192
    """Cap on cached feature rows per block (a seeded random subset beyond it)."""
    seed: int = 0
    """Seed for the subset and minibatch order."""

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps={self.steps} must be >= 0 (0: initialisation only)")
        if self.dagger_rounds < 0:
            raise ValueError(f"dagger_rounds={self.dagger_rounds} must be >= 0")
        if self.init not in ("centroid", "keep"):
            raise ValueError(f"init={self.init!r}; use 'centroid' or 'keep'")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={self.label_smoothing} must be in [0, 1)")
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr} must be > 0")


@dataclass
class RouterTrainingResult:
    """What router training measured (also written to the model card)."""

    accuracy: dict[str, float] = field(default_factory=dict)
    """Token routing accuracy per router block (key ``"block_N"``) and ``"mean"``."""
    final_loss: dict[str, float] = field(default_factory=dict)
    """Last cross-entropy per router block."""
    tokens: int = 0
    """Supervised tokens per block."""


def collect_features(
    model: nn.Module, sequences: Sequence[LabelledSequence], *, oracle: bool = True
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Router inputs: ``{block: (features (N, d), slot labels (N,))}``.

    ``oracle=True`` forces every token to its label's slot (the inputs a correct router sees);
    ``oracle=False`` uses the current learned routing (the inputs the router actually sees,
    for DAgger-style relabelling). Unsupervised tokens (``label_mask`` False) are dropped.
    """
    state = moe_state(model)
    feats: dict[int, list[torch.Tensor]] = {}
    labels: list[torch.Tensor] = []
    device = next(model.parameters()).device
    state.capture = {}
    try:
        with torch.no_grad():
            for seq in sequences:
                slot = state.slot_index(seq.slot)
                keep = torch.tensor(seq.label_mask or [True] * len(seq.input_ids))
                ids = torch.tensor([seq.input_ids], device=device)
                with state.forced(slot) if oracle else contextlib.nullcontext():
                    model(ids)
                for block, chunks in state.capture.items():
                    feats.setdefault(block, []).append(chunks.pop()[keep].float().cpu())
                labels.append(torch.full((int(keep.sum()),), slot, dtype=torch.long))
    finally:
        state.capture = None
    y = torch.cat(labels)
    return {b: (torch.cat(x), y) for b, x in feats.items()}


def centroid_init(router: nn.Linear, x: torch.Tensor, y: torch.Tensor, scale: float) -> None:
    """Set ``router`` to the nearest-centroid classifier of ``(x, y)``; unseen slots get a low
    logit (``-scale``) so they are not picked before they have data."""
    mean = x.mean(0)
    weight = torch.zeros_like(router.weight, dtype=torch.float32)
    bias = torch.full((weight.shape[0],), -scale)
    for s in range(weight.shape[0]):
        rows = x[y == s]
        if len(rows):
            weight[s] = scale * F.normalize(rows.mean(0) - mean, dim=0)
            bias[s] = -(weight[s] @ mean)
    with torch.no_grad():
        router.weight.copy_(weight)
        router.bias.copy_(bias)


def balance_loss(logits: torch.Tensor) -> torch.Tensor:
    """Switch-Transformer load balancing ``E * sum_i f_i * P_i`` (1.0 when perfectly uniform):
    ``f_i`` the fraction of tokens whose top-1 is i, ``P_i`` the mean router probability."""
    n_slots = logits.shape[-1]
    probs = logits.softmax(-1)
    frac = F.one_hot(probs.argmax(-1), n_slots).float().mean(0)
    return n_slots * (frac * probs.mean(0)).sum()


def _fit_router(
    router: nn.Linear, x: torch.Tensor, y: torch.Tensor, cfg: RouterTrainingConfig
) -> float:
    n_slots = router.weight.shape[0]
    counts = torch.bincount(y, minlength=n_slots).float()
    class_weight = torch.where(counts > 0, counts.sum() / (counts.clamp(min=1) * n_slots), 0.0)
    params = [router.weight, router.bias]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss = torch.tensor(0.0)
    x = x.to(router.weight.dtype)
    for _ in range(cfg.steps):
        logits = router(x)
        ce = F.cross_entropy(
            logits.float(), y, weight=class_weight, label_smoothing=cfg.label_smoothing
        )
        loss = ce + cfg.balance_coef * balance_loss(logits)
        loss = loss + cfg.z_loss_coef * logits.float().logsumexp(-1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def train_routers(
    model: nn.Module,
    sequences: Sequence[LabelledSequence],
    config: RouterTrainingConfig | None = None,
) -> RouterTrainingResult:
    """Initialise and train every router of ``model`` on labelled rollouts (experts frozen).

    Oracle-routed features first, then ``dagger_rounds`` rounds adding features collected under
    the learned routing. Returns per-block token accuracy on the last round's learned-routing
    features (held-out accuracy: :func:`token_routing_accuracy`). Saves nothing; see ``save_moe``.
    """
    cfg = config or RouterTrainingConfig()
    state = moe_state(model)
    gen = torch.Generator().manual_seed(cfg.seed)
    data = collect_features(model, sequences, oracle=True)
    result = RouterTrainingResult()
    for round_ in range(cfg.dagger_rounds + 1):
        if round_:
            fresh = collect_features(model, sequences, oracle=False)
            data = {
                b: (torch.cat([x, fresh[b][0]]), torch.cat([y, fresh[b][1]]))
                for b, (x, y) in data.items()
            }
        for block, (x, y) in sorted(data.items()):
            if len(y) > cfg.max_tokens:
                keep = torch.randperm(len(y), generator=gen)[: cfg.max_tokens]
                x, y = x[keep], y[keep]
            router = state.routers[str(block)]
            if cfg.init == "centroid" and round_ == 0:
                centroid_init(router, x, y, cfg.centroid_scale)
            with torch.enable_grad():
                result.final_loss[f"block_{block}"] = _fit_router(router, x, y, cfg)
            result.tokens = len(y)
    with torch.no_grad():
        final = collect_features(model, sequences, oracle=False)
        for block, (x, y) in sorted(final.items()):
            router = state.routers[str(block)]
            acc = (router(x.to(router.weight.dtype)).argmax(-1) == y).float().mean()
            result.accuracy[f"block_{block}"] = float(acc)
    result.accuracy["mean"] = sum(result.accuracy.values()) / max(len(result.accuracy), 1)
    return result


def token_routing_accuracy(
    model: nn.Module, sequences: Sequence[LabelledSequence]
) -> dict[str, float | dict[str, float]]:
    """Teacher-force ``sequences`` under *learned* routing; the fraction of supervised tokens
    routed to their label, per block, overall (``"mean"``), and per slot (``"per_slot"``),
    plus the fraction of all routed tokens per slot (``"slot_fraction"``)."""
    state = moe_state(model)
    names = state.config.slot_names
    hits: dict[int, list[torch.Tensor]] = {}
    labels: list[torch.Tensor] = []
    device = next(model.parameters()).device
    state.record, state.recorded = True, {}
    try:
        with torch.no_grad():
            for seq in sequences:
                model(torch.tensor([seq.input_ids], device=device))
                keep = torch.tensor(seq.label_mask or [True] * len(seq.input_ids))
                label = state.slot_index(seq.slot)
                for block, slots in state.recorded.items():
                    hits.setdefault(block, []).append(slots.pop().reshape(-1)[keep])
                labels.append(torch.full((int(keep.sum()),), label))
    finally:
        state.record, state.recorded = False, {}
    y = torch.cat(labels)
    routed = {b: torch.cat(h) for b, h in sorted(hits.items())}
    out: dict[str, float | dict[str, float]] = {
        f"block_{b}": float((r == y).float().mean()) for b, r in routed.items()
    }
    out["mean"] = sum(out.values()) / len(routed)
    every = torch.cat(list(routed.values()))
    yy = y.repeat(len(routed))
    out["per_slot"] = {
        names[s]: float((every[yy == s] == s).float().mean()) for s in yy.unique().tolist()
    }
    out["slot_fraction"] = {n: float((every == i).float().mean()) for i, n in enumerate(names)}
    return out


RewardFn = Callable[[str], float]


def closed_loop_check(
    model: nn.Module,
    tokenizer: object,
    families: dict[str, tuple[list[str], RewardFn]],
    *,
    max_new_tokens: int = 16,
) -> dict[str, dict[str, float]]:
    """Greedy-generate each family's prompts under learned routing and with the family's own
    expert forced; return ``{expert: {"moe": mean reward, "expert": ..., "ratio": ...}}``.

    ``families`` maps an expert name to (chat-templated prompt strings, reward of a completion).
    """
    state = moe_state(model)
    device = next(model.parameters()).device

    def mean_reward(prompts: list[str], reward: RewardFn) -> float:
        total = 0.0
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
            total += reward(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
        return total / max(len(prompts), 1)

    report = {}
    for name, (prompts, reward) in families.items():
        moe = mean_reward(prompts, reward)
        with state.forced(name):
            own = mean_reward(prompts, reward)
        report[name] = {"moe": moe, "expert": own, "ratio": moe / own if own else float("nan")}
    return report
