"""The built-in memory flush: the summarizer is asked what is worth remembering from the turns about to be
compacted, and its answer is appended to the day's memory file by the confined writer.

Nothing here may block or break a compaction: every error, an LLM outage included, becomes a
:class:`FlushResult` with status ``failed``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

import anyio

from compactd import offload
from compactd.core.messages import Message
from compactd.datarecord import datarecord
from compactd.memory._writer import MemoryWriteRefused, append_memory_as_owner, local_date
from compactd.summarize.outcomes import Completion, LLMError
from compactd.summarize.pace import PROMPT_OVERHEAD_TOKENS, estimate_prompt_tokens
from compactd.summarize.prompts import NO_REPLY, fence, is_no_reply, memory_flush_messages
from compactd.summarize.redact import redact_secrets
from compactd.summarize.serialize import (
    PART_SEPARATOR,
    SUMMARIZER_TOOL_RESULT_MAX_CHARS,
    serialize_transcript,
)
from compactd.workspace import Workspace

logger = logging.getLogger("compactd.memory")

# Memories are a handful of bullets; a cap keeps a rambling model from writing pages (about 4,000 chars).
FLUSH_MAX_OUTPUT_TOKENS = 1_024
# When the server still reports an overflow, the newer half of the transcript is tried, at most this often.
FLUSH_OVERFLOW_RETRIES = 2
_OMITTED_NOTE = "[... {count} earlier messages left out of this memory flush to fit the summarizer ...]"


# --- the built-in flush -------------------------------------------------------------------------------------

FlushStatus = Literal["written", "no_reply", "failed", "skipped"]


@datarecord(frozen=True, slots=True)
class FlushResult:
    """What the flush did; ``latency_s`` is the summarizer call's (for metrics), None without a call."""

    status: FlushStatus
    path: Path | None = None
    chars: int = 0
    error: str | None = None
    latency_s: float | None = None


class FlushClient(Protocol):
    """What the flush needs of :class:`compactd.summarize.llm.SummarizerClient`."""

    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Completion: ...


def flush_prompts(
    transcript_text: str, date: str, *, prompt: str | None = None, system_prompt: str | None = None
) -> tuple[str, str]:
    """(system, user) of the flush: the built-in prompts, or the operator's (``YYYY-MM-DD`` filled in, the
    NO_REPLY rule added when missing, as OpenClaw does) with the transcript fenced as data either way."""
    system, user = memory_flush_messages(transcript_text, date)
    if system_prompt and system_prompt.strip():
        system = system_prompt.strip().replace("YYYY-MM-DD", date)
    if prompt and prompt.strip():
        instructions = prompt.strip().replace("YYYY-MM-DD", date)
        if NO_REPLY not in instructions:
            instructions += f"\nIf nothing is worth keeping, answer exactly {NO_REPLY} and nothing else."
        user = "\n\n".join(
            [f"Pre-compaction memory flush for {date}.", fence("conversation", transcript_text), instructions]
        )
    return system, user


def _part_tokens(part: str) -> int:
    return estimate_prompt_tokens("", part) - PROMPT_OVERHEAD_TOKENS + 1


def _fit(parts: list[str], budget_tokens: int | None) -> tuple[list[str], int]:
    """The newest parts whose estimate fits ``budget_tokens``, and how many older parts were left out."""
    if budget_tokens is None:
        return parts, 0
    kept: list[str] = []
    used = 0
    for part in reversed(parts):
        cost = _part_tokens(part)
        if kept and used + cost > budget_tokens:
            break
        kept.append(part)
        used += cost
    kept.reverse()
    return kept, len(parts) - len(kept)


def _with_note(parts: list[str], omitted: int) -> str:
    body = PART_SEPARATOR.join(parts)
    return f"{_OMITTED_NOTE.format(count=omitted)}{PART_SEPARATOR}{body}" if omitted else body


def _transcript_budget(
    client: FlushClient, date: str, prompt: str | None, system_prompt: str | None
) -> int | None:
    context = getattr(client, "context_tokens", None)
    if not isinstance(context, int) or context <= 0:
        return None
    system, user = flush_prompts(_OMITTED_NOTE, date, prompt=prompt, system_prompt=system_prompt)
    return max(0, context - FLUSH_MAX_OUTPUT_TOKENS - estimate_prompt_tokens(system, user))


def _complete_lines(text: str) -> str:
    """A cut answer without its unfinished last line (half a bullet is worse than none)."""
    head, newline, _ = text.rpartition("\n")
    return head if newline and head.strip() else text


