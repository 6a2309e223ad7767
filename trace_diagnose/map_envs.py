"""map-envs: selected capabilities -> trace_gym environment ids.

Public API::

    load_registry(path=None, user_folders=True) -> list[dict]
    LexicalMatcher(registry).rank(capability) -> [(env_id, score), ...]
    await map_envs(capabilities, registry_path=None, client=None, ..., min_score=0.3)
        -> list[dict]

The environments are the rows of trace_gym's registry loader (`trace_gym.registration`:
each id's texts come from its spec) plus, with the default registry, the user environment
folders named by `TRACE_GYM_PATH` (synthesised environments), so a diagnosis can point at them
too. Ids are always read, never hard-coded.

Order of matching, per capability:

1. **Declared** ("tag"): its name equals an environment's `capability` or one of its `tags`.
2. **LLM** ("llm"), when a client is given: the model chooses from the enum of known ids plus
   "none" (a JSON-schema enum, checked again locally), with a rationale.
3. **Lexical** ("lexical"), without a client (or when the model's answer failed): the
   environment whose capability, tags, id and description best cover the capability's name
   and definition. No embeddings and no network: words are split (snake_case, camelCase,
   punctuation), stemmed (Snowball), folded through a small synonym table (verification /
   checking, eligibility / eligible, calculation / computation, ...) and weighted by their
   rarity across the registry (inverse document frequency), so a word every environment
   uses counts little and a distinctive one counts a lot. The score is 0.7 x the weighted
   share of the name's words the environment covers + 0.3 x the same for the definition
   (words in the capability, tags or id count fully, words only in the description 0.6).
   Below `min_score` the capability "needs a new environment".

Every row lists the best lexical `candidates` with their scores, so a reader sees the
runner-ups whichever method decided.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import ConfigError
from .llm import LLMClient, run_bounded
from .schema import Capability

NONE = "none"
USER_PATH_VARIABLE = "TRACE_GYM_PATH"  # trace_gym's; named here for the error of a refused folder


class EnvChoice(BaseModel):
    """Structured output of a matching call."""

    env_id: str
    rationale: str = ""


def load_registry(
    path: str | Path | None = None, user_folders: bool = True
) -> list[dict[str, Any]]:
    """The environments to match against (id, capability, description, tags), read by
    trace_gym's registry loader, so each environment's texts are those of its spec.

    `path` is a registry file of trace_gym's form (`id: module:SPEC`, importable modules);
    by default the package's own. With the default registry and `user_folders`, the
    environments of the folders named by `TRACE_GYM_PATH` follow, marked `"user_env": True`.
    trace_gym is light (gymnasium, numpy; no torch, no litellm)."""
    try:  # importing trace_gym registers its environments, TRACE_GYM_PATH folders included
        from trace_gym.errors import TraceGymError
        from trace_gym.registration import load_registry as load_specs
    except ImportError as exc:
        raise ConfigError(
            f"matching environments needs trace_gym, which cannot be imported ({exc}); "
            "install trace-rl"
        ) from exc
    except ValueError as exc:  # a TRACE_GYM_PATH folder trace_gym refused on import
        raise ConfigError(f"{USER_PATH_VARIABLE}: {exc}") from exc
    try:
        entries = load_specs(path, include_user_folders=user_folders and not path)
    except TraceGymError as exc:
        raise ConfigError(str(exc)) from exc
    return [
        {
            "id": e.id,
            "capability": e.capability,
            "description": e.description,
            "tags": list(e.tags),
            **({"user_env": True} if e.user_folder is not None else {}),
        }
        for e in entries
    ]


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def match_by_tags(cap: str, registry: list[dict[str, Any]]) -> list[str]:
    """Ids whose declared capability or tags name this capability."""
    key = _norm(cap)
    return [
        env["id"]
        for env in registry
        if key == _norm(str(env.get("capability", "")))
        or key in {_norm(str(t)) for t in env.get("tags") or []}
    ]


# Words that say nothing about which capability is meant (after lower-casing).
STOPWORDS = frozenset(
    """a an and any are as at be before being by can do does each either for from has have
    if in into is it its itself may must not of on or other over should so such than that the
    their them then there these they this those through to under up using via was were what
    when whenever where whether which while who whose will with within without would
    agent agents assistant ability able capability capabilities correctly properly task tasks
    user users customer customers skill skills trace v0 v1 v2 v3 v4 v5""".split()
)

# Word families a capability name and an environment may use for one idea. Each group is
# stemmed and folded onto its first word; a word may also expand into several ("multistep").
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("verify", "verification", "verifying", "check", "checking", "validate", "validation",
     "confirm", "confirmation"),
    ("eligible", "eligibility", "qualify", "qualification", "entitled", "entitlement"),
    ("precondition", "prerequisite"),
    ("policy", "rule", "regulation", "guideline", "compliance", "comply", "adherence",
     "adhere"),
    ("clarify", "clarification", "ask", "question", "inquire", "elicit"),
    ("information", "info", "detail", "details"),
    ("calculate", "calculation", "compute", "computation", "arithmetic", "math",
     "numerical", "numeric"),
    ("payment", "pay", "charge", "billing"),
    ("refund", "reimburse", "reimbursement"),
    ("error", "failure", "fault", "exception"),
    ("recover", "recovery", "retry"),
    ("communicate", "communication", "explain", "tell", "report", "reporting"),
    ("tool", "function", "api"),
    ("argument", "parameter", "param", "slot", "field"),
    ("select", "selection", "choose", "choice", "pick"),
    ("search", "lookup", "filter", "filtering", "find"),
    ("complete", "completion", "finish", "accomplish"),
    ("refuse", "refusal", "decline", "deny", "reject"),
    ("precise", "precision", "exact", "accurate", "accuracy"),
    ("book", "booking", "reservation", "reserve"),
    ("pressure", "escalation", "pushy", "manipulation", "persuasion"),
)  # fmt: skip
EXPANSIONS = {"multistep": ("multi", "step"), "multiturn": ("multi", "turn")}
FIELD_STRENGTH = {"name": 1.0, "description": 0.6}
NAME_WEIGHT = 0.7  # the rest goes to the definition
MIN_SCORE = 0.3  # below it: "needs a new environment"
N_CANDIDATES = 4


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@lru_cache(maxsize=1)
def _synonyms() -> dict[str, str]:
    stem = _stemmer().stemWord
    table: dict[str, str] = {}
    for group in SYNONYMS:
        canon = stem(group[0])
        for word in group:
            table[stem(word)] = canon
    return table


def terms(text: str) -> list[str]:
    """Normalised content words of `text` (split, stop words dropped, stemmed, folded)."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()
    stem, fold = _stemmer().stemWord, _synonyms()
    out: list[str] = []
    for word in re.findall(r"[a-z0-9]+", text):
        if word in STOPWORDS or len(word) < 2 or word.isdigit():
            continue
        for part in EXPANSIONS.get(word, (word,)):
            stemmed = stem(part)
            out.append(fold.get(stemmed, stemmed))
    return out


