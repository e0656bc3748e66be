"""One session's compaction job: load → budget → engine → (commit). Shared by ``compact``, ``once`` and ``run``.

The model call happens here with no lock held; the commit re-validates against the file as it is then, and a
session whose branch ends mid-turn (``decision.readiness``) is refused both before the model call and again
by the commit, under its lock, so a turn the agent started during the model call is not cut.

One reading per job: the transcript the decision was made from (the caller's, or read here once) is the one
the engine summarizes and the commit revalidates against (inode, size and the bytes at the cut) instead of
parsing the file again; the commit's own check of its result is the caller's next reading (``successor``).
"""

from __future__ import annotations

import enum
import functools
import logging
import math
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from compactd import offload, progress
from compactd.commit.notes import ARCHIVE_INFIX, FULL_TEXT_PLACEHOLDER, archive_note, entry_note
from compactd.config import Config
from compactd.core.budget import target_tokens
from compactd.core.context import SessionContext, build_context, compaction_message, entry_to_message
from compactd.core.decision import (
    Decision,
    Figures,
    Route,
    decide,
    prune_target_tokens,
    readiness,
    route_after_summary,
)
from compactd.core.messages import llm_visible
from compactd.core.planning import figures_of, prune_plan
from compactd.core.reader import Transcript
from compactd.core.timestamps import archive_stamp, js_iso
from compactd.core.tokens import estimate_tokens, js_len
from compactd.core.turns import turn_of_branch
from compactd.datarecord import datarecord
from compactd.defaults import SAFETY_MARGIN
from compactd.heap import frozen, release_free_memory
from compactd.reading import read_transcript
from compactd.roots import is_session_path
from compactd.sources.openclaw import refusal as openclaw_refusal
from compactd.summarize.engine import CompactionEngine, EngineResult, post_compaction_entry
from compactd.summarize.settings import engine_settings
from compactd.workspace import read_agents_md, trusted_workspace

if TYPE_CHECKING:
    from compactd.commit.commit import CommitStatus, Successor
    from compactd.core.prune import PruneEdit
    from compactd.workspace import Workspace

# A session's workspace, chosen on the first call (``workspace_of``).
WorkspaceOf = Callable[[], "Workspace | None"]

__all__ = [
    "EXIT_CODES",
    "MODEL_FAILED",
    "Fill",
    "JobResult",
    "JobStatus",
    "Plan",
    "committed_note_chars",
    "compact_file",
    "flush_runs",
    "plan_of",
    "predict_route",
    "refusal_before_spending",
    "snapshot_size",
    "turn_in_flight",
    "workspace_of",
]

log = logging.getLogger(__name__)


def snapshot_size(transcript: Transcript) -> int:
    """Bytes of complete lines the plan was made from (a torn tail is not part of the snapshot)."""
    if not transcript.spans:
        return transcript.header_span[1] + 1 if transcript.header_span else 0
    return transcript.spans[-1][1] + 1


