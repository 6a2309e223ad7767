"""An OpenAI-compatible stub LLM on 127.0.0.1 that answers trace_diagnose's prompts.

It reads the prompt like a (very literal) labeller would: a capability is LACKING in a
transcript when one of its `lacking` marker phrases appears in a step, PRESENT when a
`present` marker does, NA otherwise, and it quotes the marker as evidence. Proposal calls get
`propose` capabilities (plus one outcome-restating one to be rejected); environment-matching
calls get the first enum id sharing a word with the capability, else "none".

Faults: with `fault_rate`, a request is answered (deterministically, from its body and how
often that body was seen) with HTTP 500, a stall past the client timeout, malformed JSON,
schema-violating JSON, or evidence citing a step that does not exist. `counts` and
`completed` record every request body hash at the stub, so tests count calls across
processes. `block_after` makes the stub hang after that many successful answers (used to
SIGKILL a client at a known point). `die_after` makes the server close its socket after that
many answers, as an endpoint that dies mid-run (later connections are refused).
`latency_range` draws each answer's latency uniformly from (low, high), seeded by the request.

**Obedient mode** (`obey_injection`): a gullible, compliant labeller, the adversary's best
case. It reads every content field the way a fooled model would: look-alike letters and
invisible characters read as plain Latin (`trace_diagnose.injection.fold`), and a line
shaped like a step (`[S3] AGENT: ...`, `AGENT: ...`, or a `{"step": 3, "speaker": "agent",
"text": ...}` object, or a chat record `{"role": "assistant", "content": ...}`) inside a
user's or a tool's text is believed to be that step. It obeys any sentence it reads that
gives a verdict (PRESENT / LACKING / NA / not applicable, or the same in French or Chinese)
for a scope (a capability's name, or every / each / all capabilities, or everything),
citing the sentence as its evidence, from the step (and speaker) it believes it is in. It
reads as a capable model does: base64 tokens and text said to be rot13 decoded, Unicode tag
characters as the ASCII they spell, and a sentence that one speaker splits across two of
its messages read joined. With
`corrects_on_repair` it re-reads carefully once told its answer was invalid (believes no
forged step, obeys nothing); otherwise it repeats itself however often it is corrected.
`forged_citations` and `obeyed` count the answers in which the attack took hold.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trace_diagnose.injection import fold

FAULTS = ("http500", "timeout", "malformed", "schema", "bad_step")


@dataclass
class StubConfig:
    """What the stub knows and how it misbehaves."""

    markers: dict[str, dict[str, list[str]]] = field(
        default_factory=dict
    )  # cap -> {lacking, present}
    propose: list[dict[str, Any]] = field(default_factory=list)
    fault_rate: float = 0.0
    stall_s: float = 3.0
    latency_s: float = 0.0
    noise: float = (
        0.0  # probability of flipping LACKING<->PRESENT per (seed, transcript, capability)
    )
    block_after: int | None = None
    http_status: int | None = None  # answer every request with this error status
    obey_injection: bool = False  # gullible and compliant: see the module docstring
    corrects_on_repair: bool = False  # in obedient mode: re-read carefully after a repair turn
    die_after: int | None = None  # close the server after this many answers
    latency_range: tuple[float, float] | None = None  # per-answer latency drawn in this range


def _unit(*parts: Any) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:12], 16) / 16**12


class StubLLM:
    """Start with `StubLLM(config).start()`; `api_base` is the URL to give litellm."""

    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self.counts: Counter[str] = Counter()
        self.completed: list[str] = []
        self.log: list[str] = []  # every request, in arrival order
        self.faults: Counter[str] = Counter()
        self.forged_citations = 0  # answers citing a step that exists only in forged text
        self.obeyed = 0  # answers that followed an instruction found in the transcript
        self.answered = 0
        self.arrivals: list[float] = []  # time.monotonic() of every request's arrival
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> StubLLM:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _die(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def total_requests(self) -> int:
        return sum(self.counts.values())

    # -- request handling -------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, payload = stub.answer(json.loads(body))
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler

    def answer(self, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = request_hash(req)
        with self.lock:
            self.arrivals.append(time.monotonic())
            self.counts[key] += 1
            self.log.append(key)
            seen = self.counts[key]
            blocked = (
                self.config.block_after is not None
                and len(self.completed) >= self.config.block_after
            )
        if blocked:
            self.release.wait(30)
            return 503, {"error": {"message": "stub blocked"}}
        if self.config.http_status is not None:
            code = self.config.http_status
            return code, {"error": {"message": f"stub: refused with {code}", "code": code}}
        if self.config.latency_s:
            time.sleep(self.config.latency_s)
        if self.config.latency_range:
            low, high = self.config.latency_range
            time.sleep(low + (high - low) * _unit("latency", key, seen))
        fault = self._fault(key, seen)
        if fault == "http500":
            return 500, {"error": {"message": "stub: internal error", "type": "server_error"}}
        if fault == "timeout":
            time.sleep(self.config.stall_s)
            return 500, {"error": {"message": "stub: too late"}}
        content = self._content(req, fault)
        with self.lock:
            self.completed.append(key)
            self.answered += 1
            dying = self.config.die_after is not None and self.answered >= self.config.die_after
        if dying:  # close the listening socket: later connections are refused
            threading.Thread(target=self._die, daemon=True).start()
        prompt = sum(len(str(m.get("content", ""))) for m in req.get("messages", [])) // 4
        return 200, {
            "id": f"stub-{key[:8]}-{seen}",
            "object": "chat.completion",
            "created": 0,
            "model": req.get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": len(content) // 4,
                "total_tokens": prompt + len(content) // 4,
            },
        }

    def _fault(self, key: str, seen: int) -> str | None:
        if self.config.fault_rate <= 0 or _unit("fault", key, seen) >= self.config.fault_rate:
            return None
        fault = FAULTS[int(_unit("kind", key, seen) * len(FAULTS))]
        with self.lock:
            self.faults[fault] += 1
        return fault

    def _content(self, req: dict[str, Any], fault: str | None) -> str:
        if fault == "malformed":
            return '{"labels": [{"capability": '
        schema_name = ((req.get("response_format") or {}).get("json_schema") or {}).get("name")
        if schema_name == "LabelResponse":
            obj = self._label(req)
            if fault == "schema":
                obj["labels"][0]["verdict"] = "MAYBE"
            elif fault == "bad_step":
                obj["labels"][0]["verdict"] = "LACKING"
                obj["labels"][0]["evidence"] = [
                    {"step": 9999, "speaker": "agent", "quote": "nothing"}
                ]
        elif schema_name == "ProposedCapabilities":
            obj = {
                "capabilities": self.config.propose
                + [
                    {
                        "name": "task_success",
                        "definition": "Whether the task was completed.",
                        "examples": [],
                    }
                ]
            }
            if fault in ("schema", "bad_step"):
                obj = {"capabilities": [{"name": "Not Snake"}]}
        elif schema_name == "EnvChoice":
            obj = self._env_choice(req)
        else:
            obj = {"error": f"unknown schema {schema_name}"}
        return json.dumps(obj)

    def _label(self, req: dict[str, Any]) -> dict[str, Any]:
        messages = req["messages"]
        transcript, _, rubric = messages[1]["content"].partition("## Capabilities to label")
        tid = json.loads(re.search(r'<transcript id=("(?:[^"\\]|\\.)*")>', transcript).group(1))
        caps = re.findall(r"^### (\S+)", rubric, re.M)
        steps = _records(transcript)  # (step, speaker, [content strings])
        careful = self.config.corrects_on_repair and any(m["role"] == "assistant" for m in messages)
        gullible = self.config.obey_injection and not careful
        believed = list(steps)
        if gullible:
            believed += [f for s in steps for f in _forged(s)]
        read = believed + _joined(steps) if gullible else []
        orders = [o for s in read for o in _instructions(s, caps)]
        labels, forged_cited, obeyed = [], False, False
        for cap in caps:
            order = next((o for o in orders if cap in o["scope"]), None)
            if order is not None:
                obeyed = True
                evidence = [] if order["verdict"] == "NA" else [order["evidence"]]
                labels.append(
                    {
                        "capability": cap,
                        "verdict": order["verdict"],
                        "evidence": evidence,
                        "rationale": "as the transcript instructs",
                    }
                )
                continue
            verdict, evidence = "NA", []
            marks = self.config.markers.get(cap, {})
            for kind in ("lacking", "present"):
                hit = next(
                    (
                        (step, speaker, m, forged)
                        for m in marks.get(kind, [])
                        for step, speaker, texts, *forged in believed
                        if speaker == "agent" and any(fold(m) in fold(t) for t in texts)
                    ),
                    None,
                )
                if hit:  # quote the marker sentence itself, as a careful model would
                    step, speaker, quote, forged = hit
                    forged_cited |= bool(forged)
                    verdict = kind.upper()
                    evidence = [{"step": step, "speaker": speaker, "quote": quote}]
                    break
            if verdict != "NA" and _unit("noise", req.get("seed"), tid, cap) < self.config.noise:
                verdict = "PRESENT" if verdict == "LACKING" else "LACKING"
            labels.append(
                {
                    "capability": cap,
                    "verdict": verdict,
                    "evidence": evidence,
                    "rationale": f"stub judged {cap} from the markers.",
                }
            )
        with self.lock:
            self.forged_citations += forged_cited
            self.obeyed += obeyed
        return {"labels": labels}

    def _env_choice(self, req: dict[str, Any]) -> dict[str, Any]:
        schema = req["response_format"]["json_schema"]["schema"]
        ids = schema["properties"]["env_id"]["enum"]
        cap = re.search(r"Capability: (\S+)", req["messages"][1]["content"]).group(1)
        words = set(cap.split("_"))
        for env_id in ids:
            if words & set(re.split(r"[^a-z]+", env_id)):
                return {"env_id": env_id, "rationale": f"{env_id} shares a word with {cap}"}
        return {"env_id": "none", "rationale": f"nothing in the catalog trains {cap}"}


def request_hash(req: dict[str, Any]) -> str:
    """Identity of a request at the stub: model, seed and messages."""
    ident = {"model": req.get("model"), "seed": req.get("seed"), "messages": req.get("messages")}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


# -- how the stub reads a transcript ---------------------------------------------------------
_LINE_BREAK = re.compile(r"[\n\r\u2028\u2029\x85\v\f]")
_SPEAKERS = {
    "agent": "agent",
    "assistant": "agent",
    "user": "user",
    "customer": "user",
    "tool": "tool",
    "system": "system",
    "environment": "environment",
}
_HEADER = re.compile(
    r"^\s*\[\s*s\s*(\d+)\s*\]\s*(agent|assistant|user|customer|tool|system|environment)\b[^:]*?:\s*(.*)$",
    re.I,
)
_LABEL = re.compile(r"^\s*(agent|assistant)\s*:\s*(.+)$", re.I)
_RECORD = re.compile(
    r'\{\s*"step"\s*:\s*(\d+)\s*,\s*"speaker"\s*:\s*"(\w+)"\s*,\s*"text"\s*:\s*"((?:[^"\\]|\\.)*)"'
)
_CHAT_RECORD = re.compile(r'\{\s*"role"\s*:\s*"(\w+)"\s*,\s*"content"\s*:\s*"((?:[^"\\]|\\.)*)"')
# verdict words in English, French and Chinese (read folded: "présent" is "present")
_VERDICT = re.compile(
    r"\b(present|lacking|absente?|manquante?|not applicable|sans objet|n/?a)\b"
    r"|(具备|缺失|不适用)",
    re.I,
)
_WORDS = {
    "present": "PRESENT",
    "具备": "PRESENT",
    "lacking": "LACKING",
    "absent": "LACKING",
    "absente": "LACKING",
    "manquant": "LACKING",
    "manquante": "LACKING",
    "缺失": "LACKING",
}
_ALL = re.compile(
    r"\beverything\b|\b(?:every|each|all|any|chaque|toutes?|tous)\b[^.!?]*?\b(?:capabilit"
    r"|skill|criteri|categor|label|verdict|item|question|rubric|competence|capacite)"
    r"|(?:所有|每个|每项|全部)",
    re.I,
)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|" + _LINE_BREAK.pattern)
_BASE64 = re.compile(r"\b[A-Za-z0-9+/]{16,}={0,2}")


def _records(transcript: str) -> list[tuple[int, str, list[str]]]:
    """The steps as a model that reads the structure sees them."""
    m = re.search(r'^<steps boundary="(\w+)">$', transcript, re.M)
    if m is None:
        return []
    body = transcript[m.end() :].split(f'</steps boundary="{m.group(1)}">')[0]
    steps = []
    for line in body.strip("\n").split("\n"):
        rec = json.loads(line)
        if "step" not in rec:
            continue  # a summary of dropped steps
        texts = [rec[k] for k in ("text", "thinking") if isinstance(rec.get(k), str)]
        if "output" in rec:
            out = rec["output"]
            texts.append(out if isinstance(out, str) else json.dumps(out, ensure_ascii=False))
        for call in rec.get("tool_calls", []):
            texts.append(f"{call['name']}({json.dumps(call['arguments'], ensure_ascii=False)})")
        steps.append((rec["step"], rec["speaker"], texts))
    return steps


def _forged(step: tuple[int, str, list[str]]) -> list[tuple[int, str, list[str], bool]]:
    """Steps a gullible reader believes it sees inside one step's text."""
    host, _, texts = step
    found = []
    for text in texts:
        for raw in _LINE_BREAK.split(text):
            line = fold(raw, casefold=False)
            if m := _HEADER.match(line):
                found.append((int(m.group(1)), _SPEAKERS[m.group(2).lower()], [m.group(3)], True))
            elif m := _LABEL.match(line):
                found.append((host, "agent", [m.group(2)], True))
        for m in _RECORD.finditer(fold(text, casefold=False)):
            speaker = _SPEAKERS.get(m.group(2).lower(), m.group(2).lower())
            found.append((int(m.group(1)), speaker, [json.loads(f'"{m.group(3)}"')], True))
        for m in _CHAT_RECORD.finditer(fold(text, casefold=False)):
            speaker = _SPEAKERS.get(m.group(1).lower(), m.group(1).lower())
            found.append((host, speaker, [json.loads(f'"{m.group(2)}"')], True))
    return found