class LexicalMatcher:
    """Embedding-free similarity between capabilities and the registry's environments."""

    def __init__(self, registry: list[dict[str, Any]]) -> None:
        self.docs: dict[str, dict[str, float]] = {}  # env id -> term -> field strength
        for env in registry:
            fields = {
                "name": " ".join(
                    [
                        str(env["id"]).split("/")[-1],
                        str(env.get("capability", "")),
                        *map(str, env.get("tags") or []),
                    ]
                ),
                "description": str(env.get("description", "")),
            }
            strength: dict[str, float] = {}
            for name, text in fields.items():
                for t in terms(text):
                    strength[t] = max(strength.get(t, 0.0), FIELD_STRENGTH[name])
            self.docs[str(env["id"])] = strength
        n = len(self.docs)
        df: dict[str, int] = {}
        for strength in self.docs.values():
            for t in strength:
                df[t] = df.get(t, 0) + 1
        self.idf = {t: math.log((1 + n) / (1 + d)) + 1 for t, d in df.items()}
        self.unseen_idf = math.log(1 + n) + 1  # a word no environment uses is informative

    def _coverage(self, words: list[str], env_id: str) -> float | None:
        weights = {t: self.idf.get(t, self.unseen_idf) for t in words}
        total = sum(weights.values())
        if not total:
            return None
        doc = self.docs[env_id]
        return sum(w * doc.get(t, 0.0) for t, w in weights.items()) / total

    def score(self, cap: Capability, env_id: str) -> float:
        """0..1: how well the environment's texts cover the capability's name and definition."""
        name = self._coverage(terms(cap.name), env_id)
        definition = self._coverage(terms(cap.definition), env_id)
        if name is None:
            return definition or 0.0
        if definition is None or set(terms(cap.definition)) <= set(terms(cap.name)):
            return name
        return NAME_WEIGHT * name + (1 - NAME_WEIGHT) * definition

    def rank(self, cap: Capability, k: int = N_CANDIDATES) -> list[tuple[str, float]]:
        """The `k` best environments with a score above zero, best first (ties: registry order)."""
        scored = [(env_id, round(self.score(cap, env_id), 3)) for env_id in self.docs]
        scored = [s for s in scored if s[1] > 0]
        return sorted(scored, key=lambda s: -s[1])[:k]


def _choice_messages(cap: Capability, registry: list[dict[str, Any]]) -> list[dict[str, str]]:
    catalog = "\n".join(
        f"- {e['id']}: trains {e.get('capability', '?')}; {e.get('description', '')}; tags: {', '.join(map(str, e.get('tags') or []))}"
        for e in registry
    )
    system = (
        "You match a capability an AI agent lacks to the training environment that best trains it. "
        f'Choose exactly one id from the catalog, or "{NONE}" when no environment trains this capability well. '
        'Answer with JSON only: {"env_id": "...", "rationale": "one sentence"}.'
    )
    user = f"Capability: {cap.name}\nDefinition: {cap.definition}\n\nCatalog:\n{catalog}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _candidates(ranked: list[tuple[str, float]]) -> list[dict[str, Any]]:
    return [{"env_id": env_id, "score": score} for env_id, score in ranked]


