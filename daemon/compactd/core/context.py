"""pi's ``buildSessionContext``: the message list an agent sends to its model after loading a transcript.

Reproduced exactly for the two rule sets pi has had (the differential tests against pi 0.73.1 and 1.6.0 are the
judges); which one applies is read off the branch itself (:func:`rules_of`, design.md §6.14):

- pi 0.73: the last compaction on the branch wins; its summary comes first, then the branch entries from
  ``firstKeptEntryId`` up to it, then everything after it.
- pi 1.x (``buildSessionProjection``): the same selection, except that system messages before the compaction
  are left out (the compaction's ``systemMessage`` checkpoint, put before its summary, replays them), an older
  compaction inside the kept range contributes nothing, and the latest ``context_edit`` of each entry omits or
  replaces what it shows the model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Iterator
from dataclasses import field
from typing import Any

from compactd.core.messages import PI_0_73, PI_1, is_runtime_context
from compactd.core.reader import Entry, Transcript, link_key
from compactd.core.tokens import ContextEstimate, estimate_for_planning, projected_estimate
from compactd.datarecord import datarecord
from compactd.patterns import lazy_pattern

__all__ = [
    "UNDEFINED",
    "SessionContext",
    "build_context",
    "compaction_message",
    "context_entries",
    "context_estimate",
    "context_from_path",
    "entry_to_message",
    "is_pi1_marker",
    "is_system_message",
    "js_same",
    "js_timestamp",
    "message_entries",
    "projected_entries",
    "rules_of",
    "rules_reason",
]


@datarecord
class SessionContext:
    """The messages pi would send the model from a branch, with the model and thinking level in force."""

    messages: list[dict[str, Any]]
    thinking_level: str
    model: dict[str, Any] | None
    rules: str = PI_0_73
    # pi 1.x: a usage anchor at a message index below this was measured before a later context edit or
    # compaction on the branch, and pi no longer trusts it (``estimateProjectedContextTokens``).
    trusted_from: int = 0
    # The entry each message comes from, parallel to ``messages`` (a compaction's summary: the compaction).
    sources: list[Entry] = field(default_factory=list, repr=False, compare=False)
    _visible: list[dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)
    _tool_results: list[tuple[Entry, dict[str, Any]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def visible(self) -> list[dict[str, Any]]:
        """The messages that reach the model (runtime context left out), in order: listed once per context,
        as its estimate, its ledger and ``inspect``'s report each walk them (``messages`` is never changed
        once built, and no reader changes this list: it is ``messages`` itself when the builder saw no custom
        message, see ``_pi073_context``)."""
        if self._visible is None:
            self._visible = [m for m in self.messages if not is_runtime_context(m)]
        return self._visible

    def message_entries(self) -> Iterator[tuple[Entry, dict[str, Any]]]:
        """``message_entries`` of the branch this context was built from, without walking the branch again:
        each message with its entry, a compaction's summary and checkpoint excepted."""
        for entry, message in zip(self.sources, self.messages, strict=True):
            if entry.get("type") != "compaction":
                yield entry, message

    def tool_results(self) -> list[tuple[Entry, dict[str, Any]]]:
        """``message_entries`` narrowed to the tool results, in one pass over the messages' roles: an entry is
        read only for a tool result (the routing figure's items; 42,000 messages: 24 -> 17 ms). Listed once
        per context, as the ledger's count and a dry run's pruning plans each read them (no reader changes it).
        """
        if self._tool_results is None:
            self._tool_results = [
                (entry, message)
                for entry, message in zip(self.sources, self.messages, strict=True)
                if message.get("role") == "toolResult" and entry.get("type") != "compaction"
            ]
        return self._tool_results