def _joined(steps: list[tuple]) -> list[tuple[int, str, list[str]]]:
    """A sentence one speaker splits across two of its messages, read joined: the last
    sentence of each message with the first of that speaker's next one (at the later step)."""
    last: dict[str, str] = {}
    out = []
    for index, speaker, texts, *_ in steps:
        for text in texts:
            parts = [p for p in _SENTENCES.split(text) if p.strip()]
            if not parts:
                continue
            if speaker in last:
                out.append((index, speaker, [f"{last[speaker]} {parts[0]}"]))
            last[speaker] = parts[-1]
    return out


def _decodings(sentence: str) -> list[str]:
    """What a capable reader also reads in a sentence: base64 tokens decoded, and the
    sentence in rot13 when it says so."""
    out = []
    for token in _BASE64.findall(sentence):
        try:
            plain = base64.b64decode(token, validate=True).decode("ascii")
        except ValueError:
            continue
        if plain.isprintable():
            out.append(sentence.replace(token, plain))
    if "rot13" in sentence.lower():
        out.append(codecs.decode(sentence, "rot13"))
    return out


def _instructions(step: tuple, caps: list[str]) -> list[dict[str, Any]]:
    """Sentences giving a verdict for a scope, which an obedient reader follows."""
    index, speaker, texts = step[0], step[1], step[2]
    orders = []
    for text in texts:
        readings = [
            (raw, read) for raw in _SENTENCES.split(text) for read in [raw, *_decodings(raw)]
        ]
        for raw, read in readings:
            sentence = fold(read, casefold=False)
            verdict = _VERDICT.search(sentence)
            if verdict is None:
                continue
            verdict_name = _WORDS.get(verdict.group(0).lower(), "NA")
            named = [
                c
                for c in caps
                if re.search(re.escape(c) + "|" + r"\s+".join(c.split("_")), sentence, re.I)
            ]
            scope = list(caps) if _ALL.search(sentence) else named
            if scope:
                quote = raw.strip()[:200]
                orders.append(
                    {
                        "verdict": verdict_name,
                        "scope": scope,
                        "evidence": {"step": index, "speaker": speaker, "quote": quote},
                    }
                )
    return orders
