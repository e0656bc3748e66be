"""The long-running process and ``once``: the lifecycle around the session sources.

Lifecycle lives here and only here (uvicorn's shape): the instance lock, start-up recovery (each source's
``prepare``), the sources started and followed, their workers (the lifecycle owns them: a job's computation
runs in :mod:`compactd.offload`'s worker thread, never on the loop), the status writer, the HTTP endpoint,
signals and sd_notify. Shutdown is an injectable trigger (hypercorn's ``shutdown_trigger``). What a session is
and how it is followed, decided and acted on is its source's (:mod:`compactd.sources`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO

from compactd import __version__, offload
from compactd.commit.locks import AlreadyRunning, InstanceLock
from compactd.config import Config, ConfigError, load_config
from compactd.core.timestamps import iso_seconds
from compactd.heap import fix_mmap_threshold, limit_malloc_arenas, release_free_memory
from compactd.logs import apply_config_level
from compactd.progress import ActivityHandler
from compactd.sources import Host, Outcome, Source, build_sources, one_pass, work
from compactd.sources.watch import expand_roots
from compactd.state import Metrics, SessionState, StateStore, describe_error, dump_json
from compactd.systemd import Notifier

if TYPE_CHECKING:
    import anyio

    from compactd.httpd import HttpEndpoint
    from compactd.summarize.llm import SummarizerClient

__all__ = ["EXIT_ALREADY_RUNNING", "Service", "run_once", "run_service"]

log = logging.getLogger(__name__)

ShutdownTrigger = Callable[[], Awaitable[None]]
# Watchers yield an empty batch this often when nothing happens: the heartbeat the watchdog checks.
WATCH_HEARTBEAT_MS = 5_000
# status.json is rewritten at least this often even when nothing changed (its updated_at is a heartbeat).
STATE_HEARTBEAT_SECONDS = 60.0
# The archives' disk use (a read of the journal and a stat per archive) is measured for the metrics this often.
ARCHIVE_MEASURE_SECONDS = 60.0
# /healthz: the loop ticks every LOOP_TICK_SECONDS; unhealthy when it has not for LOOP_STALE_SECONDS (a job
# holding the loop), or when the watchers' heartbeat (an empty batch every WATCH_HEARTBEAT_MS) is this stale.
LOOP_TICK_SECONDS = 1.0
LOOP_STALE_SECONDS = 10.0
WATCH_STALE_SECONDS = 3 * WATCH_HEARTBEAT_MS / 1000
# How long a thread holding the GIL keeps it once another asks (Python's default: 5 ms). A job's computation in
# its worker thread hands the GIL back only that often, and the loop's thread needs it several times per step:
# at 5 ms a 16 MB job held the loop (and systemd's watchdog ping) up to 0.4 s on 2 cores; at 1 ms, 0.05 s.
GIL_SWITCH_SECONDS = 0.001
# ``once`` exits with this when a ``run`` holds the state directory (``run`` itself, when another runs).
EXIT_ALREADY_RUNNING = 3
# ``run`` started while a ``once`` works looks again this often until it is done.
ONCE_POLL_SECONDS = 0.5


class Service:
    """compactd's process: its sources (:data:`compactd.sources.SOURCES`) and what is shared between them
    (the config, the metrics, the summarizer client, the state directory's status files)."""

    def __init__(
        self,
        config: Config,
        *,
        config_path: str | None = None,
        env: dict[str, str] | None = None,
        files_only: bool = False,
        roots: list[str] | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.env = dict(os.environ if env is None else env)
        self.store = StateStore(config.state_dir)
        self.metrics = Metrics(session_series=config.service.metrics_top_sessions)
        self.notifier = Notifier(self.env)
        self._max_concurrency = config.summarizer.max_concurrency  # the limiter's, as the service started
        self.stopping = False
        self.started_at = time.time()
        self.loop_tick = time.monotonic()
        self.archives_measured = -ARCHIVE_MEASURE_SECONDS  # the archives' disk use, for the metrics
        self.activity: dict[str, tuple[str, float]] = {}  # path -> (stage in progress, since when)
        self.activity_progress: dict[str, str] = {}  # path -> its model calls so far ("call 3 of ~19, ...")
        self.activity_changed = False
        self.dirty = True  # something changed since state files were last written
        self.last_written = 0.0
        self._client: SummarizerClient | None = None
        self._state_write_error: str | None = None
        self.host = Host(
            config,
            self.env,
            self.metrics,
            client=self.client,
            changed=self._mark_dirty,
            at=self._at,
            done=self._done,
            archived=self._archived,
            roots=roots,
        )
        # ``once FILE...`` and dry runs read transcript files alone: the other sources are not even built.
        self.sources: list[Source[Any]] = build_sources(self.host, files_only=files_only or roots is not None)

    @functools.cached_property
    def limiter(self) -> anyio.CapacityLimiter:
        """The model calls' concurrency limit, which every client this service makes shares: made with the first
        client (a dry run makes none, and anyio's synchronisation primitives cost 12 ms to load)."""
        import anyio

        return anyio.CapacityLimiter(self._max_concurrency)

    def _mark_dirty(self) -> None:
        self.dirty = True

    def _archived(self) -> None:
        self.archives_measured = -ARCHIVE_MEASURE_SECONDS  # a new archive: measured at the next write

    def _at(self, path: str, stage: str) -> str:
        """Note the stage a session's action is at, for ``status`` (``--watch`` shows it live): status.json
        alone is rewritten for it (the snapshots and metrics wait for the action's end)."""
        self.activity[path] = (stage, time.time())
        self.activity_progress.pop(path, None)
        self.activity_changed = True
        return stage

    def _done(self, path: str) -> None:
        self.activity.pop(path, None)
        self.activity_progress.pop(path, None)

    def note_progress(self, path: str, text: str) -> None:
        """A model call of ``path``'s action started or ended (from the job's thread: it only stores)."""
        self.activity_progress[path] = text
        self.activity_changed = True

    def source(self, name: str) -> Source[Any]:
        """The source of that name (``jsonl``, ``openclaw-sqlite``, ``codex``)."""
        for source in self.sources:
            if source.name == name:
                return source
        raise KeyError(name)

    def client(self) -> SummarizerClient | None:
        """The summarizer client every source shares (None: no endpoint, the digest), built on first use."""
        if self._client is None:
            from compactd.summarize.settings import make_client

            self._client = make_client(self.config, self.limiter)
            if self._client is not None:
                from compactd.logs import protect_config_secrets

                protect_config_secrets(self.config)  # this config may be a reloaded one
        return self._client

    def states(self) -> dict[str, SessionState]:
        tracked: dict[str, SessionState] = {}
        for source in self.sources:
            tracked.update(source.states())
        return tracked

    # --- loops ----------------------------------------------------------------------------------------------
    async def status_loop(self) -> None:
        """Refresh status.json, sessions.json and metrics.prom every few seconds when something changed, and
        at least once a minute (status.json's ``updated_at`` doubles as a heartbeat for ``compactd status``)."""
        import anyio  # in each loop, not with the module: ``once`` and ``inspect`` run no loop (2 ms to load)

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
        from compactd.state import write_status  # the status module: not loaded by ``once --dry-run``

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
        from compactd.state import archive_usage, write_status

        self.dirty = False
        self.activity_changed = False
        self.last_written = time.monotonic()
        states = self.states()
        self.metrics.set_sessions(len(states), sum(1 for s in states.values() if s.near_threshold()))
        if time.monotonic() - self.archives_measured >= ARCHIVE_MEASURE_SECONDS:
            self.archives_measured = time.monotonic()
            usage = archive_usage(self.config.state_dir)
            self.metrics.set_archives(usage.count, usage.disk_bytes)
        try:
            write_status(self.config.state_dir, self.status())
            for source in self.sources:
                source.save()
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

    def _watchers(self) -> tuple[int, float]:
        """How many watchers run over all sources, and the oldest heartbeat among the sources that have some."""
        watching = [s for s in self.sources if s.watched]
        oldest = min((s.heartbeat for s in watching), default=time.monotonic())
        return sum(s.watched for s in watching), oldest

    async def watchdog_loop(self) -> None:
        """WATCHDOG=1 at half of WATCHDOG_USEC, but only while the watchers show progress: their heartbeat (an
        empty batch every few seconds) stops if the pipeline wedges, and then systemd restarts us."""
        interval = self.notifier.watchdog_interval
        if not interval:
            return
        import anyio

        while not self.stopping:
            watching, heartbeat = self._watchers()
            stale = time.monotonic() - heartbeat > max(2 * interval, 2 * WATCH_HEARTBEAT_MS / 1000)
            if not (watching and stale):
                self.notifier.watchdog()
            await anyio.sleep(interval)

    async def tick_loop(self) -> None:
        """The loop's own heartbeat for /healthz: a tick that stops when anything holds the loop."""
        import anyio

        while not self.stopping:
            self.loop_tick = time.monotonic()
            await anyio.sleep(LOOP_TICK_SECONDS)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while the loop ticks and, with roots watched, the watchers' heartbeat is fresh (what the
        watchdog pings on); the figures go into /healthz's body. Called from the HTTP thread: reads only."""
        now = time.monotonic()
        watching, heartbeat = self._watchers()
        loop_age, watch_age = now - self.loop_tick, now - heartbeat
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
            "sessions": sum(len(s.sessions) for s in self.sources),
        }

    def render_metrics(self) -> str:
        """The exposition for /metrics, from the HTTP thread: the loop may change a dict mid-copy, so retry."""
        for _ in range(4):
            try:
                return self.metrics.render()
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        return self.metrics.render()

    def start_http(self) -> HttpEndpoint | None:
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
        return sum(1 for st in self.states().values() if st.near_threshold())

    def status_line(self) -> str:
        states = self.states()
        compactions = sum(s.compactions for s in states.values())
        near = sum(1 for s in states.values() if s.near_threshold())
        return f"watching {len(states)} sessions, {near} near threshold, {compactions} compactions"

    def status(self, *, rows: bool = True) -> dict[str, Any]:
        from compactd.state import STATUS_MAX_SESSIONS, build_status

        roots = [root for source in self.sources for root in source.roots()]
        doc = build_status(
            self.states(),
            max_sessions=STATUS_MAX_SESSIONS if rows else 0,
            now=time.time(),
            started_at=self.started_at,
            version=__version__,
            config_path=self.config_path,
            state_dir=self.config.state_dir,
            extra={"roots": sorted(roots)},
        )
        for source in self.sources:
            source.annotate(doc)
        for row in doc.get("sessions", []):
            doing = self.activity.get(row.get("path"))
            if doing is not None:
                row["in_progress"] = {"stage": doing[0], "since": iso_seconds(doing[1])}
                calls = self.activity_progress.get(row.get("path"))
                if calls:
                    row["in_progress"]["progress"] = calls
        return doc

    async def signals(self, scope: anyio.CancelScope) -> None:
        import signal

        import anyio

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
        for source in self.sources:
            source.stop()
        scope.cancel()

    def log_start(self) -> None:
        """One line with what this process serves: version, config, roots, sources and the summarizer
        (endpoint with its credentials masked, model, the context it is given)."""
        from compactd.summarize.secret_rules import redact_url_secrets

        s = self.config.summarizer
        roots = expand_roots(self.config.sessions.roots, state_dir=self.config.state_dir)
        log.info(
            "action=starting version=%s config=%s state_dir=%s roots=%s sources=%s summarizer=%s model=%s "
            "context_tokens=%d num_ctx=%s http=%s",
            __version__,
            self.config.source,
            self.config.state_dir,
            ",".join(roots) or "(none yet)",
            ",".join(source.name for source in self.sources if source.enabled),
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
        if config.service.http_listen != self.config.service.http_listen:
            log.warning(
                "action=reload_partial key=%s reason=%s",
                "service.http_listen",
                "the HTTP endpoint is bound at start: restart compactd to move it",
            )
        self.config = self.host.config = config
        self.metrics.session_series = config.service.metrics_top_sessions
        for source in self.sources:
            source.configure(config)
        self._client = None
        if apply_config_level(config.log_level):
            log.info("action=log_level level=%s", config.log_level.lower())
        log.info("action=reloaded config=%s", config.source)
        self.notifier.ready("config reloaded")

    def lock_instance(self, *, shared: bool = False) -> InstanceLock:
        """Take the state directory's instance lock (``run`` alone; ``once``, ``shared``, beside other onces)
        and make the state directory; raises :class:`~compactd.commit.locks.AlreadyRunning`."""
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
        probe = InstanceLock(self.config.state_dir, shared=True)
        try:
            probe.acquire()
        except AlreadyRunning:
            return False
        probe.release()
        return True

    def prepare(self) -> None:
        """The start-up of ``run`` and ``once``, under the instance lock, before any session is read: each
        source's recovery and what the state directory recorded of its sessions."""
        for source in self.sources:
            source.prepare()

    async def serve(self, shutdown_trigger: ShutdownTrigger | None = None) -> int:
        """Run until SIGTERM/SIGINT or ``shutdown_trigger`` returns; 0 on a clean stop, 3 if another runs."""
        import anyio

        limit_malloc_arenas()
        fix_mmap_threshold()
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
        switch = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_SECONDS)
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
                self.host.task_group = tg
                tg.start_soon(self.signals, tg.cancel_scope)
                if shutdown_trigger is not None:

                    async def trigger() -> None:
                        await shutdown_trigger()
                        self.shutdown(tg.cancel_scope)

                    tg.start_soon(trigger)
                for source in self.sources:
                    await source.start(tg)  # its watchers in place, then every session read and decided
                release_free_memory()  # the start-up read of every transcript leaves freed heap behind
                for source in self.sources:
                    if not source.enabled:
                        continue
                    tg.start_soon(source.follow, tg)
                    for _ in range(source.workers):
                        tg.start_soon(work, source, source.ready, source.act)
                tg.start_soon(self.watchdog_loop)
                tg.start_soon(self.tick_loop)
                http = self.start_http()
                self.write_status()
                self.notifier.ready(self.status_line())
                log.info(
                    "action=ready sessions=%d state_dir=%s",
                    sum(len(s.sessions) for s in self.sources),
                    self.config.state_dir,
                )
                # sessions.json, the snapshots and metrics.prom follow at once, after READY: serving needs
                # none of them, and with 10,000 sessions they are megabytes
                tg.start_soon(self.status_loop)
        finally:
            progress_log.removeHandler(calls)
            self.host.task_group = None
            if http is not None:
                http.stop()
            with anyio.CancelScope(shield=True):
                self.write_state()
                if self._client is not None:
                    with anyio.move_on_after(1.0):
                        await self._client.close()
            lock.release()
            sys.setswitchinterval(switch)
        log.info("action=stopped")
        return 0

    async def once(self, *, force: bool = False, dry_run: bool = False) -> list[Outcome]:
        """One pass of every source: each session read and decided, the ready ones acted on (a dry run acts on
        every due one without writing), the others reported as they wait."""
        outcomes: list[Outcome] = []
        for source in self.sources:
            outcomes.extend(await one_pass(source, force=force, dry_run=dry_run))
        return outcomes


