"""Views over pi's AgentMessage dicts (design.md §6.12).

Messages stay the raw dicts read from the transcript, so unknown fields round-trip untouched; these helpers
are the one place that knows where text, tool calls and images live inside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = [
    "PI_0_73",
    "PI_1",
    "RUNTIME_CONTEXT_TYPE",
    "TOOL_CALL_BLOCK_TYPES",
    "Message",
    "blocks_of",
    "current_system_message",
    "is_error_turn",
    "is_runtime_context",
    "llm_visible",
    "role_of",
    "strip_for_llm",
    "text_of",
    "tool_call_id",
    "tool_calls",
]

Message = dict[str, Any]

_ABSENT: Any = object()  # a key the message does not have
RUNTIME_CONTEXT_TYPE = "openclaw.runtime-context"
PI_0_73 = "pi-0.73"  # @mariozechner/pi-coding-agent up to 0.73.x (and OpenClaw's JSONL transcripts)
PI_1 = "pi-1"  # @earendil-works/pi-coding-agent 1.x: system messages, context edits, compaction checkpoints
# Tuples, not sets, wherever a transcript's value is looked up in them: a list or an object where a string
# belongs is JSON pi reads like any other, and a set's membership test raises on an unhashable value.
TOOL_CALL_BLOCK_TYPES = ("toolCall", "toolUse", "functionCall")


def role_of(message: Message) -> str:
    role = message.get("role")
    return role if isinstance(role, str) else ""


def blocks_of(message: Message) -> list[dict[str, Any]]:
    """Content blocks; a string content is one text block, anything malformed is no block."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def text_of(message: Message, *, include_thinking: bool = False, sep: str = "\n") -> str:
    """The message's plain text: text blocks (and thinking when asked), bash command and output, summaries."""
    role = role_of(message)
    if role == "bashExecution":
        return f"$ {message.get('command', '')}\n{message.get('output', '')}"
    if role in ("compactionSummary", "branchSummary"):
        summary = message.get("summary")
        return summary if isinstance(summary, str) else ""
    parts: list[str] = []
    for block in blocks_of(message):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif include_thinking and kind == "thinking" and isinstance(block.get("thinking"), str):
            parts.append(block["thinking"])
    return sep.join(parts)


def tool_calls(message: Message) -> list[dict[str, Any]]:
    """Tool-call blocks of an assistant message that carry an id."""
    if role_of(message) != "assistant":
        return []
    return [
        b
        for b in blocks_of(message)
        if b.get("type") in TOOL_CALL_BLOCK_TYPES and isinstance(b.get("id"), str)
    ]


def tool_call_id(message: Message) -> str | None:
    """The call id a toolResult answers (``toolCallId``, or the legacy ``toolUseId``)."""
    for key in ("toolCallId", "toolUseId"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def is_runtime_context(message: Message) -> bool:
    return role_of(message) == "custom" and message.get("customType") == RUNTIME_CONTEXT_TYPE


def is_error_turn(message: Message) -> bool:
    return role_of(message) == "assistant" and message.get("stopReason") in ("error", "aborted")


def strip_for_llm(message: Message) -> Message:
    """A copy without what must never reach a model or a token count: ``toolResult.details``."""
    if role_of(message) == "toolResult" and "details" in message:
        return {k: v for k, v in message.items() if k != "details"}
    return message


def llm_visible(messages: Iterable[Message]) -> Iterator[Message]:
    """Messages as a model may see them: runtime-context messages dropped, tool-result details stripped."""
    for message in messages:
        if not is_runtime_context(message):
            yield strip_for_llm(message)


def _content_text(content: Any) -> str:
    """pi-ai's ``contentText``: a string, or the text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def current_system_message(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """pi-ai's ``getCurrentSystemMessage``: every system message replayed into one holding the current prompt
    (contents appended, sections patched by name) and tools (added and removed by name, first position kept)."""
    content: list[str] = []
    sections: dict[str, Any] = {}
    tools: dict[Any, Any] = {}
    timestamp: Any = _ABSENT
    for message in messages:
        if message.get("role") != "system":
            continue
        if timestamp is _ABSENT or timestamp is None:
            timestamp = message.get("timestamp", _ABSENT)
        text = _content_text(message.get("content"))
        if text:
            content.append(text)
        patch = message.get("sections")
        if isinstance(patch, dict):
            for name, value in patch.items():
                if value is None:
                    sections.pop(name, None)
                else:
                    sections[name] = value
        for key, adding in (("toolsRemoved", False), ("toolsAdded", True)):
            listed = message.get(key)
            for tool in listed if isinstance(listed, list) else ():
                name = tool.get("name") if isinstance(tool, dict) else None
                if isinstance(name, list | dict):  # unhashable; a JavaScript Map keys an object by identity
                    name = (id(name),)
                if adding:
                    tools[name] = tool
                else:
                    tools.pop(name, None)
    if timestamp is _ABSENT and not tools:
        return None
    merged: dict[str, Any] = {"role": "system", "content": "\n\n".join(content)}
    if sections:
        merged["sections"] = sections
    if tools:
        merged["toolsAdded"] = list(tools.values())
    merged["timestamp"] = 0 if timestamp is _ABSENT or timestamp is None else timestamp
    return merged
