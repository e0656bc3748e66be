"""A message's share of a compaction, made once when the message is read: its redacted copy (when redaction
changes it) and its identifier findings, keyed by its content. A compaction of a session the daemon followed
then only merges (issue 22): redaction and extraction were four fifths of a cold compaction's CPU.

Exactness: a message's redacted copy and findings depend on that message alone
(``identifiers.message_findings``), so the records merged from prepared findings are those a cold extraction
gives; the key is a hash of the message as a span holds it (orjson's serialisation of the same parse is the same
bytes), so a message changed in any way (a context edit, a repaired tool pairing, a migration) is simply not
found, and is done cold. A key is 128 bits of SHA-256 (in hardware on x86_64 and aarch64: twice BLAKE2b's
speed here): no transcript can make two messages collide. Only redacted text is kept, never a secret.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from compactd.core.messages import Message
from compactd.summarize.identifiers import Findings, WordMemo, findings_valid, message_findings
from compactd.summarize.redact import SpanText, redact_value

__all__ = ["Prepared", "decode", "encode", "message_key", "prepare"]

_KEY_BYTES = 16


@dataclass(frozen=True, slots=True)
class Prepared:
    """One message's share: ``redacted``, ``redact_value`` of it when that differs from it (None: nothing to
    redact, the message is handed on as it is), and the findings of it as handed on."""

    redacted: Message | None
    findings: Findings


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
    # Equal is as good as the same: a rule that matched and kept its match makes an equal copy.
    return Prepared(None if handed_on == message else handed_on, findings)


def encode(key: str, prepared: Prepared) -> bytes:
    """One line of a session's store."""
    return orjson.dumps([key, prepared.redacted, prepared.findings]) + b"\n"


def decode(line: bytes) -> tuple[str, Prepared] | None:
    """A line of a store back, or None for anything that is not one (a torn last line, a foreign file)."""
    try:
        value: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(value, list) and len(value) == 3):
        return None
    key, redacted, findings = value
    if not (
        isinstance(key, str) and (redacted is None or isinstance(redacted, dict)) and findings_valid(findings)
    ):
        return None
    return key, Prepared(redacted, findings)
