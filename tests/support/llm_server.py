"""A real OpenAI-compatible HTTP server on 127.0.0.1, scriptable per test (design.md §7.6).

openai 3.x talks through ``httpx2``, which respx cannot intercept, and a mock transport would skip sockets,
timeouts, connection errors and the SDK's own parsing. A stdlib ``ThreadingHTTPServer`` in a thread is real,
starts in milliseconds and needs no dependency; ``disable_nagle_algorithm`` removes a 40 ms delayed-ACK stall
per request.

Use as a pytest plugin (``pytest_plugins = ["tests.support.llm_server"]``): the function-scoped fixture
``llm_server`` yields a started :class:`StubLLMServer`. Replies come from ``server.script(...)`` in order,
then from ``server.responder`` (a function of the recorded request). Every request is recorded.

A completion asked for with ``"stream": true`` is sent as server-sent events the way llama.cpp and Ollama send
them: a role chunk, the content in pieces, a chunk with the finish reason, a final chunk with the usage, then
``data: [DONE]``. Bodies generated while they are sent (:meth:`Reply.trickling`, :meth:`Reply.huge`) are
recorded in ``server.bodies`` with the bytes that reached the socket and whether the client went away.

A reply may be held (``Reply(..., hold=server.gate())``): the request stays open, answered only when the test
sets the gate, so a test can act while a client waits on a slow model without sleeping for it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_MODEL = "stub-model"
# A hung reply is released by the test or at shutdown; this bound only keeps a forgotten one from leaking a
# thread for ever.
HANG_LIMIT_SECONDS = 120.0
# How many characters of content each streamed chunk carries (small, so the client must accumulate deltas).
STREAM_PIECE_CHARS = 16
# ``Reply.completion(prompt_tokens=COUNTED)`` (the default): the usage reports the request's own size, as a real
# server does, counted by :func:`count_prompt_tokens`.
COUNTED = -1
# A stand-in for a model's tokenizer: prose and code run at about 4 characters a token, and a chat template adds
# a few tokens per message. (compactd's own estimate uses 3.5, so it stays above this count.)
CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS_PER_MESSAGE = 4


def count_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """What a server reports as the prompt tokens of ``messages`` (the tokenizer stand-in above)."""
    total = 0
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content is not None else ""
        total += -(-len(text) // CHARS_PER_TOKEN) + TEMPLATE_TOKENS_PER_MESSAGE
    return total


# What each server answers when the prompt does not fit (design.md §6.6).
OVERFLOW_BODIES: dict[str, tuple[int, object]] = {
    "openai": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9120 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "vllm": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, your request has 5021 "
            "input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    "vllm_max_tokens": (
        400,
        {
            "error": {
                "message": "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum "
                "context length is 4096 tokens and your request has 1000 input tokens (4096 > 4096 - 1000).",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
    ),
    "llamacpp": (
        400,
        {
            "error": {
                "code": 400,
                "message": "request (9000 tokens) exceeds the available context size (8192 tokens), try "
                "increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9000,
                "n_ctx": 8192,
            }
        },
    ),
    "llamacpp_old": (
        400,
        {"error": {"code": 400, "message": "the request exceeds the available context size", "type": "x"}},
    ),
    "llama_cpp_python": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 512 tokens. However, you requested 2041 "
                "tokens (2031 in the messages, 10 in the completion). Please reduce the length of the "
                "messages or completion.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    # Ollama's OpenAI-compatible endpoint wraps its own refusal (shift disabled) in an OpenAI-style error.
    "ollama": (
        400,
        {
            "error": {
                "message": "the prompt is longer than the context length currently available to the model; "
                "shorten the prompt, adjust the context length in settings, or use a model with a longer "
                "context length",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    ),
    # Ollama's native style: the error is a bare string.
    "ollama_native": (
        400,
        {"error": "the prompt is longer than the context length currently available to the model"},
    ),
    "proxy_413": (413, {"error": {"message": "Request Entity Too Large", "type": "request_too_large"}}),
}


BodyMaker = Callable[[bool], tuple[str, Iterable[bytes]]]


def llamacpp_props(n_ctx: int, parallel: int = 1, *, kv_unified: bool = False) -> dict[str, Any]:
    """``GET /props`` of a llama-server started with ``-c n_ctx --parallel parallel``, the fields compactd reads.

    llama.cpp's tools/server/README.md: "`default_generation_settings` - the default generation settings for
    the `/completion` endpoint, which has the same fields as the `generation_settings` response object" and
    "`total_slots` - the total number of slots for process requests (defined by `--parallel` option)". A slot's
    settings carry its own ``n_ctx``: the context divided between the slots (its start-up log: "n_slots = 4,
    n_ctx_slot = 2048"), the whole of it with a unified KV cache ("kv_unified = 'true'").
    """
    slot = n_ctx if kv_unified else n_ctx // parallel
    return {
        "default_generation_settings": {
            "id": 0,
            "n_ctx": slot,
            "params": {"n_predict": -1, "temperature": 0.8},
        },
        "total_slots": parallel,
        "model_path": "/models/stub.gguf",
        "chat_template": "",
        "build_info": "b6000-stub",
    }


@dataclass
class Reply:
    """One scripted answer. ``body`` (bytes) overrides everything; ``payload`` is sent as JSON, or as
    server-sent events when the request streams and the payload is a chat completion (``stream=False``: never).

    ``generate`` makes a body while it is sent: given whether the request streams, it returns the content
    type and an iterable of byte chunks, written with ``interval`` seconds before each and no content-length
    (the body ends when the connection closes). ``hold`` (from :meth:`StubLLMServer.gate`) keeps the request
    open until the test sets it, then the reply is sent as it is.
    """

    status: int = 200
    payload: object | None = None
    body: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hang: bool = False
    stream: bool | None = None
    generate: BodyMaker | None = None
    interval: float = 0.0
    hold: threading.Event | None = None

    @classmethod
    def completion(
        cls,
        text: str | None,
        *,
        finish_reason: str | None = "stop",
        prompt_tokens: int | None = COUNTED,
        completion_tokens: int | None = 7,
        model: str = DEFAULT_MODEL,
        delay: float = 0.0,
        extra_message: dict[str, Any] | None = None,
        stream: bool | None = None,
        hold: threading.Event | None = None,
    ) -> Reply:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        message.update(extra_message or {})
        payload: dict[str, Any] = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if prompt_tokens is not None and completion_tokens is not None:
            payload["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        return cls(payload=payload, delay=delay, stream=stream, hold=hold)

    @classmethod
    def error(
        cls, status: int, message: str = "stub error", *, headers: dict[str, str] | None = None
    ) -> Reply:
        payload = {"error": {"message": message, "type": "stub_error", "param": None, "code": None}}
        return cls(status=status, payload=payload, headers=dict(headers or {}))

    @classmethod
    def rate_limited(cls, retry_after: str | None = None) -> Reply:
        headers = {} if retry_after is None else {"retry-after": retry_after}
        return cls.error(429, "Rate limit reached, please try again", headers=headers)

    @classmethod
    def overflow(cls, server: str) -> Reply:
        status, payload = OVERFLOW_BODIES[server]
        return cls(status=status, payload=payload)

    @classmethod
    def empty(cls) -> Reply:
        return cls(body=b"")

    @classmethod
    def garbage(cls, content_type: str = "application/json") -> Reply:
        return cls(
            body=b"<html><body>502 upstream gateway went fishing</body></html>", content_type=content_type
        )

    @classmethod
    def hung(cls) -> Reply:
        return cls(hang=True)

    @classmethod
    def trickling(
        cls, first: str = "partial answer", *, interval: float = 0.5, stream: bool | None = None
    ) -> Reply:
        """``first`` at once, then one byte every ``interval`` seconds for as long as the client listens: each
        read gets a byte well within any read timeout, so only a deadline on the whole answer ends it."""

        def generate(streaming: bool) -> tuple[str, Iterable[bytes]]:
            if streaming:
                head = sse_event(chunk_payload({"role": "assistant", "content": first}))
                kind = "text/event-stream"
            else:
                head = json.dumps({"id": "chatcmpl-stub", "choices": [{"message": {"content": first}}]})[:-2]
                head = head.encode()
                kind = "application/json"
            return kind, itertools.chain([head], itertools.repeat(b" "))

        return cls(generate=generate, interval=interval, stream=stream)

    @classmethod
    def huge(
        cls,
        total_bytes: int,
        *,
        one_event: bool = False,
        piece_bytes: int = 64 * 1024,
        stream: bool | None = None,
        status: int = 200,
    ) -> Reply:
        """An answer of about ``total_bytes`` of content, made while it is sent (never held in memory): many
        streamed chunks of ``piece_bytes``, or (``one_event``, or a request that does not stream) a single
        JSON document whose content is the whole answer."""
        pieces = max(1, total_bytes // piece_bytes)
        piece = b"x" * piece_bytes

        def generate(streaming: bool) -> tuple[str, Iterable[bytes]]:
            if streaming and not one_event:
                chunk = sse_event(chunk_payload({"content": piece.decode()}))
                done = sse_event(chunk_payload({}, finish_reason="stop")) + b"data: [DONE]\n\n"
                return "text/event-stream", itertools.chain(itertools.repeat(chunk, pieces), [done])
            document = {"id": "chatcmpl-stub", "object": "chat.completion", "model": DEFAULT_MODEL}
            if streaming:
                document["choices"] = [{"index": 0, "delta": {"content": "@@"}, "finish_reason": None}]
                kind, prefix, tail = "text/event-stream", b"data: ", b"\n\ndata: [DONE]\n\n"
            else:
                document["choices"] = [{"index": 0, "message": {"role": "assistant", "content": "@@"}}]
                kind, prefix, tail = "application/json", b"", b""
            head, end = json.dumps(document).encode().split(b"@@")
            return kind, itertools.chain([prefix + head], itertools.repeat(piece, pieces), [end + tail])

        return cls(generate=generate, stream=stream, status=status)


def chunk_payload(
    delta: dict[str, Any], *, finish_reason: str | None = None, model: str = DEFAULT_MODEL
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as llama.cpp and Ollama stream it."""
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "system_fingerprint": "b0000-stub",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def sse_event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def completion_events(payload: dict[str, Any]) -> bytes | None:
    """A chat completion as the events a streaming server sends, or None when it is not one."""
    choices = payload.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    model = str(payload.get("model") or DEFAULT_MODEL)
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}
    events = [sse_event(chunk_payload({"role": "assistant", "content": "", **extra}, model=model))]
    content = message.get("content")
    if isinstance(content, str):
        for start in range(0, len(content), STREAM_PIECE_CHARS):
            piece = content[start : start + STREAM_PIECE_CHARS]
            events.append(sse_event(chunk_payload({"content": piece}, model=model)))
    events.append(sse_event(chunk_payload({}, finish_reason=choices[0].get("finish_reason"), model=model)))
    usage = payload.get("usage")
    if usage is not None:
        final = {**chunk_payload({}, model=model), "choices": [], "usage": usage}
        events.append(sse_event(final))
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


