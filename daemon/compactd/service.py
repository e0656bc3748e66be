"""The long-running process: watch → tail → ledger → decide → (flush) → summarize → commit, and ``once``.

Lifecycle lives here and only here (uvicorn's shape): start-up recovery, the watchers, the scheduler, the
status writer, signals and sd_notify. Shutdown is an injectable trigger (hypercorn's ``shutdown_trigger``).
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import signal
import stat
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from compactd import __version__, offload
from compactd._worker import work
from compactd.config import Config, ConfigError, file_kind, load_config
from compactd.decision import Decision, Figures, Recorded, blocked_reason, decide
from compactd.heap import limit_malloc_arenas, release_free_memory
from compactd.ledger import SessionLedger
from compactd.openclaw import refusal as openclaw_refusal
from compactd.planning import figures_of, route_cap, tool_result_cap
from compactd.progress import ActivityHandler
from compactd.roots import IntactDirs, is_session_path
from compactd.state import Backoff, SessionState, describe_error
from compactd.tail import Change
from compactd.timestamps import iso_seconds
from compactd.tracker import UNTOUCHED, SessionTracker
from compactd.transcript.reader import read_transcript
from compactd.watch import expand_roots, scan_root, watch_root

if TYPE_CHECKING:
    from compactd.codex import CodexSource
    from compactd.commit.claim import SessionClaim
    from compactd.commit.commit import Successor
    from compactd.commit.locks import InstanceLock
    from compactd.job import JobResult
    from compactd.openclaw import OpenClawSource
    from compactd.transcript.reader import Transcript

__all__ = [
    "IDLE_WAKE_SECONDS",
    "Outcome",
    "Service",
    "Session",
    "run_once",
    "run_service",
]

log = logging.getLogger(__name__)

ShutdownTrigger = Callable[[], Awaitable[None]]
# A worker with nothing due sleeps this long at most (new work wakes it at once).
IDLE_WAKE_SECONDS = 60.0
# Watchers yield an empty batch this often when nothing happens: the heartbeat the watchdog checks. Stopping
# does not wait for it (the stop event is seen within one step).
WATCH_HEARTBEAT_MS = 5_000
# status.json is rewritten at least this often even when nothing changed (its updated_at is a heartbeat).
STATE_HEARTBEAT_SECONDS = 60.0
# Archive retention runs over every session this often (and after each rotation, for that session).
RETENTION_SWEEP_SECONDS = 3600.0
# The archives' disk use (a read of the journal and a stat per archive) is measured for the metrics this often.
ARCHIVE_MEASURE_SECONDS = 60.0
# /healthz: the loop ticks every LOOP_TICK_SECONDS; unhealthy when it has not for LOOP_STALE_SECONDS (a job
# holding the loop), or when the watchers' heartbeat (an empty batch every WATCH_HEARTBEAT_MS) is this stale.
LOOP_TICK_SECONDS = 1.0
LOOP_STALE_SECONDS = 10.0
WATCH_STALE_SECONDS = 3 * WATCH_HEARTBEAT_MS / 1000


def _signature(path: str) -> tuple[int, ...] | None:
    """What changes when a file is replaced, written, truncated or chmod-ed (None: it cannot be stat-ed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


# ``once`` exits with this when a ``run`` holds the state directory (``run`` itself, when another runs).
EXIT_ALREADY_RUNNING = 3
# ``run`` started while a ``once`` works looks again this often until it is done.
ONCE_POLL_SECONDS = 0.5


@dataclass(slots=True)
class Session:
    tracker: SessionTracker
    in_flight: bool = False
    due: bool = False  # the last decision found something to do, and no action has settled it since
    decision: Decision | None = None  # the last one recorded (exact once a full read made it)

    @property
    def path(self) -> str:
        return self.tracker.path


@dataclass
class Outcome:
    path: str
    action: str
    committed: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """This session needs attention: it failed now, or it is backing off after a failure."""
        return self.action in ("failed", "backoff")

    def line(self) -> str:
        """One line whatever the path (a file or an OpenClaw key) or a reason holds."""
        from compactd.display import display_name

        extra = " ".join(f"{k}={v}" for k, v in self.detail.items() if v is not None)
        return display_name(f"{self.action:<10} {self.path} {extra}".rstrip())


class Service:
    def __init__(
        self, config: Config, *, config_path: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        from compactd.resume import SnapshotStore
        from compactd.state import Metrics, StateStore
        from compactd.systemd import Notifier

        self.config = config
        self.config_path = config_path
        self.env = dict(os.environ if env is None else env)
        self.sessions: dict[str, Session] = {}
        self.roots: dict[str, anyio.Event] = {}
        self.explicit_roots: list[str] | None = None
        self.refused: set[str] = set()  # paths refused as symlinks (logged once)
        self.store = StateStore(config.state_dir)
        self.resume = SnapshotStore(config.state_dir)  # cursors and ledgers saved for the next start
        self.state: dict[str, SessionState] = {}
        self.metrics = Metrics(session_series=config.service.metrics_top_sessions)
        self.notifier = Notifier(self.env)
        self.limiter = anyio.CapacityLimiter(config.summarizer.max_concurrency)
        self.wakeup = anyio.Event()
        self.rescan_due = anyio.Event()
        self.stopping = False
        self.started_at = time.time()
        self.heartbeat = time.monotonic()
        self.loop_tick = time.monotonic()
        self.archives_measured = -ARCHIVE_MEASURE_SECONDS  # the archives' disk use, for the metrics
        self.activity: dict[str, tuple[str, float]] = {}  # path -> (stage in progress, since when)
        self.activity_progress: dict[str, str] = {}  # path -> its model calls so far ("call 3 of ~19, ...")
        self.predicted: dict[str, tuple[int, str]] = {}  # path -> (file size, the route its job ends with)
        self.predicting: set[str] = set()
        self.activity_changed = False
        self.dirty = True  # something changed since state files were last written
        self.last_written = 0.0
        self.last_sweep = time.monotonic()
        self.task_group: anyio.abc.TaskGroup | None = None
        self._client: Any = None
        # What was last logged per path (a failure, an ignored file), so a repeat is not logged again.
        self._reported: dict[str, str] = {}
        self._state_write_error: str | None = None
        self._unreadable: dict[str, tuple[int, ...] | None] = {}  # path -> its stat when reading it failed
        self._dirs = IntactDirs()  # realpath once per directory, not once per file
        # During one discovery pass: which session directories belong to a SQLite-backed agent (acting on a
        # file checks again, so a database that appears after the pass is still seen in time).
        self._agent_dirs: dict[str, str | None] | None = None

    # The other session sources are built on first use: ``once --dry-run`` reads and decides the files alone,
    # and their modules (SQLite, the gateway, the rollouts) cost it a tenth of its time when they were loaded.
    @functools.cached_property
    def openclaw(self) -> OpenClawSource:
        """The second session source: OpenClaw 2026.9+ agents, followed in their databases."""
        from compactd.openclaw import OpenClawSource

        return OpenClawSource(
            self.config, self.env, client=self.client, changed=self._mark_dirty, metrics=self.metrics
        )

    @functools.cached_property
    def codex(self) -> CodexSource:
        """The third: Codex CLI rollouts under $CODEX_HOME."""
        from compactd.codex import CodexSource

        return CodexSource(
            self.config, self.env, client=self.client, changed=self._mark_dirty, metrics=self.metrics
        )

    def _mark_dirty(self) -> None:
        self.dirty = True

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

    def refresh(self, path: str, *, seeded: bool = False) -> None:
        """Reconcile one path with the file system (only appended bytes are read), then decide if it is due.

        ``seeded``: the tracker was just given the file's new reading (:meth:`seed`), so it is decided on again
        even if no byte changed since.

        The session boundary for reading: whatever this one file raises is recorded in its state (with a
        back-off, during which it is read again only if its inode, size, times or mode change) and never
        reaches the caller, so the start-up read, a watcher batch or a rescan goes on with every other session.
        """
        if self.config.sessions.is_ignored(path):
            return
        st = self.state.get(path)
        if st is not None and st.error_stage == "read" and st.in_backoff(time.time()):
            failed_on = self._unreadable.get(path)
            if failed_on is not None and failed_on == _signature(path):
                if path not in self.sessions:
                    self.sessions[path] = Session(SessionTracker(path))
                return
        try:
            self._refresh(path, seeded=seeded)
        except Exception as exc:
            session = self.sessions.get(path)
            if session is not None:  # forget what was half read: the next attempt reads the file afresh
                session.due = False
                session.tracker.cursor.reset()
                session.tracker.ledger = None
            self._unreadable[path] = _signature(path)
            self.fail(path, "read", exc)
        else:
            self._unreadable.pop(path, None)

    def _refresh(self, path: str, *, seeded: bool = False) -> None:
        sqlite_refusal = openclaw_refusal(path, self._agent_dirs)
        if sqlite_refusal is not None:  # never a session to act on (compactd writes nothing there)
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            self._report_once(path, "sqlite-agent", logging.INFO, f"action=ignored reason={sqlite_refusal}")
            return
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
            return
        if info is not None and not self._dirs.is_session_path(path, info):
            # Swapped for a symlink, or its directory was: what it leads to is not under a root.
            if self.sessions.pop(path, None) is not None or path not in self.refused:
                log.warning(
                    "session=%s action=refused reason=not a regular file reached without symlinks", path
                )
            self.refused.add(path)
            self.metrics.forget_session(path)
            return
        self.refused.discard(path)
        session = self.sessions.get(path)
        if session is None:
            session = self.sessions[path] = Session(
                SessionTracker(path, resume=self.resume.take(path), cap_for=route_cap(self.config))
            )
        update = session.tracker.refresh(info)
        if update.change is Change.UNCHANGED and path in self.state and not seeded:
            return  # nothing new: the rescan's common case, kept cheap
        self.dirty = True
        if update.change is Change.SKIPPED:  # kept (its cursor remembers it), never read whole nor acted on
            session.due = False
            session.decision = None
            self.metrics.forget_session(path)
            st = self.session_state(path)
            if st.skipped != update.reason:
                st.skipped = update.reason
                st.show_next(None, time.time())
                log.warning("session=%s action=skipped reason=%s", path, update.reason)
            return
        ledger = session.tracker.ledger
        if ledger is None:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            return
        if update.reason == UNTOUCHED and not seeded and self._keeps_decision(path):
            window = self.state[path].window
            self.metrics.set_session(
                path, session_id=ledger.session_id, tokens=ledger.planning_tokens, window=window
            )
            self.resume.mark_decided(path)
            return
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

    def figures(self, session: Session) -> Figures | None:
        """The ledger's figures of a session (None: not a transcript), as :func:`decide` takes them."""
        ledger = session.tracker.ledger
        if ledger is None:
            return None
        cursor = session.tracker.cursor
        return Figures.of_ledger(ledger, size=cursor.size, mtime=cursor.mtime)

    def decide(self, session: Session, now: float, *, force: bool = False) -> Decision | None:
        """:func:`compactd.decision.decide` on what the tracker and the state directory know of a session."""
        figures = self.figures(session)
        if figures is None:
            return None
        recorded = Recorded.of_state(self.session_state(session.path))
        return decide(self.config, figures, recorded, now=now, force=force)

    def _exact_decision(self, session: Session, provisional: Decision) -> Decision:
        """The decision with the route's reducible tool-result characters: from the ledger when it counted
        them at this session's cap, else from a full read; the provisional one when the read cannot say."""
        ledger = session.tracker.ledger
        known = ledger.reducible if ledger is not None else None
        if (
            ledger is not None
            and known is not None
            and known[0] == tool_result_cap(self.config, ledger.provider, ledger.model)
        ):
            cursor = session.tracker.cursor
            figures = Figures.of_ledger(ledger, size=cursor.size, mtime=cursor.mtime, reducible=known[1])
            return decide(
                self.config, figures, Recorded.of_state(self.session_state(session.path)), now=time.time()
            )
        try:
            transcript = read_transcript(session.path, follow_symlinks=False)
        except OSError as exc:
            log.debug("session=%s cannot read it to decide its route: %s", session.path, exc)
            return provisional
        if blocked_reason(transcript) is not None:
            return provisional  # acting on it says why
        figures = figures_of(self.config, transcript, mtime=session.tracker.cursor.mtime)
        recorded = Recorded.of_state(self.session_state(session.path))
        return decide(self.config, figures, recorded, now=time.time())

    def record_decision(self, session: Session, decision: Decision) -> None:
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
        self.resume.mark_decided(path)
        if decision.due:
            self.wakeup.set()

    def _predicted_next(self, session: Session, decision: Decision) -> str | None:
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
        if self.task_group is not None and session.path not in self.predicting and not session.in_flight:
            self.predicting.add(session.path)
            self.task_group.start_soon(self._predict, session, decision, size)
        return action

    async def _predict(self, session: Session, decision: Decision, size: int) -> None:
        from compactd.job import predict_route

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
            self.dirty = True

    def rescan(self, *, seal: bool = True) -> None:
        """The safety net for dropped events: :meth:`discover` again (sealing torn idle lines unless
        ``seal=False``), and the sessions whose files are gone forgotten."""
        seen = self.discover(seal=seal)
        for path in [p for p in self.sessions if p not in seen]:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)

    def seal(self, session: Session, now: float) -> None:
        from compactd.commit.seal import seal_torn_line

        idle = self.config.sessions.idle_seconds
        if now - session.tracker.cursor.mtime >= idle and seal_torn_line(session.path, idle):
            log.warning("session=%s action=sealed_torn_line (a writer stopped mid-line)", session.path)
            self.refresh(session.path)

    # --- acting ---------------------------------------------------------------------------------------------
    def ready_sessions(self, now: float, *, force: bool = False) -> list[Session]:
        """Due sessions that may be acted on now (idle and not mid-turn, not backing off, not in flight),
        fullest first."""
        ready = []
        for session in self.sessions.values():
            if session.due and not session.in_flight:
                decision = self.decide(session, now, force=force)
                if decision is not None and decision.ready:
                    ready.append(session)
        return sorted(ready, key=lambda s: -(self.session_state(s.path).percent_of_budget() or 0.0))

    async def act(self, session: Session, *, force: bool = False, dry_run: bool = False) -> Outcome:
        """:meth:`act_claimed` under the session's claim, which every compactd process of this state directory
        takes (``run``, ``once``, ``compact``): one flush and one commit per cycle, whoever runs it."""
        from compactd.commit.claim import ClaimBusy, SessionClaim

        if dry_run:
            return await self.act_claimed(session, None, force=force, dry_run=True)
        claim = SessionClaim(self.config.state_dir, session.path)
        try:
            claim.acquire()
        except ClaimBusy as exc:
            self._retry_later(self.session_state(session.path), str(exc))
            log.info("session=%s action=busy reason=%s", session.path, exc)
            return Outcome(session.path, "busy", detail={"reason": str(exc)})
        except OSError as exc:  # the state dir is unwritable: this session fails, the others go on
            self.fail(session.path, "claim", exc)
            return Outcome(session.path, "failed", detail={"stage": "claim", "reason": describe_error(exc)})
        try:
            return await self.act_claimed(session, claim, force=force)
        finally:
            claim.release()

    def _at(self, path: str, stage: str) -> str:
        """Note the stage a session's action is at, for ``status`` (``--watch`` shows it live): status.json
        alone is rewritten for it (the snapshots and metrics wait for the action's end)."""
        self.activity[path] = (stage, time.time())
        self.activity_progress.pop(path, None)
        self.activity_changed = True
        return stage

    def note_progress(self, path: str, text: str) -> None:
        """A model call of ``path``'s action started or ended (from the job's thread: it only stores)."""
        self.activity_progress[path] = text
        self.activity_changed = True

    async def act_claimed(
        self, session: Session, claim: SessionClaim | None, *, force: bool = False, dry_run: bool = False
    ) -> Outcome:
        """Read once → decide → flush → compact → record, for one session. Never raises: this is the session
        boundary, and a failure at any stage is recorded in its state with a back-off and returned as
        ``failed``."""
        path = session.path
        st = self.session_state(path)
        session.in_flight = True
        stage = self._at(path, "read")  # where an exception stopped this session, for its state and the log
        try:
            if dry_run:
                unchanged = self._unchanged_exact_decision(session, force=force)
                if unchanged is not None and not unchanged.due:  # decided from the ledger on these bytes
                    detail = {**unchanged.figures(), "flush": False, "route": unchanged.route}
                    return self._refused(session) or Outcome(path, unchanged.action, detail=detail)
            read = await self._read_step(session)
            if isinstance(read, Outcome):
                return read
            stage = self._at(path, "plan")
            decision, cycle, figures = await self._decide_step(session, read, claim, force=force)
            if dry_run:
                return await self._predicted(path, read, decision, figures)
            flushed = False
            if decision.flush:
                stage = self._at(path, "flush")
                flushed = await self._flush_step(path, read, decision, claim, cycle)
            if not decision.compact:
                session.due = False
                if decision.skip is not None:
                    st.skipped = decision.skip
                    return Outcome(path, "skipped", detail={"reason": decision.skip})
                return Outcome(path, decision.action, detail={**decision.figures(), "flush": flushed})
            stage = self._at(path, "compact")
            result = await self._compact_step(path, decision, read, force=force)
            stage = self._at(path, "commit")
            successor = result.successor
            # The committed file's ledger, from the commit's own reading of it: a pass over every entry.
            ledger = None
            if successor is not None:
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
                "failed",
                detail={"stage": stage, "reason": describe_error(exc), "retry_in": round(delay)},
            )
        finally:
            session.in_flight = False
            self.activity.pop(path, None)
            self.activity_progress.pop(path, None)
            self.dirty = True

    async def _read_step(self, session: Session) -> Transcript | Outcome:
        """The one read the decision and the action are made from; an Outcome when there is nothing to act on
        (an agent holds the lock, or the file is not one compactd may touch or read as pi does)."""
        path = session.path
        st = self.session_state(path)
        refused = self._refused(session)
        if refused is not None:
            return refused
        transcript = await offload.run_sync(lambda: read_transcript(path, follow_symlinks=False))
        blocked = blocked_reason(transcript)
        if blocked is not None:
            session.due = False
            st.skipped = blocked
            return Outcome(path, "skipped", detail={"reason": blocked})
        return transcript

    def _refused(self, session: Session) -> Outcome | None:
        """An Outcome when the file is not to be touched now: an agent holds its lock, it is not a regular file
        reached without symlinks, or it lies under a SQLite-backed OpenClaw agent."""
        from compactd.commit.locks import lock_holder

        path = session.path
        st = self.session_state(path)
        holder = lock_holder(path)
        if holder is not None:
            reason = f"{holder} holds the session lock"
            self._retry_later(st, reason)
            return Outcome(path, "busy", detail={"reason": reason})
        if not is_session_path(path):
            session.due = False
            st.skipped = "not a regular file reached without symlinks"
            return Outcome(path, "skipped", detail={"reason": st.skipped})
        sqlite_refusal = openclaw_refusal(path)  # its database may have appeared since the last read
        if sqlite_refusal is not None:
            session.due = False
            st.skipped = sqlite_refusal
            return Outcome(path, "skipped", detail={"reason": st.skipped})
        return None

    async def _predicted(
        self, path: str, transcript: Transcript, decision: Decision, figures: Figures
    ) -> Outcome:
        """A dry run's outcome: the route the job would end with and whether the flush would do anything,
        worked out as the real run does them (``job.predict_route``, ``job.flush_runs``), no model called."""
        from compactd.job import flush_runs, predict_route

        if decision.skip is not None:
            return Outcome(path, "skipped", detail={"reason": decision.skip})
        config = self.config
        flush = decision.flush and await offload.run_sync(lambda: flush_runs(config, path, transcript))
        route = decision.route
        if decision.compact:
            route = await predict_route(path, config, transcript, decision.job_route, figures=figures)
        action = route if decision.compact else decision.action
        return Outcome(path, action, detail={**decision.figures(), "flush": flush, "route": route})

    def _unchanged_exact_decision(self, session: Session, *, force: bool) -> Decision | None:
        """For a dry run: the ledger's decision when it is exact (the route's reducible characters counted at
        this session's cap) and the file is still the bytes the ledger read; None means read it."""
        ledger, cursor = session.tracker.ledger, session.tracker.cursor
        known = ledger.reducible if ledger is not None else None
        if (
            ledger is None
            or known is None
            or known[0] != tool_result_cap(self.config, ledger.provider, ledger.model)
        ):
            return None
        try:
            info = os.lstat(session.path)
        except OSError:
            return None
        if (info.st_ino, info.st_size, info.st_mtime) != (cursor.ino, cursor.offset, cursor.mtime):
            return None
        figures = Figures.of_ledger(ledger, size=cursor.size, mtime=cursor.mtime, reducible=known[1])
        recorded = Recorded.of_state(self.session_state(session.path))
        return decide(self.config, figures, recorded, now=time.time(), force=force)

    async def _decide_step(
        self, session: Session, transcript: Transcript, claim: SessionClaim | None, *, force: bool
    ) -> tuple[Decision, str, Figures]:
        """The exact decision from the transcript just read, with what every process recorded of this cycle's
        flush (another compactd may have flushed or compacted it since this one last looked)."""
        from compactd.commit.claim import flush_cycle

        st = self.session_state(session.path)
        cycle = flush_cycle(transcript)
        recorded = claim.flushed_in(cycle) if claim is not None else None
        if recorded is not None and recorded != st.flushed_this_cycle:
            st.flushed_cycle = st.compactions if recorded else None
        config, mtime = self.config, session.tracker.cursor.mtime
        figures = await offload.run_sync(
            lambda: figures_of(config, transcript, mtime=mtime)
        )  # a pass over it all
        decision = decide(self.config, figures, Recorded.of_state(st), now=time.time(), force=force)
        session.decision = decision
        return decision, cycle, figures

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

    async def _compact_step(
        self, path: str, decision: Decision, transcript: Transcript, *, force: bool
    ) -> JobResult:
        from compactd.job import compact_file

        result = await compact_file(
            path,
            self.config,
            client=self.client(),
            force=force,
            route=decision.route,
            transcript=transcript,  # the reading decided on: the job and the commit reuse it
        )
        engine = result.engine
        if engine is not None and engine.calls:
            self.metrics.observe_summarizer_latency(engine.latency_s)
        return result

    def _record_step(
        self,
        session: Session,
        decision: Decision,
        result: JobResult,
        ledger: SessionLedger | None = None,
        *,
        flushed: bool = False,
    ) -> Outcome:
        """What a compaction job did, into the session's state, the metrics and the log; the session read
        afresh (the file may have been rewritten), and backed off if that did not bring it under budget."""
        from compactd.job import MODEL_FAILED

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
                self.archives_measured = -ARCHIVE_MEASURE_SECONDS  # a new archive: measured at the next write
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
        elif result.reason and result.reason.startswith("nothing to compact"):
            session.due = False
        elif result.reason and result.reason.startswith("turn in flight"):
            pass  # still due; the ledger (refreshed above) holds it back until the turn ends
        elif result.reason and result.reason.startswith(("not idle", "locked")):
            self._retry_later(st, result.reason)  # an agent is at work: not a failure, just not now
        else:
            failed = True
            reason = result.reason or ""
            where = "read" if reason.startswith("unusable") else "commit"
            if reason.startswith(MODEL_FAILED):  # summarizer.fallback: none; the model gets the next cycle
                where = "summarize"
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
            return Outcome(path, "failed", False, detail)
        return Outcome(path, result.route, result.committed, detail)

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
        self.dirty = True
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

    async def flush(self, path: str, transcript: Any, budget: Any) -> bool:
        """Hooks (fire-and-forget) and the built-in memory extraction; neither can block the compaction.
        Whether either ran (``job.flush_runs`` says beforehand, for a dry run)."""
        from compactd.job import engine_settings, workspace_for
        from compactd.memory import flush_span, start_hooks
        from compactd.summarize.engine import CompactionEngine

        workspace = workspace_for(self.config, path, transcript)  # None when its cwd is not trusted
        await start_hooks(
            self.config,
            self.metrics,
            self.task_group,
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
            self.client(),
            plan.to_summarize,
            workspace=workspace,
            session_file=path,
            session_id=transcript.session_id,
        )
        return True

    def client(self) -> Any:
        if self._client is None:
            from compactd.job import make_client

            self._client = make_client(self.config, self.limiter)
            if self._client is not None:
                from compactd.logs import protect_config_secrets

                protect_config_secrets(self.config)  # this config may be a reloaded one
        return self._client

    # --- loops ----------------------------------------------------------------------------------------------
    async def worker(self) -> None:
        """Act on the fullest ready session; otherwise sleep until one is due, goes idle or ends its back-off."""
        await work(self, self.ready_sessions, self.act)

    def next_wake(self, now: float) -> float:
        """Seconds until a due session may become ready (idle, its turn abandoned, or out of back-off); long
        when none is due. A turn that ends is an append, which wakes the worker at once."""
        decisions = [self.decide(s, now) for s in self.sessions.values() if s.due and not s.in_flight]
        waits = [d.wait_seconds for d in decisions if d is not None]
        return max(0.05, min(waits)) if waits else IDLE_WAKE_SECONDS

    async def watch_new_roots(self, tg: Any) -> list[str]:
        """Start a watcher for every root not watched yet and return (those roots) once each is in place, so
        that a scan of them made now misses nothing: what changes after it is reported by its watcher."""
        started: list[tuple[str, anyio.Event]] = []
        for root in self.root_paths():
            if root not in self.roots:
                stop, armed = anyio.Event(), anyio.Event()
                self.roots[root] = stop
                tg.start_soon(self._watch_one, root, stop, armed)
                started.append((root, armed))
        for root, armed in started:
            await armed.wait()
            log.info("root=%s action=watching", root)
        return [root for root, _ in started]

    async def watch_roots(self, tg: Any) -> None:
        """Watch every root that appears (the start-up's are watched before :meth:`discover` reads them, so
        each is scanned once); rescan periodically."""
        while not self.stopping:
            for root in await self.watch_new_roots(tg):
                for path in scan_root(root):  # a root that appeared since the last scan
                    self.refresh(path)
            with anyio.move_on_after(self.config.service.rescan_seconds):
                await self.rescan_due.wait()
            self.rescan_due = anyio.Event()
            self.rescan()
            if time.monotonic() - self.last_sweep >= RETENTION_SWEEP_SECONDS:
                await anyio.to_thread.run_sync(self.sweep_archives)

    async def _watch_one(self, root: str, stop: anyio.Event, armed: anyio.Event) -> None:
        """Follow one root's events; ``armed`` is set once its watch is in place (or it failed to start)."""
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
        self.roots.pop(root, None)

    async def status_loop(self) -> None:
        """Refresh status.json, sessions.json and metrics.prom every few seconds when something changed, and
        at least once a minute (status.json's ``updated_at`` doubles as a heartbeat for ``compactd status``)."""
        while not self.stopping:
            if self.dirty or time.monotonic() - self.last_written >= STATE_HEARTBEAT_SECONDS:
                await anyio.to_thread.run_sync(self.write_state)
                self.notifier.status(self.status_line())
            elif self.activity_changed:
                await anyio.to_thread.run_sync(self.write_activity)
            await anyio.sleep(self.config.service.status_refresh_seconds)

    def write_status(self) -> None:
        """status.json alone, its counts without the rows (the start-up's: it shows the daemon serving; the
        rows, sorted fullest first, follow at the first state write, right after READY); everything is still
        dirty."""
        from compactd.state import write_status

        try:
            write_status(self.config.state_dir, self.status(rows=False))
        except Exception as exc:  # as write_state: the sessions are still served
            log.warning("action=state_write_failed error=%s", describe_error(exc))
        self.dirty = True

    def write_activity(self) -> None:
        """status.json with the actions in progress (see :meth:`_at`)."""
        from compactd.state import write_status

        self.activity_changed = False
        try:
            write_status(self.config.state_dir, self.status())
        except Exception as exc:  # as write_state: the sessions are still served
            log.warning("action=state_write_failed error=%s", describe_error(exc))

    def write_state(self) -> None:
        from compactd.state import write_status

        self.dirty = False
        self.activity_changed = False
        self.last_written = time.monotonic()
        openclaw = [*self.openclaw.states().values(), *self.codex.states().values()]
        self.metrics.set_sessions(
            len(self.sessions) + len(openclaw),
            self.near_threshold() + sum(s.near_threshold() for s in openclaw),
        )
        if time.monotonic() - self.archives_measured >= ARCHIVE_MEASURE_SECONDS:
            from compactd.state import archive_usage

            self.archives_measured = time.monotonic()
            usage = archive_usage(self.config.state_dir)
            self.metrics.set_archives(usage.count, usage.disk_bytes)
        try:
            write_status(self.config.state_dir, self.status())
            self.store.save_sessions(self.state)
            self.resume.save(self.sessions)
            self.store.write_metrics(self.metrics, path=self.config.service.metrics_textfile)
        except Exception as exc:  # a full disk or an odd value: the sessions are still served
            reason = describe_error(exc)
            if reason != self._state_write_error:
                log.warning(
                    "action=state_write_failed error=%s", reason, exc_info=not isinstance(exc, OSError)
                )
            self._state_write_error = reason
        else:
            self._state_write_error = None
        release_free_memory()  # the documents just built were large and short-lived

    async def watchdog_loop(self) -> None:
        """WATCHDOG=1 at half of WATCHDOG_USEC, but only while the watchers show progress: their heartbeat (an
        empty batch every few seconds) stops if the pipeline wedges, and then systemd restarts us."""
        interval = self.notifier.watchdog_interval
        if not interval:
            return
        while not self.stopping:
            stale = time.monotonic() - self.heartbeat > max(2 * interval, 2 * WATCH_HEARTBEAT_MS / 1000)
            if not (self.roots and stale):
                self.notifier.watchdog()
            await anyio.sleep(interval)

    async def tick_loop(self) -> None:
        """The loop's own heartbeat for /healthz: a tick that stops when anything holds the loop."""
        while not self.stopping:
            self.loop_tick = time.monotonic()
            await anyio.sleep(LOOP_TICK_SECONDS)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while the loop ticks and, with roots watched, the watchers' heartbeat is fresh (what the
        watchdog pings on); the figures go into /healthz's body. Called from the HTTP thread: reads only."""
        now = time.monotonic()
        loop_age, watch_age = now - self.loop_tick, now - self.heartbeat
        watching = len(self.roots)
        healthy = (
            not self.stopping
            and loop_age <= LOOP_STALE_SECONDS
            and not (watching and watch_age > WATCH_STALE_SECONDS)
        )
        return healthy, {
            "version": __version__,
            "loop_seconds_ago": round(loop_age, 3),
            "watchers_seconds_ago": round(watch_age, 3),
            "roots_watched": watching,
            "sessions": len(self.sessions),
        }

    def render_metrics(self) -> str:
        """The exposition for /metrics, from the HTTP thread: the loop may change a dict mid-copy, so retry."""
        for _ in range(4):
            try:
                return self.metrics.render()
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        return self.metrics.render()

    def start_http(self) -> Any:
        """The opt-in endpoint (``service.http_listen``), or None; a port that cannot be bound is logged and
        the service goes on without it (the textfile still has the metrics)."""
        listen = self.config.service.http_listen
        if listen is None:
            return None
        from compactd.httpd import HttpEndpoint

        try:
            endpoint = HttpEndpoint(listen, self.render_metrics, self.health)
        except OSError as exc:
            log.error("action=http_failed listen=%s error=%s", listen, describe_error(exc))
            return None
        endpoint.start()
        log.info("action=http_listening url=%s paths=/metrics,/healthz", endpoint.url)
        return endpoint

    def near_threshold(self) -> int:
        return sum(1 for path in self.sessions if self.session_state(path).near_threshold())

    def status_line(self) -> str:
        compactions = sum(s.compactions for s in self.state.values())
        return f"watching {len(self.sessions)} sessions, {self.near_threshold()} near threshold, {compactions} compactions"

    def status(self, *, rows: bool = True) -> dict[str, Any]:
        from compactd.state import STATUS_MAX_SESSIONS, build_status

        tracked = {p: self.session_state(p) for p in self.sessions}
        tracked.update(self.openclaw.states())
        tracked.update(self.codex.states())
        doc = build_status(
            tracked,
            max_sessions=STATUS_MAX_SESSIONS if rows else 0,
            now=time.time(),
            started_at=self.started_at,
            version=__version__,
            config_path=self.config_path,
            state_dir=self.config.state_dir,
            extra={"roots": sorted(self.roots)},
        )
        self.openclaw.annotate(doc)
        self.codex.annotate(doc)
        for row in doc.get("sessions", []):
            doing = self.activity.get(row.get("path"))
            if doing is not None:
                row["in_progress"] = {"stage": doing[0], "since": iso_seconds(doing[1])}
                calls = self.activity_progress.get(row.get("path"))
                if calls:
                    row["in_progress"]["progress"] = calls
        return doc

    async def signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
            async for signum in received:
                if signum == signal.SIGHUP:
                    self.reload()
                    continue
                log.info("signal=%s action=stopping", signal.Signals(signum).name)
                self.shutdown(scope)
                return

    def shutdown(self, scope: anyio.CancelScope) -> None:
        self.stopping = True
        self.notifier.stopping()
        self.openclaw.stop()
        self.codex.stop()
        for stop in self.roots.values():
            stop.set()
        scope.cancel()

    def log_start(self) -> None:
        """One line with what this process serves: version, config, roots, sources and the summarizer
        (endpoint with its credentials masked, model, the context it is given)."""
        from compactd.summarize.redact import redact_url_secrets

        s = self.config.summarizer
        sources = ["jsonl"] + (["openclaw-sqlite"] if self.config.openclaw.enabled else [])
        log.info(
            "action=starting version=%s config=%s state_dir=%s roots=%s sources=%s summarizer=%s model=%s "
            "context_tokens=%d num_ctx=%s http=%s",
            __version__,
            self.config.source,
            self.config.state_dir,
            ",".join(self.root_paths()) or "(none yet)",
            ",".join(sources),
            redact_url_secrets(s.base_url) if s.base_url else "digest",
            s.model,
            s.context_tokens,
            s.num_ctx(),
            self.config.service.http_listen,
        )

    def reload(self) -> None:
        self.notifier.reloading()
        self.dirty = True
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            log.error("reload rejected, keeping the running config: %s", exc)
            self.notifier.ready(f"config reload rejected: {exc.key}")
            return
        from compactd.logs import apply_config_level

        if config.service.http_listen != self.config.service.http_listen:
            log.warning(
                "action=reload_partial key=%s reason=%s",
                "service.http_listen",
                "the HTTP endpoint is bound at start: restart compactd to move it",
            )
        self.config = config
        self.metrics.session_series = config.service.metrics_top_sessions
        self.openclaw.config = config
        self.codex.config = config
        self._client = None
        if apply_config_level(config.log_level):
            log.info("action=log_level level=%s", config.log_level.lower())
        self.resume.fingerprint = None  # decisions recorded from now on may be under either configuration
        log.info("action=reloaded config=%s", config.source)
        self.notifier.ready("config reloaded")

    def lock_instance(self, *, shared: bool = False) -> InstanceLock:
        """Take the state directory's instance lock (``run`` alone; ``once``, ``shared``, beside other onces)
        and make the state directory; raises :class:`~compactd.commit.locks.AlreadyRunning`."""
        from compactd.commit.locks import InstanceLock

        lock = InstanceLock(self.config.state_dir, shared=shared)
        lock.acquire()
        try:
            self.store.ensure()
        except BaseException:
            lock.release()
            raise
        return lock

    def _only_once_holds(self) -> bool:
        """The instance lock is held, but only shared (by ``once`` runs), not by another ``run``."""
        from compactd.commit.locks import AlreadyRunning, InstanceLock

        probe = InstanceLock(self.config.state_dir, shared=True)
        try:
            probe.acquire()
        except AlreadyRunning:
            return False
        probe.release()
        return True

    def prepare(self) -> None:
        """The start-up of ``run`` and ``once``, under the instance lock, before any transcript is read:
        finish or roll back what a killed compactd left (its late lines belong in the files read next),
        sweep the archives, and load what the state directory recorded of every session."""
        from compactd.resume import config_fingerprint

        self.recover()
        self.state = self.store.load_sessions()
        self.resume.fingerprint = config_fingerprint(self.config)
        self.resume.load()

    def discover(self, *, seal: bool = False) -> set[str]:
        """Every transcript under every root, reconciled with the file system and decided (the read at start
        and the periodic rescan); ``seal``: an idle file whose last line is torn is sealed, so the agent's next
        append is not swallowed by it. Returns the paths seen."""
        seen: set[str] = set()
        now = time.time()
        self._agent_dirs = {}
        try:
            for root in self.root_paths():
                for path in scan_root(root):
                    seen.add(path)
                    self.refresh(path)
                    session = self.sessions.get(path)
                    if seal and session is not None and session.tracker.cursor.partial:
                        try:
                            self.seal(session, now)
                        except Exception as exc:
                            self.fail(path, "seal", exc)
        finally:
            self._agent_dirs = None
        return seen

    async def serve(self, shutdown_trigger: ShutdownTrigger | None = None) -> int:
        """Run until SIGTERM/SIGINT or ``shutdown_trigger`` returns; 0 on a clean stop, 3 if another runs."""
        from compactd.commit.locks import AlreadyRunning

        limit_malloc_arenas()
        while True:
            try:
                lock = self.lock_instance()
                break
            except AlreadyRunning as exc:
                if not self._only_once_holds():
                    log.error("%s", exc)
                    return EXIT_ALREADY_RUNNING
            # A ``once`` (cron) is at work: it ends on its own, so wait rather than fail and be restarted.
            self.notifier.status("waiting for a running `compactd once` to finish")
            log.info(
                "action=waiting reason=a compactd once holds the state directory %s", self.config.state_dir
            )
            await anyio.sleep(ONCE_POLL_SECONDS)
        http = None
        progress_log = logging.getLogger("compactd.progress")
        calls = ActivityHandler(self.note_progress)
        progress_log.addHandler(calls)
        try:
            self.log_start()
            self.prepare()
            # The model client now, before READY: its first build imports openai (seconds on a busy machine),
            # which would otherwise hold the loop at the first flush or summary.
            self.client()
            async with anyio.create_task_group() as tg:
                self.task_group = tg
                tg.start_soon(self.signals, tg.cancel_scope)
                if shutdown_trigger is not None:

                    async def trigger() -> None:
                        await shutdown_trigger()
                        self.shutdown(tg.cancel_scope)

                    tg.start_soon(trigger)
                await self.watch_new_roots(tg)  # before the read: a file changed during it is reported
                if not self.root_paths():
                    log.warning(
                        "no sessions directory matches sessions.roots %s: no transcript file is served until "
                        "one appears (OpenClaw 2026.9+ databases are followed apart); see `compactd doctor`",
                        list(self.config.sessions.roots),
                    )
                self.discover()
                release_free_memory()  # the start-up read of every transcript leaves freed heap behind
                tg.start_soon(self.watch_roots, tg)
                self.openclaw.task_group = tg
                tg.start_soon(self.openclaw.run)
                self.codex.task_group = tg
                tg.start_soon(self.codex.run)
                for _ in range(self.config.summarizer.max_concurrency):
                    tg.start_soon(self.worker)
                tg.start_soon(self.watchdog_loop)
                tg.start_soon(self.tick_loop)
                http = self.start_http()
                self.write_status()
                self.notifier.ready(self.status_line())
                log.info("action=ready sessions=%d state_dir=%s", len(self.sessions), self.config.state_dir)
                # sessions.json, the snapshots and metrics.prom follow at once, after READY: serving needs
                # none of them, and with 10,000 sessions they are megabytes
                tg.start_soon(self.status_loop)
        finally:
            progress_log.removeHandler(calls)
            self.task_group = None
            if http is not None:
                http.stop()
            with anyio.CancelScope(shield=True):
                self.write_state()
                if self._client is not None:
                    with anyio.move_on_after(1.0):
                        await self._client.close()
            lock.release()
        log.info("action=stopped")
        return 0

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


