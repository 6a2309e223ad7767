"""llm: the only module that talks to litellm: cache, retries, concurrency, cost cap.

Public API::

    LLMConfig(model="openai/gpt-4o-mini", api_base=None, concurrency=8, timeout=120, ...)
    Cache(path)                       # SQLite, one row per completed request
    LLMClient(config, cache)
        await client.structured(stage, messages, schema, validate=None, sample=0)
            -> CallResult(value | None, error | None)
        client.estimate_cost(prompt_tokens, output_tokens) -> float | None
    run_bounded(coroutines, limit, label, show_progress, budget) -> list  # concurrency limit
    Budget(cap)                       # one command's spend, calls and cache hits

**Cache and resume.** Every completed request (valid answer or not) is stored under the
SHA-256 of the exact request (model, decoding parameters, sample index, messages, schema)
and committed at once. Validation is deterministic, so replaying the cache walks the same
schema-repair path: rerunning a command never asks the model again for a request that
already completed, and `cache_only=True` replays without any network call (a miss raises
`CacheMiss`). Failures are classified (`classify_error`): bad credentials, an unknown model
or an endpoint that never answered stop the command at once (`LLMUnavailable`, exit code 3,
naming the option to change), and so does a missing API key, checked before the first
request with litellm's `validate_environment`; 429, 5xx and timeouts are retried with
backoff; any other refusal fails that request only. An endpoint that answered and then went
away is retried too, but not for long: after `max_connection_failures` requests in a row
failed to connect (or timed out), or `dead_after` seconds without one success while they
fail, the command stops with exit code 3 and one line; everything finished is in the cache,
so rerunning resumes. Failures are recorded in an `errors` table, never cached as answers.

**Concurrency and rate.** At most `concurrency` requests are in flight (an asyncio
semaphore), and with `rpm` the requests (first tries, retries and repairs alike) are spaced
at least 60/rpm seconds apart by `aiolimiter`'s leaky bucket. litellm's own limits do not
fit a client: its Router enforces a deployment's `rpm` and `max_parallel_requests` by
refusing the call over the limit (`RateLimitError`, checked against litellm 1.110), which
would turn a limit into failed requests instead of waiting.

**Structured output.** The pydantic schema goes to litellm as a `json_schema`
`response_format`; the answer is parsed and validated locally anyway (many providers ignore
the schema). An invalid answer is shown back to the model with the validation error, up to
`repair_retries` times; after that the item stays unanswered with the reason.

**Cost.** Per-call cost comes from token usage times the price per token (`price_in` /
`price_out` in USD per million tokens, else litellm's bundled price map). `max_cost` is a
hard cap for a whole command: the stages of one command share a `Budget`, and a call is not
started when the spend so far plus the estimates of calls in flight and of this call would
exceed it (`BudgetExceeded`, exit code 2; finished work is cached).

litellm is imported lazily inside functions, so analysis and reporting work without it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import BudgetExceeded, CacheMiss, LLMError, LLMUnavailable
from .render import approx_tokens

T = TypeVar("T")
Validator = Callable[[Any], "str | None"]


@dataclass
class LLMConfig:
    """LLM access settings (one field per concern; the CLI help is derived from these).

    model: litellm `provider/model` string, e.g. `openai/gpt-4o-mini` or `openai/stub` with
        `api_base` for an OpenAI-compatible local server.
    api_base / api_key: passed to litellm as is (api_key falls back to the provider's env var).
    concurrency: requests in flight at once (asyncio semaphore; `--max-concurrency`). Default 8.
    rpm: requests per minute at most (first tries, retries and repairs), paced evenly; None
        (default) sets no limit. Use the provider's limit to avoid 429s altogether.
    max_connection_failures: requests in a row that failed to connect or timed out, after
        the endpoint had answered, before the command stops (exit code 3). Default 16.
    dead_after: seconds without one successful request, while requests fail to connect,
        before the command stops (exit code 3). Default 120.
    timeout: seconds per request. Default 120.
    retries: transport retries per request (HTTP 5xx, 429, timeouts, connection errors), with
        exponential backoff from `backoff` seconds. Default 3.
    repair_retries: re-asks after an answer fails schema or evidence validation. Default 2.
    temperature / max_tokens: decoding parameters (part of the cache key).
    max_cost: hard cap in USD for new (uncached) calls; None disables it.
    price_in / price_out: USD per million input / output tokens; override litellm's price map
        (required for `max_cost` or a dry-run estimate when the model is not in the map).
    cache_only: replay from the cache only; a miss raises `CacheMiss`.
    """

    model: str
    api_base: str | None = None
    api_key: str | None = None
    concurrency: int = 8
    timeout: float = 120.0
    retries: int = 3
    repair_retries: int = 2
    temperature: float = 0.7
    max_tokens: int = 4096
    max_cost: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    cache_only: bool = False
    backoff: float = 0.5
    rpm: float | None = None
    max_connection_failures: int = 16
    dead_after: float = 120.0

    def __post_init__(self) -> None:
        if "/" not in self.model:
            raise LLMError(
                f"--model {self.model!r} must be a litellm 'provider/model' string, e.g. openai/gpt-4o-mini"
            )
        if self.concurrency < 1:
            raise LLMError(f"--max-concurrency={self.concurrency} must be >= 1")
        if self.rpm is not None and self.rpm <= 0:
            raise LLMError(f"--rpm={self.rpm} must be > 0 (leave it out for no limit)")
        if self.max_connection_failures < 1:
            raise LLMError(f"--max-connection-failures={self.max_connection_failures} must be >= 1")
        if self.dead_after <= 0:
            raise LLMError(f"--dead-after={self.dead_after} must be > 0 seconds")
        if self.max_cost is not None and self.max_cost < 0:
            raise LLMError(f"--max-cost={self.max_cost} must be >= 0")
        if (self.price_in is None) != (self.price_out is None):
            raise LLMError(
                "give both --price-in and --price-out (USD per million tokens), or neither"
            )


@dataclass
class Budget:
    """The ledger of one command, shared by every stage's client: spend against the
    `--max-cost` cap, and the counts its progress output and final summary line show."""

    cap: float | None = None
    spent: float = 0.0
    reserved: float = 0.0
    priced: bool = True  # False once a client had no price: spend shows as unknown
    calls: int = 0  # requests answered by the model
    failed: int = 0  # requests that got an error (retried or not)
    cache_hits: int = 0
    unlabelled: int | None = None  # set by the label stage: trajectories left unlabelled
    usable: int | None = None

    def summary(self) -> str:
        """One line: calls made, cost, cache hits and (after labelling) unlabelled count."""
        cost = f"{self.spent:.4f} USD" if self.priced else "cost unknown (no price for the model)"
        line = f"LLM calls: {self.calls} made"
        if self.failed:
            line += f" ({self.failed} failed requests)"
        line += f", {self.cache_hits} from cache, {cost}"
        if self.unlabelled is not None:
            line += f"; unlabelled: {self.unlabelled} of {self.usable} trajectories"
        return line


@dataclass
class CallResult:
    """Outcome of one structured call: a validated value, or the reason there is none."""

    value: Any = None
    error: str | None = None
    calls: int = 0  # network requests made for this result (0 when fully cached)


class Cache:
    """Persistent SQLite cache of completed requests; every write is committed at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives the process being killed (SIGKILL); only a power
        # loss can drop the last commits. FULL would fsync every call for no gain here.
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, stage TEXT, model TEXT,
                request TEXT, response TEXT, prompt_tokens INT, completion_tokens INT,
                cost REAL, created REAL);
            CREATE TABLE IF NOT EXISTS errors (id INTEGER PRIMARY KEY, key TEXT, stage TEXT,
                error TEXT, created REAL);
            """
        )
        self.db.commit()

    def get(self, key: str) -> str | None:
        """The stored response text for a request key, if any."""
        row = self.db.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(
        self,
        key: str,
        stage: str,
        model: str,
        request: dict[str, Any],
        response: str,
        usage: tuple[int, int],
        cost: float | None,
    ) -> None:
        """Store one completed request and commit (an interrupt loses only calls in flight)."""
        self.db.execute(
            "INSERT OR IGNORE INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                stage,
                model,
                json.dumps(request),
                response,
                usage[0],
                usage[1],
                cost,
                time.time(),
            ),
        )
        self.db.commit()

    def record_error(self, key: str, stage: str, error: str) -> None:
        """Log a failed attempt (retried later; never served as an answer)."""
        self.db.execute(
            "INSERT INTO errors (key, stage, error, created) VALUES (?, ?, ?, ?)",
            (key, stage, error, time.time()),
        )
        self.db.commit()

    def stats(self) -> dict[str, Any]:
        """Counts, tokens and cost per stage, and the number of recorded errors."""
        rows = self.db.execute(
            "SELECT stage, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost) FROM calls GROUP BY stage"
        ).fetchall()
        errors = self.db.execute("SELECT stage, COUNT(*) FROM errors GROUP BY stage").fetchall()
        return {
            "stages": {
                s: {
                    "calls": n,
                    "prompt_tokens": pi or 0,
                    "completion_tokens": po or 0,
                    "cost_usd": c or 0.0,
                }
                for s, n, pi, po, c in rows
            },
            "errors": dict(errors),
        }

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def canonical_key(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request."""
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
    ).hexdigest()