def run_service(config: Config, *, config_path: str | None = None) -> int:
    import anyio

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

    It starts as ``run`` does (the instance lock, shared with other ``once`` runs; recovery, the archive
    sweep, the recorded state; every session read and decided), then acts on each ready session once.
    Returns 0 when every session was handled (compacted, fits, skipped, waiting for its agent), 1 when at
    least one failed or is backing off after a failure (those are listed as ``failed``/``backoff`` with the
    stage and the reason, and every other session is still done), 3 when a ``run`` holds the state directory
    (nothing is changed). ``dry_run`` reads only: no lock, no recovery, no state written; it and named
    ``sessions`` read transcript files alone (no OpenClaw database, no Codex rollout is looked at).
    """
    roots = [os.path.realpath(s) for s in sessions] if sessions else None
    service = Service(config, files_only=dry_run, roots=roots)
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
        try:
            return await service.once(force=force, dry_run=dry_run)
        finally:
            if not dry_run:
                service.write_state()  # under the shared lock: no run is there to own the state files
            if service._client is not None:
                await service._client.close()

    try:
        if dry_run:  # its work never waits (nothing else runs meanwhile): no event loop, nor anyio loaded
            outcomes = offload.run_inline(go)
        else:
            import anyio

            outcomes = anyio.run(go)
    finally:
        if lock is not None:
            lock.release()
    if as_json:
        out.write(dump_json([o.as_json() for o in outcomes]).decode())
    else:
        if not outcomes:
            out.write("no sessions found under the configured roots\n")
        for outcome in outcomes:
            out.write(outcome.line() + "\n")
    failed = sum(1 for o in outcomes if o.failed)
    if failed:
        err.write(f"compactd: {failed} of {len(outcomes)} session(s) failed or are backing off (see above)\n")
    return 1 if failed else 0