def run_service(config: Config, *, config_path: str | None = None) -> int:
    return anyio.run(Service(config, config_path=config_path).serve)


def _waiting_outcome(service: Service, session: Session, now: float) -> Outcome:
    """What ``once`` reports of a session it does not act on now: failed to read, skipped, backing off,
    waiting for its agent (or its turn, or quiet), or fits."""
    path = session.path
    st = service.session_state(path)
    if st.error_stage == "read" and st.last_error:
        detail = {"stage": "read", "reason": st.last_error, "retry_in": round(st.backoff_remaining(now))}
        return Outcome(path, "failed", detail=detail)
    if st.skipped:
        return Outcome(path, "skipped", detail={"reason": st.skipped})
    decision = service.decide(session, now)
    if session.due and st.in_backoff(now) and st.last_error:
        detail = {
            "retry_in": round(st.backoff_remaining(now)),
            "stage": st.error_stage,
            "reason": st.last_error,
        }
        return Outcome(path, "backoff", detail=detail)
    if session.due and st.in_backoff(now):  # an agent held the lock or was writing: not a failure
        return Outcome(
            path,
            "wait",
            detail={"reason": "an agent was at work", "retry_in": round(st.backoff_remaining(now))},
        )
    if session.due:
        reason = decision.wait if decision is not None else None
        return Outcome(path, "wait", detail={"reason": reason or "not idle yet"})
    return Outcome(path, "fits", detail={"tokens": st.planning_tokens, "threshold": st.compact_threshold})


