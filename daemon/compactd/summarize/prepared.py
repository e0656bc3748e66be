"""A message's share of a compaction, made once when the message is read: its redacted copy (when redaction
changes it), its identifier findings and what the current state and the digest take from it (``derived``),
keyed by its content. A compaction of a session the daemon followed then only merges (issue 22): redaction and
extraction were four fifths of a cold compaction's CPU.

Exactness: a message's redacted copy, findings and derived share depend on that message alone
(``identifiers.message_findings``, ``derive``), so the records and sections made from prepared shares are those
a cold job makes; the key is a hash of the message as a span holds it (orjson's serialisation of the same parse
is the same bytes), so a message changed in any way (a context edit, a repaired tool pairing, a migration) is
simply not found, and is done cold. A key is 128 bits of SHA-256 (in hardware on x86_64 and aarch64: twice
BLAKE2b's speed here): no transcript can make two messages collide. Only redacted text is kept, never a secret.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import orjson

from compactd.core.messages import Message, role_of
from compactd.datarecord import datarecord
from compactd.summarize.augment import is_tool_failure
from compactd.summarize.derived import Derived, derived_valid
from compactd.summarize.digest import message_decisions, message_rules, message_todos
from compactd.summarize.facts import message_statements, result_of
from compactd.summarize.identifiers import (
    Findings,
    FindingsMerge,
    WordMemo,
    findings_valid,
    message_findings,
)
from compactd.summarize.redact import SpanText, redact_value

__all__ = ["Prepared", "Stored", "decode", "derive", "encode", "message_key", "prepare", "stored_shares"]

_KEY_BYTES = 16


@datarecord(frozen=True, slots=True)
class Prepared:
    """One message's share: ``redacted``, ``redact_value`` of it when that differs from it (None: nothing to
    redact, the message is handed on as it is), and the findings of it as handed on."""

    redacted: Message | None
    findings: Findings
    derived: Derived  # what the current state and the digest take from it


def message_key(message: Message) -> str | None:
    """The message's content key; None for a value orjson cannot write (an integer past 64 bits, a lone
    surrogate): such a message is never prepared, only done cold."""
    try:
        data = orjson.dumps(message)
    except TypeError:
        return None
    return hashlib.sha256(data).hexdigest()[: 2 * _KEY_BYTES]


def prepare(message: Message, memo: WordMemo) -> Prepared:
    """What a compaction's redaction and extraction make of ``message`` (with redaction on: the default)."""
    handed_on = redact_value(message)
    texts = SpanText.of([message], [handed_on])
    findings = message_findings(handed_on, texts, memo)
    derived = derive(message, handed_on, texts)
    # Equal is as good as the same: a rule that matched and kept its match makes an equal copy.
    return Prepared(None if handed_on == message else handed_on, findings, derived)


def derive(message: Message, handed_on: Message, read: SpanText) -> Derived:
    """What the current state and the digest take from ``handed_on`` (``redact_value`` of ``message``) alone
    (``read``: its redacted text), and whether the tool result ``message`` failed as read (the augmentation
    lists failures from the messages before redaction)."""
    tool_result = role_of(handed_on) == "toolResult"
    return Derived(
        [s.text for s in message_statements(handed_on, read)],
        message_decisions(handed_on, read),
        message_rules(handed_on, read),
        message_todos(handed_on, read),
        result_of(handed_on) if tool_result else None,
        is_tool_failure(message) if tool_result else None,
    )


def encode(key: str, prepared: Prepared) -> bytes:
    """One line of a session's store."""
    derived = [*prepared.derived]  # orjson writes no tuple subclass
    return orjson.dumps([key, prepared.redacted, prepared.findings, derived]) + b"\n"


def decode(line: bytes) -> tuple[str, Prepared] | None:
    """A line of a store back, or None for anything that is not one (a torn last line, a foreign file)."""
    try:
        value: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(value, list) and len(value) == 4):
        return None
    key, redacted, findings, derived = value
    if not (
        isinstance(key, str) and (redacted is None or isinstance(redacted, dict)) and findings_valid(findings)
    ):
        return None
    if derived == _NOTHING_STORED:  # most messages: one shared share, not six new objects each
        return key, Prepared(redacted, findings, _NOTHING_DERIVED)
    if not derived_valid(derived):
        return None
    statements, decisions, rules, todos, result, failed = derived
    derived = Derived(
        statements or (),
        decisions or (),
        rules or (),
        [tuple(op) for op in todos] if todos else (),
        None if result is None else tuple(result),
        failed,
    )
    return key, Prepared(redacted, findings, derived)


_NOTHING_DERIVED = Derived((), (), (), (), None, None)
# How ``encode`` writes a message's empty derived share (a tool result's is never this: its ``failed`` is a bool).
_NOTHING_STORED: list[Any] = [[], [], [], [], None, None]


class Stored(NamedTuple):
    """What a compaction keeps of a message's stored share once its findings are merged."""

    redacted: Message | None
    derived: Derived


def _key_of(line: bytes) -> str | None:
    """The key :func:`encode` wrote at the start of ``line``, without parsing the rest; None for another shape."""
    end = 2 + 2 * _KEY_BYTES
    if line[:2] != b'["' or line[end : end + 2] != b'",':
        return None
    return line[2:end].decode("ascii", "replace")


def stored_shares(
    lines: Iterable[bytes], keys: Sequence[str | None]
) -> tuple[list[Stored | None], FindingsMerge]:
    """The stored share of each message by its key (None where the store lacks it, or ``keys`` has None), and the
    findings of those found merged at their positions, as the store's lines are read: only the lines of the
    span's messages are parsed, and no message's findings outlive the line (a 50 MB session's store holds about
    350,000). A message the span holds at two positions counts at both; a key stored twice is taken once (its
    shares are equal: a share is a function of the message); a line that does not decode leaves its key to a
    later one."""
    places: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        if key is not None:
            places.setdefault(key, []).append(index)
    shares: list[Stored | None] = [None] * len(keys)
    merged = FindingsMerge()
    for line in lines:
        key = _key_of(line)
        at = places.pop(key, None) if key is not None else None
        if key is None or at is None:
            continue
        got = decode(line)
        if got is None or got[0] != key:
            places[key] = at
            continue
        share = got[1]
        stored = Stored(share.redacted, share.derived)
        for index in at:
            shares[index] = stored
            merged.add(share.findings, index)
    return shares, merged