@datarecord(frozen=True, rare=True)
class Fill:
    """Where a session stood before and after a job and where its tokens went (pi's estimate, raw tokens).

    ``after_tokens`` = ``summary_tokens`` + ``post_compaction_tokens`` + ``kept_tokens``; the figures with
    the safety margin are what the threshold compares, and what ``status`` shows as the share of the budget.
    """

    threshold: int
    before_tokens: int
    after_tokens: int
    summary_tokens: int = 0
    post_compaction_tokens: int = 0
    kept_tokens: int = 0
    pruned_results: int = 0
    pruned_chars: int = 0
    pruned_tokens: int = 0

    @property
    def before(self) -> int:
        return math.ceil(self.before_tokens * SAFETY_MARGIN)

    @property
    def after(self) -> int:
        return math.ceil(self.after_tokens * SAFETY_MARGIN)

    def percent(self, tokens: int) -> float:
        return round(100.0 * tokens / self.threshold, 1) if self.threshold > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "before": self.before,
            "after": self.after,
            "before_percent": self.percent(self.before),
            "after_percent": self.percent(self.after),
            "before_tokens": self.before_tokens,
            "after_tokens": self.after_tokens,
            "summary_tokens": self.summary_tokens,
            "post_compaction_tokens": self.post_compaction_tokens,
            "kept_tokens": self.kept_tokens,
            "pruned_results": self.pruned_results,
            "pruned_chars": self.pruned_chars,
            "pruned_tokens": self.pruned_tokens,
        }

    def describe(self) -> str:
        """One line for the log and the ``compact`` table."""
        return (
            f"{self.before:,} -> {self.after:,} of {self.threshold:,} tokens with the margin "
            f"({self.percent(self.before):.0f}% -> {self.percent(self.after):.0f}%): "
            f"summary {self.summary_tokens:,} + post-compaction {self.post_compaction_tokens:,} + kept "
            f"{self.kept_tokens:,} tokens; pruned {self.pruned_chars:,} chars ({self.pruned_tokens:,} tokens) "
            f"from {self.pruned_results} tool result{'s' if self.pruned_results != 1 else ''}"
        )


class JobStatus(enum.Enum):
    """What one job came to: the service, ``compact`` and its exit code act on this, never on the words."""

    COMMITTED = "committed"
    DRY_RUN = "dry_run"
    NOTHING_TO_COMPACT = "nothing_to_compact"  # the whole branch is within the kept recent turns
    NOTHING_TO_COMMIT = "nothing_to_commit"
    TURN_IN_FLIGHT = "turn_in_flight"  # the agent is mid-turn: not now
    AGENT_AT_WORK = "agent_at_work"  # not idle, or a live process holds the session lock: not now
    UNUSABLE = "unusable"  # the file cannot be read as its agent reads it
    REFUSED = "refused"  # not a file compactd may touch (gone, a symlink, an OpenClaw database's, blocked)
    MODEL_FAILED = "model_failed"  # summarizer.fallback: none, and the model failed
    FAILED = "failed"  # the commit failed

    @property
    def busy(self) -> bool:
        return self in (JobStatus.TURN_IN_FLIGHT, JobStatus.AGENT_AT_WORK)


def _of_commit(status: CommitStatus) -> JobStatus:
    """A commit's outcome as the job's status (the commit's modules are loaded by a commit alone: a dry run
    plans the job without them)."""
    from compactd.commit.commit import CommitStatus

    return {
        CommitStatus.COMMITTED: JobStatus.COMMITTED,
        CommitStatus.NOTHING: JobStatus.NOTHING_TO_COMMIT,
        CommitStatus.NOT_IDLE: JobStatus.AGENT_AT_WORK,
        CommitStatus.LOCKED: JobStatus.AGENT_AT_WORK,
        CommitStatus.TURN: JobStatus.TURN_IN_FLIGHT,
    }.get(status, JobStatus.FAILED)


@datarecord(frozen=True, slots=True, rare=True)
class Plan:
    """The decision made on one reading of a session, with the figures it was made from: handed to the job,
    which takes its budget and route from it and decides nothing again."""

    figures: Figures
    decision: Decision


def plan_of(
    config: Config, transcript: Transcript, *, mtime: float = 0.0, context: SessionContext | None = None
) -> Plan:
    """A plan for a compaction asked for by name (``compact``, a dry run): the exact figures of this reading
    and their decision, forced (a session that fits is compacted anyway, on the ``compact_only`` route)."""
    figures = figures_of(config, transcript, mtime=mtime, context=context)
    return Plan(figures, decide(config, figures, now=time.time(), force=True))


