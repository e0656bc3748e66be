"""The compaction engine: a session's history in, a checked summary and the pi entries that carry it out.

Order of work: cut → strip and repair the span → rank identifiers → summarize (LLM level 1, partial level 2,
digest level 3) → quality guard → identifier repair → augmentation → entries. Nothing here writes to disk; the
model call is the only IO, behind ``Summarizer``.

With ``redact`` on, secrets are redacted at the engine's three edges: the messages and the previous summary as
they are read (so nothing downstream, cap or cut included, ever holds a secret or half of one), every prompt as
it leaves (:class:`RedactedPrompts`), and what else is written: the summary's parts before they are fitted to
the cap (model text, a split-turn summary) and AGENTS.md before its post-compaction text is cut.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compactd import progress
from compactd.core.context import (
    SessionContext,
    build_context,
    compaction_message,
    context_estimate,
    js_timestamp,
)
from compactd.core.messages import (
    PI_1,
    Message,
    current_system_message,
    is_runtime_context,
    llm_visible,
    role_of,
    strip_for_llm,
    text_of,
)
from compactd.core.reader import Transcript
from compactd.core.timestamps import js_iso
from compactd.core.tokens import estimate_tokens
from compactd.datarecord import datarecord
from compactd.defaults import CHARS_PER_TOKEN, SUMMARY_MAX_CHARS
from compactd.heap import collector_paused
from compactd.ids import fresh_id
from compactd.summarize.cutpoint import CutPlan, plan_cut

# What only writing a summary needs (redaction, identifiers, the digest, the current state, the quality checks,
# the model's stages, the augmentation, the span's repair and file operations) is imported when one is written:
# a dry run whose route the summary's length cannot change (``job.predict_route``), and the daemon's start,
# load none of it (about a tenth of a second of regexes).
if TYPE_CHECKING:
    from compactd.summarize import quality
    from compactd.summarize.derived import Lookup
    from compactd.summarize.identifiers import FindingsMerge, Identifier, IdentifierReport
    from compactd.summarize.pace import Pace
    from compactd.summarize.prepared import Stored
    from compactd.summarize.redact import SpanText
    from compactd.summarize.stages import Stages, Summarizer

__all__ = ["CompactionEngine", "EngineResult", "EngineSettings", "latest_user_ask"]

log = logging.getLogger(__name__)
# How a summary was written: by the model, by the model without what it could not take, or model-free. Here,
# not beside the model stages: a model-free compaction loads none of them.
LEVEL_LLM, LEVEL_PARTIAL, LEVEL_DIGEST = "llm", "llm_partial", "digest"

POST_COMPACTION_CUSTOM_TYPE = "compactd.post_compaction_context"
# Each identifier line in the repaired section is capped, so a pathological one cannot crowd out the rest.
IDENTIFIER_LINE_MAX_CHARS = 300


@datarecord(rare=True)
class EngineSettings:
    """How the engine compacts: what it keeps, its identifier and quality rules, the summary's limits."""

    keep_recent_turns: int
    keep_recent_tokens: int
    identifier_policy: str = "strict"
    identifier_instructions: str | None = None
    identifier_cap: int = 64
    quality_guard: bool = True
    quality_retries: int = 1
    summary_max_chars: int = SUMMARY_MAX_CHARS
    redact: bool = True
    post_compaction_sections: tuple[str, ...] = ("Session Startup", "Red Lines")
    post_compaction_max_chars: int = 1_800
    custom_instructions: str | None = None
    summarizer_window: int = 32_768
    max_output_tokens: int | None = None
    # Whole turns kept within this many tokens, the newest always (None: pi's cut, turns and tokens only);
    # the job sizes it so that a compaction leaves the session room to work (``compaction.target_fill``).
    keep_budget_tokens: int | None = None