UNDEFINED: Any = object()  # a key the entry does not have: ``undefined`` in JavaScript
# ECMAScript's date-time string format (the only one Date.parse must accept; V8's legacy fallback is not copied).
_ES_DATE = lazy_pattern(
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
    match = _ES_DATE().fullmatch(value)
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


def is_system_message(entry: Entry) -> bool:
    """A pi 1.x system-message entry: prompt and tool-loadout state, not conversation."""
    if entry.get("type") != "message":
        return False
    message = entry.get("message")
    return isinstance(message, dict) and message.get("role") == "system"


def is_pi1_marker(entry: Entry) -> bool:
    """An entry only pi 1.x writes: a system message, a context edit, a usage record, a compaction checkpoint."""
    kind = entry.get("type")
    if kind in ("context_edit", "usage"):
        return True
    if kind == "compaction":
        return "systemMessage" in entry
    return kind == "message" and is_system_message(entry)


def rules_reason(path: list[Entry], rules: str | None = None) -> tuple[str, str]:
    """(rules, why): what ``inspect`` and ``doctor`` say about which pi's rules a branch follows. ``rules``: the
    branch's (``rules_of``), when the caller knows them already: pi 0.73's need no count (nothing to count)."""
    if rules == PI_0_73:
        return PI_0_73, _NO_PI1_ENTRY
    counts = {"system messages": 0, "context edits": 0, "usage records": 0, "compaction checkpoints": 0}
    for entry in path:
        kind = entry.get("type")
        if kind == "context_edit":
            counts["context edits"] += 1
        elif kind == "usage":
            counts["usage records"] += 1
        elif kind == "compaction" and "systemMessage" in entry:
            counts["compaction checkpoints"] += 1
        elif is_system_message(entry):
            counts["system messages"] += 1
    found = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    if found:
        return PI_1, f"pi 1.x wrote this branch ({found})"
    return PI_0_73, _NO_PI1_ENTRY


_NO_PI1_ENTRY = "nothing on the branch only pi 1.x writes (no system message, context edit or checkpoint)"


def rules_of(path: list[Entry]) -> str:
    """The rules pi applies to this branch: pi 1.x's when the branch holds anything only pi 1.x writes (every
    session the pi 1.x agent writes opens with its system message), else pi 0.73's (design.md §6.14)."""
    return PI_1 if any(map(is_pi1_marker, path)) else PI_0_73


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


def context_entries(path: list[Entry], rules: str | None = None) -> list[Entry]:
    """The path entries whose messages make up the context, in order (the last compaction first, if any)."""
    rules = rules_of(path) if rules is None else rules
    # The last compaction (``_settings``'s), found from the end: most branches have none, or one near the leaf.
    compaction = next((e for e in reversed(path) if e.get("type") == "compaction"), None)
    return _context_entries(path, compaction, pi1=rules == PI_1)


def _context_entries(path: list[Entry], compaction: Entry | None, *, pi1: bool = False) -> list[Entry]:
    if compaction is None:
        return path
    # pi finds the compaction by id (first match, ===; pi 1.x matches any entry type), then keeps from
    # firstKeptEntryId before it.
    compaction_id = compaction.get("id", UNDEFINED)
    position = next(
        i
        for i, e in enumerate(path)
        if (pi1 or e.get("type") == "compaction") and js_same(e.get("id", UNDEFINED), compaction_id)
    )
    first_kept = compaction.get("firstKeptEntryId", UNDEFINED)
    start = next((i for i in range(position) if js_same(path[i].get("id", UNDEFINED), first_kept)), position)
    kept = path[start:position]
    if pi1:  # pi 1.x keeps no system message from before the compaction: its checkpoint replays them
        kept = [e for e in kept if not is_system_message(e)]
    return [compaction, *kept, *path[position + 1 :]]


def context_from_path(path: list[Entry], rules: str | None = None) -> SessionContext:
    """The context an agent builds from this branch, by ``rules`` (default: the branch's own, ``rules_of``)."""
    if rules is None:
        context = _pi073_context(path)
        if context is not None:
            return context
        rules = PI_1  # the walk met an entry only pi 1.x writes
    if rules == PI_1:
        return _projection(path)
    thinking_level, model, compaction = _settings(path)  # one walk of the branch for the settings
    messages, sources = _listed(path, compaction)
    return SessionContext(messages, thinking_level, model, sources=sources)


def _listed(path: list[Entry], compaction: Entry | None) -> tuple[list[dict[str, Any]], list[Entry]]:
    """The messages pi 0.73's context shows from ``path`` (from ``compaction``, the last one, when there is one),
    and the entry each comes from."""
    messages: list[dict[str, Any]] = []
    sources: list[Entry] = []
    for entry in _context_entries(path, compaction):
        message = compaction_message(entry) if entry is compaction else entry_to_message(entry)
        if message is not None:
            messages.append(message)
            sources.append(entry)
    return messages, sources


def _pi073_context(path: list[Entry]) -> SessionContext | None:
    """The branch's context by pi 0.73's rules, or None when it holds an entry only pi 1.x writes (its rules are
    then pi 1.x's): ``rules_of``, ``_settings`` and the messages in one walk of the branch instead of three (a
    42,000-entry branch: each walk is mostly the memory its entries and messages are read from). Before a
    compaction the messages are listed as they come; after one, from the compaction (as ``context_from_path``)."""
    thinking_level = "off"
    model: dict[str, Any] | None = None
    compaction: Entry | None = None
    messages: list[dict[str, Any]] = []
    sources: list[Entry] = []
    custom = False  # a custom message is on the branch: some message may be runtime context
    # What names the model: the last assistant message (its "model") or model_change (its "modelId"), read at
    # the end instead of a dict made for each of 20,000 assistant messages.
    said: dict[str, Any] | None = None
    said_key = "model"
    for entry in path:
        # ``is_pi1_marker`` read inline, from the type and the role this walk reads anyway (two calls fewer for
        # each of 42,000 entries): a system message, a context edit, a usage record or a checkpoint.
        kind = entry.get("type")
        if kind == "message":
            message = entry.get("message")
            if isinstance(message, dict):
                role = message.get("role")
                if role == "system":
                    return None
                if role == "assistant":
                    said, said_key = message, "model"  # the model, read once the walk is over
                elif role == "custom":
                    custom = True
                if compaction is None:
                    messages.append(message)
                    sources.append(entry)
            continue
        if kind in ("context_edit", "usage") or (kind == "compaction" and "systemMessage" in entry):
            return None
        if kind == "thinking_level_change":
            thinking_level = entry.get("thinkingLevel")  # type: ignore[assignment]
        elif kind == "model_change":
            said, said_key = entry, "modelId"
        elif kind == "compaction":
            compaction = entry
        elif kind == "custom_message":
            custom = True
        if compaction is None and (shown := entry_to_message(entry)) is not None:
            messages.append(shown)
            sources.append(entry)
    if compaction is not None:  # the last one wins: the context starts from it
        messages, sources = _listed(path, compaction)
    if said is not None:
        model = {"provider": said.get("provider"), "modelId": said.get(said_key)}
    context = SessionContext(messages, thinking_level, model, sources=sources)
    if not custom:
        # No runtime context (a custom message) anywhere: the messages are the visible ones, known without
        # another look at each of them (42,000 messages: about 15 ms, each message's memory read again).
        context._visible = messages
    return context


def message_entries(path: list[Entry], rules: str | None = None) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """(entry, message) for each message of the context that an entry of the branch contributes, in order (a
    compaction's summary and checkpoint excepted): what the agent shows the model of that entry."""
    rules = rules_of(path) if rules is None else rules
    if rules == PI_1:
        for entry, messages in projected_entries(path):
            if entry.get("type") != "compaction":
                for message in messages:
                    yield entry, message
        return
    for entry in context_entries(path, rules):
        shown = entry_to_message(entry)
        if shown is not None:
            yield entry, shown


def projected_entries(path: list[Entry]) -> list[tuple[Entry, list[dict[str, Any]]]]:
    """pi 1.x's ``buildSessionProjection(...).entries``: each context entry with the messages it shows the
    model (its latest context edit applied), the newest compaction first."""
    selected = _context_entries(path, _settings(path)[2], pi1=True)
    edits: dict[Hashable, Entry] = {}
    for entry in selected:
        if entry.get("type") == "context_edit":
            key = link_key(entry.get("targetId"))
            if key is not None:
                edits[key] = entry
    projected: list[tuple[Entry, list[dict[str, Any]]]] = []
    for index, entry in enumerate(selected):
        if entry.get("type") == "compaction" and index > 0:
            # an older compaction inside the kept range: no checkpoint, no summary
            projected.append((entry, []))
            continue
        key = link_key(entry.get("id"))
        projected.append((entry, _project_entry(entry, edits.get(key) if key is not None else None)))
    return projected


def _entry_messages(entry: Entry) -> list[dict[str, Any]]:
    """pi 1.x's ``sessionEntryToContextMessages``."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        if not isinstance(message, dict):
            return []
        role = message.get("role")
        if message.get("content") is None:
            if role == "system":
                return [{**message, "content": ""}]
            if role in ("user", "assistant", "toolResult"):
                return [{**message, "content": []}]
        return [message]
    if kind == "custom_message":
        made: dict[str, Any] = {"role": "custom"}
        if "customType" in entry:
            made["customType"] = entry["customType"]
        content = entry.get("content")
        made["content"] = [] if content is None else content  # pi 1.x: ``content ?? []``
        made.update((k, entry[k]) for k in ("display", "details") if k in entry)
        made["timestamp"] = js_timestamp(entry.get("timestamp", UNDEFINED))
        return [made]
    if kind == "branch_summary" and entry.get("summary"):
        return [_made("branchSummary", entry, ("summary", "fromId"))]
    if kind == "compaction":
        summary = compaction_message(entry)
        checkpoint = entry.get("systemMessage")
        return [checkpoint, summary] if isinstance(checkpoint, dict) and checkpoint else [summary]
    return []


_EDITABLE_ROLES = ("user", "assistant", "toolResult", "custom")


def _project_entry(entry: Entry, edit: Entry | None) -> list[dict[str, Any]]:
    """pi 1.x's ``projectContextEntry``: the entry's messages with its latest context edit applied."""
    messages = _entry_messages(entry)
    if edit is None:
        return messages
    replacement = edit.get("replacement", UNDEFINED)
    if replacement is None:
        return []
    if not isinstance(replacement, dict):
        return messages  # pi throws on this edit; compactd keeps what the entry says
    projected = []
    for message in messages:
        role = message.get("role")
        if role not in _EDITABLE_ROLES:
            projected.append(message)
            continue
        content = replacement.get("content", UNDEFINED)
        if role in ("assistant", "toolResult") and isinstance(content, str):
            content = [{"type": "text", "text": content}]
        edited = {**message, "content": content}
        if content is UNDEFINED:
            del edited["content"]
        projected.append(edited)
    return projected


def _projection(path: list[Entry]) -> SessionContext:
    thinking_level, model, _ = _settings(path)
    projected = projected_entries(path)
    messages: list[dict[str, Any]] = []
    # The newest context edit or compaction on the branch: usage measured at or before it is stale.
    invalidating = max(
        (i for i, e in enumerate(path) if e.get("type") in ("context_edit", "compaction")), default=-1
    )
    position = {id(e): i for i, e in enumerate(path)}
    trusted_from = 0
    sources: list[Entry] = []
    for entry, shown in projected:
        if position.get(id(entry), -1) <= invalidating:
            trusted_from = len(messages) + len(shown)
        messages.extend(shown)
        sources.extend([entry] * len(shown))
    return SessionContext(
        messages, thinking_level, model, rules=PI_1, trusted_from=trusted_from, sources=sources
    )


def context_estimate(context: SessionContext) -> ContextEstimate:
    """The figure the agent that wrote this context compares with its threshold: pi 1.x's projected estimate,
    or (pi 0.73 and OpenClaw) ``estimate_for_planning`` over what reaches the model."""
    if context.rules == PI_1:
        return projected_estimate(context.messages, context.trusted_from)
    return estimate_for_planning(context.visible())


def build_context(transcript: Transcript, leaf_id: str | None = None) -> SessionContext:
    return context_from_path(transcript.branch(leaf_id))
