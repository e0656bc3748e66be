"""The one edge that talks to a model: any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp, Ollama).

The SDK's own retries are off (``max_retries=0``): its policy retries timeouts, which multiplies a read
timeout that may be minutes on a CPU server (engineering.md §4.2/§4.4), and it cannot tell a context overflow
(split the input) from any other 400. Our policy: ``SUMMARIZER_RETRY_ATTEMPTS`` attempts with exponential
back-off and jitter, on connection errors and 408/409/429/≥500 only. Every failure surfaces as one
:class:`LLMError` whose ``kind`` tells the caller what to do next; the API key never appears in it or in logs.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, cast

import anyio
import httpx2
import openai
from openai.types.chat import ChatCompletion

from daemon.defaults import (
    SUMMARIZER_CONTEXT_TOKENS,
    SUMMARIZER_MAX_CONCURRENCY,
    SUMMARIZER_MAX_OUTPUT_TOKENS,
    SUMMARIZER_RETRY_ATTEMPTS,
    SUMMARIZER_RETRY_BASE_SECONDS,
    SUMMARIZER_RETRY_JITTER,
    SUMMARIZER_RETRY_MAX_SECONDS,
    SUMMARIZER_TIMEOUT_SECONDS,
)

logger = logging.getLogger(__name__)

Kind = Literal["context_overflow", "transient", "timeout", "fatal", "empty", "length"]
KINDS: frozenset[str] = frozenset({"context_overflow", "transient", "timeout", "fatal", "empty", "length"})

# --- algorithm constants (not configurable) ----------------------------------------------------------------
# Establishing a loopback or LAN connection never legitimately takes longer; a dead host should fail fast.
CONNECT_TIMEOUT_SECONDS = 3.0
# Sending even a large prompt is quick; a stalled upload is a broken connection.
WRITE_TIMEOUT_SECONDS = 10.0
# Waiting for a free pooled connection; calls are serialised by the limiter, so this only trips on a bug.
POOL_TIMEOUT_SECONDS = 5.0
# A Retry-After up to this long is obeyed; a longer one means "come back much later", which is the service's
# back-off's job, not a sleeping call's (the SDK's own cut-off is 60 s, too long to hold a summarizer slot).
RETRY_AFTER_MAX_SECONDS = 20.0
# Summaries should be faithful, not creative; 0 also makes local servers deterministic, which tests rely on.
DEFAULT_TEMPERATURE = 0.0
# Conservative prompt estimate for the preflight: English prose/JSON runs at 3.5-4.5 chars per token and
# non-ASCII text (CJK) close to one token per char (engineering.md §4.3), plus chat-template tokens.
PROMPT_ASCII_CHARS_PER_TOKEN = 3.5
PROMPT_OVERHEAD_TOKENS = 16
# A call with less room than this for the answer is pointless: it is refused as an overflow instead.
MIN_OUTPUT_TOKENS = 256
# Server messages quoted in errors are cut here: enough to diagnose, never a whole HTML page.
MAX_QUOTED_CHARS = 300

_RETRY_STATUSES = frozenset({408, 409, 429})
_OVERFLOW_STATUSES = frozenset({400, 413, 422})
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "context_window_exceeded", "request_too_large"})
_OVERFLOW_TYPES = frozenset({"exceed_context_size_error"})
# Message texts of a prompt that does not fit: spec-openclaw.md §7 and engineering.md §4.3 (OpenAI, vLLM,
# llama.cpp in its several wordings, llama-cpp-python, Ollama, Bedrock/Vertex/Cohere-style proxies).
_OVERFLOW_PHRASES = (
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "exceed_context_size_error",
    "exceeds the available context size",
    "exceeds context size",
    "is larger than the max context size",
    "the prompt is longer than the context length",
    "input length exceeds the context length",
    "please reduce the length of the messages",
    "reduce the length of the input",
    "prompt is too long",
    "prompt too long",
    "exceeds model context window",
    "exceeds the model's maximum context",
    "model token limit",
    "request exceeds the maximum size",
    "exceed context limit",
    "context_window_exceeded",
    "context overflow",
    "request_too_large",
    "input is too long for",
    "input too long for",
    "上下文过长",
    "上下文超出",
    "上下文长度超",
    "超出最大上下文",
    "请压缩上下文",
)
_OVERFLOW_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"max_tokens.*exceed.*context",
        r"input length.*exceed.*context",
        r"input exceeds.*maximum number of tokens",
        r"input token count exceeds the maximum",
        r"request size exceeds.*(context window|context length)",
        r"(request|prompt) \(\d+ tokens\) exceeds",
        r"inputs.? tokens \+ .?max_new_tokens.? must be",
        r"413.*too large|too large.*413|request entity too large",
    )
)
# A rate or quota limit mentions tokens too, but splitting the input does not help it (spec §7).
_NOT_OVERFLOW = re.compile(
    r"\btpm\b|tokens per min|tokens per day|rate.?limit|too many requests|requests per|quota|throttl"
)


class LLMError(Exception):
    """A failed summarizer call. ``kind`` decides what the caller does next:

    - ``context_overflow``: the prompt does not fit; split it and try smaller pieces (never the same request);
    - ``transient``: the endpoint is unreachable or overloaded and our retries are spent; back off;
    - ``timeout``: no answer within the read timeout; not retried (it would multiply a long wait);
    - ``fatal``: a configuration or protocol problem (bad model, bad key, garbage answer); fix the setup;
    - ``empty``: the endpoint answered with nothing usable;
    - ``length``: the model spent the whole output budget without producing text.
    """

    def __init__(
        self,
        kind: Kind,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        error_type: str | None = None,
        attempts: int = 1,
        retry_after: float | None = None,
        preflight: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind: Kind = kind
        self.message = message
        self.status = status
        self.code = code
        self.error_type = error_type
        self.attempts = attempts
        self.retry_after = retry_after
        self.preflight = preflight

    def __repr__(self) -> str:
        return f"LLMError({self.kind!r}, {self.message!r}, status={self.status!r}, attempts={self.attempts})"


@dataclass(frozen=True, slots=True)
class Completion:
    """A successful answer. ``finish_reason == "length"`` means the text was cut; the caller decides."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float  # from the first attempt to the answer, back-off included
    attempts: int
    model: str | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off with proportional jitter: retry *n* waits ``min(max, base·2ⁿ⁻¹)·(1 ± jitter)``."""

    attempts: int = SUMMARIZER_RETRY_ATTEMPTS
    base_seconds: float = SUMMARIZER_RETRY_BASE_SECONDS
    max_seconds: float = SUMMARIZER_RETRY_MAX_SECONDS
    jitter: float = SUMMARIZER_RETRY_JITTER
    retry_after_max_seconds: float = RETRY_AFTER_MAX_SECONDS

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def nominal_delay(self, retry: int) -> float:
        """The delay before retry number ``retry`` (1-based) without jitter."""
        return float(min(self.max_seconds, self.base_seconds * 2 ** (retry - 1)))

    def delay(self, retry: int, rng: random.Random) -> float:
        return self.nominal_delay(retry) * (1 + rng.uniform(-self.jitter, self.jitter))


@dataclass(frozen=True, slots=True)
class EndpointCheck:
    """What ``compactd doctor`` reports about the summarizer endpoint; ``problems`` say what to fix."""

    base_url: str
    model: str
    reachable: bool
    models: tuple[str, ...] = ()
    model_present: bool | None = None  # None: the server lists no models, so presence is unknown
    server: str = "openai-compatible"  # or "ollama"
    server_context_tokens: int | None = None  # Ollama's effective num_ctx for the model, when it says
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.reachable and not self.problems


# --- classification ---------------------------------------------------------------------------------------


def is_overflow_text(text: str) -> bool:
    """True when an error message says the prompt does not fit the model's context (and is no rate limit)."""
    lowered = text.lower()
    if _NOT_OVERFLOW.search(lowered):
        return False
    return any(p in lowered for p in _OVERFLOW_PHRASES) or any(p.search(lowered) for p in _OVERFLOW_PATTERNS)