@datarecord(repr=False, rare=True)
class EngineResult:
    """The engine's output. Its repr stays a line (the plan holds the whole branch; see ``JobResult``)."""

    plan: CutPlan
    summary: str
    level: str
    compaction: dict[str, Any]
    post_message: dict[str, Any] | None
    tokens_before: int
    tokens_after: int
    identifiers: IdentifierReport
    quality: dict[str, Any]
    read_files: list[str]
    modified_files: list[str]
    notes: list[str] = field(default_factory=list)
    calls: int = 0
    latency_s: float = 0.0
    # The model's error when a digest replaced its summary (None: the model's summary, or no model at all).
    model_error: str | None = None
    # Of the span's messages, how many were prepared when the daemon read them (redaction and identifiers).
    prepared: int = 0
    span_messages: int = 0

    def __repr__(self) -> str:
        return (
            f"EngineResult(level={self.level!r}, first_kept_entry_id={self.first_kept_entry_id!r}, "
            f"tokens_before={self.tokens_before}, tokens_after={self.tokens_after}, "
            f"summary_chars={len(self.summary)}, calls={self.calls})"
        )

    @property
    def first_kept_entry_id(self) -> str:
        return self.plan.first_kept_entry_id

    def expected_context(self, mode: str) -> list[dict[str, Any]]:
        """What pi will build after the commit: rotate puts the post message before the kept ones."""
        summary = compaction_message(self.compaction)
        checkpoint = self.compaction.get("systemMessage")
        head = [checkpoint, summary] if isinstance(checkpoint, dict) else [summary]  # pi 1.x: prompt first
        post = [_custom_message(self.post_message)] if self.post_message else []
        kept = self.plan.kept
        return [*head, *post, *kept] if mode == "rotate" else [*head, *kept, *post]


class RedactedPrompts:
    """A :class:`Summarizer` whose every prompt is redacted on its way out, whichever stage built it and
    whatever it carries (the span, a previous summary, partial summaries, retry reasons, operator text)."""

    def __init__(self, client: Summarizer) -> None:
        self.client = client

    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Any:
        from compactd.summarize.redact import redact_secrets

        return await self.client.complete(redact_secrets(system), redact_secrets(user), max_tokens=max_tokens)

    def pace(self) -> Pace:
        return self.client.pace()

    async def prepare(self) -> None:
        prepare = getattr(self.client, "prepare", None)
        if prepare is not None:
            await prepare()


def _custom_message(entry: dict[str, Any]) -> dict[str, Any]:
    from compactd.core.context import entry_to_message

    message = entry_to_message(entry)
    assert message is not None
    return message


def _prepared_shares(
    messages: Sequence[Message], load: Callable[[], Iterable[bytes]]
) -> tuple[list[Stored | None], FindingsMerge | None]:
    """Each message's stored share, or None, and the findings of those found merged at their positions; the
    store is read as it is matched, never held (``prepared.stored_shares``). Nothing without a store: then no
    key is made."""
    from compactd.summarize.prepared import message_key, stored_shares

    lines = iter(load())
    first = next(lines, None)
    if first is None:
        return [], None
    keys = [message_key(m) for m in messages]
    return stored_shares(itertools.chain((first,), lines), keys)


def _failed_as_read(
    visible: Sequence[tuple[Message, Message]], span: Sequence[Message], made: Sequence[Stored | None]
) -> Callable[[Message], bool | None]:
    """Whether each message of the span's source failed as its prepared share read it (details apart: see
    ``augment.collect_tool_failures``), by way of the visible copy the span holds (the same object, unless the
    tool pairing's repair replaced it); None where no share says."""
    by_visible = {id(v): got.derived.failed for v, got in zip(span, made, strict=False) if got is not None}
    failed = {id(m): by_visible.get(id(v)) for m, v in visible}
    return lambda message: failed.get(id(message))


def new_entry_id(taken: set[str]) -> str:
    """pi's id shape: 8 lowercase hex characters, unique within the file (and added to ``taken``)."""
    return fresh_id(taken, reserve=True)