@datarecord(repr=False, rare=True)
class JobResult:
    """What one job did. Its repr is a line, not the data: asyncio formats a finished task's result when
    the runner looks up its SIGINT handler, and the whole engine result (every entry) cost seconds there."""

    path: str
    route: str
    engine: EngineResult | None = None
    committed: bool = False
    mode: str | None = None
    archive: str | None = None
    reason: str | None = None
    pruned: int = 0
    chars_saved: int = 0
    fill: Fill | None = None
    successor: Successor | None = None  # the committed file, as the commit's check parsed it
    status: JobStatus = JobStatus.FAILED

    def __repr__(self) -> str:
        return (
            f"JobResult(path={self.path!r}, route={self.route!r}, committed={self.committed}, "
            f"mode={self.mode!r}, reason={self.reason!r}, engine={self.engine!r})"
        )

    @property
    def outcome(self) -> str:
        """What happened, in the words of ``compactd compact``'s exit codes (:data:`EXIT_CODES`)."""
        status = self.status
        if status in (JobStatus.COMMITTED, JobStatus.DRY_RUN):
            return str(status.value)
        if status in (JobStatus.NOTHING_TO_COMPACT, JobStatus.NOTHING_TO_COMMIT):
            return "nothing_to_do"
        return "busy" if status.busy else "failed"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "route": self.route, "outcome": self.outcome}
        e = self.engine
        if e is not None:
            out.update(
                {
                    "first_kept_entry_id": e.first_kept_entry_id,
                    "tokens_before": e.tokens_before,
                    "tokens_after": e.tokens_after,
                    "summary_level": e.level,
                    "identifiers_total": e.identifiers.total,
                    "identifiers_kept_by_model": e.identifiers.kept_by_model,
                    "identifiers_in_summary": e.identifiers.in_summary,
                    "quality": e.quality,
                    "summarizer_calls": e.calls,
                    "prepared": {"messages": e.prepared, "of": e.span_messages},
                    "model_error": e.model_error,
                    "summary": e.summary,
                    "entries": [x for x in (e.compaction, e.post_message) if x is not None],
                }
            )
        out.update(
            {
                "committed": self.committed,
                "mode": self.mode,
                "archive": self.archive,
                "reason": self.reason,
                "pruned_results": self.pruned,
                "chars_saved": self.chars_saved,
                "fill": self.fill.as_json() if self.fill is not None else None,
            }
        )
        return out


# ``compactd compact``'s exit code for each outcome (README, Commands): busy means "retry later".
EXIT_CODES = {"committed": 0, "dry_run": 0, "failed": 1, "busy": 3, "nothing_to_do": 4}

# The start of a JobResult's reason when the model failed and ``summarizer.fallback: none`` kept the digest out.
MODEL_FAILED = "model failed, not committed"


def committed_note_chars(path: str, mode: str) -> Callable[[str], int]:
    """entry id -> length of the note the commit puts for the placeholder (archive name or entry id)."""
    if mode == "rotate":
        name = f"{os.path.basename(path)}{ARCHIVE_INFIX}{archive_stamp(time.time())}"
        chars = js_len(archive_note(name))
        return lambda _entry_id: chars
    return lambda entry_id: js_len(entry_note(entry_id))


