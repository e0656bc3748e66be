"""The file source: pi's and JSONL OpenClaw's transcripts, followed under the configured roots.

watch → tail → ledger → decide → (flush) → summarize → commit, for every ``*.jsonl`` under ``sessions.roots``:
a watcher per root (the real ``watchfiles``) and a periodic rescan, the tracker reading only appended bytes, the
ledger keeping each session's figure as its agent computes it, :func:`compactd.core.decision.decide` on it, and the
job (:mod:`compactd.sources.files.job`) on the one reading an action is decided on, with that decision (:class:`Plan`).
"""

from __future__ import annotations

import glob
import logging
import os
import stat
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from compactd import offload
from compactd.config import Config, file_kind
from compactd.core.decision import Decision, Figures, Recorded, blocked_reason, decide
from compactd.core.ledger import SessionLedger
from compactd.core.planning import figures_of, route_cap, tool_result_cap
from compactd.datarecord import datarecord
from compactd.defaults import DRY_RUN_KEPT_BYTES
from compactd.heap import collector_paused
from compactd.reading import read_transcript
from compactd.roots import IntactDirs, is_session_path
from compactd.sources import IDLE_WAKE_SECONDS, Action, Host, Outcome, Unawaited
from compactd.sources.files.resume import SnapshotStore, config_fingerprint
from compactd.sources.files.tail import Change
from compactd.sources.files.tracker import UNTOUCHED, SessionTracker
from compactd.sources.openclaw import refusal as openclaw_refusal
from compactd.sources.watch import expand_roots, scan_root, watch_root
from compactd.state import Backoff, SessionState, StateStore, describe_error

if TYPE_CHECKING:
    import anyio
    import anyio.abc

    from compactd.commit.claim import SessionClaim
    from compactd.commit.commit import Successor
    from compactd.core.budget import Budget
    from compactd.core.context import SessionContext
    from compactd.core.reader import Transcript
    from compactd.sources.files.job import JobResult, Plan
    from compactd.sources.files.preparer import Preparer

__all__ = ["FileSession", "FileSource", "committed_size", "seed_tracker"]

log = logging.getLogger(__name__)

# Watchers yield an empty batch this often when nothing happens: the heartbeat the watchdog checks. Stopping
# does not wait for it (the stop event is seen within one step).
WATCH_HEARTBEAT_MS = 5_000
# Archive retention runs over every session this often (and after each rotation, for that session).
RETENTION_SWEEP_SECONDS = 3600.0


# A dry run's kept reading of a due session: the transcript, its context and its ledger's reducible count, all
# made by the discovery from the file's bytes (``SessionTracker.keep_reading``).
Kept = tuple["Transcript", "SessionContext", "tuple[int, int] | None"]


def _unchanged(session: FileSession) -> bool:
    """The session's file is still the bytes its tracker last read: same inode, size and mtime, no torn line."""
    cursor = session.tracker.cursor
    try:
        info = os.lstat(session.path)
    except OSError:
        return False
    return (info.st_ino, info.st_size, info.st_mtime) == (cursor.ino, cursor.offset, cursor.mtime)


