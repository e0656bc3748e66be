"""pi's ``buildSessionContext``: the message list an agent sends to its model after loading a transcript.

Reproduced exactly (the differential test against pi 0.73.1 is the judge): the last compaction on the branch wins;
its summary comes first, then the branch entries from ``firstKeptEntryId`` up to it, then everything after it.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from compactd.transcript.reader import Entry, Transcript

__all__ = [
    "UNDEFINED",
    "SessionContext",
    "build_context",
    "compaction_message",
    "context_entries",
    "context_from_path",
    "entry_to_message",
    "js_same",
    "js_timestamp",
]


@dataclass
class SessionContext:
    messages: list[dict[str, Any]]
    thinking_level: str
    model: dict[str, Any] | None


UNDEFINED: Any = object()  # a key the entry does not have: ``undefined`` in JavaScript
# ECMAScript's date-time string format (the only one Date.parse must accept; V8's legacy fallback is not copied).
_ES_DATE = re.compile(
    r"([+-]\d{6}|\d{4})(?:-(\d{2})(?:-(\d{2}))?)?"
    r"(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?(Z|[+-]\d{2}:\d{2})?"
)


def js_timestamp(value: Any = UNDEFINED) -> float | int | None:
    """``new Date(value).getTime()`` as pi computes message timestamps from entries; None where JS gives NaN."""
    if value is UNDEFINED:
        return None
    if value is None or isinstance(value, bool):
        return int(bool(value))
    if isinstance(value, int | float):
        return math.trunc(value) if math.isfinite(value) and abs(value) <= 8.64e15 else None
    if not isinstance(value, str):
        return None
    match = _ES_DATE.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    if year == "-000000" or (hour is None and offset is not None and month is None):
        return None
    if not (1 <= int(month or 1) <= 12 and 1 <= int(day or 1) <= 31):
        return None
    h, m, sec = int(hour or 0), int(minute or 0), int(second or 0)
    if h > 24 or m > 59 or sec > 59 or (h == 24 and (m or sec or int(fraction or 0))):
        return None
    millis = int((fraction or "0")[:3].ljust(3, "0"))
    epoch_days = _days_from_civil(int(year), int(month or 1), int(day or 1))
    ms = ((epoch_days * 24 + h) * 60 + m) * 60_000 + sec * 1000 + millis
    if offset is None and hour is not None:
        local = time.localtime(ms // 1000)
        ms -= local.tm_gmtoff * 1000  # JavaScript reads a date-time without offset as local time
    elif offset not in (None, "Z"):
        assert offset is not None
        sign = 1 if offset[0] == "+" else -1
        ms -= sign * (int(offset[1:3]) * 60 + int(offset[4:6])) * 60_000
    return ms if abs(ms) <= 8.64e15 else None


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (any year, unlike ``datetime``)."""
    year -= month <= 2
    era = (year if year >= 0 else year - 399) // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


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
    message["timestamp"] = js_timestamp(entry.get("timestamp", UNDEFINED))
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


def js_same(a: Any, b: Any) -> bool:
    """JavaScript's ``a === b`` for parsed JSON values (``UNDEFINED`` standing for ``undefined``)."""
    if isinstance(a, dict | list) or isinstance(b, dict | list) or a is UNDEFINED or b is UNDEFINED:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return isinstance(a, str) and isinstance(b, str) and a == b


def context_entries(path: list[Entry]) -> list[Entry]:
    """The path entries whose messages make up the context, in order (the last compaction first, if any)."""
    return _context_entries(path, _settings(path)[2])


def _context_entries(path: list[Entry], compaction: Entry | None) -> list[Entry]:
    if compaction is None:
        return path
    # pi finds the compaction by id (first match, ===), then keeps from firstKeptEntryId before it.
    compaction_id = compaction.get("id", UNDEFINED)
    position = next(
        i
        for i, e in enumerate(path)
        if e.get("type") == "compaction" and js_same(e.get("id", UNDEFINED), compaction_id)
    )
    first_kept = compaction.get("firstKeptEntryId", UNDEFINED)
    start = next((i for i in range(position) if js_same(path[i].get("id", UNDEFINED), first_kept)), position)
    return [compaction, *path[start:position], *path[position + 1 :]]


def context_from_path(path: list[Entry]) -> SessionContext:
    thinking_level, model, compaction = _settings(path)  # one walk of the branch for the settings
    messages: list[dict[str, Any]] = []
    for entry in _context_entries(path, compaction):
        message = compaction_message(entry) if entry is compaction else entry_to_message(entry)
        if message is not None:
            messages.append(message)
    return SessionContext(messages, thinking_level, model)


def build_context(transcript: Transcript, leaf_id: str | None = None) -> SessionContext:
    return context_from_path(transcript.branch(leaf_id))
