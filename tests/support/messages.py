"""The pi messages and blocks the tests build transcripts from: one set of factories for every test file.

Each factory writes only the keys it is given (``None`` leaves a key out), so a test states just what its
case needs: a bare ``user("hi")`` is ``{"role": "user", "content": [{"type": "text", "text": "hi"}]}``. Test
files bind their usual defaults (timestamps, provider, usage) with ``functools.partial`` or a short wrapper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Json = dict[str, Any]


def text(value: str) -> Json:
    return {"type": "text", "text": value}


def call(call_id: str, name: str = "bash", arguments: Json | None = None, *, kind: str = "toolCall") -> Json:
    """A tool call block (``kind="toolUse"`` and the like for the legacy spellings)."""
    return {"type": kind, "id": call_id, "name": name, "arguments": {} if arguments is None else arguments}


def blocks_of(content: Sequence[Json | str]) -> list[Json]:
    """Blocks as given, a plain string standing for a text block."""
    return [text(b) if isinstance(b, str) else b for b in content]


def user(content: str | list[Json], *, ts: Any = None, bare: bool = False) -> Json:
    """A user message; a string is one text block, or the content itself with ``bare`` (pi accepts both)."""
    body: str | list[Json] = content if bare or not isinstance(content, str) else [text(content)]
    message: Json = {"role": "user", "content": body}
    if ts is not None:
        message["timestamp"] = ts
    return message


def usage(
    total: int | None,
    *,
    input: int = 0,
    output: int = 0,
    cost: bool = False,
) -> Json | None:
    """pi's usage block (``totalTokens``), with a zero ``cost`` block when asked; None for ``total=None``."""
    if total is None:
        return None
    figures: Json = {"input": input, "output": output, "cacheRead": 0, "cacheWrite": 0, "totalTokens": total}
    if cost:
        figures["cost"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    return figures


def assistant(
    *content: Json | str,
    stop: str | None = "stop",
    ts: Any = None,
    api: str | None = None,
    provider: str | None = None,
    model: str | None = None,
    usage: Json | None = None,
    **extra: Any,
) -> Json:
    """An assistant message: blocks (a string is a text block), then the keys given, in pi's order."""
    message: Json = {"role": "assistant", "content": blocks_of(content)}
    for key, value in (("api", api), ("provider", provider), ("model", model), ("usage", usage)):
        if value is not None:
            message[key] = value
    if stop is not None:
        message["stopReason"] = stop
    if ts is not None:
        message["timestamp"] = ts
    message.update(extra)
    return message


def tool_result(
    call_id: str,
    content: str | list[Json],
    *,
    name: str | None = "bash",
    error: bool | None = False,
    ts: Any = None,
    **extra: Any,
) -> Json:
    """A toolResult answering ``call_id``; a string is one text block."""
    message: Json = {"role": "toolResult", "toolCallId": call_id}
    if name is not None:
        message["toolName"] = name
    message["content"] = [text(content)] if isinstance(content, str) else content
    if error is not None:
        message["isError"] = error
    if ts is not None:
        message["timestamp"] = ts
    message.update(extra)
    return message
