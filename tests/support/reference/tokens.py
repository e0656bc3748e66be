# pi's per-message character count and JSON.stringify length as they were before issue 22's fifth round (main at
# 834329e), kept verbatim as the reference the faster ones must equal (tests/test_tokens_fast.py). Not to be
# edited.
# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

from typing import Any

import orjson

from compactd.core.jsjson import js_number, stringify
from compactd.core.messages import Message
from compactd.core.tokens import IMAGE_CHARS, _js_truthy, js_len


def js_json_len(value: Any) -> int:
    try:
        encoded = orjson.dumps(value)
    except TypeError:
        return js_len(stringify(value, js_key_order=False))
    return js_len(encoded.decode()) + _number_correction(value)


def _number_correction(value: Any) -> int:
    if isinstance(value, float):
        return len(js_number(value)) - len(orjson.dumps(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return 0 if abs(value) < 2**53 else len(stringify(value)) - len(str(value))
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return 0
    correction = 0
    for item in items:
        kind = type(item)
        if kind is str or kind is bool or item is None or (kind is int and -(2**53) < item < 2**53):
            continue
        correction += _number_correction(item)
    return correction


def _text_chars(content: Any, *, images: bool) -> int:
    if isinstance(content, str):
        return js_len(content)
    chars = 0
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            text = block.get("text")
            if kind == "text" and isinstance(text, str) and text:
                chars += js_len(text)
            if images and kind == "image":
                chars += IMAGE_CHARS
    return chars


def message_chars(message: Message, *, pi1: bool = False) -> int:
    role = message.get("role")
    if role == "user":
        return _text_chars(message.get("content"), images=pi1)
    if role == "system":
        return _system_chars(message) if pi1 else 0
    if role in ("toolResult", "custom"):
        return _text_chars(message.get("content"), images=True)
    if role == "assistant":
        chars = 0
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                chars += js_len(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                chars += js_len(block["thinking"])
            elif kind == "toolCall":
                name = block.get("name")
                chars += (js_len(name) if isinstance(name, str) else 0) + js_json_len(block.get("arguments"))
        return chars
    if role == "bashExecution":
        return sum(js_len(v) for v in (message.get("command"), message.get("output")) if isinstance(v, str))
    if role in ("branchSummary", "compactionSummary"):
        summary = message.get("summary")
        return js_len(summary) if isinstance(summary, str) else 0
    return 0


def _system_chars(message: Message) -> int:
    chars = _text_chars(message.get("content"), images=True)
    sections = message.get("sections")
    if isinstance(sections, dict):
        chars += sum(js_len(text) for text in sections.values() if isinstance(text, str))
    tools = message.get("toolsAdded")
    if _js_truthy(tools):
        chars += js_json_len(tools)
    return chars
