"""Per-task routing (TRACE v1): the frozen base model picks one adapter per task, zero-shot.

The base model reads the task's system prompt and first user message together with the
adapters' capability descriptions, each under a letter label, plus one more label for "no
adapter"; the label with the highest next-token log-probability wins (as in the TRACE paper's
routing: per conversation, top-1, label probabilities at temperature 1). The chosen adapter then
serves the whole episode. The decision depends only on that text, so it is testable without
environments.

Saved layout (``save_routed`` / ``load_routed``)::

    <dir>/trace_routed_config.json   base model, experts (name, description, folder)
    <dir>/experts/<name>/            unchanged PEFT adapters
"""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

CONFIG_NAME = "trace_routed_config.json"
BASE_DESCRIPTION = "None of the above: the task needs no special capability."


@dataclass
class RoutedExpert:
    """One adapter the router can choose."""

    name: str
    """Adapter name (also its folder under ``experts/``)."""
    adapter_dir: str
    """PEFT adapter folder (relative to the routed folder once saved)."""
    description: str
    """What the capability is and when a task needs it; the router reads this."""

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise ValueError(
                f"expert {self.name!r} has an empty description; describe when to use it"
            )


@dataclass
class RoutingConfig:
    """Per-task router settings."""

    base_model_name_or_path: str
    """Frozen base model (also the classifier)."""
    experts: list[RoutedExpert]
    """Adapters to choose from; the label order follows this list."""
    base_description: str = BASE_DESCRIPTION
    """Text of the extra "no adapter" option (always the last label)."""
    max_task_chars: int = 4000
    """The task text is cut to this many characters (start kept) before classification."""
    stats: dict = field(default_factory=dict)
    """Measured routing accuracy, for the record."""

    def __post_init__(self) -> None:
        if not self.experts:
            raise ValueError("experts is empty; give at least one adapter to route to")
        if len(self.experts) + 1 > len(string.ascii_uppercase):
            raise ValueError(f"{len(self.experts)} experts; at most 25 fit the letter labels")


def task_text(messages: Sequence[dict]) -> str:
    """The routing input: the system prompt (if any) and the first user message, nothing else."""
    parts = []
    for m in messages:
        if m.get("role") == "system" and not parts:
            parts.append(str(m.get("content", "")))
        if m.get("role") == "user":
            parts.append(str(m.get("content", "")))
            break
    return "\n\n".join(parts)


def classifier_prompt(config: RoutingConfig, text: str) -> str:
    """The question put to the base model: the options under letters, then the task."""
    lines = ["Which capability does this task need most? Options:"]
    options = [e.description for e in config.experts] + [config.base_description]
    for letter, desc in zip(string.ascii_uppercase, options, strict=False):
        lines.append(f"{letter}. {desc}")
    lines += ["", "Task:", text[: config.max_task_chars], "", "Answer with one letter."]
    return "\n".join(lines)


class RoutedPolicy:
    """The base model with every adapter loaded; chooses one per task and serves with it.

    ``choose_adapter(messages)`` returns an adapter name or ``None`` (base model);
    ``activate(name)`` switches the served adapter; ``model`` generates with the active one.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: object, config: RoutingConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        letters = string.ascii_uppercase[: len(config.experts) + 1]
        ids = [tokenizer(letter, add_special_tokens=False).input_ids for letter in letters]
        if any(len(i) != 1 for i in ids) or len({i[0] for i in ids}) != len(ids):
            raise ValueError(
                "the tokenizer does not encode each label letter as one distinct token"
            )
        self.label_ids = [i[0] for i in ids]
        self.active: str | None = None

    def label_logprobs(self, messages: Sequence[dict]) -> torch.Tensor:
        """Log-probabilities over the labels (experts in order, then base), renormalised over
        the labels, from the *base* model's next token after the classifier prompt."""
        prompt = classifier_prompt(self.config, task_text(messages))
        chat = [{"role": "user", "content": prompt}]
        text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad(), self.model.disable_adapter():
            logits = self.model(ids.to(self.model.device)).logits[0, -1]
        return torch.log_softmax(logits[self.label_ids].float(), dim=-1)

    def choose_adapter(self, messages: Sequence[dict]) -> str | None:
        """The adapter for this task (``None``: the base model)."""
        best = int(self.label_logprobs(messages).argmax())
        return None if best == len(self.config.experts) else self.config.experts[best].name

    def activate(self, name: str | None) -> None:
        """Serve with adapter ``name`` (``None``: base model) until the next call."""
        names = [e.name for e in self.config.experts]
        if name is not None and name not in names:
            raise ValueError(f"unknown adapter {name!r}; adapters are {names}")
        if name is None:
            self.model.base_model.disable_adapter_layers()
        else:
            self.model.base_model.enable_adapter_layers()
            self.model.set_adapter(name)
        self.active = name

    def route(self, messages: Sequence[dict]) -> str | None:
        """Choose the adapter for ``messages`` and activate it; returns the choice."""
        choice = self.choose_adapter(messages)
        self.activate(choice)
        return choice


def build_routed(config: RoutingConfig, dtype: torch.dtype = torch.float32) -> RoutedPolicy:
    """Load the base model and every adapter (peft) into a :class:`RoutedPolicy`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_train.quiet import quiet

    with quiet():
        base = AutoModelForCausalLM.from_pretrained(config.base_model_name_or_path, dtype=dtype)
        first, *rest = config.experts
        model = PeftModel.from_pretrained(base, first.adapter_dir, adapter_name=first.name)
        for e in rest:
            model.load_adapter(e.adapter_dir, adapter_name=e.name)
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(config.base_model_name_or_path)
    return RoutedPolicy(model, tokenizer, config)


def save_routed(config: RoutingConfig, out_dir: str | Path) -> Path:
    """Write the config and copies of the adapters to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = asdict(config)
    for e in data["experts"]:
        target = out / "experts" / e["name"]
        if Path(e["adapter_dir"]).resolve() != target.resolve():
            shutil.copytree(e["adapter_dir"], target, dirs_exist_ok=True)
        e["adapter_dir"] = f"experts/{e['name']}"
    (out / CONFIG_NAME).write_text(json.dumps(data, indent=2) + "\n")
    return out


def load_routed(routed_dir: str | Path) -> RoutedPolicy:
    """Load a folder written by :func:`save_routed` (the harness's ``routed:DIR`` policy)."""
    root = Path(routed_dir)
    if not (root / CONFIG_NAME).is_file():
        raise ValueError(f"{root} has no {CONFIG_NAME}; write it with save_routed")
    data = json.loads((root / CONFIG_NAME).read_text())
    data["experts"] = [
        RoutedExpert(**{**e, "adapter_dir": str(root / e["adapter_dir"])}) for e in data["experts"]
    ]
    return build_routed(RoutingConfig(**data))


def task_routing_accuracy(
    policy: RoutedPolicy, tasks: Sequence[tuple[Sequence[dict], str | None]]
) -> dict[str, float | dict]:
    """Fraction of ``(messages, expected adapter or None)`` tasks routed as expected, overall
    and per expected adapter, plus the confusion counts ``{expected: {chosen: n}}``."""
    confusion: dict[str, dict[str, int]] = {}
    hits = 0
    for messages, expected in tasks:
        chosen = policy.choose_adapter(messages)
        hits += chosen == expected
        row = confusion.setdefault(str(expected), {})
        row[str(chosen)] = row.get(str(chosen), 0) + 1
    per = {k: v.get(k, 0) / sum(v.values()) for k, v in confusion.items()}
    return {"accuracy": hits / max(len(tasks), 1), "per_expected": per, "confusion": confusion}
