"""pi's ``buildSessionContext``: the message list an agent sends to its model after loading a transcript.

Reproduced exactly (the differential test against pi 0.73.1 is the judge): the last compaction on the branch wins;
its summary comes first, then the branch entries from ``firstKeptEntryId`` up to it, then everything after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from daemon.transcript.reader import Entry, Transcript


@dataclass
class SessionContext:
    messages: list[dict[str, Any]]
    thinking_level: str
    model: dict[str, Any] | None


def js_timestamp(value: Any) -> float | int | None:
    """``new Date(value).getTime()`` for the ISO strings and epoch numbers pi writes; None where JS gives NaN."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None and "T" not in text:
        parsed = parsed.replace(tzinfo=timezone.utc)  # JavaScript reads a bare date as UTC, a date-time as local
    return int(round(parsed.timestamp() * 1000))


def entry_to_message(entry: Entry) -> dict[str, Any] | None:
    """The message an entry contributes to the context, or None (pi's ``appendMessage`` in buildSessionContext)."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        return message if isinstance(message, dict) else None
    if kind == "custom_message":
        return _made("custom", entry, ("customType", "content", "display", "details"))
    if kind == "branch_summary" and entry.get("summary"):
        return _made("branchSummary", entry, ("summary", "fromId"))
    return None


def _made(role: str, entry: Entry, keys: tuple[str, ...]) -> dict[str, Any]:
    """A message pi creates from an entry; keys the entry lacks stay absent, as JSON.stringify drops undefined."""
    message: dict[str, Any] = {"role": role}
    message.update((k, entry[k]) for k in keys if k in entry)
    message["timestamp"] = js_timestamp(entry.get("timestamp"))
    return message


def compaction_message(entry: Entry) -> dict[str, Any]:
    return _made("compactionSummary", entry, ("summary", "tokensBefore"))


def _settings(path: list[Entry]) -> tuple[str, dict[str, Any] | None, Entry | None]:
    thinking_level = "off"
    model: dict[str, Any] | None = None
    compaction: Entry | None = None
    for entry in path:
        kind = entry.get("type")
        if kind == "thinking_level_change":
            thinking_level = entry.get("thinkingLevel")  # type: ignore[assignment]
        elif kind == "model_change":
            model = {"provider": entry.get("provider"), "modelId": entry.get("modelId")}
        elif kind == "message":
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "assistant":
                model = {"provider": message.get("provider"), "modelId": message.get("model")}
        elif kind == "compaction":
            compaction = entry
    return thinking_level, model, compaction


def context_entries(path: list[Entry]) -> list[Entry]:
    """The path entries whose messages make up the context, in order (the last compaction first, if any)."""
    compaction = _settings(path)[2]
    if compaction is None:
        return path
    # pi finds the compaction by id (first match), then keeps from firstKeptEntryId before it.
    position = next(
        i for i, e in enumerate(path) if e.get("type") == "compaction" and e.get("id") == compaction.get("id")
    )
    first_kept = compaction.get("firstKeptEntryId")
    start = next((i for i in range(position) if path[i].get("id") == first_kept), position)
    return [compaction, *path[start:position], *path[position + 1 :]]


def context_from_path(path: list[Entry]) -> SessionContext:
    thinking_level, model, compaction = _settings(path)
    messages: list[dict[str, Any]] = []
    for entry in context_entries(path):
        message = compaction_message(entry) if entry is compaction else entry_to_message(entry)
        if message is not None:
            messages.append(message)
    return SessionContext(messages, thinking_level, model)


def build_context(transcript: Transcript, leaf_id: str | None = None) -> SessionContext:
    return context_from_path(transcript.branch(leaf_id))
