"""An HTTP server on 127.0.0.1 that behaves as Ollama documents it, for the behaviours compactd depends on.

No Ollama binary can be installed here (no registry ships the server, and no model can be downloaded), so this
imitates it. Each behaviour below names the sentence of Ollama's documentation (``docs/`` of ollama/ollama,
read at fb30760, August 2026) or, where the docs are silent, of its API's Go documentation or code, that it
implements. Only the model is replaced: a tokenizer stand-in (4 characters a token) and an answer computed
from what the model was given (:attr:`OllamaServer.responder`), so a test can see what a cut prompt lost.

Behaviours (``D:`` documentation, ``G:`` Go API doc comment or code):

1. ``GET /api/version`` → ``{"version": ...}``. D api.md, Version: "Retrieve the Ollama version".
2. ``POST /api/show`` → ``parameters`` (the Modelfile's, ``num_ctx`` among them when set) and ``model_info``
   with ``<arch>.context_length``. D api.md, Show Model Information: "Show information about a model including
   details, modelfile, template, parameters, license, system prompt." (example: ``"llama.context_length":
   8192``). An unknown model: 404 ``{"error": ...}``. D api/errors.mdx: "`404`: Not Found (model doesn't exist,
   etc.)", "Errors are returned in the `application/json` format ... with the error message in the `error`
   property".
3. ``GET /api/ps`` → the loaded models with ``context_length`` and ``expires_at``. D api.md, List Running
   Models: "List models that are currently loaded into memory."; D context-length.mdx shows ``ollama ps`` with
   its CONTEXT column; G api/types.go ``ProcessModelResponse.ContextLength `json:"context_length"```.
4. The context a request gets: its ``options.num_ctx``, else the Modelfile's ``num_ctx``, else
   ``OLLAMA_CONTEXT_LENGTH``, else 4096. D faq.mdx: "By default, Ollama uses a context window size of 4096
   tokens." / "This can be overridden with the `OLLAMA_CONTEXT_LENGTH` environment variable" / "When using the
   API, specify the `num_ctx` parameter"; D context-length.mdx: "< 24 GiB VRAM: 4k context". Never above the
   model's trained context: G server/sched.go ``effectiveContext`` ("if trainCtx > 0 && numCtx > trainCtx {
   return trainCtx }").
5. ``/v1/chat/completions`` ignores ``options``: D api/openai-compatibility.mdx: "The OpenAI API does not have a
   way of setting the context size for a model. If you need to change the context size, create a `Modelfile`".
   It streams ``chat.completion.chunk`` events and, asked for it, the usage: D same page, "`stream_options`
   - [x] `include_usage`".
6. A prompt longer than the context is cut, without an error: the first ``num_keep`` tokens (default 4) are
   kept, then the newest tokens up to ``num_ctx - (num_ctx - num_keep) / 2``, and the answer is made from that.
   G api/types.go ``Shift``: "shifts the chat history when hitting the context length limit instead of
   erroring"; G llm/llama_server.go ``completionPromptForRequest`` (``tokens[:nKeep]`` +
   ``tokens[nKeep+discard:]``, ``slog.Warn("truncating input prompt", ...)``) and ``contextShiftPromptLimit``;
   G api/types.go ``DefaultOptions``: "NumKeep: 4". The reported ``prompt_eval_count`` / ``prompt_tokens`` is
   what was kept: G llm/llama_server.go ``promptEvalCount`` (``CacheN + PromptN`` of the cut prompt).
   With ``"shift": false``: 400 "the prompt is longer than the context length currently available to the
   model; ..." (G the same function).
7. ``POST /api/chat`` streams one JSON object a line, the last with ``done: true`` and the timings. D api.md,
   Generate a chat completion: "This is a streaming endpoint, so there will be a series of responses.
   Streaming can be disabled using `"stream": false`. The final response object will include statistics and
   additional data from the request." and "`load_duration`: time spent in nanoseconds loading the model",
   "`prompt_eval_count`: number of tokens in the prompt", "`prompt_eval_duration`: time spent in nanoseconds
   evaluating the prompt", "`eval_count`: number of tokens in the response", "`eval_duration`: time in
   nanoseconds spent generating the response"; D api.md Conventions: "All durations are returned in
   nanoseconds." ``options.num_predict`` bounds the answer (``done_reason: "length"``).
8. Loading: a request for a model not loaded (or loaded with another ``num_ctx``) loads it first, which takes
   :attr:`OllamaServer.load_seconds` and is reported as ``load_duration``. ``keep_alive`` says how long it stays
   loaded afterwards, 5 minutes by default. D api.md: "`keep_alive`: controls how long the model will stay loaded
   into memory following the request (default: `5m`)"; D faq.mdx: "By default models are kept in memory for 5
   minutes before being unloaded", "'0' which will unload the model immediately after generating a response";
   G server/sched.go ``needsReload`` (the runner options, ``NumCtx`` among them, must be equal).
9. ``GET /v1/models`` lists the local models (D api/openai-compatibility.mdx, "### `/v1/models`").

Time is real but short: the prompt is evaluated at :attr:`prompt_tps` and the answer generated at
:attr:`output_tps` (the server waits that long, so a client measuring time to first token sees it), and expiry
is driven by the test (:meth:`expire`) rather than by waiting five minutes.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The tokenizer stand-in: the rendered prompt is cut into pieces of this many characters, one token each.
CHARS_PER_TOKEN = 4
DEFAULT_CONTEXT = 4096  # behaviour 4
DEFAULT_NUM_KEEP = 4  # behaviour 6
DEFAULT_KEEP_ALIVE_SECONDS = 300.0  # behaviour 8
OVERFLOW_MESSAGE = (
    "the prompt is longer than the context length currently available to the model; shorten the prompt, "
    "adjust the context length in settings, or use a model with a longer context length"
)
_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def render(messages: list[dict[str, Any]]) -> str:
    """The prompt a chat template makes of the messages (the stand-in: role markers around each)."""
    return "".join(f"<|{m.get('role')}|>{m.get('content') or ''}<|end|>" for m in messages) + "<|assistant|>"


def tokenize(text: str) -> list[str]:
    return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def keep_alive_seconds(value: object) -> float:
    """Ollama's ``keep_alive``: a number of seconds or a duration string; negative keeps the model loaded."""
    if value is None:
        return DEFAULT_KEEP_ALIVE_SECONDS
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(str(value))) if value != "0" else 0.0
    return float("inf") if seconds < 0 else seconds


