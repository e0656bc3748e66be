"""What ``compactd inspect`` and ``compactd validate`` report about one transcript file."""

from __future__ import annotations

import os
from typing import Any

from compactd.core.context import SessionContext, build_context, rules_reason
from compactd.core.ledger import SessionLedger, tool_result_chars
from compactd.core.messages import PI_1, RUNTIME_CONTEXT_TYPE
from compactd.core.prune import ReducibleCount
from compactd.core.reader import FATAL_KINDS, Transcript
from compactd.core.tokens import message_chars
from compactd.defaults import CHARS_PER_TOKEN
from compactd.reading import read_transcript

__all__ = ["inspect_transcript", "validation_exit_code"]

EXIT_OK, EXIT_PROBLEMS, EXIT_UNUSABLE = 0, 1, 2


def inspect_transcript(
    path: str | os.PathLike[str],
    transcript: Transcript | None = None,
    *,
    context: SessionContext | None = None,
    reducible: ReducibleCount | None = None,
) -> dict[str, Any]:
    """The figures of one read: the branch is walked once (the transcript caches it), the context is built
    once (or taken from the caller, who passes it on to ``figures_of``) and each of its messages is estimated
    and measured in the same pass. ``reducible``: fed every tool result ``figures_of`` counts (those of an
    entry with an id, a compaction's excepted: ``planning.tool_result_items``) in that pass, while its blocks
    are at hand, so that the caller passes its total on to ``figures_of`` instead of a second walk."""
    transcript = transcript if transcript is not None else read_transcript(path)
    context = context if context is not None else build_context(transcript)
    ledger = SessionLedger.from_transcript(transcript, context=context)
    figures = ledger.figures()
    by_role: dict[str, int] = {}
    tool_chars = 0
    pi1 = context.rules == PI_1
    add = reducible.add if reducible is not None else None
    # What reaches the model (``llm_visible``), without its copies of the tool results: the estimate never
    # counts their ``details``. A tool result is measured once for its estimate and its text characters.
    count = len(context.visible())
    for entry, message in zip(context.sources, context.messages, strict=True):
        role = message.get("role")
        if not isinstance(role, str):
            role = ""  # as role_of reads it, without its call for each of 42,000 messages
        if role == "toolResult":
            chars, text = tool_result_chars(message.get("content"))
            tokens = -(-chars // CHARS_PER_TOKEN)
            tool_chars += text
            if add is not None and entry.get("type") != "compaction" and isinstance(entry.get("id"), str):
                add(message)
        elif role == "custom" and message.get("customType") == RUNTIME_CONTEXT_TYPE:
            continue  # runtime context: not visible (``SessionContext.visible``)
        else:
            tokens = -(-message_chars(message, pi1=pi1) // CHARS_PER_TOKEN)  # ``estimate_tokens``, inline
        by_role[role] = by_role.get(role, 0) + tokens
    return {
        "path": os.fspath(path),
        "session_id": transcript.session_id,
        "version": transcript.version,
        "entries": transcript.count,
        "leaf_id": transcript.leaf_id,
        "rules": ("pi 1.x" if pi1 else "pi 0.73")
        + ": "
        + rules_reason(transcript.branch(), context.rules)[1],
        "context_messages": count,
        "context_tokens": figures["tokens"],
        "estimated_with_margin": ledger.estimate.with_margin,
        "tokens_source": figures["tokens_source"],
        "usage_tokens": figures["usage_tokens"],
        "trailing_tokens": figures["trailing_tokens"],
        "by_role": dict(sorted(by_role.items())),
        "tool_result_chars": tool_chars,
        "provider": figures["provider"],
        "model": figures["model"],
        "bytes": transcript.size,
        "problems": [p.as_json() for p in transcript.problems],
    }


def validation_exit_code(transcript: Transcript) -> int:
    """0: an agent loads every line; 1: it loads with problems; 2: unusable (no header) or unreadable."""
    if any(p.kind in FATAL_KINDS for p in transcript.problems):
        return EXIT_UNUSABLE
    return EXIT_PROBLEMS if transcript.problems else EXIT_OK