async def compact_file(
    path: str,
    config: Config,
    *,
    client: Any = None,
    dry_run: bool = False,
    mode: str | None = None,
    force: bool = False,
    plan: Plan | None = None,
    now: datetime | None = None,
    transcript: Transcript | None = None,
) -> JobResult:
    """Run the engine on one transcript and, unless ``dry_run``, commit its result.

    ``path`` must be the file's real path (no symlink anywhere in it): what is read, sent and committed is
    that file and no other, whatever is swapped in meanwhile (the commit checks again). Pruning is planned on
    what remains after the summary (the kept turns) and frees only what the target still needs, oldest results
    first (``compactd.core.prune.plan_pruning``). ``transcript``: the caller's reading of ``path`` (by
    ``read_transcript``, which records the inode), the one its decision was made from; else it is read here.
    ``plan``: the decision made on that reading (:class:`Plan`), whose budget and route the job takes; without
    one (a compaction asked for by name) it is made here, forced (:func:`plan_of`).
    """
    refused = JobStatus.REFUSED
    if not os.path.lexists(path):
        return JobResult(path, "none", reason="no such file", status=refused)
    if not is_session_path(path):
        reason = "refusing: not a regular file reached without symlinks"
        return JobResult(path, "none", reason=reason, status=refused)
    sqlite_refusal = openclaw_refusal(path)
    if sqlite_refusal is not None:
        return JobResult(path, "none", reason=f"refusing: {sqlite_refusal}", status=refused)
    if transcript is None:
        progress.stage("reading", path)
        transcript = await offload.run_sync(
            lambda: read_transcript(path, follow_symlinks=False, lean=True, checked=True)
        )
    if not transcript.usable:
        reason = "; ".join(p.message for p in transcript.problems)
        return JobResult(path, "none", reason=f"unusable transcript: {reason}", status=JobStatus.UNUSABLE)
    if not transcript.committable:
        reason = "; ".join(f"{p.kind} at line {p.line}: {p.message}" for p in transcript.blocking)
        return JobResult(path, "none", reason=f"not compacted: {reason}", status=refused)
    loop_client = offload.LoopClient(client) if client is not None else None
    # Everything from here to the commit is computation over the whole transcript (the checks, the engine's
    # redaction, identifiers and digest, the pruning plan): off the loop, which serves every other session.
    # The transcript, read and parsed, is not traversed by the cyclic collector again meanwhile.
    with frozen():
        planned = await offload.run_async(
            lambda: _plan_job(
                path,
                config,
                transcript,
                client=loop_client,
                dry_run=dry_run,
                mode=mode,
                force=force,
                plan=plan,
                now=now,
            ),
            client=loop_client,
            name="compactd-job",
        )
    if isinstance(planned, JobResult):
        return planned
    result, replacements = planned
    commit_mode = result.mode or config.compaction.commit
    # The commit writes: it runs in anyio's pool, whose thread a cancellation waits for (never abandoned
    # half way), and the commit is atomic and journalled anyway.
    progress.stage("committing", f"{result.route}, mode {commit_mode}")
    import anyio.to_thread  # the commit's pool: a dry run commits nothing and never loads anyio

    with frozen():
        done = await anyio.to_thread.run_sync(
            lambda: _commit(path, config, transcript, result, replacements, commit_mode, force)
        )
    if done.committed and result.fill is not None:
        e = result.engine
        log.info(
            "compacted path=%s route=%s mode=%s prepared=%s fill: %s",
            path,
            done.route,
            done.mode,
            f"{e.prepared}/{e.span_messages}" if e is not None else "-",
            result.fill.describe(),
        )
    return done


