"""Staged summarization through a model, with the seed's three fallback levels.

Level 1 summarizes everything (chunked to the summarizer's window, partial summaries merged); level 2 leaves
out messages too large for the summarizer, with a note for each, or keeps what a call had written when its
deadline hit; level 3 is the model-free digest. A context overflow never fails a level: the chunk is halved
and retried; a chunk the server answered from a cut prompt (it reported fewer prompt tokens than were sent) is
re-chunked to the context the server kept and retried, its answer dropped.

Each call is sized before it is sent (:mod:`compactd.summarize.pace`): its ``max_tokens`` from its input, and,
once the endpoint's speed is measured, its chunk and answer so the call fits the timeout. Chunks are taken one
at a time, so a speed measured by the first call already sizes the second. The window is the smaller of the
configured one and the context the server will really give a call (``Pace.window``, which the client learns
from the server before the first chunk is cut: ``prepare``).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import field
from typing import Any, Protocol

from compactd import progress
from compactd.core.messages import role_of
from compactd.datarecord import datarecord
from compactd.defaults import (
    CHARS_PER_TOKEN,
    POST_COMPACTION_SECTIONS,
    SAFETY_MARGIN,
    SUMMARIZER_MAX_OUTPUT_TOKENS,
)
from compactd.summarize import prompts, sanitize
from compactd.summarize.chunking import (
    BASE_CHUNK_RATIO,
    call_groups,
    chunk_by_max_tokens,
    is_oversized,
    max_chunk_tokens,
    split_by_token_share,
)
from compactd.summarize.pace import (
    CHUNK_OUTPUT_RATIO,
    MERGE_OUTPUT_RATIO,
    MIN_PACED_OUTPUT_TOKENS,
    PROMPT_ASCII_CHARS_PER_TOKEN,
    Pace,
    estimate_prompt_tokens,
    output_budget,
)
from compactd.summarize.serialize import SUMMARIZER_TOOL_RESULT_MAX_CHARS, serialize_transcript

__all__ = ["Message", "StageSettings", "Stages", "Summarizer"]

log = logging.getLogger(__name__)

Message = dict[str, Any]
# A single pass is enough for spans this short (design.md §6.7).
MIN_MESSAGES_FOR_SPLIT = 4
DEFAULT_PARTS = 2
# How many times an overflowing chunk is halved before the level gives up.
MAX_OVERFLOW_SPLITS = 6
# What a call cut off by its deadline must have written to be kept: this many letters and digits outside
# headings (a lone "## Decisions" says nothing).
PARTIAL_MIN_CONTENT_CHARS = 40
_NOT_CONTENT = re.compile(r"[\W_]+")


class Summarizer(Protocol):
    """What the stages need of a model client (``compactd.summarize.llm.SummarizerClient``)."""

    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Any: ...

    # Optional: ``async def prepare()`` learns the server's real context before the first chunk is sized.

    def pace(self) -> Pace:
        """The call deadline and the endpoint's measured speed, for sizing the next call."""
        ...


def usable_prefix(text: str, reserved_sections: Sequence[str]) -> str | None:
    """What to keep of an answer its deadline cut off: the complete lines (the last one stopped mid-way,
    perhaps inside an identifier), cleaned like an answer, when they say something beside headings."""
    lines = text.splitlines()[:-1]
    kept = sanitize.summary_text("\n".join(lines), reserved_sections).strip()
    content = sum(
        len(_NOT_CONTENT.sub("", line)) for line in kept.splitlines() if not line.lstrip().startswith("#")
    )
    return kept if content >= PARTIAL_MIN_CONTENT_CHARS else None


class SummaryFailed(Exception):
    """A level could not produce a summary; the caller falls back to the next level."""


@datarecord
class StageSettings:
    """What every stage of one summary is given: the window, identifier rules, instructions and limits."""

    window: int
    identifier_policy: str = "strict"
    identifier_instructions: str | None = None
    custom_instructions: str | None = None
    max_output_tokens: int | None = None
    tool_result_max_chars: int = SUMMARIZER_TOOL_RESULT_MAX_CHARS
    redact: bool = True
    # The AGENTS.md sections compactd re-injects: a model may not write them as headings (sanitize.py).
    reserved_sections: tuple[str, ...] = POST_COMPACTION_SECTIONS