def _litellm() -> Any:
    # The bundled price map: importing litellm must not fetch anything from the network.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise LLMError("litellm is not installed: pip install 'trace-rl[diagnose]'") from exc
    litellm.suppress_debug_info = True  # its "Give Feedback" banner would flood the progress output
    return litellm


def response_format(schema: type[BaseModel] | dict[str, Any], name: str) -> dict[str, Any]:
    """An OpenAI `json_schema` response_format for a pydantic model or a raw JSON schema."""
    body = schema if isinstance(schema, dict) else schema.model_json_schema()
    return {"type": "json_schema", "json_schema": {"name": name, "schema": body, "strict": False}}


class LLMClient:
    """Structured LLM calls with cache, retries, schema repair, concurrency and a cost cap."""

    def __init__(self, config: LLMConfig, cache: Cache, budget: Budget | None = None) -> None:
        self.config = config
        self.cache = cache
        # One budget may be shared by the clients of several stages: --max-cost caps a command.
        self.budget = budget if budget is not None else Budget(config.max_cost)
        self.spent = 0.0  # this client's own spend (per-stage accounting)
        self.network_calls = 0
        self.cache_hits = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.prices = self._prices()
        if self.prices is None:
            self.budget.priced = False
        self.health = EndpointHealth(config.max_connection_failures, config.dead_after)
        self._limiter: Any = None  # aiolimiter.AsyncLimiter, made inside the event loop
        self._checked_credentials = False

    def _prices(self) -> tuple[float, float] | None:
        cfg = self.config
        if cfg.price_in is not None and cfg.price_out is not None:
            return cfg.price_in / 1e6, cfg.price_out / 1e6
        if cfg.cache_only:
            return None
        entry = _litellm().model_cost.get(cfg.model) or _litellm().model_cost.get(
            cfg.model.split("/", 1)[1]
        )
        if entry and entry.get("input_cost_per_token") is not None:
            return float(entry["input_cost_per_token"]), float(
                entry.get("output_cost_per_token") or 0.0
            )
        if cfg.max_cost is not None:
            raise LLMError(
                f"no price known for {cfg.model!r}: pass --price-in and --price-out (USD per million tokens) to use --max-cost"
            )
        return None

    def estimate_cost(self, prompt_tokens: int, output_tokens: int) -> float | None:
        """USD for a call of this size, or None when the price is unknown."""
        if self.prices is None:
            return None
        return prompt_tokens * self.prices[0] + output_tokens * self.prices[1]

    def request_key(
        self, stage: str, messages: list[dict[str, str]], schema_name: str, sample: int
    ) -> tuple[str, dict[str, Any]]:
        """The cache key and canonical request of a call."""
        request = {
            "stage": stage,
            "model": self.config.model,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "sample": sample,
            "schema": schema_name,
            "messages": messages,
        }
        return canonical_key(request), request

    def is_cached(
        self, stage: str, messages: list[dict[str, str]], schema_name: str, sample: int = 0
    ) -> bool:
        """True when the first request of a call is already in the cache."""
        return self.cache.get(self.request_key(stage, messages, schema_name, sample)[0]) is not None

    async def structured(
        self,
        stage: str,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        validate: Validator | None = None,
        sample: int = 0,
        json_schema: dict[str, Any] | None = None,
    ) -> CallResult:
        """Ask for JSON matching `schema` (and `validate`), repairing invalid answers."""
        conversation = list(messages)
        result = CallResult()
        last_error = "no answer"
        for _ in range(self.config.repair_retries + 1):
            text, err, calls = await self._complete(
                stage, conversation, schema, sample, json_schema
            )
            result.calls += calls
            if text is None:
                result.error = err
                return result
            value, last_error = self._check(text, schema, validate)
            if last_error is None:
                result.value = value
                return result
            conversation = conversation + [
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": f"Your answer was invalid: {last_error}\nAnswer again with the complete JSON object only.",
                },
            ]
        result.error = f"invalid after {self.config.repair_retries} repair attempts: {last_error}"
        return result

    @staticmethod
    def _check(
        text: str, schema: type[BaseModel], validate: Validator | None
    ) -> tuple[Any, str | None]:
        try:
            value = schema.model_validate_json(_strip_fences(text))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "answer"
            return (
                None,
                f"{'malformed JSON' if first['type'] == 'json_invalid' else 'schema violation'} at {where}: {first['msg']}",
            )
        problem = validate(value) if validate else None
        return (None, problem) if problem else (value, None)

    async def _complete(
        self,
        stage: str,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        sample: int,
        json_schema: dict[str, Any] | None,
    ) -> tuple[str | None, str | None, int]:
        """One request: from the cache, or from the model with transport retries."""
        key, request = self.request_key(stage, messages, schema.__name__, sample)
        cached = self.cache.get(key)
        if cached is not None:
            self.cache_hits += 1
            self.budget.cache_hits += 1
            return cached, None, 0
        if self.config.cache_only:
            raise CacheMiss(
                f"--cache-only: the {stage} request {key[:12]} is not in {self.cache.path}; rerun without --cache-only"
            )
        self.check_credentials()
        fmt = response_format(json_schema or schema, schema.__name__)
        error = "no attempt"
        for attempt in range(self.config.retries + 1):
            estimate = self._reserve(messages)
            try:
                await self._pace()
                response = await self._acompletion(messages, fmt, sample)
            except _api_errors() as exc:
                kind = classify_error(exc, reached_before=self.network_calls > 0)
                if kind in FATAL_KINDS:
                    raise LLMUnavailable(self._fatal_message(kind, exc)) from exc
                error = f"{type(exc).__name__}: {_short(exc)}"
                self.budget.failed += 1
                self.cache.record_error(key, stage, error)
                if kind == "connection":
                    dead = self.health.failed()
                    if dead:
                        raise LLMUnavailable(self._dead_message(dead, exc)) from exc
                if kind == "request":
                    return None, error, attempt + 1
                await asyncio.sleep(self.config.backoff * 2**attempt)
                continue
            finally:
                self.budget.reserved -= estimate
            self.health.ok()
            self.network_calls += 1
            self.budget.calls += 1
            text = response.choices[0].message.content or ""
            usage = getattr(response, "usage", None)
            tokens = (
                getattr(usage, "prompt_tokens", 0) or 0,
                getattr(usage, "completion_tokens", 0) or 0,
            )
            cost = self.estimate_cost(*tokens)
            self.spent += cost or 0.0
            self.budget.spent += cost or 0.0
            self.prompt_tokens += tokens[0]
            self.completion_tokens += tokens[1]
            self.cache.put(key, stage, self.config.model, request, text, tokens, cost)
            return text, None, attempt + 1
        return (
            None,
            f"gave up after {self.config.retries + 1} attempts: {error}",
            self.config.retries + 1,
        )

    async def _pace(self) -> None:
        """Wait for the `rpm` limit (a leaky bucket of one request per 60/rpm seconds)."""
        if self.config.rpm is None:
            return
        if self._limiter is None:
            from aiolimiter import AsyncLimiter

            self._limiter = AsyncLimiter(1, 60.0 / self.config.rpm)
        await self._limiter.acquire()

    def check_credentials(self) -> None:
        """Before the first request: a provider key that is neither given nor in the
        environment stops the command (exit code 3) instead of failing every request.
        Stages call it before they start; `structured` calls it before its first request."""
        if self._checked_credentials or self.config.api_key or self.config.cache_only:
            return
        self._checked_credentials = True
        try:
            found = _litellm().validate_environment(model=self.config.model)
        except Exception:  # an unknown provider: let the request itself say what is wrong
            return
        missing = [k for k in found.get("missing_keys") or [] if k.endswith("_KEY")]
        if missing:
            raise LLMUnavailable(
                f"{self.config.model}: no API key: set {' or '.join(missing)}, or pass "
                "--api-key-env VAR naming the variable that holds it (a local server that "
                "needs no key accepts any value)"
            )

    def _dead_message(self, why: str, exc: BaseException) -> str:
        cfg = self.config
        where = cfg.api_base or f"the {cfg.model.split('/', 1)[0]} provider's endpoint"
        return (
            f"{cfg.model}: {where} stopped answering: {why} (last: {_short(exc, 80)}); "
            f"{self.network_calls} calls of this stage finished and are cached: rerun the same "
            "command to resume"
        )

    def _fatal_message(self, kind: str, exc: BaseException) -> str:
        cfg = self.config
        where = cfg.api_base or f"the {cfg.model.split('/', 1)[0]} provider's default endpoint"
        if kind == "auth":
            fix = (
                "check the key (--api-key-env VAR, or the provider's own variable such as "
                "OPENAI_API_KEY)"
            )
            return f"{cfg.model}: authentication refused by {where}: {_short(exc, 120)}; {fix}"
        if kind == "model":
            return (
                f"{cfg.model}: unknown model at {where}: {_short(exc, 120)}; "
                "check --model (litellm 'provider/model')"
            )
        return (
            f"{cfg.model}: cannot reach {where}: {_short(exc, 120)}; "
            "check --api-base and that the server is running"
        )

    def _reserve(self, messages: list[dict[str, str]]) -> float:
        """Check the cost cap before a call and reserve its estimated cost."""
        estimate = (
            self.estimate_cost(
                sum(approx_tokens(m["content"]) for m in messages), self.config.max_tokens // 4
            )
            or 0.0
        )
        budget = self.budget
        cap = budget.cap
        if cap is not None and budget.spent + budget.reserved + estimate > cap:
            raise BudgetExceeded(
                f"--max-cost {cap:.4f} USD reached (spent {budget.spent:.4f} in this command, "
                f"next call ~{estimate:.4f}); finished calls are cached: rerun with a higher "
                "--max-cost to resume"
            )
        budget.reserved += estimate
        return estimate

    async def _acompletion(
        self, messages: list[dict[str, str]], fmt: dict[str, Any], sample: int
    ) -> Any:
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "response_format": fmt,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
            "timeout": cfg.timeout,
            "seed": sample,
            # Retries are ours (counted, backed off, recorded); the SDK's own would hide them.
            "num_retries": 0,
            "max_retries": 0,
        }
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if cfg.api_key:
            kwargs["api_key"] = cfg.api_key
        # asyncio.wait_for backs up the provider timeout: a stalled stream must not hang a run.
        return await asyncio.wait_for(_litellm().acompletion(**kwargs), cfg.timeout + 5)


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return stripped