def _signature(path: str) -> tuple[int, ...] | None:
    """What changes when a file is replaced, written, truncated or chmod-ed (None: it cannot be stat-ed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


@datarecord(slots=True)
class FileSession:
    """One transcript file as served: its tracker, and where the last decision left it."""

    tracker: SessionTracker
    in_flight: bool = False
    due: bool = False  # the last decision found something to do, and no action has settled it since
    decision: Decision | None = None  # the last one recorded (exact once a full read made it)
    ready_at: float = 0.0  # epoch seconds from which time alone makes that decision's session ready

    @property
    def path(self) -> str:
        return self.tracker.path


class FileSource:
    """The :class:`~compactd.sources.Source` of transcript files."""

    name = "jsonl"
    enabled = True

    def __init__(self, host: Host) -> None:
        self.host = host
        self.config = host.config
        self.metrics = host.metrics
        self.workers = host.config.summarizer.max_concurrency
        self.sessions: dict[str, FileSession] = {}
        self.watchers: dict[str, anyio.Event] = {}  # root -> its watcher's stop event
        self.explicit_roots = host.roots  # ``once FILE...``: these paths alone, not the configured roots
        self.refused: set[str] = set()  # paths refused as symlinks (logged once)
        self.store = StateStore(host.config.state_dir)
        self.resume = SnapshotStore(host.config.state_dir)  # cursors and ledgers saved for the next start
        # Appended messages' redaction and identifiers, made as they are read: while serving (``start``) alone,
        # so the preparer is made (and its module, its queue and thread, loaded) then, not by ``once``.
        self.preparer: Preparer | None = None
        self.serving = False  # ``start``-ed: the daemon, not ``once``
        # ``once --dry-run``: the due sessions' readings are kept from the discovery for their action (read once).
        self.keep_readings = False
        self.kept: dict[
            str, int
        ] = {}  # path -> the file's bytes of its kept reading (DRY_RUN_KEPT_BYTES in all)
        self.kept_bytes = 0
        self.state: dict[str, SessionState] = {}
        self.wakeup: anyio.Event | Unawaited = Unawaited()
        self.rescan_due: anyio.Event | None = None  # made by :meth:`watch_roots`, which waits on it
        self.redecide = False  # the next rescan decides unchanged sessions again too (a reload)
        self.stopping = False
        self.heartbeat = time.monotonic()
        self.last_sweep = time.monotonic()
        self.predicted: dict[str, tuple[int, str]] = {}  # path -> (file size, the route its job ends with)
        self.predicting: set[str] = set()
        self.acted: dict[str, Outcome] = {}  # a dry run's outcomes, of the sessions its scan acted on
        # What was last logged per path (a failure, an ignored file), so a repeat is not logged again.
        self._reported: dict[str, str] = {}
        self._unreadable: dict[str, tuple[int, ...] | None] = {}  # path -> its stat when reading it failed
        self._dirs = IntactDirs()  # realpath once per directory, not once per file
        # During one discovery pass: which session directories belong to a SQLite-backed agent (acting on a
        # file checks again, so a database that appears after the pass is still seen in time).
        self._agent_dirs: dict[str, str | None] | None = None

    @property
    def watched(self) -> int:
        return len(self.watchers)

    def roots(self) -> list[str]:
        return sorted(self.watchers)

    def configure(self, config: Config) -> None:
        self.config = config
        self.resume.fingerprint = None  # decisions recorded from now on may be under either configuration
        if self.serving:
            self._prepare(config)
            # A reload: every session is decided again under the new configuration (thresholds, windows, idle
            # time) by the next rescan, asked for now, so a session a lowered threshold makes due is acted on
            # without waiting for its agent's next append, and status shows the new thresholds.
            self.redecide = True
            if self.rescan_due is not None:
                self.rescan_due.set()

    def _prepare(self, config: Config) -> None:
        """Prepare appended messages while serving, if the configuration wants it (shares are made with
        redaction on: without it a compaction would not use them)."""
        if config.compaction.prepare_as_read and config.compaction.redact_secrets:
            if self.preparer is None:
                from compactd.sources.files.preparer import Preparer

                self.preparer = Preparer(self.store.state_dir)
            self.preparer.start()
        elif self.preparer is not None:
            self.preparer.stop()

    # --- sessions -------------------------------------------------------------------------------------------
    def session_state(self, path: str) -> SessionState:
        st = self.state.get(path)
        if st is None:
            st = self.state[path] = SessionState(path=path)
        return st

    def root_paths(self) -> list[str]:
        if self.explicit_roots is not None:
            escaped = [glob.escape(root) for root in self.explicit_roots]  # paths, not patterns
            return expand_roots(escaped, state_dir=self.config.state_dir)
        return expand_roots(self.config.sessions.roots, state_dir=self.config.state_dir)

    def refresh(self, path: str, *, seeded: bool = False) -> Decision | None:
        """Reconcile one path with the file system (only appended bytes are read), then decide if it is due;
        the decision made on this reading, if one was (None: nothing new to decide, or not a session).

        ``seeded``: the tracker was just given the file's new reading (:meth:`seed`), so it is decided on again
        even if no byte changed since.

        The session boundary for reading: whatever this one file raises is recorded in its state (with a
        back-off, during which it is read again only if its inode, size, times or mode change) and never
        reaches the caller, so the start-up read, a watcher batch or a rescan goes on with every other session.
        """
        if self.config.sessions.is_ignored(path):
            return None
        st = self.state.get(path)
        if st is not None and st.error_stage == "read" and st.in_backoff(time.time()):
            failed_on = self._unreadable.get(path)
            if failed_on is not None and failed_on == _signature(path):
                if path not in self.sessions:
                    self.sessions[path] = FileSession(SessionTracker(path))
                return None
        try:
            decision = self._refresh(path, seeded=seeded)
            self._keep_reading(path)
        except Exception as exc:
            session = self.sessions.get(path)
            if session is not None:  # forget what was half read: the next attempt reads the file afresh
                session.due = False
                session.tracker.cursor.reset()
                session.tracker.ledger = None
                session.tracker.drop_reading()
            self._keep_reading(path)  # (forgets it)
            self._unreadable[path] = _signature(path)
            self.fail(path, "read", exc)
            return None
        self._unreadable.pop(path, None)
        return decision

    def _refresh(self, path: str, *, seeded: bool = False) -> Decision | None:
        sqlite_refusal = openclaw_refusal(path, self._agent_dirs)
        if sqlite_refusal is not None:  # never a session to act on (compactd writes nothing there)
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            self._report_once(path, "sqlite-agent", logging.INFO, f"action=ignored reason={sqlite_refusal}")
            return None
        try:
            info: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            info = None  # gone: the tracker reports it missing and it is forgotten below
        mode = stat.S_IFREG if info is None else info.st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            # Not a transcript (scan_root never lists one); opening a FIFO would block the whole service.
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            kind = file_kind(mode)
            self._report_once(path, kind, logging.WARNING, f"action=ignored reason=not a transcript: {kind}")
            return None
        if info is not None and not self._dirs.is_session_path(path, info):
            # Swapped for a symlink, or its directory was: what it leads to is not under a root.
            if self.sessions.pop(path, None) is not None or path not in self.refused:
                log.warning(
                    "session=%s action=refused reason=not a regular file reached without symlinks", path
                )
            self.refused.add(path)
            self.metrics.forget_session(path)
            return None
        self.refused.discard(path)
        session = self.sessions.get(path)
        if session is None:
            session = self.sessions[path] = FileSession(
                SessionTracker(
                    path,
                    resume=self.resume.take(path),
                    cap_for=route_cap(self.config),
                    keep_reading=self.keep_readings,
                )
            )
        offset = session.tracker.cursor.offset
        update = session.tracker.refresh(info)
        if self.preparer is not None:
            if update.change is Change.APPENDED:
                self.preparer.appended(path, update.entries, session.tracker.cursor.offset - offset)
            elif update.change is Change.RELOADED:
                self.preparer.reloaded(path, session.tracker.cursor.offset)
        if update.change is Change.UNCHANGED and path in self.state and not seeded and not self.redecide:
            return None  # nothing new: the rescan's common case, kept cheap
        self.host.changed()
        if update.change is Change.SKIPPED:  # kept (its cursor remembers it), never read whole nor acted on
            session.due = False
            session.decision = None
            self.metrics.forget_session(path)
            st = self.session_state(path)
            if st.skipped != update.reason:
                st.skipped = update.reason
                st.show_next(None, time.time())
                log.warning("session=%s action=skipped reason=%s", path, update.reason)
            return None
        ledger = session.tracker.ledger
        if ledger is None:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            return None
        if update.reason == UNTOUCHED and not seeded and self._keeps_decision(path):
            window = self.state[path].window
            self.metrics.set_session(
                path, session_id=ledger.session_id, tokens=ledger.planning_tokens, window=window
            )
            self.resume.mark_decided(path)
            return None
        st = self.session_state(path)
        if st.error_stage == "read":  # readable again
            Backoff.record_success(st)
            st.next_action = None
            self._reported.pop(path, None)
            log.info("session=%s action=recovered (readable again)", path)
        decision = self.decide(session, time.time())
        if decision is not None and decision.compact and not decision.exact and not decision.turn_in_flight:
            # Due, and between turns: which of the three routes is decided by a full read (once per turn
            # while it waits; mid-turn, status shows the turn instead).
            decision = self._exact_decision(session, decision)
        if decision is not None:
            self.record_decision(session, decision)
        return decision

    def _keeps_decision(self, path: str) -> bool:
        """A session resumed unchanged keeps the decision sessions.json recorded for it, if that was made under
        this configuration and found nothing due nor failing: deciding it again would find the same (only a due
        session's readiness depends on the time), and a restart need not decide 10,000 sessions anew."""
        st = self.state.get(path)
        return (
            st is not None
            and st.next_action is None
            and st.error_stage is None
            and st.compact_threshold is not None
            and self.resume.decided(path)
        )

    def figures(self, session: FileSession) -> Figures | None:
        """The ledger's figures of a session (None: not a transcript), as :func:`decide` takes them: with the
        route's reducible tool-result characters when the ledger counted them at this session's cap (then the
        decision is exact without reading the file)."""
        ledger = session.tracker.ledger
        if ledger is None:
            return None
        cursor = session.tracker.cursor
        known = ledger.reducible
        reducible = None
        if known is not None and known[0] == tool_result_cap(self.config, ledger.provider, ledger.model):
            reducible = known[1]
        return Figures.of_ledger(ledger, size=cursor.size, mtime=cursor.mtime, reducible=reducible)

    def decide(self, session: FileSession, now: float, *, force: bool = False) -> Decision | None:
        """:func:`compactd.core.decision.decide` on what the tracker and the state directory know of a session."""
        figures = self.figures(session)
        if figures is None:
            return None
        recorded = Recorded.of_state(self.session_state(session.path))
        return decide(self.config, figures, recorded, now=now, force=force)

    def _exact_decision(self, session: FileSession, provisional: Decision) -> Decision:
        """The decision with the route's reducible tool-result characters, which the ledger did not count at
        this session's cap: from a full read (the kept reading, if any); the provisional one when the read
        cannot say."""
        tracker = session.tracker
        transcript, context = tracker.reading, tracker.reading_context
        if transcript is None:
            try:
                transcript = read_transcript(session.path, follow_symlinks=False)
            except OSError as exc:
                log.debug("session=%s cannot read it to decide its route: %s", session.path, exc)
                return provisional
        if blocked_reason(transcript) is not None:
            return provisional  # acting on it says why
        figures = figures_of(self.config, transcript, mtime=tracker.cursor.mtime, context=context)
        recorded = Recorded.of_state(self.session_state(session.path))
        return decide(self.config, figures, recorded, now=time.time())

    def record_decision(self, session: FileSession, decision: Decision) -> None:
        """Write a decision into the session's state (what ``status`` shows) and mark it due or not."""
        path = session.path
        st = self.session_state(path)
        ledger = session.tracker.ledger
        budget = decision.budget
        if ledger is not None:
            st.session_id = ledger.session_id
            st.tokens = ledger.planning_tokens  # the stale pre-compaction usage anchor would mislead here
            # What status shows: after a compaction, the estimate of the compacted context (the commit's
            # successor seeds this ledger), never the stale usage anchor of the context before it.
            self.metrics.set_session(
                path,
                session_id=ledger.session_id,
                tokens=ledger.planning_tokens,
                window=budget.context_window,
            )
        st.planning_tokens = budget.estimated_with_margin
        st.window = budget.context_window
        st.compact_threshold = budget.compact_threshold
        st.flush_threshold = budget.flush_threshold or None
        if decision.skip != st.skipped:
            st.skipped = decision.skip
            if decision.skip:
                log.warning("session=%s action=skipped reason=%s", path, decision.skip)
        if decision.due and not session.due:
            log.info(
                "session=%s action=due route=%s flush=%s tokens=%d threshold=%d",
                path,
                decision.route,
                decision.flush,
                budget.estimated_with_margin,
                budget.compact_threshold,
            )
        if decision.held is not None and decision.route != "fits":
            log.debug("session=%s action=held reason=%s", path, decision.held)
        st.show_next(self._predicted_next(session, decision), time.time())
        session.due = decision.due
        session.decision = decision
        session.ready_at = time.time() + (0.0 if decision.ready else decision.wait_seconds)
        self.resume.mark_decided(path)
        if decision.due:
            self.wakeup.set()

    def _predicted_next(self, session: FileSession, decision: Decision) -> str | None:
        """What ``status`` shows next for a session: the decision's action, except that a compaction waiting
        (not quiet yet, backing off) shows the route the job will end with (``job.predict_route``, as
        ``inspect`` and ``once --dry-run`` do), worked out once per file size in the background."""
        action = decision.next_action
        if not decision.compact or action != decision.route or decision.ready:
            return action
        size = session.tracker.cursor.size
        known = self.predicted.get(session.path)
        if known is not None and known[0] == size:
            return known[1]
        if self.host.task_group is not None and session.path not in self.predicting and not session.in_flight:
            self.predicting.add(session.path)
            self.host.task_group.start_soon(self._predict, session, decision, size)
        return action

    async def _predict(self, session: FileSession, decision: Decision, size: int) -> None:
        from compactd.sources.files.job import predict_route

        path = session.path
        try:
            transcript = await offload.run_sync(lambda: read_transcript(path, follow_symlinks=False))
            if transcript.size != size or blocked_reason(transcript) is not None:
                return  # changed while read (decided again anyway) or not to be acted on
            route = await predict_route(path, self.config, transcript, decision.job_route)
        except Exception as exc:  # a prediction is a nicety: the session itself is served regardless
            log.debug("session=%s cannot predict its route: %s", path, describe_error(exc))
            return
        finally:
            self.predicting.discard(path)
        self.predicted[path] = (size, route)
        st = self.session_state(path)
        if st.next_action == decision.route and session.tracker.cursor.size == size:
            st.next_action = route
            self.host.changed()

    def rescan(self, *, seal: bool = True) -> None:
        """The safety net for dropped events: :meth:`discover` again (sealing torn idle lines unless
        ``seal=False``), and the sessions whose files are gone forgotten."""
        seen = self.discover(seal=seal)
        for path in [p for p in self.sessions if p not in seen]:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)

    def seal(self, session: FileSession, now: float) -> None:
        from compactd.commit.seal import seal_torn_line

        idle = self.config.sessions.idle_seconds
        if now - session.tracker.cursor.mtime >= idle and seal_torn_line(session.path, idle):
            log.warning("session=%s action=sealed_torn_line (a writer stopped mid-line)", session.path)
            self.refresh(session.path)

    # --- acting ---------------------------------------------------------------------------------------------
    async def act(self, session: FileSession, *, force: bool = False, dry_run: bool = False) -> Outcome:
        """:meth:`act_claimed` under the session's claim, which every compactd process of this state directory
        takes (``run``, ``once``, ``compact``): one flush and one commit per cycle, whoever runs it."""
        from compactd.commit.claim import ClaimBusy, SessionClaim

        if dry_run:
            acted = self.acted.pop(session.path, None)  # by the scan, right after reading it
            return (
                acted
                if acted is not None
                else await self.act_claimed(session, None, force=force, dry_run=True)
            )
        claim = SessionClaim(self.config.state_dir, session.path)
        try:
            claim.acquire()
        except ClaimBusy as exc:
            self._retry_later(self.session_state(session.path), str(exc))
            log.info("session=%s action=busy reason=%s", session.path, exc)
            return Outcome(session.path, Action.BUSY, detail={"reason": str(exc)})
        except OSError as exc:  # the state dir is unwritable: this session fails, the others go on
            self.fail(session.path, "claim", exc)
            return Outcome(
                session.path, Action.FAILED, detail={"stage": "claim", "reason": describe_error(exc)}
            )
        try:
            return await self.act_claimed(session, claim, force=force)
        finally:
            claim.release()

    async def act_claimed(
        self,
        session: FileSession,
        claim: SessionClaim | None,
        *,
        force: bool = False,
        dry_run: bool = False,
        decided: Decision | None = None,
    ) -> Outcome:
        """Read once → decide → flush → compact → record, for one session. Never raises: this is the session
        boundary, and a failure at any stage is recorded in its state with a back-off and returned as
        ``failed``. ``decided``: a dry run's, the decision the refresh just made on the tracker's reading
        (:meth:`scan`), passed on instead of deciding again (see :meth:`_unchanged_exact_decision`)."""
        path = session.path
        st = self.session_state(path)
        session.in_flight = True
        stage = self.host.at(
            path, "read"
        )  # where an exception stopped this session, for its state and the log
        try:
            unchanged = None
            if dry_run:
                unchanged = self._unchanged_exact_decision(session, force=force, decided=decided)
                if unchanged is not None and not unchanged[1].due:  # decided from the ledger on these bytes
                    decision = unchanged[1]
                    detail = {**decision.figures(), "flush": False, "route": decision.route}
                    return self._refused(session) or Outcome(path, Action(decision.action), detail=detail)
            kept = self._kept_reading(session) if dry_run else None
            read = await self._read_step(session, kept=kept[0] if kept is not None else None)
            if isinstance(read, Outcome):
                return read
            stage = self.host.at(path, "plan")
            # The refresh's decision, made under the same time rule, is the one of this reading when the full
            # read's figures are the ledger's (``force`` skips that rule: then it is made again).
            same = unchanged if decided is not None and not force else None
            plan, cycle = await self._decide_step(session, read, claim, force=force, kept=kept, decided=same)
            decision = plan.decision
            if dry_run:
                return await self._predicted(path, read, plan, kept[1] if kept is not None else None)
            flushed = False
            if decision.flush:
                stage = self.host.at(path, "flush")
                flushed = await self._flush_step(path, read, decision, claim, cycle)
            if not decision.compact:
                session.due = False
                if decision.skip is not None:
                    st.skipped = decision.skip
                    return Outcome(path, Action.SKIPPED, detail={"reason": decision.skip})
                return Outcome(path, Action(decision.action), detail={**decision.figures(), "flush": flushed})
            stage = self.host.at(path, "compact")
            result = await self._compact_step(path, plan, read, force=force)
            stage = self.host.at(path, "commit")
            successor = result.successor
            # The committed file's ledger, from the commit's own reading of it: a pass over every entry.
            ledger = None
            if successor is not None:
                import anyio

                try:
                    ledger = await offload.run_sync(
                        lambda: SessionLedger.from_transcript(successor.transcript)
                    )
                except anyio.get_cancelled_exc_class():
                    result.successor = (
                        None  # stopping: the commit is recorded all the same (the file read afresh)
                    )
                    self._record_step(session, decision, result, flushed=flushed)
                    raise
            return self._record_step(session, decision, result, ledger, flushed=flushed)
        except Exception as exc:  # still due: tried again when its back-off ends
            delay = self.fail(path, stage, exc)
            return Outcome(
                path,
                Action.FAILED,
                detail={"stage": stage, "reason": describe_error(exc), "retry_in": round(delay)},
            )
        finally:
            session.in_flight = False
            self.host.done(path)
            self.host.changed()

    async def _read_step(
        self, session: FileSession, *, kept: Transcript | None = None
    ) -> Transcript | Outcome:
        """The one read the decision and the action are made from (``kept``: that reading, already made); an
        Outcome when there is nothing to act on (an agent holds the lock, or the file is not one compactd may
        touch or read as pi does)."""
        path = session.path
        st = self.session_state(path)
        refused = self._refused(session)
        if refused is not None:
            return refused
        transcript = kept
        if transcript is None:
            transcript = await offload.run_sync(
                lambda: read_transcript(path, follow_symlinks=False, lean=True, checked=True)
            )
        blocked = blocked_reason(transcript)
        if blocked is not None:
            session.due = False
            st.skipped = blocked
            return Outcome(path, Action.SKIPPED, detail={"reason": blocked})
        return transcript

    def _refused(self, session: FileSession) -> Outcome | None:
        """An Outcome when the file is not to be touched now: an agent holds its lock, it is not a regular file
        reached without symlinks, or it lies under a SQLite-backed OpenClaw agent."""
        from compactd.commit.locks import lock_holder

        path = session.path
        st = self.session_state(path)
        holder = lock_holder(path)
        if holder is not None:
            reason = f"{holder} holds the session lock"
            self._retry_later(st, reason)
            return Outcome(path, Action.BUSY, detail={"reason": reason})
        if not is_session_path(path):
            session.due = False
            st.skipped = "not a regular file reached without symlinks"
            return Outcome(path, Action.SKIPPED, detail={"reason": st.skipped})
        sqlite_refusal = openclaw_refusal(path)  # its database may have appeared since the last read
        if sqlite_refusal is not None:
            session.due = False
            st.skipped = sqlite_refusal
            return Outcome(path, Action.SKIPPED, detail={"reason": st.skipped})
        return None

    async def _predicted(
        self, path: str, transcript: Transcript, plan: Plan, context: SessionContext | None = None
    ) -> Outcome:
        """A dry run's outcome: the route the job would end with and whether the flush would do anything,
        worked out as the real run does them (``job.predict_route``, ``job.flush_runs``), no model called.
        ``context``: the discovery's, built from ``transcript`` (its rules and tool results are not looked for
        again)."""
        from compactd.sources.files.job import flush_runs, predict_route, workspace_of

        decision = plan.decision
        if decision.skip is not None:
            return Outcome(path, Action.SKIPPED, detail={"reason": decision.skip})
        config = self.config
        rules = context.rules if context is not None else None
        workspace = workspace_of(config, path, transcript)  # chosen once for both, if either asks
        flush = decision.flush and await offload.run_sync(
            lambda: flush_runs(config, path, transcript, rules=rules, workspace=workspace)
        )
        route = decision.route
        if decision.compact:
            route = await predict_route(
                path, config, transcript, decision.job_route, plan=plan, context=context, workspace=workspace
            )
        action = route if decision.compact else decision.action
        return Outcome(path, Action(action), detail={**decision.figures(), "flush": flush, "route": route})

    def _keep_reading(self, path: str) -> None:
        """Keep a just refreshed session's reading only if it is due (nothing else is acted on) and the readings
        kept stay within ``DRY_RUN_KEPT_BYTES`` (the memory a dry run holds; the others are read again)."""
        self.kept_bytes -= self.kept.pop(path, 0)
        session = self.sessions.get(path)
        reading = session.tracker.reading if session is not None else None
        if session is None or reading is None:
            return
        if session.due and self.kept_bytes + reading.size <= DRY_RUN_KEPT_BYTES:
            self.kept[path] = reading.size
            self.kept_bytes += reading.size
        else:
            session.tracker.drop_reading()

    def _kept_reading(self, session: FileSession) -> Kept | None:
        """The discovery's reading of a session (taken: used once), if the file is still the very bytes it read:
        the whole file, no line since and no torn line after them (``read_transcript`` would read those)."""
        tracker = session.tracker
        transcript, context, ledger = tracker.reading, tracker.reading_context, tracker.ledger
        tracker.drop_reading()
        self.kept_bytes -= self.kept.pop(session.path, 0)
        if transcript is None or context is None or ledger is None or not _unchanged(session):
            return None
        return transcript, context, ledger.reducible

    def _unchanged_exact_decision(
        self, session: FileSession, *, force: bool, decided: Decision | None = None
    ) -> tuple[Figures, Decision] | None:
        """For a dry run: the ledger's figures and their decision when it is exact (the route's reducible
        characters counted at this session's cap) and the file is still the bytes the ledger read; None means
        read it. ``decided``: the refresh's decision on these very figures, made just before (the scan's), is
        taken instead of deciding again: what a dry run reads of it (due, route, action, figures) depends on
        neither the time nor ``force``."""
        figures = self.figures(session)
        if figures is None or figures.reducible_chars is None or not _unchanged(session):
            return None
        if decided is not None:
            return figures, decided
        recorded = Recorded.of_state(self.session_state(session.path))
        return figures, decide(self.config, figures, recorded, now=time.time(), force=force)

    async def _decide_step(
        self,
        session: FileSession,
        transcript: Transcript,
        claim: SessionClaim | None,
        *,
        force: bool,
        kept: Kept | None = None,
        decided: tuple[Figures, Decision] | None = None,
    ) -> tuple[Plan, str]:
        """The exact decision from the transcript just read, with what every process recorded of this cycle's
        flush (another compactd may have flushed or compacted it since this one last looked): the plan the
        job is handed (it decides nothing again), and the cycle the claim records a flush in ("" without a
        claim: a dry run records none). ``kept``: the transcript is the discovery's reading, whose context and
        ledger's reducible count are taken instead of worked out again. ``decided``: a dry run's decision on
        the ledger's figures of this reading, under the same time rule: taken when these figures are those."""
        from compactd.commit.claim import flush_cycle
        from compactd.sources.files.job import Plan

        st = self.session_state(session.path)
        cycle = flush_cycle(transcript) if claim is not None else ""  # a dry run (no claim) records no flush
        recorded = claim.flushed_in(cycle) if claim is not None else None
        if recorded is not None and recorded != st.flushed_this_cycle:
            st.flushed_cycle = st.compactions if recorded else None
        config, mtime = self.config, session.tracker.cursor.mtime
        context, counted = (kept[1], kept[2]) if kept is not None else (None, None)
        figures = await offload.run_sync(
            lambda: figures_of(config, transcript, mtime=mtime, context=context, counted=counted)
        )  # a pass over it all
        if decided is not None and decided[0] == figures:
            decision = decided[1]
        else:
            decision = decide(self.config, figures, Recorded.of_state(st), now=time.time(), force=force)
        session.decision = decision
        return Plan(figures, decision), cycle

    async def _flush_step(
        self, path: str, transcript: Transcript, decision: Decision, claim: SessionClaim | None, cycle: str
    ) -> bool:
        """The memory flush, recorded at once (in the state and in the claim every process reads); whether
        it did anything."""
        flushed = await self.flush(path, transcript, decision.budget)
        self.session_state(path).mark_flushed(time.time())
        if claim is not None:
            try:
                claim.mark_flushed(cycle)
            except OSError as exc:  # the flush is done; only a second runner may repeat it
                log.warning("session=%s cannot record the flush: %s", path, exc)
        return flushed

    async def _compact_step(self, path: str, plan: Plan, transcript: Transcript, *, force: bool) -> JobResult:
        from compactd.sources.files.job import compact_file

        result = await compact_file(
            path,
            self.config,
            client=self.host.client(),
            force=force,
            plan=plan,  # the decision made on this reading: the job takes its budget and route
            transcript=transcript,  # the reading decided on: the job and the commit reuse it
        )
        engine = result.engine
        if engine is not None and engine.calls:
            self.metrics.observe_summarizer_latency(engine.latency_s)
        return result

    def _record_step(
        self,
        session: FileSession,
        decision: Decision,
        result: JobResult,
        ledger: SessionLedger | None = None,
        *,
        flushed: bool = False,
    ) -> Outcome:
        """What a compaction job did, into the session's state, the metrics and the log; the session read
        afresh (the file may have been rewritten), and backed off if that did not bring it under budget."""
        from compactd.sources.files.job import JobStatus

        path = session.path
        st = self.session_state(path)
        engine = result.engine
        detail: dict[str, Any] = {
            **decision.figures(),
            "route": result.route,
            "flush": flushed,
            "level": engine.level if engine else None,
            "mode": result.mode,
            "reason": result.reason,
        }
        now = time.time()
        seeded = seed_tracker(session.tracker, result.successor, ledger)  # else read afresh below
        if result.committed:
            self.metrics.record_compaction(result.route, engine.level if engine else "none")
            if result.archive is not None:
                self.host.archived()
            ids = engine.identifiers if engine else None
            st.mark_compacted(
                now,
                level=engine.level if engine else None,
                route=result.route,
                identifiers_total=ids.total if ids else None,
                identifiers_kept_by_model=ids.kept_by_model if ids else None,
                identifiers_in_summary=ids.in_summary if ids else None,
                fill=result.fill.as_json() if result.fill else None,
                size=committed_size(path, result.successor),
                fallback_error=engine.model_error if engine else None,
            )
            if engine is not None and engine.model_error is not None:
                self.metrics.record_digest_fallback()
            if engine is not None:
                self.metrics.record_span(engine.span_messages, engine.prepared)
            if ids is not None:
                self.metrics.record_retention(
                    path,
                    session_id=st.session_id,
                    total=ids.total,
                    kept_by_model=ids.kept_by_model,
                    in_summary=ids.in_summary,
                )
        self.refresh(path, seeded=seeded)
        failed = False
        if result.committed:
            after = session.decision
            if session.due and after is not None and after.compact:
                self._back_off(st, now, "still over its threshold after compaction", "compact")
                detail["reason"] = "still over threshold after compaction; backing off"
            else:
                Backoff.record_success(st)
                self._reported.pop(path, None)
        elif result.status is JobStatus.NOTHING_TO_COMPACT:
            session.due = False
        elif result.status is JobStatus.TURN_IN_FLIGHT:
            pass  # still due; the ledger (refreshed above) holds it back until the turn ends
        elif result.status is JobStatus.AGENT_AT_WORK:
            self._retry_later(st, result.reason or "busy")  # an agent is at work: not a failure, just not now
        else:
            failed = True
            where = {JobStatus.UNUSABLE: "read", JobStatus.MODEL_FAILED: "summarize"}.get(
                result.status, "commit"
            )
            self.metrics.record_failure(where)
            delay = self._back_off(st, now, result.reason or "not committed", where)
            detail = {"stage": where, **detail, "retry_in": round(delay)}
        log.info(
            "session=%s action=%s committed=%s level=%s reason=%s",
            path,
            result.route,
            result.committed,
            detail["level"],
            result.reason,
        )
        if failed:
            return Outcome(path, Action.FAILED, False, detail)
        return Outcome(path, Action(result.route), result.committed, detail)

    def _retry_later(self, st: SessionState, reason: str) -> None:
        """Look again after a short wait without counting a failure (a live agent holds or writes the file)."""
        st.retry_later(time.time(), self.config.sessions.idle_seconds, reason)

    def _back_off(
        self, st: SessionState, now: float, reason: str, stage: str, exc: BaseException | None = None
    ) -> float:
        """Count a failure of this session and back it off; logged once while the reason stays the same
        (an exception that is not an OS error is a bug: its one log line carries the traceback)."""
        s = self.config.service
        delay = Backoff.record_failure(
            st, now, s.backoff_base_seconds, s.backoff_max_seconds, error=reason, stage=stage
        )
        st.next_action = f"retry in {delay:.0f}s"
        self.host.changed()
        bug = exc is not None and not isinstance(exc, OSError)
        self._report_once(
            st.path,
            f"{stage}: {reason}",
            logging.ERROR if bug else logging.WARNING,
            f"action=failed stage={stage} reason={reason} retry_in={delay:.0f}s",
            exc if bug else None,
        )
        return delay

    def fail(self, path: str, stage: str, exc: BaseException) -> float:
        """An exception at the boundary of one session: counted, recorded in its state with a back-off and
        logged once with the path and the reason; the service goes on with every other session."""
        self.metrics.record_failure(stage)
        return self._back_off(self.session_state(path), time.time(), describe_error(exc), stage, exc)

    def _report_once(
        self, path: str, key: str, level: int, text: str, exc: BaseException | None = None
    ) -> None:
        """Log ``session=<path> <text>`` at ``level``, or at debug when ``key`` was the last thing logged for
        ``path`` (a session failing the same way on every rescan is not a new event)."""
        if self._reported.get(path) == key:
            log.debug("session=%s %s", path, text)
            return
        self._reported[path] = key
        log.log(level, "session=%s %s", path, text, exc_info=exc)

    async def flush(self, path: str, transcript: Transcript, budget: Budget) -> bool:
        """Hooks (fire-and-forget) and the built-in memory extraction; neither can block the compaction.
        Whether either ran (``job.flush_runs`` says beforehand, for a dry run)."""
        from compactd.memory import flush_span, start_hooks
        from compactd.summarize.engine import CompactionEngine
        from compactd.summarize.settings import engine_settings
        from compactd.workspace import trusted_workspace

        workspace = trusted_workspace(
            self.config, path, transcript.header
        )  # None when its cwd is not trusted
        await start_hooks(
            self.config,
            self.metrics,
            self.host.task_group,
            session_file=path,
            session_id=transcript.session_id,
            tokens=budget.estimated_with_margin,
            context_window=budget.context_window,
            flush_threshold=budget.flush_threshold,
            compact_threshold=budget.compact_threshold,
            memory_dir=workspace.memory_dir if workspace else None,
        )
        hooks = bool(self.config.memory_flush.hooks)
        if workspace is None:
            return hooks
        engine = CompactionEngine(engine_settings(self.config))
        plan = await offload.run_sync(lambda: engine.plan(transcript))  # a walk of the whole branch
        if plan is None:
            return hooks
        await flush_span(
            self.config,
            self.metrics,
            self.host.client(),
            plan.to_summarize,
            workspace=workspace,
            session_file=path,
            session_id=transcript.session_id,
        )
        return True

    # --- loops ----------------------------------------------------------------------------------------------
    async def watch_new_roots(self, tg: anyio.abc.TaskGroup) -> list[str]:
        """Start a watcher for every root not watched yet and return (those roots) once each is in place, so
        that a scan of them made now misses nothing: what changes after it is reported by its watcher."""
        import anyio

        started: list[tuple[str, anyio.Event]] = []
        for root in self.root_paths():
            if root not in self.watchers:
                stop, armed = anyio.Event(), anyio.Event()
                self.watchers[root] = stop
                tg.start_soon(self._watch_one, root, stop, armed)
                started.append((root, armed))
        for root, armed in started:
            await armed.wait()
            log.info("root=%s action=watching", root)
        return [root for root, _ in started]

    async def watch_roots(self, tg: anyio.abc.TaskGroup) -> None:
        """Watch every root that appears (the start-up's are watched before :meth:`discover` reads them, so
        each is scanned once); rescan periodically."""
        import anyio  # here, as in every loop: ``once`` and ``inspect`` follow nothing and never load it

        self.rescan_due = anyio.Event()
        while not self.stopping:
            for root in await self.watch_new_roots(tg):
                for path in scan_root(root):  # a root that appeared since the last scan
                    self.refresh(path)
            with anyio.move_on_after(self.config.service.rescan_seconds):
                await self.rescan_due.wait()
            self.rescan_due = anyio.Event()
            self.rescan()
            self.redecide = False
            if time.monotonic() - self.last_sweep >= RETENTION_SWEEP_SECONDS:
                await anyio.to_thread.run_sync(self.sweep_archives)

    async def _watch_one(self, root: str, stop: anyio.Event, armed: anyio.Event) -> None:
        """Follow one root's events; ``armed`` is set once its watch is in place (or it failed to start)."""
        import anyio.from_thread

        s = self.config.service

        def on_armed() -> None:  # called in watchfiles' thread
            anyio.from_thread.run_sync(armed.set)

        try:
            async for paths in watch_root(
                root,
                stop,
                debounce_ms=s.debounce_ms,
                step_ms=s.step_ms,
                rust_timeout_ms=WATCH_HEARTBEAT_MS,
                armed=on_armed,
            ):
                self.heartbeat = time.monotonic()
                for path in paths:
                    self.refresh(path)
        except Exception as exc:  # e.g. watchfiles cannot decode a file name that is not UTF-8
            log.warning(
                "root=%s action=watcher_stopped error=%s (restarted at the next rescan, which also catches "
                "what it missed)",
                root,
                describe_error(exc),
            )
        finally:
            armed.set()  # a watcher that never started must not hold up the start-up
        self.watchers.pop(root, None)

    def discover(self, *, seal: bool = False) -> set[str]:
        """Every transcript under every root, reconciled with the file system and decided (the read at start
        and the periodic rescan); ``seal``: an idle file whose last line is torn is sealed, so the agent's next
        append is not swallowed by it. Returns the paths seen."""
        return {path for path, _ in self._discovering(seal=seal)}

    def _discovering(self, *, seal: bool) -> Iterator[tuple[str, Decision | None]]:
        """:meth:`discover`, each path yielded once it is refreshed (and sealed), with the decision its refresh
        made (:meth:`refresh`), so that a dry run can act on it before the next one is read."""
        now = time.time()
        self._agent_dirs = {}
        self._dirs.begin_pass()
        try:
            with collector_paused():  # a few objects per session, for every session
                for root in self.root_paths():
                    for path in scan_root(root):
                        decision = self.refresh(path)
                        session = self.sessions.get(path)
                        if seal and session is not None and session.tracker.cursor.partial:
                            decision = None  # sealing may read it again
                            try:
                                self.seal(session, now)
                            except Exception as exc:
                                self.fail(path, "seal", exc)
                        yield path, decision
        finally:
            self._agent_dirs = None
            self._dirs.end_pass()

    # --- the Source protocol ------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Under the instance lock, before any transcript is read: finish or roll back what a killed compactd
        left (its late lines belong in the files read next), sweep the archives, and load what the state
        directory recorded of every session."""
        self.recover()
        with collector_paused():  # a record per session, and a snapshot
            self.state = self.store.load_sessions()
            self.resume.fingerprint = config_fingerprint(self.config)
            self.resume.load()

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Watch every root, then read and decide every transcript under them: a file changed during the read
        is reported by its watcher."""
        self.serving = True
        self._prepare(self.config)
        await self.watch_new_roots(tg)
        if not self.root_paths():
            log.warning(
                "no sessions directory matches sessions.roots %s: no transcript file is served until one "
                "appears (OpenClaw 2026.9+ databases are followed apart); see `compactd doctor`",
                list(self.config.sessions.roots),
            )
        self.discover()

    async def follow(self, tg: anyio.abc.TaskGroup) -> None:
        await self.watch_roots(tg)

    async def scan(self, *, dry_run: bool, force: bool = False) -> None:
        """``once``: every transcript read and decided; torn idle lines sealed unless a dry run.

        A dry run acts (``force``: as ``once --force`` asks) on each session it is to act on right after
        reading it, from that reading, and keeps only the outcome (which :meth:`act` then returns): one
        reading held at a time instead of every due session's until the pass ends (the memory and page faults
        of about the whole corpus). Acting on a session changes nothing another session's read or action
        depends on, so the outcomes are those of acting after the pass."""
        self.keep_readings = dry_run
        if not dry_run:
            self.discover(seal=True)
            return
        for path, decided in self._discovering(seal=False):
            session = self.sessions.get(path)
            if session is not None and self._is_ready(session, time.time(), force=True):
                self.acted[path] = await self.act_claimed(
                    session, None, force=force, dry_run=True, decided=decided
                )

    def ready(self, now: float, *, force: bool = False) -> list[FileSession]:
        """Due sessions that may be acted on now (idle and not mid-turn, not backing off, not in flight),
        fullest first. Time alone changes the answer, so the recorded decision says from when it is ready
        (``ready_at``) and is not made again; ``force`` (``once --force``) asks :func:`decide` to skip the
        idle and mid-turn rule. A session a dry run's scan acted on is ready (its outcome is taken)."""
        ready = [
            s for s in self.sessions.values() if s.path in self.acted or self._is_ready(s, now, force=force)
        ]
        return sorted(ready, key=lambda s: -(self.session_state(s.path).percent_of_budget() or 0.0))

    def _is_ready(self, session: FileSession, now: float, *, force: bool) -> bool:
        if not session.due or session.in_flight:
            return False
        if force:
            # ``decide(force=True).ready``: the time rule skipped, only a back-off holds a due session back (no
            # decision made again for it).
            return session.tracker.ledger is not None and not self.session_state(session.path).in_backoff(now)
        return session.ready_at <= now and not self.session_state(session.path).in_backoff(now)

    def next_wake(self, now: float) -> float:
        """Seconds until a due session may become ready (idle, its turn abandoned, or out of back-off); long
        when none is due. A turn that ends is an append, which wakes the worker at once."""
        waits = [
            max(s.ready_at - now, self.session_state(s.path).backoff_remaining(now))
            for s in self.sessions.values()
            if s.due and not s.in_flight
        ]
        return max(0.05, min(waits)) if waits else IDLE_WAKE_SECONDS

    def unreadable(self) -> list[Outcome]:
        return []

    def states(self) -> dict[str, SessionState]:
        return {path: self.session_state(path) for path in self.sessions}

    def annotate(self, status: dict[str, Any]) -> None:
        for row in status.get("sessions", []):
            if row.get("path") in self.sessions:
                row.setdefault("source", "file")

    def save(self) -> None:
        """sessions.json and the resume snapshots (cursors and ledgers) for the next start."""
        self.store.save_sessions(self.state)
        self.resume.save(self.sessions)
        p = self.preparer
        if p is not None:
            self.metrics.set_preparer(p.prepared, p.dropped, p.cpu_seconds)
        else:  # never started: what a fresh preparer counts
            self.metrics.set_preparer(0, 0, 0.0)

    def stop(self) -> None:
        self.stopping = True
        if self.preparer is not None:
            self.preparer.stop()
        for stop in self.watchers.values():
            stop.set()
        self.wakeup.set()

    def waiting(self, session: FileSession, now: float) -> Outcome:
        """What ``once`` reports of a session it does not act on now: failed to read, skipped, backing off,
        waiting for its agent (or its turn, or quiet), or fits."""
        path = session.path
        st = self.session_state(path)
        if st.error_stage == "read" and st.last_error:
            detail = {"stage": "read", "reason": st.last_error, "retry_in": round(st.backoff_remaining(now))}
            return Outcome(path, Action.FAILED, detail=detail)
        if st.skipped:
            return Outcome(path, Action.SKIPPED, detail={"reason": st.skipped})
        if session.due and st.in_backoff(now) and st.last_error:
            detail = {
                "retry_in": round(st.backoff_remaining(now)),
                "stage": st.error_stage,
                "reason": st.last_error,
            }
            return Outcome(path, Action.BACKOFF, detail=detail)
        if session.due and st.in_backoff(now):  # an agent held the lock or was writing: not a failure
            return Outcome(
                path,
                Action.WAIT,
                detail={"reason": "an agent was at work", "retry_in": round(st.backoff_remaining(now))},
            )
        if session.due:  # why it waits now (the time rule): decided at ``now``, for this alone
            decision = self.decide(session, now)
            reason = decision.wait if decision is not None else None
            return Outcome(path, Action.WAIT, detail={"reason": reason or "not idle yet"})
        return Outcome(
            path, Action.FITS, detail={"tokens": st.planning_tokens, "threshold": st.compact_threshold}
        )

    def recover(self) -> None:
        """Finish or roll back what a killed compactd left half done, drop stale temp files, and apply the
        archive retention to every session (those never compacted again age out too)."""
        from compactd.commit.journal import recover

        self.store.remove_stale_temps()
        recover(self.config.state_dir)
        self.sweep_archives()

    def sweep_archives(self) -> None:
        from compactd.commit.retention import sweep_archives

        archives = self.config.compaction.archives
        self.last_sweep = time.monotonic()
        removed = sweep_archives(
            self.config.state_dir,
            keep_count=archives.keep_count,
            keep_days=archives.keep_days,
            now=time.time(),
        )
        if removed:
            log.info("action=retention removed=%d archive(s)", len(removed))
        if self.preparer is not None:
            self.preparer.sweep()  # and the prepared stores of transcripts that are gone