async def _plan_job(
    path: str,
    config: Config,
    transcript: Transcript,
    *,
    client: Any,
    dry_run: bool,
    mode: str | None,
    force: bool,
    plan: Plan | None,
    now: datetime | None,
    route: Route | None = None,
    report: bool = True,
    route_only: bool = False,
    context: SessionContext | None = None,
    workspace: WorkspaceOf | None = None,
) -> JobResult | tuple[JobResult, dict[str, dict[str, Any]]]:
    """The job up to its commit, in :func:`compactd.offload.run_async`'s thread: a JobResult when it stops
    there (a turn in flight, nothing to compact, a dry run), else the result and the pruning's replacements.
    ``route_only`` (a dry run's prediction): only ``route`` counts, and no summary is written when any summary
    the engine could write leads to the same one (:func:`_route_without_summary`). ``context``:
    ``build_context(transcript)`` when the caller has it (``inspect``): its rules spare the cut a walk.
    ``workspace``: the session's :func:`workspace_of`, when the caller asks it too (a dry run's flush)."""
    if not dry_run:
        # Every check that can refuse the commit, before anything is spent on the model; the commit asks
        # again under the lock (an agent may start meanwhile).
        refusal = refusal_before_spending(config, path, transcript, force=force)
        if refusal is not None:
            return JobResult(path, "none", reason=refusal[1], status=refusal[0])
    # The caller's decision on this reading, or (asked for by name) one made here, forced: a session that fits
    # is compacted anyway, on the ``compact_only`` route. ``route``: a dry run's prediction of another route.
    # The caller's, or the plan's when it is made here: the engine's too.
    if plan is None:
        context = context if context is not None else build_context(transcript)
        plan = plan_of(config, transcript, context=context)
    figures, decision = plan.figures, plan.decision
    budget = decision.budget
    chosen: Route = route or decision.job_route
    commit_mode = mode or config.compaction.commit
    result = JobResult(path, chosen, mode=commit_mode)
    edits: dict[str, PruneEdit] = {}  # by entry id; their texts are built for a commit only
    kept_ids: set[str] | None = None
    summary_tokens = post_tokens = 0
    # What stays in the context before pruning. pi 1.x measures a context it sees an edit in without its usage
    # anchor (``edited_tokens``): that is its figure after a pruning, and the pruning must bring both down.
    remaining = budget.estimated_tokens
    measured = figures.edited_tokens if figures.edited_tokens is not None else remaining
    target = target_tokens(config, budget.compact_threshold)
    # pi 1.x prunes with context edits: the original stays in the file, the note names its entry.
    note_chars = committed_note_chars(path, "append" if figures.edited_tokens is not None else commit_mode)

    def prune(only: set[str] | None, need_tokens: int) -> int:
        """Plan the cuts that free ``need_tokens`` from the results of ``only``; the tokens they free."""
        if need_tokens <= 0 or (only is not None and not only):
            return 0
        pruning = prune_plan(
            config,
            transcript,
            budget,
            need_tokens,
            only=only,
            note=FULL_TEXT_PLACEHOLDER,  # the commit swaps it for where the full text still is
            committed_note_chars=note_chars,
            context=context,
        )
        edits.update({edit.entry_id: edit for edit in pruning.edits})
        result.chars_saved += pruning.chars_saved
        return pruning.tokens_saved

    pi1 = figures.edited_tokens is not None  # pi 1.x's rules: the checkpoint, system messages, user images
    rules = context.rules if context is not None else None  # the branch's, for the cut (else read off it)
    settings = engine_settings(config, figures.provider, figures.model)
    # The kept turns fill the target at most; the summary's tokens come out of the older kept results.
    settings.keep_budget_tokens = target
    engine = CompactionEngine(settings, client)
    engine.label = path
    pruned_tokens = 0
    if chosen == "truncate_tool_results_only":
        # Room to work: the older results give down to the target, the newest turn's only what the route's
        # own target still needs. When that cannot reach the target, the session is compacted instead (if
        # there is anything before the kept turns to summarize).
        branch = transcript.branch()
        newest_ids = _ids(branch[_newest_turn_start(branch) :])
        pruned_tokens = prune(_ids(branch) - newest_ids, max(remaining, measured) - target)
        need = max(remaining, measured) - prune_target_tokens(budget, chosen)
        pruned_tokens += prune(newest_ids, need - pruned_tokens)
        if (
            max(remaining, measured) - pruned_tokens > target
            and engine.plan(transcript, rules=rules) is not None
        ):
            log.debug("path=%s truncation alone cannot leave room to work: compacting instead", path)
            chosen, pruned_tokens, result.chars_saved = "compact_then_truncate", 0, 0
            edits.clear()
    if chosen != "truncate_tool_results_only":
        chosen_workspace = (workspace or workspace_of(config, path, transcript))()
        agents_md = (
            read_agents_md(chosen_workspace) if chosen_workspace else None
        )  # a small read: this thread may block
        if route_only:
            known = _route_without_summary(
                engine, transcript, chosen, agents_md, budget, target, pi1=pi1, rules=rules
            )
            if known is not None:
                result.route = known
                result.reason = "dry run"
                return result
        if report:
            progress.stage("summarizing", f"route {chosen}, {budget.estimated_tokens:,} tokens")
        # Each message's redaction and identifiers as the daemon made them when it read the message.
        from compactd.sources.files.preparer import store_lines  # a summary's import, not a dry run's

        result.engine = await engine.compact(
            transcript,
            agents_md=agents_md,
            now=now,
            prepared=lambda: store_lines(config.state_dir, path),
            context=context,
        )
        if result.engine is None:
            result.reason = "nothing to compact: the whole branch is within the kept recent turns"
            result.status = JobStatus.NOTHING_TO_COMPACT
            return result
        e = result.engine
        if e.model_error is not None and not dry_run:
            if config.summarizer.fallback == "none":
                result.reason = f"{MODEL_FAILED}: {e.model_error} (summarizer.fallback: none)"
                result.status = JobStatus.MODEL_FAILED
                return result
            log.warning(
                "path=%s the summarizer failed (%s): committing the digest instead (summarizer.fallback: digest)",
                path,
                e.model_error,
            )
        kept_ids = _ids(e.plan.path[e.plan.first_kept_index :])
        newest_ids = _ids(e.plan.path[e.plan.newest_turn_index :]) if e.plan.newest_turn_index >= 0 else set()
        checkpoint = e.compaction.get("systemMessage")
        summary_tokens = estimate_tokens(compaction_message(e.compaction))
        summary_tokens += estimate_tokens(checkpoint, pi1=True) if isinstance(checkpoint, dict) else 0
        post = entry_to_message(e.post_message) if e.post_message is not None else None
        post_tokens = sum(estimate_tokens(m) for m in llm_visible([post] if post is not None else []))
        kept_tokens = sum(estimate_tokens(m, pi1=pi1) for m in llm_visible(e.plan.kept))
        remaining = measured = summary_tokens + post_tokens + kept_tokens
        need = max(remaining, measured) - prune_target_tokens(budget, chosen)
        older = kept_ids - newest_ids
        room_need = max(remaining, measured) - target
        chosen = _route_after(chosen, need, room_need, older=bool(older))
        if chosen == "compact_then_truncate":
            pruned_tokens = prune(older, room_need)
            pruned_tokens += prune(newest_ids, need - pruned_tokens)
    result.pruned = len(edits)
    after = measured - pruned_tokens
    result.fill = Fill(
        threshold=budget.compact_threshold,
        before_tokens=budget.estimated_tokens,
        after_tokens=after,
        summary_tokens=summary_tokens,
        post_compaction_tokens=post_tokens,
        kept_tokens=after - summary_tokens - post_tokens,
        pruned_results=result.pruned,
        pruned_chars=result.chars_saved,
        pruned_tokens=pruned_tokens,
    )
    result.route = chosen
    if dry_run:
        result.reason = "dry run"
        result.status = JobStatus.DRY_RUN
        return result
    return result, {entry_id: edit.new_message for entry_id, edit in edits.items()}