def _api_errors() -> tuple[type[BaseException], ...]:
    import openai  # a litellm dependency; its exception classes are litellm's bases

    return (openai.APIError, asyncio.TimeoutError)


@dataclass
class EndpointHealth:
    """Whether an endpoint that answered before has gone away: `failed()` after each
    connection failure or timeout says why it counts as dead (else ""), `ok()` after each
    answer resets it."""

    max_failures: int
    dead_after: float
    in_a_row: int = 0
    last_success: float = field(default_factory=time.monotonic)

    def ok(self) -> None:
        """A request was answered."""
        self.in_a_row = 0
        self.last_success = time.monotonic()

    def failed(self) -> str:
        """Count one connection failure; return why the endpoint is dead, or ""."""
        self.in_a_row += 1
        quiet = time.monotonic() - self.last_success
        if self.in_a_row >= self.max_failures:
            return f"{self.in_a_row} requests in a row failed to connect, none answered for {quiet:.0f}s (--max-connection-failures)"
        if quiet >= self.dead_after:
            return f"no request answered for {quiet:.0f}s while {self.in_a_row} in a row failed to connect (--dead-after)"
        return ""


FATAL_KINDS = ("auth", "model", "unreachable")
_UNREACHABLE = (
    "connection error",
    "connection refused",
    "name or service not known",
    "nodename nor servname",
    "temporary failure in name resolution",
    "no route to host",
    "cannot connect",
    "failed to establish a new connection",
)
_NO_CREDENTIALS = ("missing credentials", "api_key client option must be set", "no api key")


