"""What the sources that follow another agent's own store share (OpenClaw's database, Codex's rollouts): the
host's services, readiness by quiet time and the agent's own "busy", and the back-off of a failed session."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar

import anyio
import anyio.abc

from compactd.config import Config
from compactd.core.decision import readiness
from compactd.datarecord import datarecord
from compactd.defaults import BUSY_RETRY_SECONDS
from compactd.sources import IDLE_WAKE_SECONDS, Action, Host, Outcome, Unawaited
from compactd.state import Backoff, Metrics, SessionState, describe_error

if TYPE_CHECKING:
    from compactd.summarize.llm import SummarizerClient

__all__ = ["HostedSource"]

log = logging.getLogger(__name__)


class _Followed(Protocol):
    state: SessionState
    due: bool
    in_flight: bool


S = TypeVar("S", bound=_Followed)


@datarecord
class HostedSource(Generic[S]):
    """The common part of :class:`~compactd.sources.openclaw.OpenClawSource` and
    :class:`~compactd.sources.codex.CodexSource`; each says how quiet a session is and whether its agent is busy
    with it (:meth:`quiet_seconds`, :meth:`busy`)."""

    config: Config
    env: Mapping[str, str]
    host: Host | None = None  # what the service lends (built alone: a metrics of its own, no model)
    heartbeat: float = field(default_factory=time.monotonic)
    wakeup: anyio.Event | Unawaited = field(default_factory=Unawaited)
    stopping: bool = False
    watching: dict[str, anyio.Event] = field(default_factory=dict)
    sessions: dict[str, S] = field(default_factory=dict)

    workers = 1
    kind: ClassVar[str] = ""  # how its log lines name the source ("openclaw", "codex")

    def __post_init__(self) -> None:
        if self.host is None:
            self.host = Host(self.config, self.env, Metrics())

    @property
    def _host(self) -> Host:
        assert self.host is not None
        return self.host

    @property
    def metrics(self) -> Metrics:
        return self._host.metrics

    def client(self) -> SummarizerClient | None:
        return self._host.client()

    def changed(self) -> None:
        self._host.changed()

    @property
    def task_group(self) -> anyio.abc.TaskGroup | None:
        return self._host.task_group

    @property
    def watched(self) -> int:
        return len(self.watching)

    def roots(self) -> list[str]:
        return []

    def configure(self, config: Config) -> None:
        self.config = config

    async def _watch(
        self,
        directory: str,
        stop: anyio.Event,
        names: Callable[[str], bool],
        batch: Callable[[set[str]], Awaitable[None]],
    ) -> None:
        """Follow one directory's events until ``stop``, each batch handed to ``batch``; every batch (an empty
        one every few seconds) is the heartbeat the watchdog and /healthz look at. A watcher that fails is
        logged and dropped from ``watching``: the next rescan starts it again."""
        from compactd.sources.watch import watch_root

        s = self.config.service
        try:
            async for paths in watch_root(
                directory,
                stop,
                debounce_ms=s.debounce_ms,
                step_ms=s.step_ms,
                rust_timeout_ms=5_000,
                names=names,
            ):
                self.heartbeat = time.monotonic()
                await batch(paths)
        except Exception as exc:
            log.warning(
                "%s directory=%s action=watcher_stopped error=%s", self.kind, directory, describe_error(exc)
            )
        self.watching.pop(directory, None)

    # --- readiness ----------------------------------------------------------------------------------------
    def quiet_seconds(self, session: S, now: float) -> float:
        raise NotImplementedError

    def busy(self, session: S) -> bool:
        """The agent itself is at work on it (a run, an open turn): never acted on then, unless forced."""
        raise NotImplementedError

    def ready(self, now: float, *, force: bool = False) -> list[S]:
        """Due sessions that are idle, not busy, not backing off nor in flight; fullest first."""
        out = [
            s
            for s in self.sessions.values()
            if s.due
            and not s.in_flight
            and not s.state.in_backoff(now)
            and (force or not self.busy(s))
            and readiness(self.config, turn=None, quiet_seconds=self.quiet_seconds(s, now), force=force).ready
        ]
        return sorted(out, key=lambda s: -(s.state.percent_of_budget() or 0.0))

    def next_wake(self, now: float) -> float:
        waits = [
            max(
                s.state.backoff_remaining(now),
                self.config.sessions.idle_seconds - self.quiet_seconds(s, now),
                BUSY_RETRY_SECONDS if self.busy(s) else 0.0,
            )
            for s in self.sessions.values()
            if s.due and not s.in_flight
        ]
        return max(0.05, min(waits)) if waits else IDLE_WAKE_SECONDS

    # --- acting -------------------------------------------------------------------------------------------
    def _outcome(
        self, path: str, action: Action, detail: dict[str, object], *, committed: bool = False
    ) -> Outcome:
        raise NotImplementedError

    def _back_off(self, st: SessionState, stage: str, reason: str) -> Outcome:
        """Count a failure of this session, back it off, log it; its outcome."""
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
        return self._outcome(
            st.path, Action.FAILED, {"stage": stage, "reason": reason, "retry_in": round(delay)}
        )

    def states(self) -> dict[str, SessionState]:
        """Every session's state, from a copy of the table taken at once (a worker thread's refresh may add or
        drop sessions meanwhile)."""
        return {path: s.state for path, s in list(self.sessions.items())}