def post_compaction_entry(text: str, entry_id: str, stamp: str) -> dict[str, Any]:
    """The post-compaction message's entry (AGENTS.md's sections), hidden from pi's display."""
    return {
        "type": "custom_message",
        "id": entry_id,
        "parentId": None,
        "timestamp": stamp,
        "customType": POST_COMPACTION_CUSTOM_TYPE,
        "content": text,
        "display": False,
    }


def latest_user_ask(messages: Sequence[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        if role_of(message) == "user":
            text = text_of(message).strip()
            if text:
                return text
    return None


def _fit_body(body: str, budget: int) -> str:
    """Shrink the body to ``budget`` without losing a heading or a line of the identifiers and the current
    state sections (both are exact and already budgeted)."""
    if len(body) <= budget:
        return body
    from compactd.summarize.headings import CURRENT_STATE, EXACT_IDENTIFIERS, split_sections

    preamble, sections = split_sections(body)
    fixed = [(h, lines) for h, lines in sections if h in (CURRENT_STATE, EXACT_IDENTIFIERS)]
    others = [(h, lines) for h, lines in sections if h not in (CURRENT_STATE, EXACT_IDENTIFIERS)]
    fixed_text = "\n".join(h + "\n" + "\n".join(lines) for h, lines in fixed)
    room = max(0, budget - len(fixed_text) - sum(len(h) + 2 for h, _ in others) - 2)
    share = room // max(1, len(others) + (1 if preamble else 0))
    parts: list[str] = []
    if preamble and share:
        parts.append("\n".join(preamble)[:share].rstrip())
    for heading, lines in others:
        text = "\n".join(lines).strip()
        if len(text) > share:
            text = text[: max(0, share - 2)].rstrip() + " …"
        parts.append(f"{heading}\n{text}")
    parts.append(fixed_text)
    return "\n\n".join(p for p in parts if p)


class CompactionEngine:
    def __init__(self, settings: EngineSettings, client: Summarizer | None = None) -> None:
        self.label: str | None = None  # the session, for the progress report's log lines
        self._tally = progress.Tally()
        self._model_error: str | None = None  # why the model's summary was replaced by the digest
        self.settings = settings
        self.client = client

    def plan(self, transcript: Transcript, *, rules: str | None = None) -> CutPlan | None:
        """The cut of the transcript's branch; ``rules``: the branch's, when the caller's context knows them."""
        return plan_cut(
            transcript.branch(),
            keep_recent_turns=self.settings.keep_recent_turns,
            keep_recent_tokens=self.settings.keep_recent_tokens,
            keep_budget_tokens=self.settings.keep_budget_tokens,
            rules=rules,
        )

    async def compact(
        self,
        transcript: Transcript,
        *,
        workspace: Path | None = None,
        agents_md: str | None = None,
        now: datetime | None = None,
        prepared: Callable[[], Iterable[bytes]] | None = None,
        context: SessionContext | None = None,
    ) -> EngineResult | None:
        """Summarize the span before the cut; None when there is nothing to compact.

        ``prepared``: the lines of the store of each message's redacted copy and identifier findings made when
        it was read (``compactd.summarize.prepared``), by key; a message it does not hold is done here, as all
        are without it. Called here, so that the store is read only when the extraction needs it. ``context``:
        ``build_context(transcript)``, when the caller has it already."""
        from compactd.core.repair import repair_tool_pairing
        from compactd.summarize import augment
        from compactd.summarize.derived import DerivedOf, nothing_derived
        from compactd.summarize.facts import (
            STATE_MAX_CHARS,
            STATE_SHARE_OF_TARGET,
            merge_state,
            working_state,
        )
        from compactd.summarize.fileops import file_operations
        from compactd.summarize.identifiers import (
            IdentifierReport,
            ensure_identifiers,
            extract_identifiers,
            missing_identifiers,
            rank_identifiers,
            with_carried,
        )
        from compactd.summarize.redact import SpanText, redact_secrets, redact_value

        # The two stretches of computation over the whole span (no model call in either) run with the cyclic
        # collector paused: they make hundreds of thousands of containers (records, copies, sections), and the
        # collector's passes over them took about a twentieth of a followed compaction. Refcounting frees as before.
        with collector_paused():
            plan = self.plan(transcript, rules=context.rules if context is not None else None)
            if plan is None:
                return None
            started = time.monotonic()
            self._tally = progress.Tally(label=self.label)  # this compaction's calls, for the progress report
            self._model_error = None
            s = self.settings
            visible = [(m, strip_for_llm(m)) for m in plan.to_summarize if not is_runtime_context(m)]
            span = repair_tool_pairing([v for _, v in visible], errored_policy="drop").messages
            prefix = list(llm_visible(plan.turn_prefix))
            previous = plan.previous_summary
            texts = SpanText()  # each message's joined text redacted once, for the extraction and the digest
            # Prepared shares are made with redaction on: without it they are not those of these messages.
            made, merged = (
                _prepared_shares([*span, *prefix], prepared)
                if prepared is not None and s.redact
                else ([], None)
            )
            # With details: exit codes live there. A prepared tool result's text was read for its exit code.
            failures = augment.collect_tool_failures(plan.to_summarize, _failed_as_read(visible, span, made))
            del visible
            if s.redact:  # everything below reads these, so a cap or a cut can never leave half a secret
                read = [*span, *prefix]
                handed_on = [
                    redact_value(m) if got is None else m if got.redacted is None else got.redacted
                    for m, got in itertools.zip_longest(read, made)
                ]
                span, prefix = handed_on[: len(span)], handed_on[len(span) :]
                texts = SpanText.of(read, handed_on)
                del read, handed_on
                failures = augment.redacted_failures(failures, redact_value)
                previous = redact_secrets(previous) if previous else previous
            # What the current state and the digest take from each prepared message, by the message handed on.
            derived: Lookup = (
                DerivedOf([*span, *prefix], [got.derived if got is not None else None for got in made])
                if made
                else nothing_derived
            )
            hits, span_messages = len(made) - made.count(None), len(span) + len(prefix)
            del made
            # What the previous summary guaranteed is guaranteed again, or a poor model loses it at this compaction.
            found = with_carried(extract_identifiers([*span, *prefix], texts, merged), previous)
            del merged
            ranked = rank_identifiers(found, cap=s.identifier_cap)
            latest_ask = latest_user_ask([*span, *prefix])

        body, level, quality_info, calls, notes = await self._summarize(
            list(span), previous, ranked, latest_ask, texts, derived
        )
        split_summary = None
        if prefix:
            split_summary, extra_calls = await self._split_turn(prefix, texts, derived)
            calls += extra_calls
        # What the agent knew, corrections applied, is computed from the span and the previous summary and
        # added whatever the model wrote (design.md §6.15); before the identifier repair, which then finds
        # most identifiers beside what they belong to.
        # Tool results are read as the engine hands them on (redacted block by block), the state redacted whole;
        # it quotes the transcript, so an imitation of compactd's markers in it is defused as a model's would be.
        with collector_paused():  # the second stretch (see the first)
            state_chars = STATE_MAX_CHARS
            if s.keep_budget_tokens is not None:
                state_chars = min(
                    state_chars, int(s.keep_budget_tokens * STATE_SHARE_OF_TARGET * CHARS_PER_TOKEN)
                )
            state = self._clean(working_state([*span, *prefix], previous, texts, derived).render(state_chars))
            if state:
                from compactd.summarize.sanitize import summary_text  # a compaction's, not a dry run's import

                state = summary_text(state, s.post_compaction_sections)
            # Before the identifier repair, so an identifier the redaction takes out of the body is restored.
            written = self._clean(body)
            body, id_report = ensure_identifiers(merge_state(written, state), ranked)
            missed = missing_identifiers(written, ranked)  # what the summarizer itself kept, as before
            id_report = IdentifierReport(
                id_report.total, len(ranked) - len(missed), id_report.in_summary, missed
            )
            ops = file_operations([*span, *prefix], plan.previous_details)
            moment = now or datetime.now().astimezone()
            post_text = self.post_text(agents_md, workspace, moment)
            suffix = self._clean(
                augment.build_suffix(
                    recent_turns=augment.select_recent_turns(span, s.keep_recent_turns),
                    tool_failures=failures,
                    read_files=ops.read,
                    modified_files=ops.modified,
                    split_turn_summary=split_summary,
                )
            )
            body = _fit_body(body.rstrip(), max(0, s.summary_max_chars - len(suffix)))
            summary = augment.cap_summary(body, suffix, s.summary_max_chars)

            taken = set(transcript.id_index())
            stamp = js_iso(now)
            context = context if context is not None else build_context(transcript)
            tokens_before = context_estimate(context).tokens
            compaction: dict[str, Any] = {
                "type": "compaction",
                "id": new_entry_id(taken),
                "parentId": None,
                "timestamp": stamp,
                "summary": summary,
                "firstKeptEntryId": plan.first_kept_entry_id,
                "tokensBefore": tokens_before,
                "details": {"readFiles": ops.read, "modifiedFiles": ops.modified},
                "fromHook": False,
            }
            checkpoint = current_system_message(context.messages) if context.rules == PI_1 else None
            if checkpoint is not None:
                # pi 1.x's appendCompaction: the replayed system message, stamped with the compaction's time, which
                # pi puts before the summary so that its next request has the one prompt and tools it had.
                compaction["systemMessage"] = {**checkpoint, "timestamp": js_timestamp(stamp)}
            post_message = None
            if post_text:
                post_message = post_compaction_entry(post_text, new_entry_id(taken), stamp)
            result = EngineResult(
                plan=plan,
                summary=summary,
                level=level,
                compaction=compaction,
                post_message=post_message,
                tokens_before=tokens_before,
                tokens_after=0,
                identifiers=id_report,
                quality=quality_info,
                read_files=ops.read,
                modified_files=ops.modified,
                notes=notes,
                calls=calls,
                latency_s=time.monotonic() - started,
                model_error=self._model_error,
                prepared=hits,
                span_messages=span_messages,
            )
            # Counted as pi counts a freshly loaded context, but without kept usage figures that predate the summary.
            after = list(llm_visible(result.expected_context("rotate")))
            result.tokens_after = sum(estimate_tokens(m, pi1=context.rules == PI_1) for m in after)
        return result

    def post_text(self, agents_md: str | None, workspace: Path | None, moment: datetime) -> str | None:
        """The post-compaction message's text (AGENTS.md's sections, or ``workspace``'s AGENTS.md), None without
        rules; shared by :meth:`compact` and a dry run's route (:meth:`summary_token_bounds`' caller)."""
        markdown = agents_md
        if markdown is None and workspace is not None:
            from compactd.agents_md import read_agents_md

            markdown = read_agents_md(workspace)
        if not markdown:
            return None
        from compactd.agents_md import post_compaction_context

        markdown = self._clean(markdown)  # before its sections are cut to fit: whole secrets only
        # The rules go into the post-compaction message only, not into the summary as well: pi and
        # OpenClaw put both in the agent's context, and one copy is the refresh (see augment).
        return post_compaction_context(
            markdown,
            sections=self.settings.post_compaction_sections,
            max_chars=self.settings.post_compaction_max_chars,
            now=moment,
        )

    def summary_token_bounds(self, transcript: Transcript, *, pi1: bool) -> tuple[int, int]:
        """The fewest and the most tokens :meth:`compact`'s compaction entry can count, whatever its summary says
        (at most ``summary_max_chars`` characters, each at most two UTF-16 units), with pi 1.x's replayed system
        message (``pi1``: the transcript's context follows pi 1.x's rules): a dry run's route is decided from
        these when both ends agree, without writing the summary."""
        checkpoint = None
        if pi1:
            context = build_context(transcript)
            checkpoint = current_system_message(context.messages) if context.rules == PI_1 else None
        fixed = estimate_tokens(checkpoint, pi1=True) if checkpoint is not None else 0
        most = -(-2 * max(0, self.settings.summary_max_chars) // CHARS_PER_TOKEN)
        return fixed, fixed + most

    def _clean(self, text: str) -> str:
        """Text the engine writes (the summary's body and suffix, AGENTS.md's copies), redacted before any cap
        cuts it."""
        if not self.settings.redact:
            return text
        from compactd.summarize.redact import redact_secrets

        return redact_secrets(text)

    def _model(self) -> Summarizer:
        assert self.client is not None
        return RedactedPrompts(self.client) if self.settings.redact else self.client

    def _check(self, body: str, latest_ask: str | None) -> quality.QualityReport:
        # Identifiers are guaranteed by ensure_identifiers afterwards, so they cost no regeneration here.
        from compactd.summarize import quality

        return quality.check_summary(
            body, latest_ask=latest_ask, identifiers=None, policy=self.settings.identifier_policy
        )

    def _digest(
        self,
        span: Sequence[dict[str, Any]],
        previous: str | None,
        ranked: list[Identifier],
        latest_ask: str | None,
        texts: SpanText,
        derived: Lookup,
    ) -> tuple[str, str, dict[str, Any], int, list[str]]:
        from compactd.summarize import quality
        from compactd.summarize.digest import build_digest

        if span:
            progress.stage("digest", f"the model-free summary of {len(span):,} messages")
            with collector_paused():  # a pass over the whole span, as in ``compact``
                body = build_digest(
                    list(span),
                    previous_summary=previous,
                    identifiers=ranked,
                    include_failures=False,  # the augmentation lists failures and files once, after the body
                    include_files=False,
                    texts=texts,
                    derived=derived,
                )
        else:
            body = quality.fallback_summary(previous)
        report = self._check(body, latest_ask if span else None)
        return body, LEVEL_DIGEST, _quality_json(report, 0, repaired=False), 0, []

    async def _summarize(
        self,
        span: list[dict[str, Any]],
        previous: str | None,
        ranked: list[Identifier],
        latest_ask: str | None,
        texts: SpanText,
        derived: Lookup,
    ) -> tuple[str, str, dict[str, Any], int, list[str]]:
        """(body, level, quality, calls, notes): level 1 full, level 2 partial, level 3 digest.

        Level 2 is a summary without the messages too large for the summarizer, or one for which a call's
        deadline hit and the lines it had written were kept. When the summary itself is such a cut-off
        answer, it is kept only if it passes the checks once its headings are repaired and its missing
        identifiers appended (else the digest), and gets no quality-guard retry: the retry would run into the
        same deadline. A cut-off chunk summary that later calls folded on is judged like any summary.
        """
        if not span or self.client is None:
            return self._digest(span, previous, ranked, latest_ask, texts, derived)
        from compactd.summarize import quality
        from compactd.summarize.identifiers import ensure_identifiers
        from compactd.summarize.outcomes import LLMError

        stages = self._stages(instructions=True)
        notes: list[str] = []
        source, level = span, LEVEL_LLM
        try:
            body = await stages.summarize_in_stages(source, previous_summary=previous)
            cut, body_cut = stages.cut_answers, stages.summary_cut
        except LLMError as exc:
            log.warning("full summary failed (%s: %s); trying without oversized messages", exc.kind, exc)
            self._model_error = f"{exc.kind}: {exc}"
            source, notes = stages.without_oversized(span)
            if not (notes and source):
                result = self._digest(span, previous, ranked, latest_ask, texts, derived)
                return (*result[:3], stages.stats.calls, [])
            try:
                body = await stages.summarize_in_stages(source, previous_summary=previous)
                level = LEVEL_PARTIAL
                cut, body_cut = stages.cut_answers, stages.summary_cut
            except LLMError as exc2:
                log.warning("partial summary failed (%s: %s); using the digest", exc2.kind, exc2)
                self._model_error = f"{exc2.kind}: {exc2}"
                result = self._digest(span, previous, ranked, latest_ask, texts, derived)
                return (*result[:3], stages.stats.calls, [])

        def with_notes(text: str) -> str:
            return text.rstrip() + "\n\n" + "\n".join(notes) if notes else text

        body = with_notes(body)
        first = report = self._check(body, latest_ask)
        attempts = 1
        retries = min(self.settings.quality_retries, 3) if self.settings.quality_guard else 0
        while not report.ok and attempts <= retries and not body_cut:
            attempts += 1
            progress.stage("quality retry", f"attempt {attempts}: {', '.join(report.reasons)}")
            try:
                candidate = with_notes(
                    await stages.summarize_in_stages(
                        source, previous_summary=previous, retry_reasons=report.reasons
                    )
                )
            except LLMError as exc:
                log.warning("quality-guard retry failed (%s); keeping the earlier attempt", exc.kind)
                break
            candidate_report = self._check(candidate, latest_ask)
            if quality.better(report, candidate_report) is candidate_report:
                body, report = candidate, candidate_report
                cut, body_cut = stages.cut_answers, stages.summary_cut
        repaired = False
        if not report.ok:
            fixed = quality.repair_headings(body)
            repaired, body = fixed != body, fixed
        final = self._check(body, latest_ask)
        if body_cut:
            # Judged as it will be committed: headings repaired and the missing identifiers appended.
            repaired_whole = self._check(ensure_identifiers(self._clean(body), ranked)[0], latest_ask)
            if not repaired_whole.ok:
                log.warning(
                    "the summary cut off at the deadline fails the checks after repair (%s); using the digest",
                    ", ".join(repaired_whole.reasons),
                )
                self._model_error = "the summary cut off at its deadline fails the checks after repair"
                result = self._digest(span, previous, ranked, latest_ask, texts, derived)
                return (*result[:3], stages.stats.calls, [])
        self._model_error = None  # the model's summary (level 1 or 2) is the one kept
        if cut:
            level = LEVEL_PARTIAL  # some of the model's answers stopped at their deadline
        info = _quality_json(final, attempts, repaired=repaired)
        info["first_attempt"] = {"ok": first.ok, "reasons": first.reasons}
        info["deadline_partials"] = stages.stats.deadline_partials
        return body, level, info, stages.stats.calls, notes

    def _stages(self, *, instructions: bool) -> Stages:
        """The staged summarizer on this engine's model; the operator's instructions shape the summary, not
        the split-turn prefix's."""
        from compactd.summarize.stages import Stages, StageSettings

        s = self.settings
        return Stages(
            self._model(),
            StageSettings(
                window=s.summarizer_window,
                identifier_policy=s.identifier_policy,
                identifier_instructions=s.identifier_instructions if instructions else None,
                custom_instructions=s.custom_instructions if instructions else None,
                max_output_tokens=s.max_output_tokens,
                redact=s.redact,
                reserved_sections=s.post_compaction_sections,
            ),
            tally=self._tally,
        )

    async def _split_turn(
        self, prefix: list[dict[str, Any]], texts: SpanText, derived: Lookup
    ) -> tuple[str, int]:
        if self.client is not None:
            from compactd.summarize.outcomes import LLMError

            stages = self._stages(instructions=False)
            try:
                return await stages.summarize_split_turn(prefix), stages.stats.calls
            except LLMError as exc:
                log.warning("split-turn summary failed (%s); using the digest for the prefix", exc.kind)
                self._model_error = self._model_error or f"{exc.kind}: {exc} (the split turn's prefix)"
        from compactd.summarize.digest import build_digest

        return build_digest(prefix, texts=texts, derived=derived), 0


def _quality_json(report: quality.QualityReport, attempts: int, *, repaired: bool) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "checks": report.checks,
        "reasons": report.reasons,
        "attempts": attempts,
        "headings_repaired": repaired,
    }
