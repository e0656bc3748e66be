"""The bounds on what one summarizer response may deliver, and the accumulation of a streamed answer.

Every response body read through the client stops at a size derived from the call's output budget (a
response hook wraps the stream, since the SDK has no per-request hook), and the answer text is kept in
pieces with the timings :mod:`compactd.summarize.pace` learns the endpoint's speed from.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import httpx2
from openai.types.chat import ChatCompletion

from compactd.datarecord import datarecord
from compactd.summarize.pace import Sample
from compactd.summarize.sanitize import strip_controls

# A summary runs about 4 characters per token; an answer 4 times longer than max_tokens allows is no summary
# but a runaway (or hostile) server, cut off before it costs memory. The floor keeps small budgets usable.
ANSWER_CHARS_PER_TOKEN = 16
MIN_ANSWER_CHARS = 32_768
# Streamed chunks repeat id, model and fingerprint in JSON around every delta (about 200 bytes per token on
# OpenAI, vLLM, llama.cpp and Ollama); the body cap allows 512 bytes per token, reasoning deltas included.
BODY_BYTES_PER_TOKEN = 512
MIN_BODY_BYTES = 1024 * 1024
# Any other body (an error, a /models list, Ollama's /api/show) is small; this is far above any real one.
OTHER_BODY_MAX_BYTES = 8 * 1024 * 1024
# Ollama's native endpoints answer in milliseconds; ``doctor`` must not hang on a server that trickles.

_THINK = re.compile(r"^\s*<think>.*?(?:</think>|$)\s*", re.DOTALL)


def _answer_text(content: str) -> str:
    """The answer without a leading ``<think>`` block that reasoning models served raw put before it, and
    without control characters."""
    if content.lstrip().startswith("<think>"):
        content = _THINK.sub("", content, count=1)
    return strip_controls(content).strip()


def answer_limits(max_tokens: int) -> tuple[int, int]:
    """(characters of answer text, bytes of response body) a call with this output budget may receive."""
    return (
        max(MIN_ANSWER_CHARS, ANSWER_CHARS_PER_TOKEN * max_tokens),
        max(MIN_BODY_BYTES, BODY_BYTES_PER_TOKEN * max_tokens),
    )


# --- bounded bodies ---------------------------------------------------------------------------------------

# The body limit of the call in progress; a response hook reads it (the SDK has no per-request hook).
_body_limit: ContextVar[int] = ContextVar("compactd_body_limit", default=OTHER_BODY_MAX_BYTES)


class _SilentStream(Exception):
    """A streamed answer that ended without a single event."""


class BodyTooLarge(Exception):
    """A response body passed its limit; raised from inside the read, so nothing past it is held."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the response body exceeds {limit} bytes")
        self.limit = limit


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise BodyTooLarge(self._limit)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _cap_body(response: httpx2.Response) -> None:
    """httpx response hook: every body read through the client (errors included) stops at the limit."""
    if isinstance(response.stream, httpx2.AsyncByteStream):
        response.stream = _CappedStream(response.stream, _body_limit.get())


@datarecord
class _Answer:
    """What a stream delivered so far; the text is kept in pieces and joined once."""

    pieces: list[str]
    chars: int = 0
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    # Timing of a stream (monotonic seconds): request sent, first and latest token (answer or reasoning),
    # how many deltas carried one, and llama.cpp's own ``timings`` when the server sends them.
    sent_at: float | None = None
    first_at: float | None = None
    last_at: float | None = None
    deltas: int = 0
    timings: dict[str, Any] | None = None
    # Ollama's native final chunk: its counts and durations (nanoseconds), the model's load time apart.
    ollama: dict[str, Any] | None = None
    native: bool = False  # read from Ollama's /api/chat (whose timing before the final chunk includes loads)
    cold: bool = False  # the model was not loaded when the call was sent: its first token waited for the load
    events: int = 0  # server-sent events dispatched, [DONE] included

    def add(self, text: str) -> None:
        self.pieces.append(text)
        self.chars += len(text)

    def tick(self) -> None:
        """A delta with generated text arrived (the answer's, or a reasoning model's thinking)."""
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        self.deltas += 1

    def sample(self, prompt_estimate: int, *, ended: float, complete: bool) -> Sample | None:
        """What this call says about the endpoint's speed (None: nothing measurable, e.g. not streamed).

        Time to the first token is prompt processing; the tokens after it over the time they took is the
        output rate. Token counts come from the usage when the server sends one, else from the prompt
        estimate and the number of deltas (llama.cpp, llama-cpp-python and Ollama stream one token each).
        Servers that time themselves are believed instead: llama.cpp's ``timings``, and Ollama's native final
        chunk, whose ``load_duration`` (a model loaded after 5 idle minutes, or reloaded for another
        ``num_ctx``) is left out, so a cold start is never taken for a slow prompt.
        """
        final = self.ollama
        if final:
            prompt_ns, output_ns = _number(final, "prompt_eval_duration"), _number(final, "eval_duration")
            prompt_n, output_n = _number(final, "prompt_eval_count"), _number(final, "eval_count")
            return Sample(
                prompt_tokens=int(prompt_n) if prompt_n is not None else None,
                prompt_seconds=prompt_ns / 1e9 if prompt_ns is not None else None,
                output_tokens=int(output_n) if output_n is not None else None,
                output_seconds=output_ns / 1e9 if output_ns is not None else None,
            )
        if self.native:
            return None  # cut off before its final chunk: the time may be the model's load, not its speed
        timings = self.timings
        if timings:
            prompt_n, prompt_ms = _number(timings, "prompt_n"), _number(timings, "prompt_ms")
            predicted_n, predicted_ms = _number(timings, "predicted_n"), _number(timings, "predicted_ms")
            return Sample(
                prompt_tokens=int(prompt_n) if prompt_n is not None else None,
                prompt_seconds=prompt_ms / 1000 if prompt_ms is not None else None,
                output_tokens=int(predicted_n) if predicted_n is not None else None,
                output_seconds=predicted_ms / 1000 if predicted_ms is not None else None,
            )
        if self.sent_at is None:
            return None
        prompt_tokens = self.prompt_tokens or prompt_estimate
        if self.first_at is None:
            if complete or self.cold:
                return None
            return Sample(prompt_tokens=prompt_tokens, prompt_seconds=ended - self.sent_at, prompt_bound=True)
        generated = self.completion_tokens if complete and self.completion_tokens else self.deltas
        assert self.last_at is not None
        return Sample(
            prompt_tokens=None if self.cold else prompt_tokens,  # a load is no prompt time
            prompt_seconds=self.first_at - self.sent_at,
            output_tokens=max(0, generated - 1),  # the first token's time is in the prompt's
            output_seconds=self.last_at - self.first_at,
        )

    def text(self) -> str:
        return "".join(self.pieces)

    def partial(self) -> str:
        return _answer_text(self.text())


def _number(mapping: dict[str, Any], name: str) -> float | None:
    value = mapping.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return float(value)


def _parse_body(body: bytes, content_type: str) -> object:
    """A whole body from a server that did not stream: a ``ChatCompletion`` when it is a JSON object, else its
    text (which :meth:`SummarizerClient._to_completion` reports). Invalid JSON raises ``JSONDecodeError``."""
    if "json" not in content_type and content_type:
        return body.decode("utf-8", "replace")
    data = json.loads(body)
    if not isinstance(data, dict):
        return body.decode("utf-8", "replace")
    return ChatCompletion.construct(**data)


def _json_dict(response: httpx2.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
