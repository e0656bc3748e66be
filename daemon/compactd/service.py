"""The long-running process: watch → tail → ledger → plan → (flush) → summarize → commit, and ``once``.

Lifecycle lives here and only here (uvicorn's shape): start-up recovery, the watchers, the scheduler, the
status writer, signals and sd_notify. Shutdown is an injectable trigger (hypercorn's ``shutdown_trigger``).
"""

from __future__ import annotations

import glob
import logging
import os
import signal
import stat
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from compactd import __version__
from compactd.config import Config, ConfigError, file_kind, load_config
from compactd.openclaw import OpenClawSource
from compactd.openclaw import refusal as openclaw_refusal
from compactd.planning import Decision, Readiness, budget_for, decide, quick_budget, readiness, skip_reason
from compactd.roots import is_session_path
from compactd.state import Backoff, SessionState, describe_error
from compactd.tail import Change
from compactd.tracker import SessionTracker
from compactd.transcript.reader import read_transcript
from compactd.watch import expand_roots, scan_root, watch_root

if TYPE_CHECKING:
    from compactd.commit.claim import SessionClaim

log = logging.getLogger(__name__)

ShutdownTrigger = Callable[[], Awaitable[None]]
# A session an agent has locked (or is writing) is looked at again after this long; not counted as a failure.
BUSY_RETRY_SECONDS = 10.0
# A worker with nothing due sleeps this long at most (new work wakes it at once).
IDLE_WAKE_SECONDS = 60.0
# Watchers yield an empty batch this often when nothing happens: the heartbeat the watchdog checks. Stopping
# does not wait for it (the stop event is seen within one step).
WATCH_HEARTBEAT_MS = 5_000
# status.json is rewritten at least this often even when nothing changed (its updated_at is a heartbeat).
STATE_HEARTBEAT_SECONDS = 60.0
# Archive retention runs over every session this often (and after each rotation, for that session).
RETENTION_SWEEP_SECONDS = 3600.0


