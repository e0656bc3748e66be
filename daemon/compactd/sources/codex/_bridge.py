"""Codex history ↔ the pi transcript compactd's engine reads, and the ``compacted`` line it writes back.

The engine (:mod:`compactd.summarize.engine`) works on pi entries; a Codex history becomes one pi branch whose
entry ids are the items' indexes (``%08x``), so the engine's cut (its first kept entry) names the first Codex item
kept verbatim. Codex's own context messages (developer, environment, instructions) and reasoning items are not
shown to the summarizer: Codex re-injects its context on resume, and reasoning is encrypted. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from compactd.datarecord import datarecord
from compactd.sources.codex._rollout import is_context_message

__all__ = ["SUMMARY_LEAD", "Bridged", "compacted_line", "kept_items", "to_transcript_bytes"]

Json = dict[str, Any]

# What the model reads before compactd's summary in the replacement history (compactd's words, not Codex's).
SUMMARY_LEAD = (
    "Summary of the earlier part of this session, written by compactd when the context neared its limit. "
    "The items after it are the latest turns, kept verbatim; continue from them without redoing finished work.\n\n"
)
# A tool result shown to the summarizer is cut further by the engine (design.md §6.5); this only bounds memory.
_UNKNOWN_ITEM_CHARS = 4_000


@datarecord(frozen=True, slots=True)
class Bridged:
    """The pi transcript's bytes and, per pi entry id, the index of the Codex item it stands for."""

    data: bytes
    index_of: dict[str, int]


def _entry_id(index: int) -> str:
    return f"{index:08x}"


def _text(item: Json) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(
        b["text"]
        for b in (content if isinstance(content, list) else ())  # a number or true: no text, not iterable
        if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return str(output["content"])
    if isinstance(output, list):
        return "\n".join(b["text"] for b in output if isinstance(b, dict) and isinstance(b.get("text"), str))
    return orjson.dumps(output).decode()


def _arguments(raw: Any) -> Json:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"arguments": raw}
        return value if isinstance(value, dict) else {"arguments": value}
    return {}


def _message(item: Json, names: dict[str, str], model: str | None, ts: int) -> Json | None:
    """The pi message one Codex item stands for, or None (context, reasoning: not summarized)."""
    kind = item.get("type")
    if kind == "reasoning" or is_context_message(item):
        return None
    assistant = {"api": "openai-responses", "provider": "codex", "model": model or "codex", "timestamp": ts}
    if kind == "message":
        role = item.get("role")
        if role == "user":
            return {"role": "user", "content": [{"type": "text", "text": _text(item)}], "timestamp": ts}
        return {
            "role": "assistant",
            "content": [{"type": "text", "text": _text(item)}],
            "stopReason": "stop",
            **assistant,
        }
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        call_id = str(item.get("call_id") or item.get("id") or "")
        name = str(item.get("name") or kind)
        names[call_id] = name
        arguments = (
            {"input": item.get("input")}
            if kind == "custom_tool_call"
            else _arguments(item.get("arguments") or item.get("action"))
        )
        block = {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}
        return {"role": "assistant", "content": [block], "stopReason": "toolUse", **assistant}
    if kind in ("function_call_output", "custom_tool_call_output"):
        call_id = str(item.get("call_id") or "")
        return {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": names.get(call_id, "tool"),
            "content": [{"type": "text", "text": _output_text(item.get("output"))}],
            "isError": False,
            "timestamp": ts,
        }
    text = f"[codex {kind} item] " + orjson.dumps(item).decode()[:_UNKNOWN_ITEM_CHARS]
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stopReason": "stop",
        **assistant,
    }


def to_transcript_bytes(
    history: Sequence[Json], *, session_id: str, cwd: str | None, model: str | None, started: str
) -> Bridged:
    """The history as a pi JSONL transcript (header, then one message entry per shown item, chained)."""
    header: Json = {"type": "session", "version": 3, "id": session_id, "timestamp": started}
    if cwd is not None:
        header["cwd"] = cwd
    lines = [orjson.dumps(header)]
    names: dict[str, str] = {}
    index_of: dict[str, int] = {}
    parent: str | None = None
    base = int(datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() * 1000)
    for index, item in enumerate(history):
        message = _message(item, names, model, base + index)
        if message is None:
            continue
        entry_id = _entry_id(index)
        entry = {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": started,
            "message": message,
        }
        lines.append(orjson.dumps(entry))
        index_of[entry_id] = index
        parent = entry_id
    return Bridged(b"\n".join(lines) + b"\n", index_of)


def kept_items(history: Sequence[Json], first_kept: int) -> list[Json]:
    """The items from ``first_kept`` on as Codex should see them after the summary: its context messages left
    out (resume re-injects them after the replacement history)."""
    return [item for item in history[first_kept:] if not is_context_message(item)]


def compacted_line(
    summary: str, kept: Sequence[Json], *, ordinal: int | None, now: datetime | None = None
) -> bytes:
    """The ``compacted`` rollout line (with its newline) whose replacement history is the summary as a user
    message followed by ``kept``; ``ordinal`` continues the rollout's when it numbers its lines."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    text = SUMMARY_LEAD + summary
    head = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    line: Json = {"timestamp": stamp}
    if ordinal is not None:
        line["ordinal"] = ordinal
    line["type"] = "compacted"
    line["payload"] = {"message": text, "replacement_history": [head, *kept]}
    return orjson.dumps(line) + b"\n"