def _route_after(route: Route, need: int, room_need: int, *, older: bool) -> Route:
    """The route a compaction ends with, given what is left over the threshold (``need``) and over the target
    (``room_need``) once the summary replaced the span: the summary may have been enough (the kept turns stay);
    room to work comes from the older kept results (never the newest turn's, which give only what the
    threshold itself still needs)."""
    if room_need > 0 and older:
        return "compact_then_truncate"
    return route_after_summary(route, need)


def _route_without_summary(
    engine: CompactionEngine,
    transcript: Transcript,
    route: Route,
    agents_md: str | None,
    budget: Any,
    target: int,
    *,
    pi1: bool,
    rules: str | None = None,
) -> Route | None:
    """The route :func:`_plan_job` ends with after the engine, decided without writing the summary: the kept
    turns, the post-compaction message and the checkpoint are known from the cut alone, and the summary counts
    between :meth:`CompactionEngine.summary_token_bounds`; when the fewest and the most give the same answers
    (over the threshold or not, over the target or not), that is the route. None: it depends on the summary
    (the caller writes it), or there is nothing to compact (the caller says so, as before). ``rules``: the
    branch's, when the caller's context knows them."""
    plan = engine.plan(transcript, rules=rules)
    if plan is None:
        return None
    kept_ids = _ids(plan.path[plan.first_kept_index :])
    newest_ids = _ids(plan.path[plan.newest_turn_index :]) if plan.newest_turn_index >= 0 else set()
    older = bool(kept_ids - newest_ids)
    text = engine.post_text(agents_md, None, datetime.now().astimezone())
    post_tokens = 0
    if text:
        post = entry_to_message(post_compaction_entry(text, "", js_iso(None)))
        post_tokens = sum(estimate_tokens(m) for m in llm_visible([post] if post is not None else []))
    kept_tokens = sum(estimate_tokens(m, pi1=pi1) for m in llm_visible(plan.kept))
    answers: set[tuple[bool, bool, Route]] = set()
    for summary_tokens in engine.summary_token_bounds(transcript, pi1=pi1):
        after = summary_tokens + post_tokens + kept_tokens
        need, room_need = after - prune_target_tokens(budget, route), after - target
        answers.add((need <= 0, room_need > 0, _route_after(route, need, room_need, older=older)))
    return next(iter(answers))[2] if len(answers) == 1 else None