def _signature(path: str) -> tuple[int, ...] | None:
    """What changes when a file is replaced, written, truncated or chmod-ed (None: it cannot be stat-ed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


@dataclass(slots=True)
class Session:
    tracker: SessionTracker
    in_flight: bool = False
    due: bool = False

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
        extra = " ".join(f"{k}={v}" for k, v in self.detail.items() if v is not None)
        return f"{self.action:<10} {self.path} {extra}".rstrip()


class Service:
    def __init__(
        self, config: Config, *, config_path: str | None = None, env: dict[str, str] | None = None
    ) -> None:
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
        self.state: dict[str, SessionState] = {}
        self.metrics = Metrics()
        self.notifier = Notifier(self.env)
        self.limiter = anyio.CapacityLimiter(config.summarizer.max_concurrency)
        self.wakeup = anyio.Event()
        self.rescan_due = anyio.Event()
        self.stopping = False
        self.started_at = time.time()
        self.heartbeat = time.monotonic()
        self.dirty = True  # something changed since state files were last written
        self.last_written = 0.0
        self.last_sweep = time.monotonic()
        self.task_group: anyio.abc.TaskGroup | None = None
        self._client: Any = None
        # What was last logged per path (a failure, an ignored file), so a repeat is not logged again.
        self._reported: dict[str, str] = {}
        self._state_write_error: str | None = None
        self._unreadable: dict[str, tuple[int, ...] | None] = {}  # path -> its stat when reading it failed
        # The second session source: OpenClaw 2026.9+ agents, followed in their databases.
        self.openclaw = OpenClawSource(config, self.env, client=self.client, changed=self._mark_dirty)

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

    def refresh(self, path: str) -> None:
        """Reconcile one path with the file system (only appended bytes are read), then decide if it is due.

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
            self._refresh(path)
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

    def _refresh(self, path: str) -> None:
        sqlite_refusal = openclaw_refusal(path)
        if sqlite_refusal is not None:  # never a session to act on (compactd writes nothing there)
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            self._report_once(path, "sqlite-agent", logging.INFO, f"action=ignored reason={sqlite_refusal}")
            return
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG  # gone: the tracker reports it missing and it is forgotten below
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            # Not a transcript (scan_root never lists one); opening a FIFO would block the whole service.
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            kind = file_kind(mode)
            self._report_once(path, kind, logging.WARNING, f"action=ignored reason=not a transcript: {kind}")
            return
        if os.path.lexists(path) and not is_session_path(path):
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
            session = self.sessions[path] = Session(SessionTracker(path))
        update = session.tracker.refresh()
        if update.change is Change.UNCHANGED and path in self.state:
            return  # nothing new: the rescan's common case, kept cheap
        self.dirty = True
        ledger = session.tracker.ledger
        if ledger is None:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)
            return
        budget = quick_budget(
            self.config, provider=ledger.provider, model=ledger.model, tokens=ledger.planning_tokens
        )
        st = self.session_state(path)
        if st.error_stage == "read":  # readable again
            Backoff.record_success(st)
            st.next_action = None
            self._reported.pop(path, None)
            log.info("session=%s action=recovered (readable again)", path)
        st.session_id = ledger.session_id
        st.tokens = ledger.planning_tokens  # the stale pre-compaction usage anchor would mislead here
        st.planning_tokens = budget.estimated_with_margin
        st.window = budget.context_window
        st.compact_threshold = budget.compact_threshold
        st.flush_threshold = budget.flush_threshold or None
        self.metrics.set_session(
            path, session_id=ledger.session_id, tokens=ledger.tokens, window=budget.context_window
        )
        skipped = skip_reason(budget)
        if skipped != st.skipped:
            st.skipped = skipped
            if skipped:
                log.warning("session=%s action=skipped reason=%s", path, skipped)
        flush = self.config.memory_flush
        flush_due = (
            flush.enabled
            and not st.flushed_this_cycle
            and (budget.over_flush_threshold or 0 < flush.force_bytes <= session.tracker.cursor.size)
        )
        due = skipped is None and (budget.over_compact_threshold or flush_due)
        if due and not session.due:
            log.info(
                "session=%s action=due tokens=%d threshold=%d",
                path,
                budget.estimated_with_margin,
                budget.compact_threshold,
            )
        st.next_action = ("compact" if budget.over_compact_threshold else "flush") if due else None
        if due:
            verdict = self.readiness(session, time.time())
            if verdict.turn_in_flight:
                st.next_action = f"busy: {verdict.reason}"
        session.due = due
        if due:
            self.wakeup.set()

    def rescan(self, *, seal: bool = True) -> None:
        """The safety net for dropped events: every transcript under every root, reconciled by stat; and an
        idle file whose last line is torn is sealed, so the agent's next append is not swallowed by it
        (``seal=False``: a dry run writes nothing, not even that newline)."""
        seen: set[str] = set()
        now = time.time()
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
    def readiness(self, session: Session, now: float, *, force: bool = False) -> Readiness:
        """:func:`planning.readiness` from what the tracker knows: the ledger's turn and the file's mtime."""
        ledger = session.tracker.ledger
        return readiness(
            self.config,
            turn=ledger.turn if ledger is not None else None,
            quiet_seconds=now - session.tracker.cursor.mtime,
            force=force,
        )

    def ready_sessions(self, now: float, *, force: bool = False) -> list[Session]:
        """Due sessions that may be acted on now (idle and not mid-turn, not backing off, not in flight),
        fullest first."""
        ready = [
            session
            for session in self.sessions.values()
            if session.due
            and not session.in_flight
            and not self.session_state(session.path).in_backoff(now)
            and self.readiness(session, now, force=force).ready
        ]
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

    async def act_claimed(
        self, session: Session, claim: SessionClaim | None, *, force: bool = False, dry_run: bool = False
    ) -> Outcome:
        """Flush, then prune and/or compact one session. Never raises: this is the session boundary, and a
        failure at any stage is recorded in the session's state with a back-off and returned as ``failed``."""
        from compactd.commit.claim import flush_cycle
        from compactd.commit.locks import lock_holder
        from compactd.job import compact_file

        path = session.path
        st = self.session_state(path)
        session.in_flight = True
        stage = "read"  # where an exception stopped this session, for its state and the log
        try:
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
            transcript = await anyio.to_thread.run_sync(lambda: read_transcript(path, follow_symlinks=False))
            if not transcript.usable:
                session.due = False
                st.skipped = "unusable transcript: " + "; ".join(p.message for p in transcript.problems)
                return Outcome(path, "skipped", detail={"reason": st.skipped})
            if not transcript.committable:  # no flush or compaction on a reading that may differ from pi's
                session.due = False
                problem = transcript.blocking[0]
                st.skipped = f"{problem.kind} at line {problem.line}: {problem.message}"
                return Outcome(path, "skipped", detail={"reason": st.skipped})
            stage = "plan"
            budget = budget_for(self.config, transcript)
            cycle = flush_cycle(transcript)
            recorded = claim.flushed_in(cycle) if claim is not None else None
            if recorded is not None and recorded != st.flushed_this_cycle:
                st.flushed_cycle = st.compactions if recorded else None  # another process flushed/compacted
            decision: Decision = decide(
                self.config,
                budget,
                transcript_bytes=transcript.size,
                flushed_this_cycle=st.flushed_this_cycle,
            )
            detail: dict[str, Any] = {
                "tokens": budget.estimated_with_margin,
                "threshold": budget.compact_threshold,
            }
            if dry_run:
                return Outcome(
                    path, decision.action, detail={**detail, "flush": decision.flush, "route": budget.route}
                )
            if decision.flush:
                stage = "flush"
                await self.flush(path, transcript, budget)
                st.mark_flushed(time.time())
                if claim is not None:
                    try:
                        claim.mark_flushed(cycle)
                    except OSError as exc:  # the flush is done; only a second runner may repeat it
                        log.warning("session=%s cannot record the flush: %s", path, exc)
            if decision.action == "skip":
                session.due = False
                st.skipped = decision.reason
                return Outcome(path, "skipped", detail={"reason": decision.reason})
            if decision.action in ("none", "flush"):
                session.due = False
                return Outcome(path, "flush" if decision.flush else decision.action, detail=detail)
            stage = "compact"
            result = await compact_file(
                path, self.config, client=self.client(), force=force, route=budget.route
            )
            engine = result.engine
            if engine is not None and engine.calls:
                self.metrics.observe_summarizer_latency(engine.latency_s)
            detail.update(
                {
                    "route": result.route,
                    "level": engine.level if engine else None,
                    "mode": result.mode,
                    "reason": result.reason,
                }
            )
            stage = "commit"
            now = time.time()
            session.tracker.cursor.reset()  # the file may have been rewritten: read it afresh below
            if result.committed:
                self.metrics.record_compaction(result.route, engine.level if engine else "none")
                ids = engine.identifiers if engine else None
                st.mark_compacted(
                    now,
                    level=engine.level if engine else None,
                    route=result.route,
                    identifiers_total=ids.total if ids else None,
                    identifiers_kept_by_model=ids.kept_by_model if ids else None,
                    identifiers_in_summary=ids.in_summary if ids else None,
                    fill=result.fill.as_json() if result.fill else None,
                )
                if ids is not None:
                    self.metrics.record_retention(
                        path,
                        session_id=st.session_id,
                        total=ids.total,
                        kept_by_model=ids.kept_by_model,
                        in_summary=ids.in_summary,
                    )
            self.refresh(path)
            failed = False
            if result.committed:
                if session.due and st.planning_tokens > (st.compact_threshold or 0):
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
                where = "read" if (result.reason or "").startswith("unusable") else "commit"
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
        except Exception as exc:  # still due: tried again when its back-off ends
            delay = self.fail(path, stage, exc)
            return Outcome(
                path,
                "failed",
                detail={"stage": stage, "reason": describe_error(exc), "retry_in": round(delay)},
            )
        finally:
            session.in_flight = False
            self.dirty = True

    def _retry_later(self, st: SessionState, reason: str) -> None:
        """Look again after a short wait without counting a failure (a live agent holds or writes the file)."""
        st.backoff_until = time.time() + max(BUSY_RETRY_SECONDS, self.config.sessions.idle_seconds)
        st.next_action = f"retry: {reason}"

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

    async def flush(self, path: str, transcript: Any, budget: Any) -> None:
        """Hooks (fire-and-forget) and the built-in memory extraction; neither can block the compaction."""
        from compactd.job import engine_settings, workspace_for
        from compactd.memory import before_compaction_event, flush_memories, run_hooks
        from compactd.summarize.engine import CompactionEngine

        workspace = workspace_for(self.config, path, transcript)  # None when its cwd is not trusted
        if self.config.memory_flush.hooks:
            event = before_compaction_event(
                session_id=transcript.session_id,
                session_file=path,
                tokens=budget.estimated_with_margin,
                context_window=budget.context_window,
                flush_threshold=budget.flush_threshold,
                compact_threshold=budget.compact_threshold,
                memory_dir=workspace.memory_dir if workspace else None,
            )

            async def hooks() -> None:
                try:
                    for result in await run_hooks(self.config.memory_flush.hooks, event):
                        self.metrics.record_hook(result.status)
                except Exception:  # run in the service's task group: an escape would stop the service
                    log.exception("session=%s action=hooks_failed", path)

            if self.task_group is not None:
                self.task_group.start_soon(hooks)
            else:
                await hooks()
        plan = CompactionEngine(engine_settings(self.config)).plan(transcript)
        if workspace is None or plan is None:
            return
        result = await flush_memories(
            self.client(),
            plan.to_summarize,
            workspace=workspace,
            session_id=transcript.session_id,
            now=datetime.now().astimezone(),
            redact=self.config.compaction.redact_secrets,
            prompt=self.config.memory_flush.prompt,
            system_prompt=self.config.memory_flush.system_prompt,
        )
        self.metrics.record_flush(result.status)
        if result.latency_s is not None:
            self.metrics.observe_summarizer_latency(result.latency_s, purpose="memory_flush")
        log.info("session=%s action=memory_flush status=%s file=%s", path, result.status, result.path)

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
        while not self.stopping:
            now = time.time()
            ready = self.ready_sessions(now)
            if ready:
                await self.act(ready[0])
                continue
            self.wakeup = anyio.Event()
            with anyio.move_on_after(self.next_wake(now)):
                await self.wakeup.wait()

    def next_wake(self, now: float) -> float:
        """Seconds until a due session may become ready (idle, its turn abandoned, or out of back-off); long
        when none is due. A turn that ends is an append, which wakes the worker at once."""
        waits = [
            max(self.session_state(s.path).backoff_remaining(now), self.readiness(s, now).wait_seconds)
            for s in self.sessions.values()
            if s.due and not s.in_flight
        ]
        return max(0.05, min(waits)) if waits else IDLE_WAKE_SECONDS

    async def watch_roots(self, tg: Any) -> None:
        """Start a watcher for every root, now and whenever a new one appears; rescan periodically."""
        while not self.stopping:
            for root in self.root_paths():
                if root not in self.roots:
                    stop = anyio.Event()
                    self.roots[root] = stop
                    tg.start_soon(self._watch_one, root, stop)
                    for path in scan_root(root):
                        self.refresh(path)
                    log.info("root=%s action=watching", root)
            with anyio.move_on_after(self.config.service.rescan_seconds):
                await self.rescan_due.wait()
            self.rescan_due = anyio.Event()
            self.rescan()
            if time.monotonic() - self.last_sweep >= RETENTION_SWEEP_SECONDS:
                await anyio.to_thread.run_sync(self.sweep_archives)

    async def _watch_one(self, root: str, stop: anyio.Event) -> None:
        s = self.config.service
        try:
            async for paths in watch_root(
                root, stop, debounce_ms=s.debounce_ms, step_ms=s.step_ms, rust_timeout_ms=WATCH_HEARTBEAT_MS
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
        self.roots.pop(root, None)

    async def status_loop(self) -> None:
        """Refresh status.json, sessions.json and metrics.prom every few seconds when something changed, and
        at least once a minute (status.json's ``updated_at`` doubles as a heartbeat for ``compactd status``)."""
        while not self.stopping:
            if self.dirty or time.monotonic() - self.last_written >= STATE_HEARTBEAT_SECONDS:
                await anyio.to_thread.run_sync(self.write_state)
                self.notifier.status(self.status_line())
            await anyio.sleep(self.config.service.status_refresh_seconds)

    def write_state(self) -> None:
        from compactd.state import write_status

        self.dirty = False
        self.last_written = time.monotonic()
        self.metrics.set_sessions(len(self.sessions), self.near_threshold())
        try:
            write_status(self.config.state_dir, self.status())
            self.store.save_sessions(self.state)
            self.store.write_metrics(self.metrics)
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

    def write_state_unless_served(self) -> None:
        """``once``: write the state files, unless a running daemon owns them (it holds the instance lock and
        would overwrite them within seconds; its ``status.json`` must keep naming it). The flush record and
        the journal, which every process shares, are written either way."""
        from compactd.commit.locks import AlreadyRunning, InstanceLock

        lock = InstanceLock(self.config.state_dir)
        try:
            lock.acquire()
        except AlreadyRunning as exc:
            log.info("state files left to the running compactd (pid %s)", exc.pid)
            return
        except OSError as exc:
            log.warning("action=state_write_failed error=%s", exc)
            return
        try:
            self.write_state()
        finally:
            lock.release()

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

    def near_threshold(self) -> int:
        return sum(1 for path in self.sessions if self.session_state(path).near_threshold())

    def status_line(self) -> str:
        compactions = sum(s.compactions for s in self.state.values())
        return f"watching {len(self.sessions)} sessions, {self.near_threshold()} near threshold, {compactions} compactions"

    def status(self) -> dict[str, Any]:
        from compactd.state import build_status

        tracked = {p: self.session_state(p) for p in self.sessions}
        tracked.update(self.openclaw.states())
        doc = build_status(
            tracked,
            now=time.time(),
            started_at=self.started_at,
            version=__version__,
            config_path=self.config_path,
            state_dir=self.config.state_dir,
            extra={"roots": sorted(self.roots)},
        )
        self.openclaw.annotate(doc)
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
        for stop in self.roots.values():
            stop.set()
        scope.cancel()

    def reload(self) -> None:
        self.notifier.reloading()
        self.dirty = True
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            log.error("reload rejected, keeping the running config: %s", exc)
            self.notifier.ready(f"config reload rejected: {exc.key}")
            return
        self.config = config
        self.openclaw.config = config
        self._client = None
        log.info("action=reloaded config=%s", config.source)
        self.notifier.ready("config reloaded")

    async def serve(self, shutdown_trigger: ShutdownTrigger | None = None) -> int:
        """Run until SIGTERM/SIGINT or ``shutdown_trigger`` returns; 0 on a clean stop, 3 if another runs."""
        from compactd.commit.locks import AlreadyRunning, InstanceLock

        limit_malloc_arenas()
        self.store.ensure()
        lock = InstanceLock(self.config.state_dir)
        try:
            lock.acquire()
        except AlreadyRunning as exc:
            log.error("%s", exc)
            return 3
        try:
            self.recover()
            self.state = self.store.load_sessions()
            async with anyio.create_task_group() as tg:
                self.task_group = tg
                tg.start_soon(self.signals, tg.cancel_scope)
                if shutdown_trigger is not None:

                    async def trigger() -> None:
                        await shutdown_trigger()
                        self.shutdown(tg.cancel_scope)

                    tg.start_soon(trigger)
                for root in self.root_paths():
                    for path in scan_root(root):
                        self.refresh(path)
                release_free_memory()  # the start-up read of every transcript leaves freed heap behind
                tg.start_soon(self.watch_roots, tg)
                self.openclaw.task_group = tg
                tg.start_soon(self.openclaw.run)
                for _ in range(self.config.summarizer.max_concurrency):
                    tg.start_soon(self.worker)
                tg.start_soon(self.status_loop)
                tg.start_soon(self.watchdog_loop)
                await anyio.sleep(0)
                self.write_state()
                self.notifier.ready(self.status_line())
                log.info("action=ready sessions=%d state_dir=%s", len(self.sessions), self.config.state_dir)
        finally:
            self.task_group = None
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


def limit_malloc_arenas() -> None:
    """One glibc malloc arena for the whole process (``M_ARENA_MAX``): the watcher and worker threads would
    otherwise each grow an arena of their own that is never given back; compactd is not allocation-bound."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def release_free_memory() -> None:
    """Hand freed heap pages back to the system (glibc's ``malloc_trim``); a no-op where it is not available.

    Reading thousands of transcripts at start allocates and frees far more than the ledgers keep; without this
    the resident size stays near that peak for the daemon's whole life.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def run_service(config: Config, *, config_path: str | None = None) -> int:
    return anyio.run(Service(config, config_path=config_path).serve)


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

    Returns 0 when every session was handled (compacted, fits, skipped, waiting for its agent), 1 when at
    least one failed or is backing off after a failure; those are listed as ``failed``/``backoff`` with the
    stage and the reason, and every other session is still done.
    """

    async def go() -> list[Outcome]:
        service = Service(config)
        if sessions:
            service.explicit_roots = [os.path.realpath(s) for s in sessions]
        if not dry_run:
            service.store.ensure()
            service.recover()
            service.state = service.store.load_sessions()
        outcomes: list[Outcome] = []
        service.rescan(seal=not dry_run)
        try:
            now = time.time()
            ready = {s.path for s in service.ready_sessions(now, force=force or dry_run)}
            for path, session in sorted(service.sessions.items()):
                outcomes.append(await _once_outcome(service, path, session, path in ready, now))
            if not sessions and not dry_run:  # named files only: no OpenClaw database is looked at
                for row in await service.openclaw.once(force=force):
                    path, action, committed = (
                        row.pop("path"),
                        row.pop("action"),
                        bool(row.pop("committed", False)),
                    )
                    outcomes.append(Outcome(path, action, committed, row))
        finally:
            if not dry_run:
                service.write_state_unless_served()
            if service._client is not None:
                await service._client.close()
        return outcomes

    async def _once_outcome(
        service: Service, path: str, session: Session, ready: bool, now: float
    ) -> Outcome:
        st = service.session_state(path)
        if ready:
            return await service.act(session, force=force, dry_run=dry_run)
        if st.error_stage == "read" and st.last_error:
            detail = {"stage": "read", "reason": st.last_error, "retry_in": round(st.backoff_remaining(now))}
            return Outcome(path, "failed", detail=detail)
        if st.skipped:
            return Outcome(path, "skipped", detail={"reason": st.skipped})
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
            return Outcome(
                path, "wait", detail={"reason": service.readiness(session, now).reason or "not idle yet"}
            )
        return Outcome(path, "fits", detail={"tokens": st.planning_tokens, "threshold": st.compact_threshold})

    outcomes = anyio.run(go)
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
