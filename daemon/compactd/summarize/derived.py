"""What a compaction's current state and digest take from one message alone, made once when the daemon
prepared the message (issue 22): its statements, its decisions and rules, and a tool result's output and
failure. A compaction of a session the daemon followed then reads them instead of scanning every message's
text again; the sections are built from them exactly as from a cold scan, since each is a function of that
message (as the engine hands it on) alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from compactd.core.messages import Message

__all__ = ["Derived", "DerivedOf", "Lookup", "derived_valid", "nothing_derived"]

# A tool result's (output as a command's result, whether a file dump shows the same, whether it failed).
Result = tuple[str | None, bool, bool]


class Derived(NamedTuple):
    """One message's share of the sections (see ``facts.message_statements``, ``digest.message_decisions``,
    ``digest.message_rules``, ``digest.message_todos``, ``facts.result_of``): statements as their texts, items as written."""

    statements: Sequence[str]
    decisions: Sequence[str]
    rules: Sequence[str]
    todos: Sequence[tuple[str, str, str]]  # (op, key, item): see ``digest.message_todos``
    result: Result | None
    failed: bool | None  # a tool result's ``is_tool_failure`` as read (before redaction), else None


Lookup = Callable[[Message], "Derived | None"]


def nothing_derived(message: Message) -> Derived | None:
    """The lookup of a cold job: every message is read."""
    return None


class DerivedOf:
    """The derived shares of one job's handed-on messages, by identity (the messages are held, so no id is
    reused while this lives)."""

    def __init__(self, messages: Sequence[Message], derived: Sequence[Derived | None]) -> None:
        self._by_id = {id(m): (m, d) for m, d in zip(messages, derived, strict=False) if d is not None}

    def __call__(self, message: Message) -> Derived | None:
        got = self._by_id.get(id(message))
        return got[1] if got is not None and got[0] is message else None

    def __len__(self) -> int:
        return len(self._by_id)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def _op(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 3 and _strings(value)


def derived_valid(value: Any) -> bool:
    """Whether a stored value has a :class:`Derived`'s shape (a store is ours, but a file can be damaged)."""
    if not (isinstance(value, list) and len(value) == 6 and all(map(_strings, value[:3]))):
        return False
    if not (isinstance(value[3], list) and all(map(_op, value[3]))):
        return False
    result = value[4]
    if not (value[5] is None or isinstance(value[5], bool)):
        return False
    return result is None or (
        isinstance(result, list)
        and len(result) == 3
        and (result[0] is None or isinstance(result[0], str))
        and isinstance(result[1], bool)
        and isinstance(result[2], bool)
    )