@dataclass
class Model:
    """A local model: its architecture, trained context and Modelfile parameters."""

    name: str
    arch: str = "llama"
    context_length: int = 131_072
    num_ctx: int | None = None  # PARAMETER num_ctx in its Modelfile
    num_keep: int = DEFAULT_NUM_KEEP

    def parameters(self) -> str:
        lines = [
            f"num_keep                       {self.num_keep}",
            'stop                           "<|end|>"',
        ]
        if self.num_ctx is not None:
            lines.insert(0, f"num_ctx                        {self.num_ctx}")
        return "\n".join(lines)


@dataclass
class Loaded:
    num_ctx: int
    expires: float  # monotonic


@dataclass
class Call:
    """One chat request as the imitation served it."""

    path: str
    body: dict[str, Any]
    num_ctx: int
    prompt_tokens: int  # what the prompt tokenized to
    kept_tokens: int  # what the model was given (== prompt_tokens unless cut)
    kept_text: str
    loaded: bool  # the model had to be loaded for it
    answer: str = ""

    @property
    def cut(self) -> bool:
        return self.kept_tokens < self.prompt_tokens


Responder = Callable[[Call], str]


def default_answer(call: Call) -> str:
    """A summary of what the model was given: the five headings, and a marker naming the call."""
    words = re.findall(r"[A-Za-z_][\w./-]{7,}", call.kept_text)
    seen = list(dict.fromkeys(words))[-12:]
    return (
        f"## Decisions\n- summarized {call.kept_tokens} tokens (call answer-{id(call):x})\n"
        "## Open TODOs\n- none\n## Constraints/Rules\n- none\n## Pending user asks\n- none\n"
        "## Exact identifiers\n" + "".join(f"- {w}\n" for w in seen)
    )