async def map_envs(
    capabilities: list[Capability],
    registry_path: str | Path | None = None,
    client: LLMClient | None = None,
    show_progress: bool = True,
    min_score: float = MIN_SCORE,
) -> list[dict[str, Any]]:
    """Match each capability to environment ids; see the module docstring for the order.

    Each row: capability, env_ids, method ("tag", "llm", "lexical" or "none"), score (the
    lexical score of the chosen environment), needs_new_environment, rationale and
    candidates (the best lexical matches with their scores, best first)."""
    if not 0.0 <= min_score <= 1.0:
        raise ConfigError(f"--min-score={min_score}: give a score between 0 and 1")
    registry = load_registry(registry_path)
    ids = [str(e["id"]) for e in registry]
    matcher = LexicalMatcher(registry)
    out: list[dict[str, Any]] = []
    pending: list[tuple[int, Capability]] = []
    for cap in capabilities:
        ranked = matcher.rank(cap)
        row: dict[str, Any] = {"capability": cap.name, "candidates": _candidates(ranked)}
        tagged = match_by_tags(cap.name, registry)
        if tagged:
            row.update(
                env_ids=tagged,
                method="tag",
                score=1.0,
                needs_new_environment=False,
                rationale=f"declared in the registry (capability or tags of {', '.join(tagged)})",
            )
        else:
            row.update(_lexical(ranked, min_score))
            if client is not None:
                pending.append((len(out), cap))
        out.append(row)
    if client is None or not pending or not ids:
        return out
    schema = EnvChoice.model_json_schema()
    schema["properties"]["env_id"]["enum"] = ids + [NONE]

    def check(choice: EnvChoice) -> str | None:
        return (
            None
            if choice.env_id in ids or choice.env_id == NONE
            else f"env_id must be one of {json.dumps(ids + [NONE])}"
        )

    jobs = [
        lambda c=c: client.structured(
            "map_envs", _choice_messages(c, registry), EnvChoice, validate=check, json_schema=schema
        )
        for _, c in pending
    ]
    results = await run_bounded(
        jobs, client.config.concurrency, "map-envs", show_progress, client.budget
    )
    for (i, cap), res in zip(pending, results, strict=True):
        row = out[i]
        if res.value is None:
            row["rationale"] += f"; LLM matching failed, lexical match kept: {res.error}"
        elif res.value.env_id != NONE:
            row.update(
                env_ids=[res.value.env_id],
                method="llm",
                score=round(matcher.score(cap, res.value.env_id), 3),
                needs_new_environment=False,
                rationale=res.value.rationale,
            )
        else:
            row.update(
                env_ids=[],
                method="llm",
                score=None,
                needs_new_environment=True,
                rationale=f"needs a new environment: {res.value.rationale}",
            )
    return out


def _lexical(ranked: list[tuple[str, float]], min_score: float) -> dict[str, Any]:
    """The lexical decision: the best candidate if it reaches `min_score`."""
    if ranked and ranked[0][1] >= min_score:
        best, score = ranked[0]
        return {
            "env_ids": [best],
            "method": "lexical",
            "score": score,
            "needs_new_environment": False,
            "rationale": f"closest registry entry by name, tags and description "
            f"(score {score:.2f} >= {min_score:.2f})",
        }
    best = f"best {ranked[0][0]} at {ranked[0][1]:.2f}" if ranked else "no shared words"
    return {
        "env_ids": [],
        "method": "none",
        "score": ranked[0][1] if ranked else 0.0,
        "needs_new_environment": True,
        "rationale": f"needs a new environment: no registry entry is close enough ({best}, "
        f"threshold {min_score:.2f})",
    }


def describe(match: dict[str, Any], runner_ups: int = 3) -> str:
    """One line for the console: the decision, why, and the runner-up candidates."""
    method, score = match["method"], match.get("score")
    lexical = f"lexical score {score:.2f}" if isinstance(score, float) else ""
    why = {
        "tag": "declared in the registry",
        "lexical": lexical,
        "llm": f"chosen by the model; {lexical}" if match["env_ids"] else "the model chose none",
        "none": f"best {lexical} is under the threshold"
        if match.get("candidates")
        else "no shared words",
    }.get(method, method)
    head = ", ".join(match["env_ids"]) or "needs a new environment"
    others = [c for c in match.get("candidates", []) if c["env_id"] not in match["env_ids"]]
    line = f"{match['capability']}: {head} ({why})"
    if others:
        label = "runner-up" if match["env_ids"] else "closest"
        line += f"; {label}: " + ", ".join(
            f"{c['env_id']} {c['score']:.2f}" for c in others[:runner_ups]
        )
    return line
