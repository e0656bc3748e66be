"""OpenClaw 2026.9+ as a second session source beside the file tailer: discover, watch, refresh, act.

The service sees four things: :meth:`OpenClawSource.run` (watchers on each agent's ``agent/`` directory for
the database's ``-wal``, through :func:`compactd.watch.watch_root`, plus a worker), :meth:`states` and
:meth:`annotate` for ``status.json``, and :meth:`once` for ``compactd once``. Nothing is written under an
agent directory: the database is read with ``mode=ro``, the memory flush goes to the agent's workspace
``memory/`` (the same trust rule as a header ``cwd``), and the compaction is the gateway's own, asked for over
its RPC and verified in the database before it counts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from compactd import offload
from compactd._worker import work
from compactd.config import Config
from compactd.decision import Decision, Figures, Recorded, decide, readiness
from compactd.defaults import BUSY_RETRY_SECONDS
from compactd.openclaw._discovery import Agent, Install, discover
from compactd.openclaw._follower import Follower, read_transcript
from compactd.openclaw._gateway import GatewayError, RpcError, call
from compactd.openclaw._guard import DATABASE_NAME
from compactd.openclaw._store import Node, Store, StoreError
from compactd.state import Backoff, Metrics, SessionState, describe_error

log = logging.getLogger(__name__)

SOURCE = "openclaw"
# How long the gateway may take over one compaction (its summarizer's timeout is 180 s by default).
COMPACT_TIMEOUT_SECONDS = 240.0
# How long the database may take to show the compaction the gateway reported.
VERIFY_SECONDS = 15.0
VERIFY_POLL_SECONDS = 0.2
IDLE_WAKE_SECONDS = 60.0
_WATCHED_NAMES = frozenset({DATABASE_NAME, DATABASE_NAME + "-wal"})


def _watched(name: str) -> bool:
    return name in _WATCHED_NAMES


def _signature(database: str) -> tuple[int, ...]:
    """What a write by the gateway changes: the database's and its ``-wal``'s size and mtime."""
    out: list[int] = []
    for path in (database, database + "-wal"):
        try:
            st = os.stat(path)
        except OSError:
            out.extend((-1, -1))
        else:
            out.extend((st.st_size, st.st_mtime_ns))
    return tuple(out)


@dataclass(slots=True)
class OpenClawSession:
    agent: Agent
    follower: Follower
    state: SessionState
    decision: Decision | None = None
    due: bool = False
    in_flight: bool = False
    flushed_at_count: int | None = None  # the compactionCount of the cycle compactd flushed in
    last_change: float = 0.0

    @property
    def key(self) -> str:
        return self.follower.session_key

    @property
    def node(self) -> Node | None:
        return self.follower.node


def session_path(agent: Agent, session_key: str) -> str:
    """How an OpenClaw session is named where file sessions have a path (status, logs)."""
    return f"{agent.database}#{session_key}"


@dataclass
class OpenClawSource:
    config: Config
    env: Mapping[str, str]
    client: Callable[[], Any] = lambda: None  # the summarizer client for the memory flush (None: digest only)
    task_group: Any = None  # where fire-and-forget hooks run (the service's)
    changed: Callable[[], None] = lambda: None  # tells the service its status files are stale
    metrics: Metrics = field(default_factory=Metrics)  # the service's: its sessions beside the file ones
    install: Install | None = None
    sessions: dict[str, OpenClawSession] = field(default_factory=dict)
    stores: dict[str, Store] = field(default_factory=dict)
    gateway_problem: str | None = None  # the last "down"/"refused" answer, for status and doctor
    watching: dict[str, anyio.Event] = field(default_factory=dict)
    wakeup: anyio.Event = field(default_factory=anyio.Event)
    stopping: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # --- discover / refresh -------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.config.openclaw.enabled

    def discover(self) -> Install | None:
        if not self.enabled:
            self.install = None
            return None
        oc = self.config.openclaw
        self.install = discover(self.env, state_dir=oc.state_dir, config_path=oc.config_path)
        if self.install.config_error:
            log.warning("openclaw action=config_unusable reason=%s", self.install.config_error)
        for agent in self.install.agents:
            self.stores.setdefault(agent.database, Store(agent.database))
        return self.install

    def agents(self) -> tuple[Agent, ...]:
        return self.install.agents if self.install is not None else ()

    def refresh_all(self) -> None:
        for agent in self.agents():
            self.refresh(agent)

    def refresh(self, agent: Agent) -> None:
        """Read what is new in one agent's database (only new rows per session) and decide what is due.

        A database that cannot be read fails its sessions' reading (logged once), never the service.
        """
        with self._lock:  # the watcher's thread and the worker's may both refresh an agent
            self._refresh(agent)

    def _refresh(self, agent: Agent) -> None:
        store = self.stores.setdefault(agent.database, Store(agent.database))
        now = time.time()
        try:
            with store.connect() as conn:
                nodes = store.nodes(conn)
                seen = set()
                for node in nodes:
                    path = session_path(agent, node.session_key)
                    seen.add(path)
                    session = self.sessions.get(path)
                    if session is None:
                        follower = Follower(node.session_key)
                        session = self.sessions[path] = OpenClawSession(
                            agent, follower, SessionState(path=path)
                        )
                    changed = session.follower.refresh(store, conn, node)
                    if changed:
                        session.last_change = now
                    self._plan(session, now)
        except StoreError as exc:
            log.warning("openclaw database=%s action=unreadable reason=%s", agent.database, exc)
            return
        for path in [
            p for p, s in self.sessions.items() if s.agent.database == agent.database and p not in seen
        ]:
            self.sessions.pop(path, None)
            self.metrics.forget_session(path)

    def _plan(self, session: OpenClawSession, now: float) -> None:
        """The one decision point (:func:`compactd.decision.decide`) on OpenClaw 2026.9's thresholds."""
        ledger, node, st = session.follower.ledger, session.node, session.state
        if ledger is None or node is None:
            session.due = False
            return
        tokens = ledger.planning_tokens
        figures = Figures(
            None,
            None,
            tokens,
            mtime=now - self.quiet_seconds(session, now),
            reducible_chars=0,  # the gateway compacts: its own cut, nothing pruned here
            thresholds="openclaw-2026.9",
            window=session.agent.context_window,
        )
        decision = decide(self.config, figures, Recorded(flushed_this_cycle=self._flushed(session)), now=now)
        budget = decision.budget
        st.session_id = node.session_id
        st.tokens = st.planning_tokens = tokens
        st.window, st.compact_threshold = budget.context_window, budget.compact_threshold
        st.flush_threshold = budget.flush_threshold or None
        self.metrics.set_session(
            st.path, session_id=node.session_id, tokens=tokens, window=budget.context_window
        )
        session.decision = decision
        self.changed()
        session.due = decision.due
        if not session.due:
            st.show_next(None, now)
        elif node.active_run:
            st.show_next(f"busy: run {node.active_run} in progress", now)
        else:
            st.show_next(decision.action, now)
        if session.due:
            self.wakeup.set()

    def _flushed(self, session: OpenClawSession) -> bool:
        """This compaction cycle's memories are already flushed (by compactd, or by OpenClaw's own turn)."""
        node = session.node
        count = node.compaction_count if node is not None else 0
        if session.flushed_at_count == count:
            return True
        record = node.entry.get("memoryFlush") if node is not None else None
        return (
            isinstance(record, dict)
            and record.get("kind") == "succeeded"
            and record.get("compactionCount") == count
        )

    # --- readiness ----------------------------------------------------------------------------------------
    def quiet_seconds(self, session: OpenClawSession, now: float) -> float:
        node = session.node
        last = max(session.follower.last_event_at, (node.updated_at if node is not None else None) or 0.0)
        return now - last

    def ready(self, now: float, *, force: bool = False) -> list[OpenClawSession]:
        """Due sessions that are idle, have no run in progress, are not backing off nor in flight; fullest
        first."""
        out = [
            s
            for s in self.sessions.values()
            if s.due
            and not s.in_flight
            and not s.state.in_backoff(now)
            and (force or (s.node is not None and not s.node.active_run))
            and readiness(self.config, turn=None, quiet_seconds=self.quiet_seconds(s, now), force=force).ready
        ]
        return sorted(out, key=lambda s: -(s.state.percent_of_budget() or 0.0))

    def next_wake(self, now: float) -> float:
        waits = [
            max(
                s.state.backoff_remaining(now),
                self.config.sessions.idle_seconds - self.quiet_seconds(s, now),
                BUSY_RETRY_SECONDS if s.node is not None and s.node.active_run else 0.0,
            )
            for s in self.sessions.values()
            if s.due and not s.in_flight
        ]
        return max(0.05, min(waits)) if waits else IDLE_WAKE_SECONDS

    # --- acting -------------------------------------------------------------------------------------------
    def _retry_later(self, st: SessionState, reason: str) -> dict[str, Any]:
        st.retry_later(time.time(), self.config.sessions.idle_seconds, reason)
        self.changed()
        log.info("session=%s action=busy reason=%s", st.path, reason)
        return {"action": "busy", "reason": reason}

    def _back_off(self, st: SessionState, stage: str, reason: str) -> dict[str, Any]:
        s = self.config.service
        delay = Backoff.record_failure(
            st, time.time(), s.backoff_base_seconds, s.backoff_max_seconds, error=reason, stage=stage
        )
        self.metrics.record_failure(stage.replace(" ", "_"))
        st.next_action = f"retry in {delay:.0f}s"
        self.changed()
        log.warning(
            "session=%s action=failed stage=%s reason=%s retry_in=%.0fs", st.path, stage, reason, delay
        )
        return {"action": "failed", "stage": stage, "reason": reason, "retry_in": round(delay)}

    async def act(self, session: OpenClawSession) -> dict[str, Any]:
        """Flush, then ask the gateway to compact; never raises (the session boundary, as the file path's)."""
        st = session.state
        session.in_flight = True
        try:
            return await self._act(session)
        except Exception as exc:
            return self._back_off(st, "act", describe_error(exc))
        finally:
            session.in_flight = False

    async def _act(self, session: OpenClawSession) -> dict[str, Any]:
        st, agent = session.state, session.agent
        store = self.stores[agent.database]
        await anyio.to_thread.run_sync(lambda: self.refresh(agent))
        node, decision = session.node, session.decision
        if node is None or decision is None or not session.due:
            return {"action": "none"}
        if node.active_run:
            return self._retry_later(st, f"run {node.active_run} in progress")
        detail: dict[str, Any] = {"tokens": st.planning_tokens, "threshold": st.compact_threshold}
        if decision.flush:
            await self._flush(session, store)
            session.flushed_at_count = node.compaction_count
            st.mark_flushed(time.time())
        if not decision.compact:
            session.due = False
            return {"action": "flush", **detail}
        install = self.install
        if install is None:
            return {"action": "none"}
        before_count, before_seq = node.compaction_count, session.follower.last_seq
        started = time.monotonic()
        params = {"key": session.key, "agentId": agent.agent_id}
        try:
            payload = await anyio.to_thread.run_sync(
                lambda: call(
                    install.gateway_url,
                    install.token,
                    "sessions.compact",
                    params,
                    timeout=COMPACT_TIMEOUT_SECONDS,
                )
            )
        except GatewayError as exc:
            self.gateway_problem = f"{exc.kind}: {exc}"
            return self._back_off(st, f"gateway {exc.kind}", str(exc))
        except RpcError as exc:
            self.gateway_problem = None
            if "retry after it finishes" in exc.message.lower():  # an active run or queued work: busy
                return self._retry_later(st, exc.message)
            return self._back_off(st, "gateway", str(exc))
        self.gateway_problem = None
        if not (isinstance(payload, dict) and payload.get("compacted") is True):
            reason = payload.get("reason") if isinstance(payload, dict) else None
            return self._back_off(st, "gateway", f"not compacted: {reason or payload!r}")
        verified = await self._verify(session, store, before_count, before_seq)
        if not verified:
            return self._back_off(
                st, "verify", "the gateway reported a compaction the database does not show"
            )
        elapsed = time.monotonic() - started
        st.mark_compacted(time.time(), level="gateway", route="compact_only")
        self.metrics.record_compaction("compact_only", "gateway")
        Backoff.record_success(st)
        self.changed()
        result = payload.get("result")
        if isinstance(result, dict):
            detail.update(
                {"tokens_before": result.get("tokensBefore"), "tokens_after": result.get("tokensAfter")}
            )
        log.info(
            "session=%s action=compacted via=gateway seconds=%.1f compaction_count=%d",
            st.path,
            elapsed,
            before_count + 1,
        )
        return {"action": "compact_only", "committed": True, "seconds": round(elapsed, 2), **detail}

    async def _verify(
        self, session: OpenClawSession, store: Store, before_count: int, before_seq: int
    ) -> bool:
        """A new ``compaction`` event after ``before_seq`` and ``compactionCount`` one higher, in the database."""
        deadline = time.monotonic() + VERIFY_SECONDS

        def look() -> bool:
            with store.connect() as conn:
                node = store.node(conn, session.key)
                if node is None or node.compaction_count < before_count + 1:
                    return False
                last = store.last_compaction_seq(conn, node.session_id)
                return last is not None and (
                    last > before_seq or node.session_id != session.follower.session_id
                )

        while True:
            if await anyio.to_thread.run_sync(look):
                await anyio.to_thread.run_sync(lambda: self.refresh(session.agent))
                return True
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(VERIFY_POLL_SECONDS)

    async def _flush(self, session: OpenClawSession, store: Store) -> None:
        """compactd's memory-flush hooks and built-in flush into the agent workspace's ``memory/`` (OpenClaw's
        own flush runs only inside turns); neither can stop the compaction."""
        from compactd.job import engine_settings
        from compactd.memory import flush_span, start_hooks
        from compactd.summarize.engine import CompactionEngine
        from compactd.workspace import claimed_workspace

        st, agent = session.state, session.agent
        choice = claimed_workspace(agent.workspace, agent.database)  # owned like the database, not shared
        workspace = choice.workspace
        if workspace is None and choice.reason:
            log.warning(
                "session=%s action=no_workspace workspace=%s reason=%s",
                st.path,
                agent.workspace,
                choice.reason,
            )
        await start_hooks(
            self.config,
            self.metrics,
            self.task_group,
            session_file=st.path,
            session_id=st.session_id,
            tokens=st.planning_tokens,
            context_window=st.window or 0,
            flush_threshold=st.flush_threshold or 0,
            compact_threshold=st.compact_threshold or 0,
            memory_dir=workspace.memory_dir if workspace else None,
        )
        if workspace is None or st.session_id is None:
            return
        session_id = st.session_id

        def load() -> Any:
            with store.connect() as conn:
                return read_transcript(store, conn, session_id)

        transcript = await anyio.to_thread.run_sync(load)
        engine = CompactionEngine(engine_settings(self.config))
        plan = await offload.run_sync(lambda: engine.plan(transcript))  # a walk of the whole branch
        if plan is None:
            return
        await flush_span(
            self.config,
            self.metrics,
            self.client(),
            plan.to_summarize,
            workspace=workspace,
            session_file=st.path,
            session_id=session_id,
        )

    # --- loops --------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Watch every agent's database and act on ready sessions until :meth:`stop`."""
        if not self.enabled:
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._worker)
            while not self.stopping:
                await anyio.to_thread.run_sync(self.discover)
                for agent in self.agents():
                    directory = agent.database.rsplit("/", 1)[0]
                    if directory not in self.watching:
                        stop = anyio.Event()
                        self.watching[directory] = stop
                        tg.start_soon(self._watch, agent, directory, stop)
                        log.info(
                            "openclaw agent=%s action=watching database=%s", agent.agent_id, agent.database
                        )
                await anyio.to_thread.run_sync(self.refresh_all)  # the safety net for dropped events
                await anyio.sleep(self.config.service.rescan_seconds)
            tg.cancel_scope.cancel()

    async def _watch(self, agent: Agent, directory: str, stop: anyio.Event) -> None:
        from compactd.watch import watch_root

        s = self.config.service
        last = _signature(agent.database)
        try:
            async for paths in watch_root(
                directory,
                stop,
                debounce_ms=s.debounce_ms,
                step_ms=s.step_ms,
                rust_timeout_ms=5_000,
                names=_watched,
            ):
                # Our own read opens the -wal, which the watcher may report: only a new size or mtime counts.
                signature = _signature(agent.database)
                if paths and signature != last:
                    last = signature
                    await anyio.to_thread.run_sync(lambda: self.refresh(agent))
        except Exception as exc:
            log.warning(
                "openclaw directory=%s action=watcher_stopped error=%s", directory, describe_error(exc)
            )
        self.watching.pop(directory, None)

    async def _worker(self) -> None:
        await work(self, self.ready, self.act)

    def stop(self) -> None:
        self.stopping = True
        for event in self.watching.values():
            event.set()
        self.wakeup.set()

    async def once(self, *, force: bool = False) -> list[dict[str, Any]]:
        """``compactd once``: one look at every OpenClaw session, acting on the ready ones."""
        if not self.enabled:
            return []
        await anyio.to_thread.run_sync(self.discover)
        await anyio.to_thread.run_sync(self.refresh_all)
        now = time.time()
        ready = {id(s) for s in self.ready(now, force=force)}
        rows = []
        for path, session in sorted(self.sessions.items()):
            if id(session) in ready:
                outcome = await self.act(session)
            elif session.due:
                outcome = {"action": "wait", "reason": session.state.next_action or "not idle yet"}
            else:
                outcome = {
                    "action": "fits",
                    "tokens": session.state.planning_tokens,
                    "threshold": session.state.compact_threshold,
                }
            rows.append({"path": path, "source": SOURCE, "session_key": session.key, **outcome})
        return rows

    # --- status -------------------------------------------------------------------------------------------
    def states(self) -> dict[str, SessionState]:
        """Every session's state, from a copy of the table taken at once (a worker thread's refresh may add or
        drop sessions meanwhile)."""
        return {path: s.state for path, s in list(self.sessions.items())}

    def annotate(self, status: dict[str, Any]) -> None:
        """Mark each ``status.json`` row with its source; OpenClaw rows get the session key, the agent, the
        database's compaction count and whether a run is active."""
        for row in status.get("sessions", []):
            session = self.sessions.get(str(row.get("path")))
            if session is None:
                row.setdefault("source", "file")
                continue
            node = session.node
            row.update(
                {
                    "source": SOURCE,
                    "file": session.key,
                    "session_key": session.key,
                    "agent": session.agent.agent_id,
                    "compaction_count": node.compaction_count if node is not None else None,
                    "active_run": bool(node is not None and node.active_run),
                    "fill": row.get("percent_of_budget"),
                    "openclaw_total_tokens": node.entry.get("totalTokens") if node is not None else None,
                }
            )
        if self.install is not None:
            status["openclaw"] = {
                "state_dir": self.install.state_dir,
                "gateway": self.install.gateway_url,
                "agents": [a.agent_id for a in self.install.agents],
                "gateway_problem": self.gateway_problem,
            }