@datarecord
class StageStats:
    """What one summary's stages did: calls, splits, chunks and what went wrong, for the job's report."""

    calls: int = 0
    overflow_splits: int = 0
    chunks: int = 0
    # Calls whose deadline hit and whose complete lines were kept as their answer.
    deadline_partials: int = 0
    # Answers dropped because the server had cut their prompt (each re-chunked and retried).
    cut_prompts: int = 0
    notes: list[str] = field(default_factory=list)


def serialized_cost(settings: StageSettings) -> Any:
    def cost(message: Message) -> int:
        text = serialize_transcript(
            [message], tool_result_max_chars=settings.tool_result_max_chars, redact=False
        )
        return math.ceil(len(text) / 4)

    return cost


def text_tokens(text: str | None) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


class Stages:
    def __init__(
        self, client: Summarizer, settings: StageSettings, tally: progress.Tally | None = None
    ) -> None:
        self.client = client
        self.settings = settings
        self.stats = StageStats()
        # The calls of the whole summarization (shared by the engine's stages), for the progress report.
        self.tally = progress.Tally() if tally is None else tally
        self._what = "summary"  # what the next call is, for the progress report
        self._later = 0  # calls expected after the current fold (the other parts, the merge)
        self._part = ""  # which part of a split span the current fold is
        self._serialized_cost = serialized_cost(settings)
        self._costs: dict[int, int] = {}
        # Chunk summaries already made, by (chunk, previous summary): a quality retry redoes only the call
        # its reasons go to, not every chunk before it (at temperature 0 they would come out the same).
        self._made: dict[tuple[tuple[int, ...], str | None], tuple[str, bool]] = {}
        # Of the latest summarize_in_stages: how many of the answers it used were cut off by their deadline,
        # and whether the summary it returned is itself one of them.
        self.cut_answers = 0
        self.summary_cut = False

    def cost(self, message: Message) -> int:
        """Serialized tokens of a message, computed once per message object (chunks are re-planned often)."""
        key = id(message)
        if key not in self._costs:
            self._costs[key] = self._serialized_cost(message)
        return self._costs[key]

    @property
    def window(self) -> int:
        """The configured window, or the context the server will really give a call when that is smaller."""
        real = self.client.pace().window
        return min(self.settings.window, real) if real else self.settings.window

    @property
    def _output_cap(self) -> int:
        return self.settings.max_output_tokens or SUMMARIZER_MAX_OUTPUT_TOKENS

    def _max_tokens(self, system: str, user: str, wanted: int) -> int:
        """``wanted`` (the budget the input calls for), lowered to what the timeout leaves at the measured
        speed; never below :data:`MIN_PACED_OUTPUT_TOKENS` (what arrives before the deadline is kept)."""
        pace = self.client.pace()
        room = pace.output_room(estimate_prompt_tokens(system, user))
        if room is None or room >= wanted or pace.speed is None:
            return wanted
        paced = min(wanted, max(room, MIN_PACED_OUTPUT_TOKENS))
        log.info(
            "summarizer call: output budget %d → %d tokens to fit %g s of the %g s timeout at %s",
            wanted,
            paced,
            pace.budget_seconds,
            pace.timeout_seconds,
            pace.speed.describe(),
        )
        return paced

    async def _call(self, system: str, user: str, *, wanted: int) -> str:
        from compactd.summarize.outcomes import LLMError

        self.stats.calls += 1
        max_tokens = self._max_tokens(system, user, wanted)
        prompt_tokens = estimate_prompt_tokens(system, user)
        speed = self.client.pace().speed
        self.tally.expected = max(self.tally.expected, self.tally.calls + 1)
        progress.call_started(
            self.tally,
            what=self._what,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            planned=speed.seconds(prompt_tokens, max_tokens) if speed is not None else None,
        )
        started = time.monotonic()
        try:
            result = await self.client.complete(system, user, max_tokens=max_tokens)
        except LLMError as exc:
            progress.call_finished(
                self.tally, seconds=time.monotonic() - started, output_tokens=None, error=exc.kind
            )
            prefix = usable_prefix(exc.partial_text, self.settings.reserved_sections)
            if exc.kind != "timeout" or prefix is None:
                raise
            self.stats.deadline_partials += 1
            self.cut_answers += 1
            self.summary_cut = True
            log.warning(
                "%s; keeping the %d characters of complete lines it wrote (a partial summary)",
                exc.message,
                len(prefix),
            )
            return prefix
        progress.call_finished(
            self.tally,
            seconds=time.monotonic() - started,
            output_tokens=getattr(result, "completion_tokens", None),
        )
        # Where the model's words enter the summary: from here on they are data, never compactd's markers.
        text = sanitize.summary_text(
            getattr(result, "text", "") or "", self.settings.reserved_sections
        ).strip()
        if not text:
            raise LLMError("empty", "the summarizer returned an empty answer")
        if getattr(result, "finish_reason", None) == "length":
            log.warning("summary cut short by the summarizer's output limit (finish_reason=length)")
        self.summary_cut = False
        return text

    def _serialize(self, messages: Sequence[Message]) -> str:
        return serialize_transcript(
            list(messages),
            tool_result_max_chars=self.settings.tool_result_max_chars,
            redact=self.settings.redact,
        )

    def _summary_prompt(
        self, transcript_text: str, previous: str | None, retry_reasons: list[str] | None
    ) -> tuple[str, str]:
        return prompts.summary_messages(
            transcript_text,
            previous_summary=previous,
            identifier_policy=self.settings.identifier_policy,
            identifier_instructions=self.settings.identifier_instructions,
            custom_instructions=self.settings.custom_instructions,
            retry_reasons=retry_reasons,
        )

    async def _summarize_chunk(
        self, chunk: Sequence[Message], previous: str | None, retry_reasons: list[str] | None, depth: int = 0
    ) -> str:
        """One chunk, folded onto the previous partial; halved and retried on a context overflow."""
        from compactd.summarize.outcomes import LLMError

        key = (tuple(id(m) for m in chunk), previous)
        if not retry_reasons and key in self._made:
            summary, cut = self._made[key]
            self.cut_answers += cut
            self.summary_cut = cut
            return summary
        text = self._serialize(chunk)
        system, user = self._summary_prompt(text, previous, retry_reasons)
        wanted = output_budget(
            text_tokens(text), text_tokens(previous), ratio=CHUNK_OUTPUT_RATIO, cap=self._output_cap
        )
        try:
            summary = await self._call(system, user, wanted=wanted)
        except LLMError as exc:
            if exc.kind != "context_overflow" or depth >= MAX_OVERFLOW_SPLITS:
                raise
            pieces = self._overflow_pieces(chunk, previous, cut=exc.cut)
            if len(pieces) < 2:
                raise
            self.stats.overflow_splits += 1
            if exc.cut:
                self.stats.cut_prompts += 1
            log.info(
                "summarizer context overflow%s: splitting a %d-message chunk in %d",
                " (a cut prompt)" if exc.cut else "",
                len(chunk),
                len(pieces),
            )
            running = previous
            for piece in pieces[:-1]:
                running = await self._summarize_chunk(piece, running, None, depth + 1)
            summary = await self._summarize_chunk(pieces[-1], running, retry_reasons, depth + 1)
        if not retry_reasons:
            self._made[key] = (summary, self.summary_cut)
        return summary

    def _overflow_pieces(
        self, chunk: Sequence[Message], previous: str | None, *, cut: bool
    ) -> list[list[Message]]:
        """A chunk that did not fit, in pieces: re-chunked to the (lowered) window after a cut prompt, else in
        two halves of whole tool-call groups."""
        if cut:
            pieces = chunk_by_max_tokens(list(chunk), self.chunk_limit(chunk, previous), self.cost)
            if len(pieces) >= 2:
                return [list(p) for p in pieces]
        groups = call_groups(chunk)
        if len(groups) < 2:
            return [list(chunk)]
        middle = len(groups) // 2
        return [[m for g in groups[:middle] for m in g], [m for g in groups[middle:] for m in g]]

    async def _fold(
        self, messages: Sequence[Message], previous: str | None, retry_reasons: list[str] | None
    ) -> str:
        """Chunk after chunk onto the running summary; each chunk is sized when its turn comes, with the
        summary carried so far and the speed measured so far."""
        summary = previous
        remaining = list(messages)
        number = 0
        while remaining:
            limit = self.chunk_limit(remaining, summary)
            chunk = chunk_by_max_tokens(remaining, limit, self.cost)[0]
            remaining = remaining[len(chunk) :]
            self.stats.chunks += 1
            number += 1
            # The chunks still to come at this chunk's size (the speed measured may shrink them): an estimate.
            rest = math.ceil(sum(self.cost(m) for m in remaining) / max(1, limit / SAFETY_MARGIN))
            self._what = f"{self._part}chunk {number} of ~{number + rest}"
            self.tally.expected = self.tally.calls + 1 + rest + self._later
            summary = await self._summarize_chunk(chunk, summary, None if remaining else retry_reasons)
        assert summary is not None
        return summary

    def chunk_limit(self, messages: Sequence[Message], previous: str | None) -> int:
        """The chunk size (serialized tokens, before the chunker's safety margin) for the next call: the
        window's share beside the call's own overhead, and once the speed is known, what fits the timeout."""
        system, user = self._summary_prompt("", previous, None)
        fixed = estimate_prompt_tokens(system, user)
        carried = text_tokens(previous)

        def answer(fresh: int) -> int:
            return output_budget(fresh, carried, ratio=CHUNK_OUTPUT_RATIO, cap=self._output_cap)

        window = self.window
        overhead = fixed + answer(math.floor(window * BASE_CHUNK_RATIO))
        by_window = max_chunk_tokens(messages, window, self.cost, overhead=overhead)
        pace = self.client.pace()
        if pace.speed is None:
            return by_window
        # The chunker keeps a chunk under limit / SAFETY_MARGIN; the prompt estimate runs at 3.5 chars/token
        # where a chunk's cost runs at 4.
        prompt_per_cost = CHARS_PER_TOKEN / PROMPT_ASCII_CHARS_PER_TOKEN

        def prompt(limit: int) -> int:
            return fixed + math.ceil(math.floor(limit / SAFETY_MARGIN) * prompt_per_cost)

        fitting = pace.largest_fitting(
            by_window, lambda n: (prompt(n), answer(math.floor(n / SAFETY_MARGIN)))
        )
        if fitting == 0:
            # Not even the budget's floor fits: the call will get less output (_max_tokens), so the chunk is
            # sized to leave it that much; smaller chunks would only mean more calls, each with that output.
            fitting = pace.largest_fitting(by_window, lambda n: (prompt(n), MIN_PACED_OUTPUT_TOKENS))
        return max(1, fitting)

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
        prepare = getattr(self.client, "prepare", None)
        if prepare is not None:
            await prepare()  # the server's real context, before the first chunk is sized
        self.cut_answers, self.summary_cut = 0, False
        total = sum(self.cost(m) for m in messages)
        if len(messages) < MIN_MESSAGES_FOR_SPLIT or total <= self.chunk_limit(messages, previous_summary):
            return await self._fold(messages, previous_summary, retry_reasons)
        splits = split_by_token_share(messages, DEFAULT_PARTS, self.cost)
        if len(splits) <= 1:
            return await self._fold(messages, previous_summary, retry_reasons)
        limit = max(1, self.chunk_limit(messages, None) / SAFETY_MARGIN)
        sizes = [math.ceil(sum(self.cost(m) for m in split) / limit) for split in splits]
        partials = []
        for index, split in enumerate(splits):
            self._later = sum(sizes[index + 1 :]) + 1  # the later parts, and the merge
            self._part = f"part {index + 1} of {len(splits)}, "
            partials.append(await self._fold(split, None, None))
        self._later, self._part = 0, ""
        self._what = f"merge of {len(partials)} partial summaries"
        system, user = prompts.merge_messages(
            partials,
            identifier_policy=self.settings.identifier_policy,
            identifier_instructions=self.settings.identifier_instructions,
            custom_instructions=self.settings.custom_instructions,
            previous_summary=previous_summary,
            retry_reasons=retry_reasons,
        )
        wanted = output_budget(
            sum(text_tokens(p) for p in partials),
            text_tokens(previous_summary),
            ratio=MERGE_OUTPUT_RATIO,
            cap=self._output_cap,
        )
        return await self._call(system, user, wanted=wanted)

    def without_oversized(self, messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
        """Level 2's input: messages too large for the summarizer left out, each with a note."""
        kept: list[Message] = []
        notes: list[str] = []
        for message in messages:
            if is_oversized(message, self.window, self.cost):
                tokens = self.cost(message)
                notes.append(
                    f"[Large {role_of(message) or 'message'} (~{max(1, round(tokens / 1000))}K tokens) omitted from summary]"
                )
            else:
                kept.append(message)
        return kept, notes

    async def summarize_split_turn(self, prefix: Sequence[Message]) -> str:
        self._what = "the split turn's prefix"
        text = self._serialize(prefix)
        system, user = prompts.split_turn_messages(
            text,
            identifier_policy=self.settings.identifier_policy,
            identifier_instructions=self.settings.identifier_instructions,
            custom_instructions=self.settings.custom_instructions,
        )
        wanted = output_budget(text_tokens(text), 0, ratio=CHUNK_OUTPUT_RATIO, cap=self._output_cap)
        return await self._call(system, user, wanted=wanted)