def classify_error(exc: BaseException, reached_before: bool = False) -> str:
    """What a failed request means: `auth`, `model`, `unreachable` (stop the command),
    `connection` (the endpoint answered before and now does not connect, or a timeout:
    retry, counted by `EndpointHealth`), `transient` (429, 5xx: retry) or `request` (this
    request only: record it).

    litellm wraps a refused connection as a 500 "Connection error.", and a missing key as a
    500 "Missing credentials", so the message and the exception chain are read too.
    """
    import openai

    chain = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 6:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    status = getattr(exc, "status_code", None)
    text = " ".join(str(e) for e in chain).lower()
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)) or status in (
        401,
        403,
    ):
        return "auth"
    if any(marker in text for marker in _NO_CREDENTIALS):
        return "auth"
    if isinstance(exc, openai.NotFoundError) or status == 404:
        return "model"
    if isinstance(exc, asyncio.TimeoutError) or any(
        isinstance(e, (asyncio.TimeoutError, openai.APITimeoutError)) for e in chain
    ):
        return "connection"
    connection = any(isinstance(e, (openai.APIConnectionError, ConnectionError)) for e in chain)
    if connection or any(marker in text for marker in _UNREACHABLE):
        return "connection" if reached_before else "unreachable"
    if status is None or status >= 500 or status in (408, 409, 429):
        return "transient"
    return "request"