@dataclass
class SentBody:
    """A generated body as the server sent it: bytes written to the socket, and whether the client left."""

    sent: int = 0
    finished: bool = False
    client_gone: threading.Event = field(default_factory=threading.Event)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    raw: bytes
    json: Any

    @property
    def streaming(self) -> bool:
        return isinstance(self.json, dict) and self.json.get("stream") is True

    @property
    def messages(self) -> list[dict[str, Any]]:
        if isinstance(self.json, dict) and isinstance(self.json.get("messages"), list):
            return list(self.json["messages"])
        return []

    def content(self, role: str) -> str:
        """The concatenated text of every message with this role."""
        parts = [m.get("content") for m in self.messages if m.get("role") == role]
        return "\n".join(p for p in parts if isinstance(p, str))


Responder = Callable[[RecordedRequest], "Reply | str"]


def responses_events(text: str, request: RecordedRequest, index: int) -> bytes:
    """A Responses API answer (``POST /v1/responses`` with ``stream: true``) as OpenAI streams it and Codex
    reads it: ``response.created``, the message item added, its text in deltas, the item done, then
    ``response.completed`` with the usage. ``input_tokens`` is the request's input counted as a quarter of its
    JSON bytes, so the figure an agent reports grows with what it sends, as a real server's does."""
    body = request.json if isinstance(request.json, dict) else {}
    counted = json.dumps([body.get("instructions"), body.get("input")]).encode()
    input_tokens = -(-len(counted) // 4)
    output_tokens = -(-len(text.encode()) // 4)
    rid, mid = f"resp_stub_{index}", f"msg_stub_{index}"
    item: dict[str, Any] = {"type": "message", "id": mid, "role": "assistant", "status": "completed"}
    events: list[bytes] = []

    def event(kind: str, **fields: Any) -> None:
        events.append(f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode())

    event("response.created", response={"id": rid, "object": "response", "status": "in_progress"})
    event("response.output_item.added", output_index=0, item={**item, "status": "in_progress", "content": []})
    for start in range(0, len(text), STREAM_PIECE_CHARS):
        piece = text[start : start + STREAM_PIECE_CHARS]
        event("response.output_text.delta", item_id=mid, output_index=0, content_index=0, delta=piece)
    done = {**item, "content": [{"type": "output_text", "text": text, "annotations": []}]}
    event("response.output_item.done", output_index=0, item=done)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    event(
        "response.completed",
        response={"id": rid, "object": "response", "status": "completed", "usage": usage},
    )
    return b"".join(events)


def default_responses_responder(request: RecordedRequest) -> str:
    body = request.json if isinstance(request.json, dict) else {}
    items = body.get("input") if isinstance(body.get("input"), list) else []
    return f"stub answer to {len(items)} items"


def default_responder(request: RecordedRequest) -> Reply:
    """A deterministic answer derived from the prompt, so tests can tell requests apart."""
    user = request.content("user")
    return Reply.completion(f"stub summary of {len(request.messages)} messages, {len(user)} chars")


class StubLLMServer:
    """Serves ``POST /v1/chat/completions``, ``POST /v1/responses`` (streamed), ``GET /v1/models`` and, when
    ``ollama`` is set, ``/api/*``."""

    def __init__(self) -> None:
        self.models: list[str] = [DEFAULT_MODEL]
        self.responder: Responder = default_responder
        # ``POST /v1/responses`` (Codex's wire API): the text of each answer, from the request.
        self.responses_responder: Callable[[RecordedRequest], str] = default_responses_responder
        # Set to a dict to impersonate Ollama: {"version": ..., "show": {...}, "ps": {...}}.
        self.ollama: dict[str, Any] | None = None
        # Set to llamacpp_props(...) to impersonate llama.cpp's llama-server.
        self.props: dict[str, Any] | None = None
        self.requests: list[RecordedRequest] = []
        self.handler_errors: list[BaseException] = []
        self.bodies: list[SentBody] = []
        self._script: deque[Reply | str] = deque()
        self._cond = threading.Condition()
        self._release = threading.Event()
        self._gates: list[threading.Event] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> StubLLMServer:
        server = self

        class Handler(_Handler):
            stub = server

        httpd = _Server(("127.0.0.1", 0), Handler)
        httpd.stub = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        with self._cond:
            for gate in self._gates:
                gate.set()  # a held reply never outlives the test
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = None

    def __enter__(self) -> StubLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.root_url}/v1"

    # --- scripting ---------------------------------------------------------------------------------------
    def script(self, *replies: Reply | str) -> None:
        """Queue replies for the next chat requests, in order; a str is a plain completion text."""
        with self._cond:
            self._script.extend(replies)

    def release(self) -> None:
        """Let every hung request (current and future) finish with a normal completion."""
        self._release.set()

    def gate(self) -> threading.Event:
        """A gate for ``Reply(hold=...)``: a reply holding it is sent once the test sets it (or at shutdown)."""
        gate = threading.Event()
        with self._cond:
            self._gates.append(gate)
        return gate

    # --- inspection --------------------------------------------------------------------------------------
    @property
    def completions(self) -> list[RecordedRequest]:
        with self._cond:
            return [
                r
                for r in self.requests
                if r.method == "POST" and r.path.split("?", 1)[0].endswith("/chat/completions")
            ]

    @property
    def responses(self) -> list[RecordedRequest]:
        """The Responses API requests (``POST …/responses``), in order."""
        with self._cond:
            return [
                r
                for r in self.requests
                if r.method == "POST" and r.path.split("?", 1)[0].rstrip("/").endswith("/responses")
            ]

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> None:
        """Block until ``count`` chat requests have arrived (for tests that act while a request is open)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.completions) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"stub saw {len(self.completions)} of {count} chat requests")
                self._cond.wait(remaining)

    def wait_for_client_gone(self, timeout: float = 30.0) -> SentBody:
        """Block until the client has gone away from the latest generated body (it was cut off, not done)."""
        deadline = time.monotonic() + timeout
        while not self.bodies:
            if time.monotonic() > deadline:
                raise TimeoutError("no generated body was sent")
            time.sleep(0.01)
        body = self.bodies[-1]
        if not body.client_gone.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"the client is still reading after {body.sent} bytes")
        return body

    # --- used by the handler -----------------------------------------------------------------------------
    def _record(self, request: RecordedRequest) -> None:
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._cond:
            scripted = self._script.popleft() if self._script else None
        reply = scripted if scripted is not None else self.responder(request)
        return Reply.completion(reply) if isinstance(reply, str) else reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: StubLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Keep handler failures for the test to inspect instead of printing tracebacks to stderr."""
        exc = sys.exc_info()[1]
        if exc is not None:
            self.stub.handler_errors.append(exc)


class _Handler(BaseHTTPRequestHandler):
    stub: StubLLMServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows stderr on failure
        pass

    def _read(self, method: str) -> RecordedRequest:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = RecordedRequest(method=method, path=self.path, headers=headers, raw=raw, json=parsed)
        self.stub._record(request)
        return request

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, payload: object) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def do_GET(self) -> None:
        request = self._read("GET")
        path = request.path.split("?", 1)[0].rstrip("/")
        ollama = self.stub.ollama
        if path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "stub"} for m in self.stub.models]
            self._send_json(200, {"object": "list", "data": data})
        elif ollama is not None and path == "/api/version":
            self._send_json(200, {"version": ollama.get("version", "0.12.0")})
        elif ollama is not None and path == "/api/ps":
            self._send_json(200, ollama.get("ps", {"models": []}))
        elif self.stub.props is not None and path == "/props":
            self._send_json(200, self.stub.props)
        else:
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        request = self._read("POST")
        path = request.path.split("?", 1)[0].rstrip("/")
        ollama = self.stub.ollama
        if ollama is not None and path == "/api/show":
            self._send_json(200, ollama.get("show", {}))
            return
        if path.endswith("/responses"):
            index = len(self.stub.responses)
            text = self.stub.responses_responder(request)
            self._send(200, responses_events(text, request, index), "text/event-stream")
            return
        if not path.endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        reply = self.stub._next_reply(request)
        if reply.hold is not None:
            reply.hold.wait(HANG_LIMIT_SECONDS)
        if reply.hang:
            self.stub._release.wait(HANG_LIMIT_SECONDS)
            reply = Reply.completion("released")
        elif reply.delay > 0:
            # Simulated slowness; a release cuts it short so shutdown never waits.
            self.stub._release.wait(reply.delay)
        if reply.generate is not None:
            self._send_generated(reply, request)
            return
        content_type = reply.content_type
        usage = reply.payload.get("usage") if isinstance(reply.payload, dict) else None
        if isinstance(usage, dict) and usage.get("prompt_tokens") == COUNTED:
            counted = count_prompt_tokens(request.messages)
            usage = {**usage, "prompt_tokens": counted, "total_tokens": counted + usage["completion_tokens"]}
            reply = dataclasses.replace(reply, payload={**reply.payload, "usage": usage})
        if reply.body is not None:
            body = reply.body
        else:
            payload = reply.payload if reply.payload is not None else {}
            events = None
            if request.streaming and reply.stream is not False and isinstance(payload, dict):
                events = completion_events(payload)
            if events is not None:
                body, content_type = events, "text/event-stream"
            else:
                body = json.dumps(payload).encode()
        try:
            self._send(reply.status, body, content_type, reply.headers)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout, cancellation)
            self.close_connection = True

    def _send_generated(self, reply: Reply, request: RecordedRequest) -> None:
        assert reply.generate is not None
        content_type, chunks = reply.generate(request.streaming and reply.stream is not False)
        record = SentBody()
        self.stub.bodies.append(record)
        self.close_connection = True
        started = time.monotonic()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", content_type)
            self.send_header("connection", "close")
            self.end_headers()
            for chunk in chunks:
                if reply.interval > 0 and self.stub._release.wait(reply.interval):
                    return  # the test is over
                if time.monotonic() - started > HANG_LIMIT_SECONDS:
                    return
                self.wfile.write(chunk)
                record.sent += len(chunk)
            record.finished = True
        except (BrokenPipeError, ConnectionResetError):
            record.client_gone.set()


@pytest.fixture
def llm_server() -> Iterator[StubLLMServer]:
    server = StubLLMServer().start()
    try:
        yield server
    finally:
        server.stop()