@dataclass
class OllamaServer:
    """The imitation. Configure :attr:`models`, :attr:`context_length_env` (``OLLAMA_CONTEXT_LENGTH``) and the
    speeds before the test's calls; read :attr:`calls` after."""

    models: dict[str, Model] = field(default_factory=dict)
    context_length_env: int | None = None
    version: str = "0.13.5"
    load_seconds: float = 0.0
    prompt_tps: float = 50_000.0
    output_tps: float = 2_000.0
    responder: Responder = default_answer
    calls: list[Call] = field(default_factory=list)
    loaded: dict[str, Loaded] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # method, path, headers
    handler_errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: ThreadingHTTPServer | None = None

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> OllamaServer:
        server = self

        class Handler(_Handler):
            ollama = server

        httpd = _Server(("127.0.0.1", 0), Handler)
        httpd.errors = self.handler_errors
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def root_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What compactd is configured with (the OpenAI-compatible endpoint)."""
        return f"{self.root_url}/v1"

    def add(self, model: Model) -> Model:
        self.models[model.name] = model
        return model

    def expire(self) -> None:
        """Every loaded model's keep_alive has run out (what five idle minutes do)."""
        with self._lock:
            self.loaded.clear()

    # --- behaviour ---------------------------------------------------------------------------------------
    def model(self, name: object) -> Model | None:
        if not isinstance(name, str):
            return None
        return self.models.get(name) or (self.models.get(f"{name}:latest") if ":" not in name else None)

    def context_for(self, model: Model, options: dict[str, Any]) -> int:
        """Behaviour 4."""
        requested = options.get("num_ctx")
        if isinstance(requested, int) and requested > 0:
            ctx = requested
        elif model.num_ctx is not None:
            ctx = model.num_ctx
        elif self.context_length_env is not None:
            ctx = self.context_length_env
        else:
            ctx = DEFAULT_CONTEXT
        return min(ctx, model.context_length)

    def serve_chat(
        self, path: str, body: dict[str, Any], model: Model, options: dict[str, Any]
    ) -> Call | str:
        """Behaviours 4, 6 and 8 for one request: the call, or the 400 message when shifting is off."""
        num_ctx = self.context_for(model, options)
        tokens = tokenize(render(body.get("messages") or []))
        kept = tokens
        if len(tokens) > num_ctx - 1:  # behaviour 6
            if body.get("shift") is False:
                return OVERFLOW_MESSAGE
            num_keep = min(model.num_keep + 1, num_ctx - 1)  # + BOS
            limit = num_ctx - max((num_ctx - num_keep) // 2, 1)
            kept = tokens[:num_keep] + tokens[len(tokens) - (limit - num_keep) :]
        with self._lock:  # behaviour 8
            current = self.loaded.get(model.name)
            now = time.monotonic()
            needs_load = current is None or current.expires <= now or current.num_ctx != num_ctx
            self.loaded[model.name] = Loaded(num_ctx, now + keep_alive_seconds(body.get("keep_alive")))
        call = Call(path, body, num_ctx, len(tokens), len(kept), "".join(kept), needs_load)
        call.answer = self.responder(call)
        with self._lock:
            self.calls.append(call)
        return call

    def after(self, model: Model, body: dict[str, Any]) -> None:
        """keep_alive 0 unloads at once (behaviour 8)."""
        if keep_alive_seconds(body.get("keep_alive")) == 0:
            with self._lock:
                self.loaded.pop(model.name, None)

    def ps(self) -> dict[str, Any]:
        now, wall = time.monotonic(), datetime.now(UTC)
        with self._lock:
            entries = [(name, loaded) for name, loaded in self.loaded.items() if loaded.expires > now]
        models = []
        for name, loaded in entries:
            left = loaded.expires - now
            until = (
                wall + timedelta(seconds=left) if left != float("inf") else datetime(2318, 1, 1, tzinfo=UTC)
            )
            models.append(
                {
                    "name": name,
                    "model": name,
                    "size": 5_137_025_024,
                    "digest": "2ae6f6dd7a3d",
                    "details": {"format": "gguf", "family": self.models[name].arch},
                    "expires_at": until.isoformat(),
                    "size_vram": 0,
                    "context_length": loaded.num_ctx,
                }
            )
        return {"models": models}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    errors: list[BaseException]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Kept for the test (a client that went away, a cancelled call, is no error of the server's)."""
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, ConnectionError):
            self.errors.append(exc)


class _Handler(BaseHTTPRequestHandler):
    ollama: OllamaServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        return parsed if isinstance(parsed, dict) else {}

    def _json(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self, method: str) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        self.ollama.requests.append((method, path, {k.lower(): v for k, v in self.headers.items()}))
        return path

    def do_GET(self) -> None:
        path = self._record("GET")
        server = self.ollama
        if path == "/api/version":
            self._json(200, {"version": server.version})
        elif path == "/api/ps":
            self._json(200, server.ps())
        elif path == "/v1/models":
            data = [{"id": n, "object": "model", "created": 0, "owned_by": "library"} for n in server.models]
            self._json(200, {"object": "list", "data": data})
        else:
            self.send_response(404)
            self.send_header("content-length", "18")
            self.end_headers()
            self.wfile.write(b"404 page not found")

    def do_POST(self) -> None:
        path = self._record("POST")
        body = self._body()
        server = self.ollama
        if path not in ("/api/show", "/api/chat", "/v1/chat/completions"):
            self._json(404, {"error": f"no route {path}"})
            return
        model = server.model(body.get("model"))
        if model is None:
            self._json(404, {"error": f"model '{body.get('model')}' not found"})
            return
        if path == "/api/show":
            self._json(
                200,
                {
                    "parameters": model.parameters(),
                    "template": "{{ .Prompt }}",
                    "details": {"format": "gguf", "family": model.arch},
                    "model_info": {
                        "general.architecture": model.arch,
                        f"{model.arch}.context_length": model.context_length,
                        f"{model.arch}.embedding_length": 4096,
                    },
                    "capabilities": ["completion"],
                },
            )
            return
        native = path == "/api/chat"
        options = (
            body.get("options") if native and isinstance(body.get("options"), dict) else {}
        )  # behaviour 5
        served = server.serve_chat(path, body, model, options)
        if isinstance(served, str):
            self._json(
                400, {"error": served} if native else {"error": {"message": served, "type": "api_error"}}
            )
            return
        limit = options.get("num_predict") if native else body.get("max_tokens")
        answer_tokens = tokenize(served.answer)
        done_reason = "stop"
        if isinstance(limit, int) and 0 < limit < len(answer_tokens):
            answer_tokens, done_reason = answer_tokens[:limit], "length"
        load = server.load_seconds if served.loaded else 0.0
        prompt_s = served.kept_tokens / server.prompt_tps
        time.sleep(load + prompt_s)  # the model's own time: loading, then evaluating the prompt
        if native:
            self._chat(body, model, served, answer_tokens, done_reason, load, prompt_s)
        else:
            self._openai(body, model, served, answer_tokens, done_reason)
        server.after(model, body)

    def _stream_start(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _pieces(self, tokens: list[str]) -> Iterator[str]:
        for token in tokens:
            time.sleep(1 / self.ollama.output_tps)
            yield token

    def _chat(
        self,
        body: dict[str, Any],
        model: Model,
        call: Call,
        tokens: list[str],
        done_reason: str,
        load: float,
        prompt_s: float,
    ) -> None:
        """Behaviour 7."""
        started = time.monotonic()
        stamp = datetime.now(UTC).isoformat()
        head = {"model": model.name, "created_at": stamp}
        final = {
            **head,
            "done": True,
            "done_reason": done_reason,
            "load_duration": int(load * 1e9),
            "prompt_eval_count": call.kept_tokens,
            "prompt_eval_duration": int(prompt_s * 1e9),
            "eval_count": len(tokens),
        }
        if body.get("stream") is False:
            text = "".join(self._pieces(tokens))
            eval_s = time.monotonic() - started
            final.update(
                eval_duration=int(eval_s * 1e9), total_duration=int((load + prompt_s + eval_s) * 1e9)
            )
            self._json(200, {**final, "message": {"role": "assistant", "content": text}})
            return
        self._stream_start("application/x-ndjson")
        for piece in self._pieces(tokens):
            line = {**head, "message": {"role": "assistant", "content": piece}, "done": False}
            self._chunk(json.dumps(line).encode() + b"\n")
        eval_s = time.monotonic() - started
        final.update(eval_duration=int(eval_s * 1e9), total_duration=int((load + prompt_s + eval_s) * 1e9))
        final["message"] = {"role": "assistant", "content": ""}
        self._chunk(json.dumps(final).encode() + b"\n")
        self._chunk(b"")

    def _openai(
        self, body: dict[str, Any], model: Model, call: Call, tokens: list[str], done_reason: str
    ) -> None:
        """Behaviour 5: the OpenAI-compatible answer, its usage the kept prompt."""
        finish = "length" if done_reason == "length" else "stop"
        usage = {
            "prompt_tokens": call.kept_tokens,
            "completion_tokens": len(tokens),
            "total_tokens": call.kept_tokens + len(tokens),
        }
        base = {
            "id": "chatcmpl-1",
            "created": int(time.time()),
            "model": model.name,
            "system_fingerprint": "fp_ollama",
        }
        if not body.get("stream"):
            text = "".join(self._pieces(tokens))
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": finish}
            self._json(200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            return
        self._stream_start("text/event-stream")
        for piece in self._pieces(tokens):
            delta = {"role": "assistant", "content": piece}
            event = {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
        end = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": finish}
        self._chunk(
            b"data: "
            + json.dumps({**base, "object": "chat.completion.chunk", "choices": [end]}).encode()
            + b"\n\n"
        )
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            tail = {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}
            self._chunk(b"data: " + json.dumps(tail).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
