"""The long-running process: watch → tail → ledger → plan → (flush) → summarize → commit, and ``once``.

Lifecycle lives here and only here (uvicorn's shape): start-up recovery, the watchers, the scheduler, the
status writer, signals and sd_notify. Shutdown is an injectable trigger (hypercorn's ``shutdown_trigger``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

import anyio
import orjson

from daemon import __version__
from daemon.config import Config, ConfigError, load_config
from daemon.planning import Decision, budget_for, decide, quick_budget
from daemon.tracker import SessionTracker
from daemon.transcript.reader import read_transcript
from daemon.watch import expand_roots, scan_root, watch_root

log = logging.getLogger(__name__)

ShutdownTrigger = Callable[[], Awaitable[None]]
# Sessions whose margin-adjusted estimate is within this share of the threshold count as "near" in STATUS.
NEAR_THRESHOLD_SHARE = 0.8


@dataclass
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

    def line(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.detail.items() if v is not None)
        return f"{self.action:<10} {self.path} {extra}".rstrip()


class Service:
    def __init__(self, config: Config, *, config_path: str | None = None, env: dict[str, str] | None = None) -> None:
        from daemon.state import Metrics, StateStore
        from daemon.systemd import Notifier

        self.config = config
        self.config_path = config_path
        self.env = dict(os.environ if env is None else env)
        self.sessions: dict[str, Session] = {}
        self.roots: dict[str, anyio.Event] = {}
        self.store = StateStore(config.state_dir)
        self.metrics = Metrics()
        self.notifier = Notifier(self.env)
        self.limiter = anyio.CapacityLimiter(config.summarizer.max_concurrency)
        self.wakeup = anyio.Event()
        self.stopping = False
        self.started_at = time.time()
        self.compactions = 0
        self.failures = 0
        self.heartbeat = time.monotonic()
        self.state: dict[str, Any] = {}
        self._client: Any = None

    # --- sessions -------------------------------------------------------------------------------------------
    def track(self, path: str) -> Session:
        session = self.sessions.get(path)
        if session is None:
            session = self.sessions[path] = Session(SessionTracker(path))
        return session

    def refresh(self, path: str) -> None:
        """Reconcile one path with the file system, then decide whether it is due."""
        session = self.track(path)
        try:
            session.tracker.refresh()
        except OSError as exc:
            log.warning("session=%s cannot read: %s", path, exc.strerror)
            return
        ledger = session.tracker.ledger
        if ledger is None:
            self.sessions.pop(path, None)
            return
        budget = quick_budget(self.config, provider=ledger.provider, model=ledger.model, tokens=ledger.planning_tokens)
        st = self.store_session(path)
        st.tokens = ledger.tokens
        st.window = budget.context_window
        st.compact_threshold = budget.compact_threshold
        flush_due = (
            self.config.memory_flush.enabled
            and st.flushed_cycle != st.compactions
            and (
                budget.over_flush_threshold
                or 0 < self.config.memory_flush.force_bytes <= session.tracker.cursor.size
            )
        )
        due = (budget.over_compact_threshold or flush_due) and budget.guard != "block"
        if due and not session.due:
            log.info("session=%s action=scheduled tokens=%d threshold=%d", path, ledger.planning_tokens, budget.compact_threshold)
        session.due = due
        if due:
            self.wakeup.set()

    def store_session(self, path: str) -> Any:
        from daemon.state import SessionState

        st = self.state.get(path)
        if st is None:
            st = self.state[path] = SessionState(session_id=None)
        return st

    def rescan(self) -> None:
        for root in expand_roots(self.config.sessions.roots) if not self._explicit_roots else self._explicit_roots:
            for path in scan_root(root):
                self.refresh(path)
        for path in [p for p in self.sessions if not os.path.exists(p)]:
            self.sessions.pop(path, None)

    _explicit_roots: list[str] = []

    # --- acting ---------------------------------------------------------------------------------------------
    def ready_sessions(self, now: float) -> list[Session]:
        """Due sessions that may be acted on now, fullest first."""
        idle = self.config.sessions.idle_seconds
        ready = []
        for session in self.sessions.values():
            if not session.due or session.in_flight:
                continue
            st = self.store_session(session.path)
            if st.backoff_until and st.backoff_until > time.time():
                continue
            if now - session.tracker.cursor.mtime < idle:
                continue
            ready.append(session)

        def fullness(s: Session) -> float:
            ledger = s.tracker.ledger
            st = self.store_session(s.path)
            return (ledger.planning_tokens if ledger else 0) / max(1, st.compact_threshold or 1)

        return sorted(ready, key=fullness, reverse=True)

    async def act(self, session: Session, *, force: bool = False, dry_run: bool = False) -> Outcome:
        """Flush, then prune and/or compact one session; never raises for ordinary failures."""
        from daemon.commit.locks import session_is_locked
        from daemon.job import compact_file, workspace_for
        from daemon.state import record_failure, record_success

        path = session.path
        session.in_flight = True
        try:
            if session_is_locked(path):
                return Outcome(path, "busy", detail={"reason": "an agent holds the session lock"})
            transcript = await anyio.to_thread.run_sync(read_transcript, path)
            if not transcript.usable:
                return Outcome(path, "skip", detail={"reason": "unusable transcript"})
            budget = budget_for(self.config, transcript)
            st = self.store_session(path)
            decision: Decision = decide(
                self.config, budget, transcript_bytes=transcript.size, flushed_this_cycle=st.flushed_cycle == st.compactions
            )
            detail: dict[str, Any] = {"tokens": budget.estimated_with_margin, "threshold": budget.compact_threshold}
            if dry_run:
                return Outcome(path, decision.action, detail={**detail, "flush": decision.flush, "route": budget.route})
            if decision.flush:
                await self.flush(path, transcript, budget)
                st.flushed_cycle = st.compactions
            if decision.action in ("none", "flush", "skip"):
                session.due = False
                return Outcome(path, decision.action if not decision.flush else "flush", detail=detail)
            started = time.monotonic()
            result = await compact_file(path, self.config, client=self.client(), force=force, route=budget.route)
            latency = time.monotonic() - started
            detail.update(
                {
                    "route": result.route,
                    "level": result.engine.level if result.engine else None,
                    "mode": result.mode,
                    "reason": result.reason,
                }
            )
            self.metrics.record_compaction(result, latency) if hasattr(self.metrics, "record_compaction") else None
            session.tracker.cursor.reset()
            session.tracker.refresh()
            if result.committed:
                ledger = session.tracker.ledger
                after = quick_budget(
                    self.config,
                    provider=ledger.provider if ledger else None,
                    model=ledger.model if ledger else None,
                    tokens=ledger.planning_tokens if ledger else 0,
                )
                st.compactions += 1
                self.compactions += 1
                st.last_level = detail["level"]
                if after.over_compact_threshold:
                    record_failure(st, time.time(), self.config.service.backoff_base_seconds, self.config.service.backoff_max_seconds)
                    detail["reason"] = "still over threshold after compaction; backing off"
                else:
                    record_success(st)
                session.due = after.over_compact_threshold and False
            else:
                self.failures += 1
                record_failure(st, time.time(), self.config.service.backoff_base_seconds, self.config.service.backoff_max_seconds)
            st.last_action = f"{result.route}:{'committed' if result.committed else 'not committed'}"
            st.last_action_at = time.time()
            _ = workspace_for
            log.info("session=%s action=%s committed=%s %s", path, result.route, result.committed, result.reason or "")
            return Outcome(path, result.route, result.committed, detail)
        except Exception:
            log.exception("session=%s action failed", path)
            self.failures += 1
            return Outcome(path, "error")
        finally:
            session.in_flight = False

    async def flush(self, path: str, transcript: Any, budget: Any) -> None:
        """Hooks (fire-and-forget) and the built-in memory extraction; never blocks the compaction on failure."""
        from daemon.job import engine_settings, workspace_for
        from daemon.memory import flush_memories, run_hooks
        from daemon.summarize.engine import CompactionEngine

        workspace = workspace_for(self.config, path, transcript)
        plan = CompactionEngine(engine_settings(self.config)).plan(transcript)
        if self.config.memory_flush.hooks:
            event = {
                "event": "before_compaction",
                "session_id": transcript.session_id,
                "session_file": path,
                "tokens": budget.estimated_with_margin,
                "context_window": budget.context_window,
                "flush_threshold": budget.flush_threshold,
                "compact_threshold": budget.compact_threshold,
                "memory_dir": str(workspace / "memory") if workspace else None,
                "timestamp": datetime.now().astimezone().isoformat(),
            }
            try:
                await run_hooks(self.config.memory_flush.hooks, event)
            except Exception:
                log.exception("session=%s memory hooks failed", path)
        if workspace is None or plan is None:
            return
        result = await flush_memories(
            self.client(), plan.to_summarize, workspace=workspace, session_id=transcript.session_id or "", now=datetime.now().astimezone()
        )
        log.info("session=%s action=memory_flush status=%s", path, result.status)

    def client(self) -> Any:
        if self._client is None:
            from daemon.job import make_client

            self._client = make_client(self.config, self.limiter)
        return self._client

    # --- loops ----------------------------------------------------------------------------------------------
    async def worker(self) -> None:
        while not self.stopping:
            now = time.time()
            ready = self.ready_sessions(now)
            if ready:
                await self.act(ready[0])
                continue
            self.wakeup = anyio.Event()
            with anyio.move_on_after(1.0):
                await self.wakeup.wait()

    async def watch_roots(self, tg: Any) -> None:
        """Start a watcher for every root, now and whenever a new one appears; rescan periodically."""
        while not self.stopping:
            for root in expand_roots(self.config.sessions.roots):
                if root not in self.roots:
                    stop = anyio.Event()
                    self.roots[root] = stop
                    tg.start_soon(self._watch_one, root, stop)
                    for path in scan_root(root):
                        self.refresh(path)
                    log.info("root=%s action=watching", root)
            with anyio.move_on_after(self.config.service.rescan_seconds):
                await self._rescan_due.wait()
            self._rescan_due = anyio.Event()
            self.rescan()

    _rescan_due: anyio.Event

    async def _watch_one(self, root: str, stop: anyio.Event) -> None:
        s = self.config.service
        try:
            async for paths in watch_root(root, stop, debounce_ms=s.debounce_ms, step_ms=s.step_ms):
                self.heartbeat = time.monotonic()
                for path in paths:
                    self.refresh(path)
        except (OSError, FileNotFoundError) as exc:
            log.warning("root=%s watcher stopped: %s", root, exc)
        self.roots.pop(root, None)

    async def status_loop(self) -> None:
        from daemon.state import write_metrics, write_status

        while not self.stopping:
            status = self.status()
            try:
                await anyio.to_thread.run_sync(write_status, self.config.state_dir, status)
                await anyio.to_thread.run_sync(self.store.save_sessions, self.state)
                await anyio.to_thread.run_sync(write_metrics, self.config.state_dir, self.metrics_snapshot())
            except OSError as exc:
                log.warning("cannot write state: %s", exc)
            self.notifier.status(self.status_line())
            await anyio.sleep(self.config.service.status_refresh_seconds)

    async def watchdog_loop(self) -> None:
        interval = self.notifier.watchdog_interval()
        if not interval:
            return
        while not self.stopping:
            # Ping only while the watchers show progress: a wedged pipeline must be restarted by systemd.
            if time.monotonic() - self.heartbeat < max(2 * interval, 5.0):
                self.notifier.watchdog()
            await anyio.sleep(interval)

    async def heartbeat_loop(self) -> None:
        while not self.stopping:
            self.heartbeat = time.monotonic()
            await anyio.sleep(1.0)

    def metrics_snapshot(self) -> Any:
        if hasattr(self.metrics, "set_sessions"):
            self.metrics.set_sessions(
                {p: (s.tracker.ledger.session_id if s.tracker.ledger else None, s.tracker.ledger.tokens if s.tracker.ledger else 0) for p, s in self.sessions.items()}
            )
        return self.metrics

    def near_threshold(self) -> int:
        count = 0
        for path, session in self.sessions.items():
            ledger = session.tracker.ledger
            st = self.state.get(path)
            if ledger and st and st.compact_threshold and ledger.planning_tokens * 1.2 >= NEAR_THRESHOLD_SHARE * st.compact_threshold:
                count += 1
        return count

    def status_line(self) -> str:
        return f"watching {len(self.sessions)} sessions, {self.near_threshold()} near threshold, {self.compactions} compactions"

    def status(self) -> dict[str, Any]:
        sessions = []
        for path, session in sorted(self.sessions.items()):
            ledger = session.tracker.ledger
            st = self.store_session(path)
            sessions.append(
                {
                    "path": path,
                    "session_id": ledger.session_id if ledger else None,
                    "tokens": ledger.planning_tokens if ledger else None,
                    "window": st.window,
                    "compact_threshold": st.compact_threshold,
                    "last_action": st.last_action,
                    "last_action_at": st.last_action_at,
                    "backoff_until": st.backoff_until,
                    "due": session.due,
                }
            )
        return {
            "pid": os.getpid(),
            "version": __version__,
            "started_at": self.started_at,
            "updated_at": time.time(),
            "config": self.config.source,
            "sessions_watched": len(self.sessions),
            "near_threshold": self.near_threshold(),
            "compactions": self.compactions,
            "failures": self.failures,
            "sessions": sessions,
        }

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
        for stop in self.roots.values():
            stop.set()
        scope.cancel()

    def reload(self) -> None:
        self.notifier.reloading()
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            log.error("reload rejected, keeping the running config: %s", exc)
            self.notifier.ready(f"config reload rejected: {exc.key}")
            return
        self.config = config
        self._client = None
        log.info("action=reloaded config=%s", config.source)
        self.notifier.ready("config reloaded")

    async def serve(self, shutdown_trigger: ShutdownTrigger | None = None) -> int:
        from daemon.commit.locks import AlreadyRunning, InstanceLock

        self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = InstanceLock(self.config.state_dir)
        try:
            lock.acquire()
        except AlreadyRunning as exc:
            log.error("%s", exc)
            return 3
        try:
            self._recover()
            self.state = self.store.load_sessions()
            self._rescan_due = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.signals, tg.cancel_scope)
                if shutdown_trigger is not None:

                    async def trigger() -> None:
                        await shutdown_trigger()
                        self.shutdown(tg.cancel_scope)

                    tg.start_soon(trigger)
                tg.start_soon(self.watch_roots, tg)
                await anyio.sleep(0)
                tg.start_soon(self.heartbeat_loop)
                for _ in range(self.config.summarizer.max_concurrency):
                    tg.start_soon(self.worker)
                tg.start_soon(self.status_loop)
                tg.start_soon(self.watchdog_loop)
                self.notifier.ready(self.status_line())
                log.info("action=ready sessions=%d state_dir=%s", len(self.sessions), self.config.state_dir)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    self.store.save_sessions(self.state)
                except OSError:
                    pass
                if self._client is not None:
                    await self._client.close()
            lock.release()
        log.info("action=stopped")
        return 0

    def _recover(self) -> None:
        try:
            from daemon.commit.journal import recover
        except ImportError:  # pragma: no cover - during development only
            return
        recover(self.config.state_dir)


def run_service(config: Config, *, config_path: str | None = None) -> int:
    service = Service(config, config_path=config_path)
    return anyio.run(service.serve)


def run_once(
    config: Config,
    *,
    dry_run: bool = False,
    as_json: bool = False,
    force: bool = False,
    sessions: list[str] | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """One pass over every session: what ``run`` would do now, then exit."""

    async def go() -> list[Outcome]:
        service = Service(config)
        service.state = service.store.load_sessions() if not dry_run else {}
        roots = [os.path.realpath(s) for s in sessions] if sessions else expand_roots(config.sessions.roots)
        service._explicit_roots = roots
        outcomes: list[Outcome] = []
        for root in roots:
            for path in scan_root(root):
                service.refresh(path)
        try:
            for path, session in sorted(service.sessions.items()):
                if not session.due:
                    ledger = session.tracker.ledger
                    outcomes.append(Outcome(path, "fits", detail={"tokens": ledger.planning_tokens if ledger else None}))
                    continue
                idle = time.time() - session.tracker.cursor.mtime >= config.sessions.idle_seconds
                if not (idle or force or dry_run):
                    outcomes.append(Outcome(path, "wait", detail={"reason": "not idle yet"}))
                    continue
                outcomes.append(await service.act(session, force=force, dry_run=dry_run))
        finally:
            if not dry_run:
                service.store.save_sessions(service.state)
            if service._client is not None:
                await service._client.close()
        return outcomes

    outcomes = anyio.run(go)
    if as_json:
        out.write(orjson.dumps([{"path": o.path, "action": o.action, "committed": o.committed, **o.detail} for o in outcomes], option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        if not outcomes:
            out.write("no sessions found under the configured roots\n")
        for outcome in outcomes:
            out.write(outcome.line() + "\n")
    return 1 if any(o.action == "error" for o in outcomes) else 0