def run_once(
    config: Config,
    *,
    dry_run: bool = False,
    as_json: bool = False,
    force: bool = False,
    sessions: list[str] | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """One pass over every session: what ``run`` would do now, then exit (for cron and for trying it out).

    It starts as ``run`` does (the instance lock, shared with other ``once`` runs; recovery, the archive
    sweep, the recorded state; every transcript read and decided), then acts on each ready session once.
    Returns 0 when every session was handled (compacted, fits, skipped, waiting for its agent), 1 when at
    least one failed or is backing off after a failure (those are listed as ``failed``/``backoff`` with the
    stage and the reason, and every other session is still done), 3 when a ``run`` holds the state directory
    (nothing is changed). ``dry_run`` reads only: no lock, no recovery, no state written.
    """
    from compactd.commit.locks import AlreadyRunning

    service = Service(config)
    if sessions:
        service.explicit_roots = [os.path.realpath(s) for s in sessions]
    lock = None
    if not dry_run:
        try:
            lock = service.lock_instance(shared=True)
        except AlreadyRunning as exc:
            err.write(f"compactd: {exc}; once changed nothing\n")
            return EXIT_ALREADY_RUNNING

    async def go() -> list[Outcome]:
        if not dry_run:
            service.prepare()
        service.discover(seal=not dry_run)
        outcomes: list[Outcome] = []
        try:
            now = time.time()
            ready = {s.path for s in service.ready_sessions(now, force=force or dry_run)}
            for path, session in sorted(service.sessions.items()):
                if path in ready:
                    outcomes.append(await service.act(session, force=force, dry_run=dry_run))
                else:
                    outcomes.append(_waiting_outcome(service, session, now))
            if not sessions and not dry_run:  # named files only: no OpenClaw database is looked at
                for row in await service.openclaw.once(force=force):
                    path, action, committed = (
                        row.pop("path"),
                        row.pop("action"),
                        bool(row.pop("committed", False)),
                    )
                    outcomes.append(Outcome(path, action, committed, row))
                for row in await service.codex.once(force=force):
                    path, action, committed = (
                        row.pop("path"),
                        row.pop("action"),
                        bool(row.pop("committed", False)),
                    )
                    outcomes.append(Outcome(path, action, committed, row))
        finally:
            if not dry_run:
                service.write_state()  # under the shared lock: no run is there to own the state files
            if service._client is not None:
                await service._client.close()
        return outcomes

    try:
        outcomes = anyio.run(go)
    finally:
        if lock is not None:
            lock.release()
    if as_json:
        from compactd.state import dump_json

        rows = [{"path": o.path, "action": o.action, "committed": o.committed, **o.detail} for o in outcomes]
        out.write(dump_json(rows).decode())
    else:
        if not outcomes:
            out.write("no sessions found under the configured roots\n")
        for outcome in outcomes:
            out.write(outcome.line() + "\n")
    failed = sum(1 for o in outcomes if o.failed)
    if failed:
        err.write(f"compactd: {failed} of {len(outcomes)} session(s) failed or are backing off (see above)\n")
    return 1 if failed else 0