def _commit(
    path: str,
    config: Config,
    transcript: Transcript,
    result: JobResult,
    replacements: dict[str, dict[str, Any]],
    mode: str,
    force: bool,
) -> JobResult:
    from compactd.commit.commit import CompactionEntries, commit

    # The engine's transients (redacted copies, texts, identifier tables) are freed by now, but their pages
    # stay in the heap, and the commit's large buffers (the file's bytes, the successor's) would be placed
    # beside them: handed back first, the commit's peak is the transcript plus those, not the engine's on top.
    release_free_memory()

    def busy(current: Transcript) -> str | None:
        """A turn the agent started during the model call: asked by the commit about the file it opened."""
        return turn_in_flight(config, path, current)

    engine = result.engine
    entries = None
    if engine is not None:
        entries = CompactionEntries(
            compaction=engine.compaction,
            post_message=engine.post_message,
            snapshot_size=snapshot_size(transcript),
            snapshot_leaf_id=transcript.leaf_id or "",
            replacements={},
        )
    outcome = commit(
        path,
        entries,
        prune=_prune_entries(transcript, replacements),
        mode=mode,  # type: ignore[arg-type]
        state_dir=config.state_dir,
        idle_seconds=config.sessions.idle_seconds,
        force=force,
        grace_seconds=config.compaction.rotate_grace_seconds,
        archive_keep_count=config.compaction.archives.keep_count,
        archive_keep_days=config.compaction.archives.keep_days,
        planned=transcript,
        check=None if force else busy,
    )
    result.committed = outcome.committed
    result.archive = outcome.archive
    result.reason = outcome.reason
    result.successor = outcome.successor
    result.status = _of_commit(outcome.status)
    return result


def _ids(entries: list[dict[str, Any]]) -> set[str]:
    return {x["id"] for x in entries if isinstance(x.get("id"), str)}


def _newest_turn_start(branch: list[dict[str, Any]]) -> int:
    """Where the branch's newest turn starts: its last user message (0 when there is none)."""
    for i in range(len(branch) - 1, -1, -1):
        message = branch[i].get("message")
        if branch[i].get("type") == "message" and isinstance(message, dict) and message.get("role") == "user":
            return i
    return 0


async def predict_route(
    path: str,
    config: Config,
    transcript: Transcript,
    route: Route,
    *,
    plan: Plan | None = None,
    context: SessionContext | None = None,
    workspace: WorkspaceOf | None = None,
) -> Route:
    """The route a compaction of ``transcript`` asked to take ``route`` ends with, for a dry run: the job
    planned exactly as the real one (the cut, the kept turns, the pruning), with the digest standing in for
    the summary, so no model is called. The real route differs only where a model's summary is so much
    longer or shorter than the digest that it alone does or does not leave room to work; the digest itself is
    written only when its length could change the route. ``plan``: the caller's decision on this reading (its
    figures are not counted again). ``context``: ``build_context(transcript)``, when the caller has it.
    ``workspace``: the session's :func:`workspace_of`, when the caller asks it too (:func:`flush_runs`)."""
    if route == "fits":
        return route
    planned = await offload.run_async(
        lambda: _plan_job(
            path,
            config,
            transcript,
            client=None,
            dry_run=True,
            mode=None,
            force=True,
            plan=plan,
            now=None,
            route=route,
            report=False,
            route_only=True,
            context=context,
            workspace=workspace,
        ),
        client=None,
        name="compactd-predict",
    )
    result = planned if isinstance(planned, JobResult) else planned[0]
    return result.route  # type: ignore[return-value]


