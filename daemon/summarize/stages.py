"""Staged summarization through a model, with the seed's three fallback levels.

Level 1 summarizes everything (chunked to the summarizer's window, partial summaries merged); level 2 leaves
out messages too large for the summarizer, with a note for each; level 3 is the model-free digest. A context
overflow never fails a level: the chunk is halved and retried.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from daemon.defaults import POST_COMPACTION_SECTIONS
from daemon.summarize import prompts, sanitize
from daemon.summarize.chunking import (
    call_groups,
    chunk_by_max_tokens,
    is_oversized,
    max_chunk_tokens,
    split_by_token_share,
)
from daemon.summarize.serialize import SUMMARIZER_TOOL_RESULT_MAX_CHARS, serialize_transcript
from daemon.transcript.messages import role_of

log = logging.getLogger(__name__)

Message = dict[str, Any]
LEVEL_LLM, LEVEL_PARTIAL, LEVEL_DIGEST = "llm", "llm_partial", "digest"
# A single pass is enough for spans this short (spec §10 minMessagesForSplit).
MIN_MESSAGES_FOR_SPLIT = 4
DEFAULT_PARTS = 2
# How many times an overflowing chunk is halved before the level gives up.
MAX_OVERFLOW_SPLITS = 6


class Summarizer(Protocol):
    """What the stages need of a model client (``daemon.summarize.llm.SummarizerClient``)."""

    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Any: ...


class SummaryFailed(Exception):
    """A level could not produce a summary; the caller falls back to the next level."""


@dataclass
class StageSettings:
    window: int
    identifier_policy: str = "strict"
    identifier_instructions: str | None = None
    custom_instructions: str | None = None
    max_output_tokens: int | None = None
    tool_result_max_chars: int = SUMMARIZER_TOOL_RESULT_MAX_CHARS
    redact: bool = True
    # The AGENTS.md sections compactd re-injects: a model may not write them as headings (sanitize.py).
    reserved_sections: tuple[str, ...] = POST_COMPACTION_SECTIONS


@dataclass
class StageStats:
    calls: int = 0
    overflow_splits: int = 0
    chunks: int = 0
    notes: list[str] = field(default_factory=list)


def serialized_cost(settings: StageSettings) -> Any:
    def cost(message: Message) -> int:
        text = serialize_transcript(
            [message], tool_result_max_chars=settings.tool_result_max_chars, redact=False
        )
        return math.ceil(len(text) / 4)

    return cost


class Stages:
    def __init__(self, client: Summarizer, settings: StageSettings) -> None:
        self.client = client
        self.settings = settings
        self.stats = StageStats()
        self.cost = serialized_cost(settings)

    async def _call(self, system: str, user: str) -> str:
        from daemon.summarize.llm import LLMError

        self.stats.calls += 1
        result = await self.client.complete(system, user, max_tokens=self.settings.max_output_tokens)
        # Where the model's words enter the summary: from here on they are data, never compactd's markers.
        text = sanitize.summary_text(
            getattr(result, "text", "") or "", self.settings.reserved_sections
        ).strip()
        if not text:
            raise LLMError("empty", "the summarizer returned an empty answer")
        if getattr(result, "finish_reason", None) == "length":
            log.warning("summary cut short by the summarizer's output limit (finish_reason=length)")
        return text

    def _serialize(self, messages: Sequence[Message]) -> str:
        return serialize_transcript(
            list(messages),
            tool_result_max_chars=self.settings.tool_result_max_chars,
            redact=self.settings.redact,
        )

    async def _summarize_chunk(
        self, chunk: Sequence[Message], previous: str | None, retry_reasons: list[str] | None, depth: int = 0
    ) -> str:
        """One chunk, folded onto the previous partial; halved and retried on a context overflow."""
        from daemon.summarize.llm import LLMError

        system, user = prompts.summary_messages(
            self._serialize(chunk),
            previous_summary=previous,
            identifier_policy=self.settings.identifier_policy,
            identifier_instructions=self.settings.identifier_instructions,
            custom_instructions=self.settings.custom_instructions,
            retry_reasons=retry_reasons,
        )
        try:
            return await self._call(system, user)
        except LLMError as exc:
            if exc.kind != "context_overflow" or depth >= MAX_OVERFLOW_SPLITS:
                raise
            groups = call_groups(chunk)
            if len(groups) < 2:
                raise
            self.stats.overflow_splits += 1
            middle = len(groups) // 2
            first = [m for g in groups[:middle] for m in g]
            second = [m for g in groups[middle:] for m in g]
            log.info("summarizer context overflow: splitting a %d-message chunk in two", len(chunk))
            partial = await self._summarize_chunk(first, previous, None, depth + 1)
            return await self._summarize_chunk(second, partial, retry_reasons, depth + 1)

    async def _fold(
        self, messages: Sequence[Message], previous: str | None, retry_reasons: list[str] | None
    ) -> str:
        chunks = chunk_by_max_tokens(messages, self._max_chunk(messages), self.cost)
        self.stats.chunks += len(chunks)
        summary = previous
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            summary = await self._summarize_chunk(chunk, summary, retry_reasons if last else None)
        assert summary is not None
        return summary

    def _max_chunk(self, messages: Sequence[Message]) -> int:
        return max_chunk_tokens(messages, self.settings.window, self.cost)

    async def summarize_in_stages(
        self,
        messages: Sequence[Message],
        *,
        previous_summary: str | None,
        retry_reasons: list[str] | None = None,
    ) -> str:
        """Single pass for a short span; else summarize each part independently and merge the partials."""
        if not messages:
            raise SummaryFailed("nothing to summarize")
        total = sum(self.cost(m) for m in messages)
        if len(messages) < MIN_MESSAGES_FOR_SPLIT or total <= self._max_chunk(messages):
            return await self._fold(messages, previous_summary, retry_reasons)
        splits = split_by_token_share(messages, DEFAULT_PARTS, self.cost)
        if len(splits) <= 1:
            return await self._fold(messages, previous_summary, retry_reasons)
        partials = [await self._fold(split, None, None) for split in splits]
        system, user = prompts.merge_messages(
            partials,
            identifier_policy=self.settings.identifier_policy,
            identifier_instructions=self.settings.identifier_instructions,
            custom_instructions=self.settings.custom_instructions,
            previous_summary=previous_summary,
            retry_reasons=retry_reasons,
        )
        return await self._call(system, user)

    def without_oversized(self, messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
        """Level 2's input: messages too large for the summarizer left out, each with a note."""
        kept: list[Message] = []
        notes: list[str] = []
        for message in messages:
            if is_oversized(message, self.settings.window, self.cost):
                tokens = self.cost(message)
                notes.append(
                    f"[Large {role_of(message) or 'message'} (~{max(1, round(tokens / 1000))}K tokens) omitted from summary]"
                )
            else:
                kept.append(message)
        return kept, notes

    async def summarize_split_turn(self, prefix: Sequence[Message]) -> str:
        system, user = prompts.split_turn_messages(
            self._serialize(prefix),
            identifier_policy=self.settings.identifier_policy,
            identifier_instructions=self.settings.identifier_instructions,
            custom_instructions=self.settings.custom_instructions,
        )
        return await self._call(system, user)
