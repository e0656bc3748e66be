"""Ollama's native chat API (``POST /api/chat``), the one where the context can be set per request.

Ollama's OpenAI-compatible endpoint cannot set the context size ("The OpenAI API does not have a way of setting
the context size for a model", docs/api/openai-compatibility.mdx), so there a model runs at the Modelfile's or
the server's default, 4,096 tokens on most machines. ``/api/chat`` takes ``options.num_ctx`` and ``keep_alive``,
streams one JSON object a line, and ends with a ``done`` object holding the counts and durations (docs/api.md,
"Generate a chat completion"): what the speed memory learns from, the model's load time apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from compactd.summarize._stream import _Answer
from compactd.summarize.outcomes import Kind, LLMError, is_overflow_text, retry_after_seconds

__all__ = ["chat_body", "read_lines", "status_error", "take_chunk"]

_RETRY_STATUSES = frozenset({408, 409, 429})
_OVERFLOW_STATUSES = frozenset({400, 413, 422})
# The final chunk's figures the speed memory and the truncation check read (durations in nanoseconds).
_FINAL_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)


def chat_body(
    model: str,
    system: str,
    user: str,
    *,
    max_tokens: int,
    num_ctx: int | None,
    keep_alive: str | float | None,
    temperature: float | None,
    seed: int | None,
) -> dict[str, Any]:
    """The ``/api/chat`` request: ``num_predict`` bounds the answer as ``max_tokens`` does on ``/v1``."""
    options: dict[str, Any] = {"num_predict": max_tokens}
    if num_ctx is not None:
        options["num_ctx"] = num_ctx
    if temperature is not None:
        options["temperature"] = temperature
    if seed is not None:
        options["seed"] = seed
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "stream": True,
        "options": options,
    }
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    return body


def status_error(response: httpx2.Response, body: bytes, where: str, attempt: int, quote: Any) -> LLMError:
    """A non-200 answer: Ollama's errors are ``{"error": "<message>"}``; classified as on ``/v1``."""
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    message = parsed.get("error") if isinstance(parsed, dict) else None
    says = message if isinstance(message, str) else text
    status = response.status_code
    kind: Kind
    if status in _OVERFLOW_STATUSES and is_overflow_text(says):
        kind = "context_overflow"
    elif status in _RETRY_STATUSES or status >= 500:
        kind = "transient"
    else:
        kind = "fatal"
    return LLMError(
        kind,
        f"summarizer {kind}: HTTP {status} from {where}: {quote(says)}",
        status=status,
        attempts=attempt,
        retry_after=retry_after_seconds(response.headers),
    )


async def read_lines(response: httpx2.Response, on_line: Callable[[bytes], bool]) -> None:
    """Feed each complete line of a streamed body to ``on_line`` (a line never exceeds the body cap)."""
    pending: list[bytes] = []
    async for chunk in response.aiter_bytes():
        pending.append(chunk)
        if b"\n" not in chunk:
            continue
        lines = b"".join(pending).split(b"\n")
        pending = [lines.pop()]
        for line in lines:
            if line.strip() and on_line(line):
                return
    tail = b"".join(pending)
    if tail.strip():
        on_line(tail)


def take_chunk(event: Mapping[str, Any], answer: _Answer) -> tuple[str | None, bool]:
    """One streamed object into ``answer``: (its answer text, whether it is the final one)."""
    message = event.get("message")
    content = None
    if isinstance(message, Mapping):
        text = message.get("content")
        thinking = message.get("thinking")
        if (isinstance(text, str) and text) or (isinstance(thinking, str) and thinking):
            answer.tick()
        content = text if isinstance(text, str) and text else None
    if isinstance(event.get("model"), str):
        answer.model = event["model"]
    if event.get("done") is not True:
        return content, False
    final = {k: event[k] for k in _FINAL_FIELDS if k in event}
    answer.ollama = final
    reason = event.get("done_reason")
    answer.finish_reason = reason if isinstance(reason, str) else "stop"
    for field, name in (("prompt_eval_count", "prompt_tokens"), ("eval_count", "completion_tokens")):
        count = final.get(field)
        if isinstance(count, int) and not isinstance(count, bool):
            setattr(answer, name, count)
    return content, True