def workspace_of(config: Config, path: str, transcript: Transcript) -> WorkspaceOf:
    """The session's :func:`trusted_workspace`, chosen when first asked and then known: a dry run asks it for
    the flush and for the route, one right after the other (the choice's system calls are made once)."""
    return functools.cache(lambda: trusted_workspace(config, path, transcript.header))


def flush_runs(
    config: Config,
    path: str,
    transcript: Transcript,
    *,
    rules: str | None = None,
    workspace: WorkspaceOf | None = None,
) -> bool:
    """Whether a memory flush of ``transcript`` does anything: hooks to start, or a trusted workspace to write
    and a span before the kept turns to extract from (what ``FileSource.flush`` does, asked beforehand).
    ``rules``: the branch's, when the caller's context knows them. ``workspace``: the session's
    :func:`workspace_of`, when the caller asks it too (:func:`predict_route`)."""
    if config.memory_flush.hooks:
        return True
    if (workspace or workspace_of(config, path, transcript))() is None:
        return False
    return CompactionEngine(engine_settings(config)).plan(transcript, rules=rules) is not None


def refusal_before_spending(
    config: Config, path: str, transcript: Transcript, *, force: bool
) -> tuple[JobStatus, str] | None:
    """Why the commit would refuse this session now, asked before any model call (None: it would not): a turn
    in flight, a file written within ``sessions.idle_seconds`` (both skipped by ``force``), or a live
    process's lock on the session (never skipped). The reasons are the commit's own words."""
    from compactd.commit.locks import SessionBusy, lock_is_live, lock_path_for, read_lock

    if not force:
        busy = turn_in_flight(config, path, transcript)
        if busy is not None:
            return JobStatus.TURN_IN_FLIGHT, busy
        try:
            quiet = time.time() - os.lstat(path).st_mtime
        except OSError:
            return None  # gone: the commit says so
        if quiet < config.sessions.idle_seconds:
            idle = config.sessions.idle_seconds
            return (
                JobStatus.AGENT_AT_WORK,
                f"not idle: written {quiet:.0f}s ago (sessions.idle_seconds: {idle:g})",
            )
    lock = lock_path_for(path)
    info = read_lock(lock)
    if info is not None and lock_is_live(info):
        return JobStatus.AGENT_AT_WORK, f"locked: {SessionBusy(lock, info)}"  # the commit's own words
    return None


def turn_in_flight(config: Config, path: str, transcript: Transcript) -> str | None:
    """Why ``transcript`` (just read from ``path``) must not be committed over now, when its branch ends
    mid-turn and the turn is not abandoned; None otherwise. The quiet-time clause of the same rule is
    ``commit()``'s own, checked again under the lock."""
    try:
        quiet = time.time() - os.lstat(path).st_mtime  # stat after the read: no older than what was read
    except OSError:
        return None  # gone: commit() says so
    verdict = readiness(config, turn=turn_of_branch(reversed(transcript.branch())), quiet_seconds=quiet)
    return verdict.reason if verdict.turn_in_flight else None


def _prune_entries(
    transcript: Transcript, replacements: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Entry id → the whole replacement entry (the message swapped for its truncated copy)."""
    out: dict[str, dict[str, Any]] = {}
    for entry_id, message in replacements.items():
        entry = transcript.get(entry_id)
        if entry is not None:
            out[entry_id] = {**entry, "message": message}
    return out
