"""Codex CLI as a session source beside the file tailer and OpenClaw (design.md §6.16): discover, follow,
decide, act.

Its face is :class:`~compactd.sources.openclaw.OpenClawSource`'s: :meth:`CodexSource.run` (a watcher per rollout day
directory through :func:`compactd.sources.watch.watch_root`, a rescan for new days, and a worker), :meth:`once`,
:meth:`states` and :meth:`annotate` for ``status.json``, :meth:`stop`. It reads rollouts only by appended bytes
(a compressed one whole, when it changes), keeps Codex's own figure, and acts on an idle session over its
threshold by appending a ``compacted`` item while holding Codex's writer lock; a session Codex has open is never
touched.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from dataclasses import field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from compactd import offload
from compactd.core.decision import Decision, Figures, Recorded, decide
from compactd.datarecord import datarecord
from compactd.sources import Action, Outcome
from compactd.sources._hosted import HostedSource
from compactd.sources.codex._files import (
    Cursor,
    ThreadBusy,
    codex_home,
    find_rollouts,
    read_new,
    thread_id_of,
)
from compactd.sources.codex._rollout import RolloutFigures, parse_rollout_line
from compactd.state import Backoff, SessionState, describe_error

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

SOURCE = "codex"
# Day directories holding a rollout written this recently are watched; older ones (a resumed old session) are
# seen by the rescan (``service.rescan_seconds``), so months of history do not cost one watch each.
WATCH_RECENT_SECONDS = 2 * 86_400.0


def _is_rollout_name(name: str) -> bool:
    return name.startswith("rollout-") and (name.endswith(".jsonl") or name.endswith(".jsonl.zst"))


@datarecord(slots=True)
class CodexSession:
    """One Codex rollout as followed: its cursor, figures, last decision and state."""

    path: str
    state: SessionState
    cursor: Cursor = field(default_factory=Cursor)
    figures: RolloutFigures = field(default_factory=RolloutFigures)
    decision: Decision | None = None
    due: bool = False
    in_flight: bool = False
    mtime: float = 0.0
    size: int = 0
    refused_at: int | None = None  # the size at which its history was refused (not read again until it grows)


@datarecord
class CodexSource(HostedSource[CodexSession]):
    """Codex CLI's rollouts, followed through the shared hosted-source loop."""

    kind = SOURCE
    # Rollouts of a thread that has a newer one (a later window file): read for status, never compacted.
    superseded: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    name = "codex"

    @property
    def enabled(self) -> bool:
        return self.config.codex.enabled

    @property
    def home(self) -> str:
        return codex_home(self.env, self.config.codex.home)

    # --- discover / refresh -------------------------------------------------------------------------------
    def refresh_all(self) -> None:
        """Find every rollout and read what was appended to each (the rescan; events only make it sooner)."""
        if not self.enabled:
            return
        try:
            paths = find_rollouts(self.home)
        except OSError as exc:
            log.warning("codex home=%s action=discovery_failed error=%s", self.home, describe_error(exc))
            return
        seen = set(paths)
        newest: dict[str, str] = {}
        for path in paths:
            thread = thread_id_of(path) or path
            if thread not in newest or os.path.basename(path) > os.path.basename(newest[thread]):
                newest[thread] = path
        self.superseded = seen - set(newest.values())
        for path in [p for p in self.sessions if p not in seen]:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
        for path in paths:
            self.refresh(path)

    def refresh(self, path: str) -> None:
        """Read what was appended to one rollout and decide on it again; a failure is this session's alone.
        One refresh at a time (the watchers' and the rescan's threads share the cursors)."""
        with self._lock:
            self._refresh(path)

    def _refresh(self, path: str) -> None:
        session = self.sessions.get(path)
        if session is None:
            session = self.sessions[path] = CodexSession(path, SessionState(path=path))
        try:
            st = os.stat(path, follow_symlinks=False)
            if (st.st_size, st.st_mtime) == (session.size, session.mtime) and session.decision is not None:
                self._plan(session, time.time())  # time alone may make it ready
                return
            lines, fresh = read_new(path, session.cursor)
        except Exception as exc:  # the boundary: a bad file never stops the service
            session.state.last_error, session.state.error_stage = describe_error(exc), "read"
            session.due = False
            self.changed()
            return
        if fresh:
            session.figures = RolloutFigures()
        for raw in lines:
            parsed = parse_rollout_line(raw)
            if parsed is not None:
                session.figures.apply(parsed)
        session.size, session.mtime = st.st_size, st.st_mtime
        if session.state.error_stage == "read":
            session.state.last_error = session.state.error_stage = None
        self._plan(session, time.time())

    def _plan(self, session: CodexSession, now: float) -> None:
        """The one decision point (:func:`compactd.core.decision.decide`) on Codex's own figure and window, with
        OpenClaw 2026.9's thresholds (window − min(20,000, window / 4)): below Codex's own auto-compaction at
        90 % of the window."""
        f, st = session.figures, session.state
        st.session_id = f.session_id
        tokens, window = f.figure, f.window
        if tokens is None or window is None:
            st.tokens = st.planning_tokens = tokens or 0
            st.next_action = "no token_count from Codex yet"
            session.due = False
            return
        figures = Figures(
            f.provider,
            f.model,
            tokens,
            size=session.size,
            mtime=session.mtime,
            reducible_chars=0,
            thresholds="openclaw-2026.9",
            window=window,
        )
        decision = decide(self.config, figures, Recorded.of_state(st), now=now)
        budget = decision.budget
        st.tokens = st.planning_tokens = tokens
        st.window, st.compact_threshold = budget.context_window, budget.compact_threshold
        st.flush_threshold = budget.flush_threshold or None
        self.metrics.set_session(
            st.path, session_id=f.session_id, tokens=tokens, window=budget.context_window
        )
        session.decision = decision
        refused = session.refused_at == session.size or session.path in self.superseded
        session.due = decision.due and not session.path.endswith(".zst") and not refused
        if not session.due:
            st.show_next(None if not decision.due or refused else "compressed: read only", now)
        elif f.turn_open:
            st.show_next(f"busy: turn {f.turn_open} in progress", now)
        else:
            st.show_next(decision.action, now)
        self.changed()
        if session.due:
            self.wakeup.set()

    # --- readiness ----------------------------------------------------------------------------------------
    def quiet_seconds(self, session: CodexSession, now: float) -> float:
        return now - session.mtime

    def busy(self, session: CodexSession) -> bool:
        """A turn Codex has open (its next request is built from its memory, not from the rollout)."""
        return session.figures.turn_open is not None

    # --- acting -------------------------------------------------------------------------------------------

    def _outcome(
        self, path: str, action: Action, detail: dict[str, Any], *, committed: bool = False
    ) -> Outcome:
        """An outcome of this source: the row names the source first."""
        return Outcome(path, action, committed, {"source": SOURCE, **detail})

    async def act(self, session: CodexSession, *, force: bool = False, dry_run: bool = False) -> Outcome:
        """Flush, summarize, append under Codex's lock; never raises (the session boundary). ``force`` was
        applied by :meth:`ready`; a dry run is never asked of this source."""
        session.in_flight = True
        try:
            return await self._act(session)
        except Exception as exc:
            return self._back_off(session.state, "act", describe_error(exc))
        finally:
            session.in_flight = False

    async def _act(self, session: CodexSession) -> Outcome:
        # Here, not at the top: `once --dry-run` and `status` import this module and need no engine.
        from compactd.core.budget import target_tokens
        from compactd.memory import flush_span
        from compactd.sources.codex._compact import append_compacted, plan_compaction, read_rollout
        from compactd.summarize.engine import CompactionEngine
        from compactd.summarize.settings import engine_settings
        from compactd.workspace import trusted_workspace

        st, decision = session.state, session.decision
        if decision is None:
            return self._outcome(session.path, Action.NONE, {})
        reading = await anyio.to_thread.run_sync(lambda: read_rollout(session.path))
        if reading.refusal:
            st.skipped = reading.refusal
            session.due, session.refused_at = False, reading.size
            self.changed()
            return self._outcome(session.path, Action.SKIPPED, {"reason": reading.refusal})
        workspace = trusted_workspace(self.config, session.path, reading.transcript.header)
        # The figures decided on, taken now: a watcher's refresh may read the appended line before this job
        # records its outcome, and would leave the state holding the figure after the compaction.
        before, threshold = st.planning_tokens, st.compact_threshold or 0
        settings = engine_settings(self.config, reading.figures.provider, reading.figures.model)
        settings.keep_budget_tokens = target_tokens(self.config, threshold) if threshold else None
        engine = CompactionEngine(settings, self.client())
        detail: dict[str, Any] = {"tokens": before, "threshold": threshold}
        if decision.flush and workspace is not None:
            plan = await offload.run_sync(lambda: engine.plan(reading.transcript))
            if plan is not None:
                await flush_span(
                    self.config,
                    self.metrics,
                    self.client(),
                    plan.to_summarize,
                    workspace=workspace,
                    session_file=st.path,
                    session_id=st.session_id,
                )
            st.mark_flushed(time.time())
        if not decision.compact:
            session.due = False
            return self._outcome(session.path, Action.FLUSH, {**detail})
        planned = await plan_compaction(reading, engine, workspace=workspace.path if workspace else None)
        if planned is None:
            session.due = False
            return self._outcome(session.path, Action.NONE, {"reason": "nothing before the cut", **detail})
        try:
            size = await anyio.to_thread.run_sync(lambda: append_compacted(self.home, reading, planned.line))
        except ThreadBusy as exc:
            st.retry_later(time.time(), self.config.sessions.idle_seconds, str(exc))
            self.changed()
            log.info("session=%s action=busy reason=%s", st.path, exc)
            return self._outcome(session.path, Action.BUSY, {"reason": str(exc)})
        result = planned.result
        projected = copy.copy(reading.figures)  # the figures as the appended line leaves them
        parsed = parse_rollout_line(planned.line.rstrip(b"\n"))
        if parsed is not None:
            projected.apply(parsed)
        after = projected.figure or 0
        st.mark_compacted(
            time.time(),
            level=result.level,
            route="compact_only",
            identifiers_total=result.identifiers.total,
            identifiers_kept_by_model=result.identifiers.kept_by_model,
            identifiers_in_summary=result.identifiers.in_summary,
            fill={"before": before, "after": after, "threshold": threshold},
            size=size,
        )
        self.metrics.record_compaction("compact_only", result.level)
        Backoff.record_success(st)
        await anyio.to_thread.run_sync(lambda: self.refresh(session.path))
        log.info(
            "session=%s action=compacted via=append level=%s kept_items=%d tokens_before=%d estimate_after=%d",
            st.path,
            result.level,
            planned.kept,
            detail["tokens"],
            after,
        )
        return self._outcome(
            session.path,
            Action.COMPACT_ONLY,
            committed=True,
            detail={"level": result.level, "kept_items": planned.kept, "estimate_after": after, **detail},
        )

    # --- the Source protocol (loops) ---------------------------------------------------------------------
    def prepare(self) -> None:
        """Nothing to recover: compactd only ever appends one line to a rollout, under Codex's lock."""

    def save(self) -> None:
        """Nothing kept across restarts: rollouts are read again at start."""

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Nothing before serving: :meth:`follow` finds the rollouts."""

    async def scan(self, *, dry_run: bool, force: bool = False) -> None:
        await anyio.to_thread.run_sync(self.refresh_all)

    async def follow(self, tg: anyio.abc.TaskGroup) -> None:
        """Watch the recent rollout directories until :meth:`stop`; find new ones every rescan interval."""
        if not self.enabled:
            return
        while not self.stopping:
            await anyio.to_thread.run_sync(self.refresh_all)
            recent = time.time() - WATCH_RECENT_SECONDS
            for directory in sorted(
                {os.path.dirname(p) for p, s in self.sessions.items() if s.mtime > recent}
            ):
                if directory not in self.watching:
                    stop = anyio.Event()
                    self.watching[directory] = stop
                    tg.start_soon(self._watch_rollouts, directory, stop)
            await anyio.sleep(self.config.service.rescan_seconds)

    async def _watch_rollouts(self, directory: str, stop: anyio.Event) -> None:
        async def batch(paths: set[str]) -> None:
            for path in sorted(paths):
                await anyio.to_thread.run_sync(lambda p=path: self.refresh(p))  # type: ignore[misc]

        await self._watch(directory, stop, _is_rollout_name, batch)

    def stop(self) -> None:
        self.stopping = True
        for event in self.watching.values():
            event.set()
        self.wakeup.set()

    def unreadable(self) -> list[Outcome]:
        return []

    def waiting(self, session: CodexSession, now: float) -> Outcome:
        """What ``once`` reports of a session it does not act on now."""
        st = session.state
        if st.error_stage == "read" and st.last_error:
            return self._outcome(session.path, Action.FAILED, {"stage": "read", "reason": st.last_error})
        if session.due:
            return self._outcome(session.path, Action.WAIT, {"reason": st.next_action or "not idle yet"})
        detail = {"tokens": st.planning_tokens, "threshold": st.compact_threshold}
        return self._outcome(session.path, Action.FITS, detail)

    # --- status -------------------------------------------------------------------------------------------

    def annotate(self, status: dict[str, Any]) -> None:
        """Mark Codex rows with their source, Codex's own figure and window, and whether a turn is open."""
        for row in status.get("sessions", []):
            session = self.sessions.get(str(row.get("path")))
            if session is None:
                continue
            f = session.figures
            row.update(
                {
                    "source": SOURCE,
                    "codex_tokens": f.tokens,
                    "codex_window": f.window,
                    "codex_version": f.cli_version,
                    "turn_open": f.turn_open is not None,
                    "compressed": session.path.endswith(".zst"),
                }
            )
        if self.enabled and self.sessions:
            status["codex"] = {"home": self.home, "sessions": len(self.sessions)}