async def flush_memories(
    client: FlushClient | None,
    messages: Sequence[Message],
    *,
    workspace: Path | Workspace,
    session_id: str | None,
    now: datetime,
    tool_result_max_chars: int = SUMMARIZER_TOOL_RESULT_MAX_CHARS,
    redact: bool = True,
    prompt: str | None = None,
    system_prompt: str | None = None,
) -> FlushResult:
    """One summarizer call over the span about to be compacted; its answer appended to today's memory file.

    Never raises (except cancellation): a model outage, a refusal or a failed write is logged and returned as
    ``failed``, because the compaction that follows must not wait on memories. Without a client: ``skipped``.
    The span is serialized without ``toolResult.details`` or runtime-context messages and with secrets
    redacted (as is the answer before it is appended); when it does not fit the summarizer's window, its newest
    messages are sent. The answer is written as the workspace's owner (a plain path is a workspace the caller
    vouches for, written as ourselves).
    """
    if client is None:
        return FlushResult("skipped", error="no summarizer configured")
    date = local_date(now)
    prepare = getattr(client, "prepare", None)
    if prepare is not None:  # the context the server really gives, before the span is fitted to it
        await prepare()
    budget = _transcript_budget(client, date, prompt, system_prompt)

    def serialized() -> tuple[list[str], int] | None:
        """The parts that fit and how many were left out (None: nothing to flush); a pass over the span."""
        text = serialize_transcript(messages, tool_result_max_chars=tool_result_max_chars, redact=redact)
        return _fit(text.split(PART_SEPARATOR), budget) if text.strip() else None

    try:
        fitted = await offload.run_sync(serialized)  # the whole span redacted: off the loop
    except Exception as exc:
        logger.warning("memory flush failed: session=%s cannot serialize the span: %r", session_id, exc)
        return FlushResult("failed", error=f"cannot serialize the span: {exc!r}")
    if fitted is None:
        return FlushResult("skipped", error="nothing to flush")
    kept, omitted = fitted
    started = time.monotonic()
    completion: Completion | None = None
    for attempt in range(FLUSH_OVERFLOW_RETRIES + 1):
        system, user = flush_prompts(
            _with_note(kept, omitted), date, prompt=prompt, system_prompt=system_prompt
        )
        try:
            completion = await client.complete(system, user, max_tokens=FLUSH_MAX_OUTPUT_TOKENS)
            break
        except LLMError as exc:
            if exc.kind == "context_overflow" and attempt < FLUSH_OVERFLOW_RETRIES and len(kept) > 1:
                dropped = math.ceil(len(kept) / 2)
                kept, omitted = kept[dropped:], omitted + dropped
                logger.info(
                    "memory flush: session=%s overflow; retrying with %d messages", session_id, len(kept)
                )
                continue
            logger.warning(
                "memory flush failed: session=%s summarizer %s: %s", session_id, exc.kind, exc.message
            )
            return FlushResult(
                "failed", error=f"{exc.kind}: {exc.message}", latency_s=time.monotonic() - started
            )
        except Exception as exc:
            logger.warning("memory flush failed: session=%s summarizer call: %r", session_id, exc)
            return FlushResult("failed", error=repr(exc), latency_s=time.monotonic() - started)
    if completion is None:  # pragma: no cover - the loop always breaks or returns
        return FlushResult("failed", error="no answer")
    latency = completion.latency_s
    answer = completion.text.strip()
    if completion.truncated:
        answer = _complete_lines(answer).rstrip()
    if not answer or is_no_reply(answer):
        logger.info("memory flush: session=%s nothing to store (NO_REPLY)", session_id)
        return FlushResult("no_reply", latency_s=latency)
    if redact:  # the memory file's one way in: whatever the model wrote, no secret is stored
        answer = redact_secrets(answer)
    where = workspace if isinstance(workspace, Workspace) else Workspace.trusted(workspace)
    try:
        path = await anyio.to_thread.run_sync(
            lambda: append_memory_as_owner(where, answer, now=now, session_id=session_id)
        )
    except (MemoryWriteRefused, OSError) as exc:
        logger.warning("memory flush failed: session=%s cannot append: %s", session_id, exc)
        return FlushResult("failed", error=str(exc), latency_s=latency)
    if path is None:
        return FlushResult("no_reply", latency_s=latency)
    logger.info("memory flush: session=%s appended %d chars to %s", session_id, len(answer), path)
    return FlushResult("written", path=path, chars=len(answer), latency_s=latency)