def committed_size(path: str, successor: Successor | None) -> int | None:
    """The file's bytes just after a commit: the successor's, else the file's now (what the agent has appended
    since the commit then counts as room already used, which only makes the next compaction come sooner)."""
    if successor is not None:
        return successor.size
    try:
        return os.lstat(path).st_size
    except OSError:
        return None


def seed_tracker(
    tracker: SessionTracker, successor: Successor | None, ledger: SessionLedger | None = None
) -> bool:
    """After a job: the tracker takes the committed file as the commit's check parsed it (no read of the file
    just written; ``ledger``: its ledger, built already). Without one (nothing committed, or other lines went
    in too), or when the file is no longer exactly that (a new inode, bytes appended since), the cursor is
    reset and the next refresh reads it."""
    tracker.cursor.reset()
    if successor is None:
        return False
    try:
        st = os.lstat(tracker.path)
    except OSError:
        return False
    if st.st_ino != successor.inode or st.st_size != successor.size:
        return False
    cursor = tracker.cursor
    cursor.dev, cursor.ino = st.st_dev, st.st_ino
    cursor.offset, cursor.size, cursor.mtime = successor.size, st.st_size, st.st_mtime
    tracker.ledger = ledger if ledger is not None else SessionLedger.from_transcript(successor.transcript)
    return True
