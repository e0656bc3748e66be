"""OpenClaw 2026.9+ as a second session source beside the file tailer: discover, watch, refresh, act.

The service sees four things: :meth:`OpenClawSource.run` (watchers on each agent's ``agent/`` directory for
the database's ``-wal``, through :func:`compactd.sources.watch.watch_root`, plus a worker), :meth:`states` and
:meth:`annotate` for ``status.json``, and :meth:`once` for ``compactd once``. Nothing is written under an
agent directory: the database is read only when it is the agent owner's own, as that owner, without a write
(:mod:`compactd.sources.openclaw._claim`, :mod:`compactd.sources.openclaw._store`), the memory flush goes to the agent's workspace
``memory/`` (the same trust rule as a header ``cwd``), and the compaction is the gateway's own, asked for over
its RPC and verified in the database before it counts.
"""

from __future__ import annotations

import logging
import os
import sqlite3
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
from compactd.sources.openclaw._discovery import Agent, Install, discover
from compactd.sources.openclaw._follower import Follower, read_session_rows
from compactd.sources.openclaw._gateway import GatewayError, RpcError, call
from compactd.sources.openclaw._guard import AGENT_SUBDIR, DATABASE_NAME
from compactd.sources.openclaw._store import Node, Store, StoreError, row_node
from compactd.state import Backoff, SessionState, describe_error

if TYPE_CHECKING:
    from compactd.core.reader import Transcript

log = logging.getLogger(__name__)

SOURCE = "openclaw"
# How long the database may take to show the compaction the gateway reported.
VERIFY_SECONDS = 15.0
VERIFY_POLL_SECONDS = 0.2
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


@datarecord(slots=True)
class OpenClawSession:
    """One OpenClaw session as served: its agent, follower, state and last decision."""

    agent: Agent
    follower: Follower
    state: SessionState
    decision: Decision | None = None
    due: bool = False
    in_flight: bool = False
    flushed_at_count: int | None = None  # the compactionCount of the cycle compactd flushed in
    last_change: float = 0.0
    entry_json: str | None = None  # the node's entry as last read: an unchanged one is not parsed again

    @property
    def key(self) -> str:
        return self.follower.session_key

    @property
    def node(self) -> Node | None:
        return self.follower.node


def session_path(agent: Agent, session_key: str) -> str:
    """How an OpenClaw session is named where file sessions have a path (status, logs)."""
    return f"{agent.database}#{session_key}"