def _short(exc: BaseException, limit: int = 200) -> str:
    """The provider's message without litellm's repeated class-name prefixes, on one line,
    cut at a word boundary (with an ellipsis) when longer than `limit`."""
    text = " ".join(str(exc).split())
    for prefix in ("litellm.", type(exc).__name__ + ":", "OpenAIException -"):
        text = text.replace(prefix, "").strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "…"


async def run_bounded(
    factories: Sequence[Callable[[], Awaitable[T]]],
    limit: int,
    label: str = "",
    show_progress: bool = True,
    budget: Budget | None = None,
) -> list[T]:
    """Run coroutine factories with at most `limit` in flight; results keep input order.

    With `show_progress`, a bar on a terminal and periodic lines when stderr is piped (see
    `Progress`); `budget` supplies the spend so far. The first `BudgetExceeded`, `CacheMiss`
    or `LLMUnavailable` stops new work: running calls finish (and are cached), then it is
    raised.
    """
    sem = asyncio.Semaphore(limit)
    stop: list[BaseException] = []
    progress = Progress.start(label, len(factories), show_progress, budget)

    async def one(factory: Callable[[], Awaitable[T]]) -> T | None:
        async with sem:
            if stop:
                return None
            try:
                return await factory()
            except (BudgetExceeded, CacheMiss, LLMUnavailable) as exc:
                stop.append(exc)
                return None
            finally:
                progress.advance()

    try:
        results = await asyncio.gather(*(one(f) for f in factories))
    finally:
        progress.close()
    if stop:
        raise stop[0]
    return list(results)  # type: ignore[arg-type]


