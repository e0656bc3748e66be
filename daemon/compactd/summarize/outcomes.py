"""What a summarizer call ends in, and the pure rules around it: a :class:`Completion`, or an
:class:`LLMError` whose :data:`Kind` says what the caller does next; :func:`classify` for any exception;
:class:`RetryPolicy` for the back-off between attempts.

Pure on purpose: the engine, the flush and the command line import this module, never the client, so a
process with no summarizer configured never loads openai, httpx or pydantic. An SDK exception can only
exist once the SDK is imported, so :func:`classify` looks the SDK up in ``sys.modules`` instead of importing it.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import sys
import time
from collections.abc import Mapping
from typing import Any, Literal

from compactd.datarecord import datarecord
from compactd.defaults import (
    SUMMARIZER_RETRY_ATTEMPTS,
    SUMMARIZER_RETRY_BASE_SECONDS,
    SUMMARIZER_RETRY_JITTER,
    SUMMARIZER_RETRY_MAX_SECONDS,
)

__all__ = [
    "KINDS",
    "RETRY_AFTER_MAX_SECONDS",
    "Completion",
    "EndpointCheck",
    "Kind",
    "LLMError",
    "RetryPolicy",
    "classify",
    "is_overflow_text",
    "retry_after_seconds",
]


Kind = Literal["context_overflow", "transient", "timeout", "fatal", "empty", "length", "too_large"]
KINDS: frozenset[str] = frozenset(
    {"context_overflow", "transient", "timeout", "fatal", "empty", "length", "too_large"}
)

# A Retry-After up to this long is obeyed; a longer one means "come back much later", which is the service's
# back-off's job, not a sleeping call's (the SDK's own cut-off is 60 s, too long to hold a summarizer slot).
RETRY_AFTER_MAX_SECONDS = 20.0

_RETRY_STATUSES = frozenset({408, 409, 429})
_OVERFLOW_STATUSES = frozenset({400, 413, 422})
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "context_window_exceeded", "request_too_large"})
_OVERFLOW_TYPES = frozenset({"exceed_context_size_error"})
# Message texts of a prompt that does not fit: design.md §6.6 (OpenAI, vLLM,
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
# A rate or quota limit mentions tokens too, but splitting the input does not help it (design.md §6.6).
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
    - ``length``: the model spent the whole output budget without producing text;
    - ``too_large``: the answer ran past the size cap and was cut off; not retried (it would run as long again).

    ``partial_text`` is the answer text received before a timeout, a cut-off or a broken stream (cleaned like
    an answer; empty when nothing arrived). Whether it is good enough to use is the caller's decision.

    ``cut``: a ``context_overflow`` the server did not report: it answered, but from fewer prompt tokens than
    were sent (it cut the prompt). The answer is dropped; the client's context is already lowered to fit.
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
        partial_text: str = "",
        cut: bool = False,
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
        self.partial_text = partial_text
        self.cut = cut

    def __repr__(self) -> str:
        return f"LLMError({self.kind!r}, {self.message!r}, status={self.status!r}, attempts={self.attempts})"


@datarecord(frozen=True, slots=True)
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


@datarecord(frozen=True, slots=True)
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


@datarecord(frozen=True, slots=True)
class EndpointCheck:
    """What ``compactd doctor`` reports about the summarizer endpoint; ``problems`` say what to fix."""

    base_url: str
    model: str
    reachable: bool
    models: tuple[str, ...] = ()
    model_present: bool | None = None  # None: the server lists no models, so presence is unknown
    server: str = "openai-compatible"  # or "ollama", "llama.cpp"
    server_context_tokens: int | None = None  # the context a call gets without compactd's num_ctx, when known
    api: str = "openai"  # the API calls go to: "openai" (/v1/chat/completions) or "ollama" (/api/chat)
    context_tokens: int | None = None  # the context compactd sizes its calls to
    context_source: str = ""  # where that figure comes from
    num_ctx: int | None = None  # the options.num_ctx sent with every native Ollama call
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


def _sdk() -> Any:
    """The openai module when it is loaded, else None (then no exception can be one of its classes)."""
    return sys.modules.get("openai")


def _error_text(exc: Any) -> str:
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


def _is_overflow(exc: Any) -> bool:
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
    sdk = _sdk()
    if sdk is not None:
        if isinstance(exc, sdk.APITimeoutError):
            return "timeout"
        if isinstance(exc, sdk.APIConnectionError):
            return "transient"
        if isinstance(exc, sdk.APIStatusError):
            if _is_overflow(exc):
                return "context_overflow"
            status: int = exc.status_code
            if status in _RETRY_STATUSES or status >= 500:
                return "transient"
            return "fatal"
    if isinstance(exc, json.JSONDecodeError):
        return "empty" if not exc.doc.strip() else "fatal"
    return "fatal"


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
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
