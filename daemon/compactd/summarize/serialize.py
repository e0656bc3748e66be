"""Messages as a labelled transcript, the form a summarizer reads (pi's ``serializeConversation``).

Sending the span as chat turns invites a model to *continue* the conversation; a flat transcript with role
labels makes it plain that the text is material to summarize. Only what the agent's model saw goes in:
``openclaw.runtime-context`` messages and ``toolResult.details`` never do, and secrets are redacted before the
text can leave the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from compactd.core.messages import Message, blocks_of, llm_visible, role_of, text_of, tool_calls
from compactd.defaults import SUMMARIZER_TOOL_RESULT_MAX_CHARS as SUMMARIZER_TOOL_RESULT_MAX_CHARS
from compactd.summarize.redact import redact_secrets

__all__ = ["PART_SEPARATOR", "format_tool_call", "serialize_transcript", "truncate_for_summary"]

IMAGE_PLACEHOLDER = "[image]"
# Separator between messages: pi joins its parts with a blank line.
PART_SEPARATOR = "\n\n"


def truncate_for_summary(text: str, max_chars: int) -> str:
    """pi's ``truncateForSummary``: the head, then a note of how much was left out."""
    if max_chars < 0 or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n\n[... {len(text) - max_chars} more characters truncated]"


def json_value(value: Any) -> str:
    """``JSON.stringify(value)`` for argument values; never raises."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return "[unserializable]"


def format_tool_call(block: dict[str, Any]) -> str:
    """``name(k=v, ...)`` with each value as JSON, as pi writes tool calls for its summarizer."""
    name = block.get("name") if isinstance(block.get("name"), str) else "tool"
    args = block.get("arguments")
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json_value(v)}" for k, v in args.items())
    elif args is None:
        inner = ""
    else:
        inner = json_value(args)
    return f"{name}({inner})"


def content_text(message: Message) -> str:
    """Text blocks joined, each image as ``[image]``, so a screenshot's presence is not silently lost."""
    parts: list[str] = []
    for block in blocks_of(message):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "image":
            parts.append(IMAGE_PLACEHOLDER)
    return "\n".join(p for p in parts if p)


def _str(message: Message, key: str, default: str = "") -> str:
    value = message.get(key)
    return value if isinstance(value, str) else default


def _identity(text: str) -> str:
    return text


def _assistant_parts(message: Message, include_thinking: bool, clean: Callable[[str], str]) -> list[str]:
    parts: list[str] = []
    if include_thinking:
        thinking = [
            b["thinking"]
            for b in blocks_of(message)
            if b.get("type") == "thinking" and isinstance(b.get("thinking"), str) and b["thinking"].strip()
        ]
        if thinking:
            parts.append("[Assistant thinking]: " + clean("\n".join(thinking)))
    text = text_of(message)
    if text.strip():
        parts.append(f"[Assistant]: {clean(text)}")
    calls = tool_calls(message)
    if calls:
        parts.append("[Assistant tool calls]: " + clean("; ".join(format_tool_call(c) for c in calls)))
    if message.get("stopReason") in ("error", "aborted"):
        error = message.get("errorMessage")
        detail = f": {clean(error)}" if isinstance(error, str) and error else ""
        parts.append(f"[Assistant turn {message['stopReason']}]{detail}")
    return parts


def _serialize_one(
    message: Message, cap: int, include_thinking: bool, clean: Callable[[str], str]
) -> list[str]:
    role = role_of(message)
    if role == "user":
        text = content_text(message)
        return [f"[User]: {clean(text)}"] if text.strip() else []
    if role == "assistant":
        return _assistant_parts(message, include_thinking, clean)
    if role == "toolResult":
        name = _str(message, "toolName", "tool")
        flag = "; error" if message.get("isError") else ""
        text = clean(content_text(message)) or "(no output)"
        return [f"[Tool result]: ({name}{flag}) {truncate_for_summary(text, cap)}"]
    if role == "bashExecution":
        if message.get("excludeFromContext"):
            return []  # ``!!cmd``: the user kept it out of the agent's context, so it stays out of ours
        notes = []
        if isinstance(message.get("exitCode"), int):
            notes.append(f"exit code {message['exitCode']}")
        if message.get("cancelled"):
            notes.append("cancelled")
        if message.get("truncated"):
            notes.append("output truncated")
        note = f" ({', '.join(notes)})" if notes else ""
        body = truncate_for_summary(clean(_str(message, "output")), cap)
        return [f"[Bash]: $ {clean(_str(message, 'command'))}{note}\n{body}".rstrip()]
    if role == "custom":
        text = content_text(message)
        kind = _str(message, "customType", "message")
        return [f"[Custom {kind}]: {clean(text)}"] if text.strip() else []
    if role in ("compactionSummary", "branchSummary"):
        text = text_of(message)
        return [f"[Previous summary]: {clean(text)}"] if text.strip() else []
    return []


def serialize_transcript(
    messages: Iterable[Message],
    *,
    tool_result_max_chars: int = SUMMARIZER_TOOL_RESULT_MAX_CHARS,
    redact: bool = True,
    include_thinking: bool = True,
) -> str:
    """The span as labelled text, one part per message line group, parts separated by a blank line.

    Redaction runs on each whole text before truncation, so a secret cut in half by the cap cannot slip
    through as a fragment the patterns no longer recognise.
    """
    clean = redact_secrets if redact else _identity
    parts: list[str] = []
    for message in llm_visible(messages):
        parts.extend(_serialize_one(message, tool_result_max_chars, include_thinking, clean))
    return PART_SEPARATOR.join(parts)