PROGRESS_LINE_EVERY_S = 30.0  # piped output: a line at least this often, and every 10 %


@dataclass
class Progress:
    """Progress of one LLM stage on stderr.

    On a terminal: a rich bar with items done, elapsed time, time remaining and the spend of
    the command so far. Piped (CI, `| tee log`): one plain line per 10 % of the items, or
    after `PROGRESS_LINE_EVERY_S` seconds without one, so logs show progress without
    control characters. `mode` is "bar", "lines" or "off".
    """

    label: str
    total: int
    mode: str = "off"
    budget: Budget | None = None
    done: int = 0
    bar: Any = None
    task: Any = None
    started: float = field(init=False)
    last_line: float = field(init=False)
    last_decile: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.started = self.last_line = time.monotonic()

    @classmethod
    def start(cls, label: str, total: int, show: bool, budget: Budget | None = None) -> Progress:
        """A progress display fitting stderr (a terminal or not), or an inert one."""
        if not show or total == 0:
            return cls(label, total)
        from rich.console import Console

        console = Console(stderr=True)
        if not console.is_terminal:
            return cls(label, total, "lines", budget)
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        bar = RichProgress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[spent]}"),
            console=console,
            transient=True,
        )
        bar.start()
        progress = cls(label, total, "bar", budget, bar=bar)
        progress.task = bar.add_task(label, total=total, spent=progress.spent())
        return progress

    def spent(self) -> str:
        """The command's spend so far, for display."""
        if self.budget is None:
            return ""
        return f"spent {self.budget.spent:.4f} USD" if self.budget.priced else "spend unknown"

    def line(self) -> str:
        """The piped-mode line for the current state."""
        elapsed = time.monotonic() - self.started
        text = f"{self.label}: {self.done}/{self.total} ({100 * self.done // self.total}%)"
        text += f", {elapsed:.0f}s elapsed"
        if 0 < self.done < self.total:
            text += f", ~{elapsed / self.done * (self.total - self.done):.0f}s left"
        spent = self.spent()
        return text + (f", {spent}" if spent else "")

    def advance(self) -> None:
        """One item finished (answered, failed or skipped)."""
        self.done += 1
        if self.mode == "bar":
            self.bar.update(self.task, advance=1, spent=self.spent())
        elif self.mode == "lines":
            decile = 10 * self.done // self.total
            now = time.monotonic()
            if decile > self.last_decile or now - self.last_line >= PROGRESS_LINE_EVERY_S:
                self.last_decile, self.last_line = decile, now
                print(f"trace-diagnose: {self.line()}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Remove the bar (the final summary line replaces it)."""
        if self.bar is not None:
            self.bar.stop()