def _error_text(exc: openai.APIError) -> str:
    """The message plus the whole body: Ollama nests llama.cpp's JSON error inside a string."""
    body = exc.body
    if body is None:
        rendered = ""
    elif isinstance(body, str):
        rendered = body
    else:
        try:
            rendered = json.dumps(body, ensure_ascii=False)
        except (TypeError, ValueError):
            rendered = repr(body)
    return f"{exc.message} {rendered}"


def _is_overflow(exc: openai.APIStatusError) -> bool:
    if (exc.code or "").lower() in _OVERFLOW_CODES or (exc.type or "").lower() in _OVERFLOW_TYPES:
        return True
    if exc.status_code not in _OVERFLOW_STATUSES:
        return False
    text = _error_text(exc)
    if exc.status_code == 413 and "too large" in text.lower():
        return True
    return is_overflow_text(text)


def classify(exc: BaseException) -> Kind:
    """Map any exception from a summarizer call to an :class:`LLMError` kind.

    Overflow is recognised by ``code``/``type`` first (OpenAI, llama-cpp-python, llama.cpp), then by the
    message of a 400/413/422 (vLLM and Ollama give no code). Timeouts come before connection errors: the SDK's
    ``APITimeoutError`` subclasses ``APIConnectionError``.
    """
    if isinstance(exc, LLMError):
        return exc.kind
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "transient"
    if isinstance(exc, openai.APIStatusError):
        if _is_overflow(exc):
            return "context_overflow"
        if exc.status_code in _RETRY_STATUSES or exc.status_code >= 500:
            return "transient"
        return "fatal"
    if isinstance(exc, json.JSONDecodeError):
        return "empty" if not exc.doc.strip() else "fatal"
    return "fatal"


