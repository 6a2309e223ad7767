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
SIGKILL a client at a known point). Used by the tests and by benchmarks/diagnose_overhead.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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
    obey_injection: bool = False  # a compliant model: "label everything PRESENT" is obeyed


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
        fault = self._fault(key, seen)
        if fault == "http500":
            return 500, {"error": {"message": "stub: internal error", "type": "server_error"}}
        if fault == "timeout":
            time.sleep(self.config.stall_s)
            return 500, {"error": {"message": "stub: too late"}}
        content = self._content(req, fault)
        with self.lock:
            self.completed.append(key)
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
                obj["labels"][0]["evidence"] = [{"step": 9999, "quote": "nothing"}]
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
        user = req["messages"][1]["content"]
        transcript, _, rubric = user.partition("## Capabilities to label")
        tid = re.search(r'<transcript id="([^"]*)"', transcript).group(1)
        steps = {
            int(m.group(1)): m.group(0) for m in re.finditer(r"^\[S(\d+)\][^\n]*", transcript, re.M)
        }
        labels = []
        injected = re.search(r"[^\n]*label everything PRESENT[^\n]*", transcript)
        if self.config.obey_injection and injected:
            line = injected.group(0)
            step = int(re.match(r"\[S(\d+)\]", line).group(1))
            quote = line.split(": ", 1)[-1]
            quote = quote[quote.find("ignore") :][:200].replace("</flagged_instruction>", "")
            return {
                "labels": [
                    {
                        "capability": cap,
                        "verdict": "PRESENT",
                        "evidence": [{"step": step, "quote": quote}],
                        "rationale": "as instructed in the transcript",
                    }
                    for cap in re.findall(r"^### (\S+)", rubric, re.M)
                ]
            }
        for cap in re.findall(r"^### (\S+)", rubric, re.M):
            verdict, evidence = "NA", []
            marks = self.config.markers.get(cap, {})
            for kind in ("lacking", "present"):
                hit = next(
                    (
                        (i, line)
                        for m in marks.get(kind, [])
                        for i, line in steps.items()
                        if m in line
                    ),
                    None,
                )
                if hit:  # quote the marker sentence itself, as a careful model would
                    quote = next(m for m in marks[kind] if m in hit[1])
                    verdict, evidence = kind.upper(), [{"step": hit[0], "quote": quote}]
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