@datarecord
class OpenClawSource(HostedSource[OpenClawSession]):
    """OpenClaw 2026.9+ agents' SQLite stores, followed through the shared hosted-source loop."""

    kind = SOURCE
    install: Install | None = None
    stores: dict[str, Store] = field(default_factory=dict)
    gateway_problem: str | None = None  # the last "down"/"refused" answer, for status and doctor
    problems: dict[str, str] = field(default_factory=dict)  # agent id -> why its database cannot be read
    refusals: dict[str, str] = field(default_factory=dict)  # agent dir → why it is not followed (logged once)
    # Per database: the transcript rowid read up to, and the layout (sessions, generations, config) as of then.
    _marks: dict[str, tuple[int, Any]] = field(default_factory=dict, repr=False)
    _by_session_id: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)  # → (database, key)
    _due_paths: set[str] = field(default_factory=set, repr=False)  # a superset of the due sessions
    _recent: dict[str, float] = field(default_factory=dict, repr=False)  # path → when rows last came
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)  # ends gateway calls

    # --- discover / refresh -------------------------------------------------------------------------------
    name = "openclaw-sqlite"

    @property
    def enabled(self) -> bool:
        return self.config.openclaw.enabled

    def discover(self) -> Install | None:
        if not self.enabled:
            self.install = None
            return None
        oc = self.config.openclaw
        try:
            install = discover(self.env, state_dir=oc.state_dir, config_path=oc.config_path)
        except Exception as exc:  # the boundary: whatever the install holds, the service goes on
            log.warning("openclaw action=discovery_failed error=%s", describe_error(exc))
            return self.install
        if install.config_error and (
            self.install is None or self.install.config_error != install.config_error
        ):
            log.warning("openclaw action=config_unusable reason=%s", install.config_error)
        self.install = install
        for agent_dir, reason in self.install.refused:
            if self.refusals.get(agent_dir) != reason:  # once per agent and reason, not every rescan
                self.refusals[agent_dir] = reason
                log.warning("openclaw agent_dir=%s action=refused reason=%s", agent_dir, reason)
            for path in [p for p, s in self.sessions.items() if s.agent.agent_dir == agent_dir]:
                self.sessions.pop(path, None)
                self.metrics.forget_session(path)
            watched = self.watching.get(os.path.join(agent_dir, AGENT_SUBDIR))
            if watched is not None:
                watched.set()  # its watcher ends (and forgets the directory)
        for agent in self.install.agents:
            self.refusals.pop(agent.agent_dir, None)
            self.store_of(agent)
        return self.install

    def store_of(self, agent: Agent) -> Store:
        """The agent's store, read as the agent's owner (a new one when the owner changed)."""
        store = self.stores.get(agent.database)
        if store is None or store.owner != agent.owner:
            store = self.stores[agent.database] = Store(agent.database, agent.owner, agent.identity)
        if self.stopping:  # made after stop() looked at the stores
            store.stop()
        return store

    def agents(self) -> tuple[Agent, ...]:
        return self.install.agents if self.install is not None else ()

    def refresh_all(self) -> None:
        """Every agent's database looked at in full (the rescan's safety net; see :meth:`refresh`)."""
        for agent in self.agents():
            self.refresh(agent, full=True)

    def refresh(self, agent: Agent, *, replan: OpenClawSession | None = None, full: bool = False) -> None:
        """Read what is new in one agent's database and decide again for the sessions it changed.

        The cost follows the rows appended, not the sessions the database holds: the transcript table's rowid
        b-tree says which sessions have rows past the last mark, and only those sessions' nodes, the due
        ones' (their readiness needs a fresh ``status`` and ``updatedAt``), those with rows in the last
        rescan interval (:meth:`_recent_keys`) and ``replan``'s are read. A full
        look (``full``: the rescan, every ``rescan_seconds``; the first look; a rewrite; a new config; rowids
        gone below the mark) compares every node and every session's newest ``seq`` (one GROUP BY in SQLite):
        what no new row reveals (a node's own change while not due, a deleted session, rows whose rowids
        were reused after a delete) is seen then, at most one rescan late; nothing is lost, as followers
        read by ``seq``. ``replan``: a session to read and decide again even if unchanged (what its last act
        recorded counts).

        Two boundaries: a session whose row cannot be read is that session's failure (backed off, shown in
        ``status``, not read again until the back-off ends); a database that cannot be read at all is that
        agent's failure (in :attr:`problems`). Neither stops the other sessions, the other agents or the service.
        """
        with self._lock:  # the watcher's thread and the worker's may both refresh an agent
            try:
                self._refresh(agent, replan, full)
            except Exception as exc:
                reason = describe_error(exc)
                self._marks.pop(agent.database, None)
                for session in self.sessions.values():  # what was read before cannot be acted on now
                    if session.agent.database == agent.database:
                        session.due = False
                if self.problems.get(agent.agent_id) != reason:
                    log.warning("openclaw database=%s action=unreadable reason=%s", agent.database, reason)
                self.problems[agent.agent_id] = reason
                self.changed()
                return
            if self.problems.pop(agent.agent_id, None) is not None:
                log.info("openclaw database=%s action=recovered (readable again)", agent.database)
                self.changed()
            if replan is not None and self.sessions.get(replan.state.path) is replan:
                self._plan(replan, time.time())

    def _refresh(self, agent: Agent, replan: OpenClawSession | None, full: bool) -> None:
        store = self.store_of(agent)
        now = time.time()
        with store.connect() as conn:
            try:
                generations = store.generations(conn)
            except sqlite3.OperationalError:
                if not store.empty(conn):
                    raise
                self._drop_gone(agent, set())  # OpenClaw created the file, not yet its schema: no sessions
                return
            layout = (generations, id(self.config))
            known = self._marks.get(agent.database)
            after = known[0] if not full and known is not None and known[1] == layout else None
            appended, top = store.appended_since(conn, after)
            last_seqs: dict[str, object] | None = None
            if appended is None:
                rows = store.node_rows(conn)
                last_seqs = store.last_seqs(conn)
            else:
                by_sid = self._by_session_id
                keys = {by_sid[sid][1] for sid in appended if sid in by_sid}
                keys.update(
                    s.key for p in self._due_paths if (s := self.sessions.get(p)) is not None and s.due
                )
                keys.update(self._recent_keys(agent, now))
                if replan is not None:
                    keys.add(replan.key)
                rows = store.node_rows(
                    conn, keys=sorted(keys), session_ids=sorted(set(appended) - by_sid.keys())
                )
            seen = set()
            for key, session_id, raw in rows:
                node = row_node(key, session_id, raw)
                path = session_path(agent, node.session_key)
                seen.add(path)
                session = self.sessions.get(path)
                if (
                    session is not None
                    and session.entry_json == raw
                    and session.follower.session_id == session_id
                    and session.follower.generation == generations.get(node.session_id)
                    and (
                        node.session_id not in appended
                        if appended is not None
                        else last_seqs is not None
                        and session.follower.last_seq == last_seqs.get(node.session_id, -1)
                    )
                ):
                    continue  # nothing of it changed: its follower and decision stand
                first = session is None
                if session is None:
                    follower = Follower(node.session_key)
                    session = self.sessions[path] = OpenClawSession(agent, follower, SessionState(path=path))
                session.entry_json = raw if isinstance(raw, str) else None
                if node.session_id:
                    self._by_session_id[node.session_id] = (agent.database, node.session_key)
                if self._refresh_session(session, store, conn, node, now) and not first:
                    self._recent[path] = now  # new rows since the last look, not merely a first sight
            self._marks[agent.database] = (top, layout)
        if appended is not None:
            return  # a partial look: sessions not read are not gone
        self._drop_gone(agent, seen)

    def _drop_gone(self, agent: Agent, seen: set[str]) -> None:
        """Forget this agent's sessions a full look did not see (deleted from the database)."""
        for path in [
            p for p, s in self.sessions.items() if s.agent.database == agent.database and p not in seen
        ]:
            session = self.sessions.pop(path)
            self._due_paths.discard(path)
            if session.follower.session_id is not None:
                self._by_session_id.pop(session.follower.session_id, None)
            self.metrics.forget_session(path)

    def _refresh_session(
        self, session: OpenClawSession, store: Store, conn: sqlite3.Connection, node: Node, now: float
    ) -> bool:
        """The session boundary for reading: whatever its rows raise is recorded in its state, with a back-off
        during which it is not read again. Whether new rows were read."""
        st = session.state
        if st.error_stage == "read" and st.in_backoff(now):
            return False
        changed = False
        try:
            if node.problem is not None:
                raise StoreError(f"session_nodes row {node.session_key!r}: {node.problem}")
            changed = session.follower.refresh(store, conn, node)
            if changed:
                session.last_change = now
            if st.error_stage == "read":  # readable again
                Backoff.record_success(st)
                log.info("session=%s action=recovered (readable again)", st.path)
            self._plan(session, now)
        except Exception as exc:
            session.due = False
            session.follower.forget()
            self._back_off(st, "read", describe_error(exc))
        return changed

    def _recent_keys(self, agent: Agent, now: float) -> list[str]:
        """The keys of this agent's sessions that had new rows within the last rescan interval: the gateway
        updates a node (status, compactionCount) a little after its rows, so those nodes are read again on
        every refresh until the rescan would have seen them anyway."""
        keys = []
        for path, when in list(self._recent.items()):
            session = self.sessions.get(path)
            if session is None or now - when > self.config.service.rescan_seconds:
                del self._recent[path]
            elif session.agent.database == agent.database:
                keys.append(session.key)
        return keys

    def _plan(self, session: OpenClawSession, now: float) -> None:
        """The one decision point (:func:`compactd.core.decision.decide`) on OpenClaw 2026.9's thresholds."""
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
        if session.due:
            self._due_paths.add(st.path)
        else:
            self._due_paths.discard(st.path)
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

    def busy(self, session: OpenClawSession) -> bool:
        """A run in progress (the gateway refuses to compact under it), or no node read yet."""
        return session.node is None or bool(session.node.active_run)

    # --- acting -------------------------------------------------------------------------------------------
    def _retry_later(self, st: SessionState, reason: str) -> Outcome:
        st.retry_later(time.time(), self.config.sessions.idle_seconds, reason)
        self.changed()
        log.info("session=%s action=busy reason=%s", st.path, reason)
        return self._outcome(st.path, Action.BUSY, {"reason": reason})

    def _outcome(
        self, path: str, action: Action, detail: dict[str, Any], *, committed: bool = False
    ) -> Outcome:
        """An outcome of this source: the row names the source and the session key first."""
        session = self.sessions.get(path)
        key = session.key if session is not None else None
        return Outcome(path, action, committed, {"source": SOURCE, "session_key": key, **detail})

    async def act(self, session: OpenClawSession, *, force: bool = False, dry_run: bool = False) -> Outcome:
        """Flush, then ask the gateway to compact; never raises (the session boundary, as the file path's).
        The gateway decides itself whether the session may be compacted now: ``force`` changes nothing, and a
        dry run is never asked of this source."""
        st = session.state
        session.in_flight = True
        try:
            return await self._act(session)
        except Exception as exc:
            return self._back_off(st, "act", describe_error(exc))
        finally:
            session.in_flight = False

    async def _act(self, session: OpenClawSession) -> Outcome:
        st, agent = session.state, session.agent
        store = self.store_of(agent)
        await anyio.to_thread.run_sync(lambda: self.refresh(agent, replan=session))
        node, decision = session.node, session.decision
        if node is None or decision is None or not session.due:
            return self._outcome(st.path, Action.NONE, {})
        if node.active_run:
            return self._retry_later(st, f"run {node.active_run} in progress")
        detail: dict[str, Any] = {"tokens": st.planning_tokens, "threshold": st.compact_threshold}
        if decision.flush:
            await self._flush(session, store)
            session.flushed_at_count = node.compaction_count
            st.mark_flushed(time.time())
        if not decision.compact:
            session.due = False
            return self._outcome(st.path, Action.FLUSH, {**detail})
        install = self.install
        if install is None:
            return self._outcome(st.path, Action.NONE, {})
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
                    timeout=self.config.openclaw.rpc_timeout_seconds,
                    owner_uid=install.gateway_uid,
                    cancel=self._cancel,
                )
            )
        except GatewayError as exc:
            self.gateway_problem = f"{exc.kind}: {exc}"
            return self._back_off(st, f"gateway {exc.kind}", str(exc))
        except RpcError as exc:
            self.gateway_problem = None
            if exc.busy:  # an active run or queued work
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
        return self._outcome(
            st.path, Action.COMPACT_ONLY, committed=True, detail={"seconds": round(elapsed, 2), **detail}
        )

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
                await anyio.to_thread.run_sync(lambda: self.refresh(session.agent, replan=session))
                return True
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(VERIFY_POLL_SECONDS)

    async def _flush(self, session: OpenClawSession, store: Store) -> None:
        """compactd's memory-flush hooks and built-in flush into the agent workspace's ``memory/`` (OpenClaw's
        own flush runs only inside turns); neither can stop the compaction."""
        from compactd.memory import flush_span, start_hooks
        from compactd.summarize.engine import CompactionEngine
        from compactd.summarize.settings import engine_settings
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

        def load() -> Transcript:
            with store.connect() as conn:
                return read_session_rows(store, conn, session_id)

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

    # --- the Source protocol (loops) ---------------------------------------------------------------------
    def prepare(self) -> None:
        """Nothing to recover: the gateway owns every write to the database."""

    def save(self) -> None:
        """Nothing kept across restarts: the database is read again (by row sequence) at start."""

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Nothing before serving: :meth:`follow` discovers the agents and reads their databases."""

    async def scan(self, *, dry_run: bool, force: bool = False) -> None:
        await anyio.to_thread.run_sync(self.discover)
        await anyio.to_thread.run_sync(self.refresh_all)

    async def follow(self, tg: anyio.abc.TaskGroup) -> None:
        """Watch every agent's database until :meth:`stop`, and read them all again every rescan interval."""
        if not self.enabled:
            return
        while not self.stopping:
            await anyio.to_thread.run_sync(self.discover)
            for agent in self.agents():
                directory = agent.database.rsplit("/", 1)[0]
                if directory not in self.watching:
                    stop = anyio.Event()
                    self.watching[directory] = stop
                    tg.start_soon(self._watch_agent, agent, directory, stop)
                    log.info("openclaw agent=%s action=watching database=%s", agent.agent_id, agent.database)
            await anyio.to_thread.run_sync(self.refresh_all)  # the safety net for dropped events
            await anyio.sleep(self.config.service.rescan_seconds)

    async def _watch_agent(self, agent: Agent, directory: str, stop: anyio.Event) -> None:
        last = _signature(agent.database)

        async def batch(paths: set[str]) -> None:
            nonlocal last
            # Our own read opens the -wal, which the watcher may report: only a new size or mtime counts.
            signature = _signature(agent.database)
            if paths and signature != last:
                last = signature
                await anyio.to_thread.run_sync(lambda: self.refresh(agent))

        await self._watch(directory, stop, _watched, batch)

    def stop(self) -> None:
        """Stop the loops, and end the database reads and the gateway call under way at once (a worker thread
        in a slow query or waiting minutes for a compaction would otherwise keep SIGTERM from stopping us)."""
        self.stopping = True
        self._cancel.set()
        for store in list(self.stores.values()):
            store.stop()
            store.drop_copy()
        for event in self.watching.values():
            event.set()
        self.wakeup.set()

    def unreadable(self) -> list[Outcome]:
        """An outcome for each agent whose database cannot be read at all."""
        return [
            Outcome(
                agent.database,
                Action.FAILED,
                detail={
                    "source": SOURCE,
                    "session_key": None,
                    "stage": "read",
                    "reason": self.problems[agent.agent_id],
                },
            )
            for agent in self.agents()
            if agent.agent_id in self.problems
        ]

    def waiting(self, session: OpenClawSession, now: float) -> Outcome:
        """What ``once`` reports of a session it does not act on now."""
        st = session.state
        if st.error_stage == "read" and st.last_error:
            detail = {"stage": "read", "reason": st.last_error, "retry_in": round(st.backoff_remaining(now))}
            return self._outcome(st.path, Action.FAILED, detail)
        if session.due:
            return self._outcome(st.path, Action.WAIT, {"reason": st.next_action or "not idle yet"})
        return self._outcome(
            st.path, Action.FITS, {"tokens": st.planning_tokens, "threshold": st.compact_threshold}
        )

    # --- status -------------------------------------------------------------------------------------------

    def annotate(self, status: dict[str, Any]) -> None:
        """Mark each ``status.json`` row with its source; OpenClaw rows get the session key, the agent, the
        database's compaction count and whether a run is active."""
        for row in status.get("sessions", []):
            session = self.sessions.get(str(row.get("path")))
            if session is None:
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
                "config_error": self.install.config_error,
                "unreadable": dict(self.problems),  # agent id -> why its database cannot be read
            }