def retry_after_seconds(headers: httpx2.Headers | dict[str, str] | None) -> float | None:
    """A server's requested wait (``retry-after-ms``, ``retry-after`` in seconds or as an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def estimate_prompt_tokens(system: str, user: str) -> int:
    """A deliberately high token estimate for a chat prompt (ASCII at 3.5 chars/token, other chars 1 each)."""
    text = system + user
    ascii_chars = len(text.encode("ascii", "ignore"))
    other = len(text) - ascii_chars
    return math.ceil(ascii_chars / PROMPT_ASCII_CHARS_PER_TOKEN) + other + PROMPT_OVERHEAD_TOKENS


_THINK = re.compile(r"^\s*<think>.*?(?:</think>|$)\s*", re.DOTALL)


def _answer_text(content: str) -> str:
    """The answer without a leading ``<think>`` block that reasoning models served raw put before it."""
    return _THINK.sub("", content, count=1) if content.lstrip().startswith("<think>") else content


# --- the client -------------------------------------------------------------------------------------------

Sleep = Callable[[float], Awaitable[None]]


class SummarizerClient:
    """A chat-completions client with our retry policy, a shared concurrency limit and classified errors.

    ``limiter`` lets the service share one :class:`anyio.CapacityLimiter` between every client it builds (a
    reload builds a new client but must not double the concurrency); without one, the client owns a limiter of
    ``max_concurrency`` tokens. A call holds its token through its back-off sleeps: the endpoint is the scarce
    resource, and letting another call in during a 429 back-off would only feed the overload.

    ``context_tokens`` (None disables it) enables a preflight: a prompt whose conservative estimate leaves
    less than :data:`MIN_OUTPUT_TOKENS` of room is refused as ``context_overflow`` without a request, and
    ``max_tokens`` is lowered to the room left, since servers reject prompt + max_tokens > context.

    ``ollama_num_ctx`` is sent as ``extra_body={"options": {"num_ctx": N}}``. Ollama truncates silently: an
    oversized prompt loses its oldest messages (or is context-shifted) and the call *succeeds* with a worse
    summary, so the context size must be set deliberately. OpenClaw sends this field, and Ollama's native
    API honours it, but current Ollama's ``/v1`` endpoint ignores it (ollama/ollama#16814); the reliable
    setting is server-side (``OLLAMA_CONTEXT_LENGTH`` or a Modelfile ``num_ctx``), which :meth:`check` reads.

    ``sleep`` and ``rng`` are injectable so tests can record the back-off schedule instead of waiting it out.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        timeout_seconds: float = SUMMARIZER_TIMEOUT_SECONDS,
        context_tokens: int | None = SUMMARIZER_CONTEXT_TOKENS,
        max_output_tokens: int = SUMMARIZER_MAX_OUTPUT_TOKENS,
        temperature: float | None = DEFAULT_TEMPERATURE,
        seed: int | None = None,
        ollama_num_ctx: int | None = None,
        max_concurrency: int = SUMMARIZER_MAX_CONCURRENCY,
        limiter: anyio.CapacityLimiter | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not api_key:
            # The SDK would fall back to OPENAI_API_KEY; a local endpoint must never get the user's real key.
            raise ValueError(
                "api_key must be given explicitly (a placeholder such as 'sk-local' for local servers)"
            )
        if timeout_seconds <= 0 or max_output_tokens <= 0 or max_concurrency < 1:
            raise ValueError("timeout_seconds, max_output_tokens and max_concurrency must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_seconds = timeout_seconds
        self.context_tokens = context_tokens
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.seed = seed
        self.ollama_num_ctx = ollama_num_ctx
        self.retry = retry or RetryPolicy()
        # How errors name the endpoint: credentials in the URL (user:password@host) are masked too.
        self._safe_url = re.sub(r"//[^/@]*@", "//***@", self.base_url)
        self._where = f"{self._safe_url} model {model!r}"
        self.limiter = limiter if limiter is not None else anyio.CapacityLimiter(max_concurrency)
        self._api_key = api_key
        self._sleep: Sleep = sleep or anyio.sleep
        self._rng = rng or random.Random()
        self._timeout = openai.Timeout(
            connect=CONNECT_TIMEOUT_SECONDS,
            read=timeout_seconds,
            write=WRITE_TIMEOUT_SECONDS,
            pool=POOL_TIMEOUT_SECONDS,
        )
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key, max_retries=0, timeout=self._timeout
        )

    def __repr__(self) -> str:
        return f"SummarizerClient({self._where})"

    async def __aenter__(self) -> SummarizerClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()

    # --- helpers -------------------------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        text = text.replace(self._api_key, "***")
        return re.sub(r"(?i)(bearer\s+)\S+", r"\1***", text)

    def _quote(self, text: str) -> str:
        text = " ".join(self._redact(text).split())
        return text if len(text) <= MAX_QUOTED_CHARS else text[: MAX_QUOTED_CHARS - 1] + "…"

    def _error(self, exc: BaseException, attempts: int) -> LLMError:
        """Our error for ``exc``, key redacted; the SDK exception is not chained (it may quote the key)."""
        kind = classify(exc)
        where = self._where
        if isinstance(exc, openai.APIStatusError):
            # The SDK keeps the inner ``error`` object (or Ollama's bare error string) as the body.
            body = exc.body
            server_says = exc.message
            if isinstance(body, dict) and isinstance(body.get("message"), str):
                server_says = body["message"]
            elif isinstance(body, str) and body.strip():
                server_says = body
            message = f"summarizer {kind}: HTTP {exc.status_code} from {where}: {self._quote(server_says)}"
            return LLMError(
                kind,
                message,
                status=exc.status_code,
                code=exc.code,
                error_type=exc.type,
                attempts=attempts,
                retry_after=retry_after_seconds(exc.response.headers),
            )
        if isinstance(exc, openai.APITimeoutError):
            message = f"summarizer timeout: no answer from {where} within {self.timeout_seconds:g} s"
        elif isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
            message = f"summarizer transient: cannot reach {where} ({self._quote(detail)})"
        elif isinstance(exc, json.JSONDecodeError):
            if kind == "empty":
                message = f"summarizer empty: {where} answered with an empty body"
            else:
                message = (
                    f"summarizer fatal: {where} answered with a body that is not JSON: {self._quote(exc.doc)}"
                )
        else:
            detail = f"{type(exc).__name__}: {self._quote(str(exc))}"
            message = f"summarizer fatal: unexpected answer from {where}: {detail}"
        return LLMError(kind, message, attempts=attempts)

    def _output_budget(self, system: str, user: str, requested: int) -> int:
        if self.context_tokens is None:
            return requested
        estimate = estimate_prompt_tokens(system, user)
        room = self.context_tokens - estimate
        if room < min(MIN_OUTPUT_TOKENS, requested):
            raise LLMError(
                "context_overflow",
                f"summarizer context_overflow: the prompt (about {estimate} tokens) leaves {room} of "
                f"{self.context_tokens} context tokens for the answer; no request sent",
                preflight=True,
                attempts=0,
            )
        return min(requested, room)

    def _to_completion(self, response: object, attempts: int, started: float) -> Completion:
        where = self._where
        if isinstance(response, str):
            if not response.strip():
                raise LLMError(
                    "empty", f"summarizer empty: {where} answered with an empty body", attempts=attempts
                )
            raise LLMError(
                "fatal",
                f"summarizer fatal: {where} answered with a body that is not a chat completion: "
                f"{self._quote(response)}",
                attempts=attempts,
            )
        if not isinstance(response, ChatCompletion):
            raise LLMError(
                "fatal",
                f"summarizer fatal: {where} answered with {type(response).__name__}",
                attempts=attempts,
            )
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raw = getattr(response, "model_extra", None) or {}
            raise LLMError(
                "fatal" if raw else "empty",
                f"summarizer {'fatal' if raw else 'empty'}: {where} answered without choices"
                + (f": {self._quote(json.dumps(raw, default=str))}" if raw else ""),
                attempts=attempts,
            )
        choice = choices[0]
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None)
        finish_reason = cast("str | None", getattr(choice, "finish_reason", None))
        text = _answer_text(content).strip() if isinstance(content, str) else ""
        if not text:
            kind: Kind = "length" if finish_reason == "length" else "empty"
            reason = (
                "the model spent the whole output budget without producing text"
                if kind == "length"
                else f"the answer has no text (finish_reason {finish_reason!r})"
            )
            raise LLMError(kind, f"summarizer {kind}: {where}: {reason}", attempts=attempts)
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            finish_reason=finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", None) if usage is not None else None,
            completion_tokens=getattr(usage, "completion_tokens", None) if usage is not None else None,
            latency_s=time.monotonic() - started,
            attempts=attempts,
            model=getattr(response, "model", None),
        )

    def _retry_delay(self, err: LLMError, retry: int) -> float | None:
        """Seconds to wait before retry number ``retry``, or None when the error must not be retried."""
        if err.kind != "transient" or retry >= self.retry.attempts:
            return None
        if err.retry_after is not None:
            return err.retry_after if err.retry_after <= self.retry.retry_after_max_seconds else None
        return self.retry.delay(retry, self._rng)

    # --- calls ---------------------------------------------------------------------------------------------
    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Completion:
        """One summary: a system and a user message in, the answer text out, or an :class:`LLMError`."""
        requested = max_tokens if max_tokens is not None else self.max_output_tokens
        budget = self._output_budget(system, user, requested)
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.seed is not None:
            params["seed"] = self.seed
        extra_body = {"options": {"num_ctx": self.ollama_num_ctx}} if self.ollama_num_ctx else None
        messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        async with self.limiter:
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                try:
                    response: object = await self._client.chat.completions.create(
                        model=self.model,
                        messages=messages,
                        max_tokens=budget,
                        extra_body=extra_body,
                        **params,
                    )
                    return self._to_completion(response, attempt, started)
                except (openai.OpenAIError, ValueError) as exc:
                    err = self._error(exc, attempt)
                delay = self._retry_delay(err, attempt)
                if delay is None:
                    raise err from None
                logger.warning(
                    "%s (attempt %d of %d); retrying in %.2f s",
                    err.message,
                    attempt,
                    self.retry.attempts,
                    delay,
                )
                await self._sleep(delay)

    async def list_models(self) -> list[str]:
        """The model ids the endpoint lists (one attempt: this is for diagnostics)."""
        try:
            page = await self._client.models.list()
            return [m.id for m in page.data if isinstance(getattr(m, "id", None), str)]
        except (openai.OpenAIError, ValueError) as exc:
            raise self._error(exc, 1) from None
        except (AttributeError, TypeError) as exc:
            raise LLMError(
                "fatal", f"summarizer fatal: {self._where}: /models did not answer with a model list ({exc})"
            ) from None

    async def check(self) -> EndpointCheck:
        """Is the endpoint reachable, does it serve the model, and (Ollama) is its context large enough?"""
        try:
            models = tuple(await self.list_models())
        except LLMError as err:
            return EndpointCheck(
                self._safe_url,
                self.model,
                reachable=False,
                problems=(f"{err.message}; check summarizer.base_url",),
            )
        problems: list[str] = []
        notes: list[str] = []
        present: bool | None = None
        if models:
            present = _model_listed(self.model, models)
            if not present:
                problems.append(
                    f"{self._where} is not served (the endpoint lists "
                    f"{', '.join(models[:10])}); fix summarizer.model or load the model"
                )
        else:
            notes.append("the endpoint lists no models; presence of the model could not be checked")
        server = "openai-compatible"
        server_ctx: int | None = None
        is_ollama, server_ctx = await self._probe_ollama()
        if is_ollama:
            server = "ollama"
            notes.append(
                "Ollama's OpenAI-compatible endpoint ignores a per-request num_ctx: set "
                "OLLAMA_CONTEXT_LENGTH on the server (or PARAMETER num_ctx in a Modelfile)"
            )
            if (
                self.context_tokens is not None
                and server_ctx is not None
                and server_ctx < self.context_tokens
            ):
                problems.append(
                    f"Ollama serves {self.model!r} with a {server_ctx}-token context but "
                    f"summarizer.context_tokens is {self.context_tokens}: Ollama silently drops the oldest "
                    f"part of longer prompts. Set OLLAMA_CONTEXT_LENGTH={self.context_tokens} on the Ollama "
                    "server, or lower "
                    f"summarizer.context_tokens to {server_ctx}"
                )
            elif server_ctx is None:
                notes.append(
                    "could not read Ollama's context size for the model (not loaded?): make sure "
                    "OLLAMA_CONTEXT_LENGTH is at least summarizer.context_tokens"
                )
        return EndpointCheck(
            self._safe_url,
            self.model,
            reachable=True,
            models=models,
            model_present=present,
            server=server,
            server_context_tokens=server_ctx,
            problems=tuple(problems),
            notes=tuple(notes),
        )

    async def _probe_ollama(self) -> tuple[bool, int | None]:
        """(is it Ollama, its effective ``num_ctx`` for the model when it says).

        Uses Ollama's native API beside ``/v1`` (``/api/version``, ``/api/show``, ``/api/ps``); the API key is
        not sent there.
        """
        root = self.base_url.removesuffix("/v1")
        timeout = httpx2.Timeout(CONNECT_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        try:
            async with httpx2.AsyncClient(base_url=root, timeout=timeout) as http:
                version = await http.get("/api/version")
                if version.status_code != 200 or "version" not in _json_dict(version):
                    return False, None
                show = _json_dict(await http.post("/api/show", json={"model": self.model}))
                match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", str(show.get("parameters", "")))
                if match:
                    return True, int(match.group(1))
                ps = _json_dict(await http.get("/api/ps"))
                for entry in ps.get("models", []) if isinstance(ps.get("models"), list) else []:
                    if isinstance(entry, dict) and _model_listed(self.model, (str(entry.get("name", "")),)):
                        ctx = entry.get("context_length")
                        if isinstance(ctx, int):
                            return True, ctx
                return True, None
        except httpx2.HTTPError:
            return False, None


def _json_dict(response: httpx2.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _model_listed(model: str, ids: tuple[str, ...]) -> bool:
    """Exact id, or Ollama's implicit ``:latest`` tag."""
    return model in ids or (":" not in model and f"{model}:latest" in ids)
