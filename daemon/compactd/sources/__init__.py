"""Where sessions come from: the one protocol every agent's source implements (docs/design.md §6.17).

A source finds its agent's sessions, follows what they append, keeps each one's figure as that agent computes
it, decides on it with :func:`compactd.core.decision.decide`, and acts on the ready ones. The service
(:mod:`compactd.service`) is only the lifecycle around its sources: it builds them from :data:`SOURCES`, starts
them, runs their workers (:func:`work`), writes what they report and stops them. Adding an agent is one source
package that exposes ``build(host) -> Source`` and one line in :data:`SOURCES`; the service does not change.
"""

from __future__ import annotations

import enum
import importlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from compactd.datarecord import datarecord

if TYPE_CHECKING:
    import anyio.abc

    from compactd.config import Config
    from compactd.state import Metrics, SessionState
    from compactd.summarize.llm import SummarizerClient

__all__ = [
    "IDLE_WAKE_SECONDS",
    "SOURCES",
    "Action",
    "Host",
    "Outcome",
    "Source",
    "build_sources",
    "one_pass",
    "work",
]


# A worker with nothing due sleeps this long at most (new work wakes it at once).
IDLE_WAKE_SECONDS = 60.0


class Action(enum.StrEnum):
    """What happened to a session (or, for one not acted on, why not): the word every output prints."""

    FITS = "fits"
    TRUNCATE_TOOL_RESULTS_ONLY = "truncate_tool_results_only"
    COMPACT_ONLY = "compact_only"
    COMPACT_THEN_TRUNCATE = "compact_then_truncate"
    FLUSH = "flush"  # a memory flush alone was due
    NONE = "none"  # nothing to act on after all (the session changed, nothing before the cut)
    SKIPPED = "skipped"  # left alone whatever its size
    WAIT = "wait"  # due, not ready yet (its agent is at work, not idle, mid-turn)
    BUSY = "busy"  # an agent held the session when compactd came to act
    FAILED = "failed"  # failed now; backed off
    BACKOFF = "backoff"  # still backing off after an earlier failure


@datarecord
class Outcome:
    """One session's outcome: the typed action, whether anything was committed, and the figures and the human
    reason beside it (``detail``, printed as ``key=value`` and in ``--json``)."""

    path: str
    action: Action
    committed: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """This session needs attention: it failed now, or it is backing off after a failure."""
        return self.action in (Action.FAILED, Action.BACKOFF)

    def line(self) -> str:
        """One line whatever the path (a file or an OpenClaw key) or a reason holds."""
        from compactd.display import display_name

        extra = " ".join(f"{k}={v}" for k, v in self.detail.items() if v is not None)
        return display_name(f"{self.action.value:<10} {self.path} {extra}".rstrip())

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "action": self.action.value, "committed": self.committed, **self.detail}


@datarecord(rare=True)
class Host:
    """What the service lends every source: the config, the environment, the metrics, the summarizer client
    (built once, shared), a way to say the status files are stale, and the task group fire-and-forget work
    (hooks) runs in."""

    config: Config
    env: Mapping[str, str]
    metrics: Metrics
    client: Callable[[], SummarizerClient | None] = lambda: None  # None: no model configured, the digest
    changed: Callable[[], None] = lambda: None
    # The stage an action of a session is at, for ``status`` (returns the stage), and its end.
    at: Callable[[str, str], str] = lambda _path, stage: stage
    done: Callable[[str], None] = lambda _path: None
    archived: Callable[[], None] = lambda: None  # an archive was made: the disk use is measured again
    roots: list[str] | None = None  # paths named on the command line: a file source serves these alone
    task_group: anyio.abc.TaskGroup | None = None


S = TypeVar("S")


class Source(Protocol[S]):
    """One agent's sessions. ``S`` is the source's own session record; the service never looks inside it.

    The life of a source in ``run``: :meth:`prepare` (under the instance lock), :meth:`start` (its watchers in
    place and every session read and decided: when it returns, the source serves), :meth:`follow` (until
    :meth:`stop`) beside ``workers`` workers (:func:`work` over :meth:`ready` and :meth:`act`). In ``once``:
    :meth:`prepare` unless a dry run, :meth:`scan`, then :meth:`act` on each :meth:`ready` session and
    :meth:`waiting` for the others.
    """

    name: str  # how logs and the start-up line name it
    enabled: bool  # configured to run (a disabled source is built, and does nothing)
    workers: int  # how many sessions it acts on at once
    stopping: bool
    wakeup: anyio.Event | Unawaited  # set when a session becomes due; the workers sleep on it
    # time.monotonic() of its watchers' last batch (they yield an empty one every few seconds)
    heartbeat: float

    @property
    def sessions(self) -> Mapping[str, S]: ...

    @property
    def watched(self) -> int:
        """How many watchers run (the heartbeat means something only when some do)."""
        ...

    def roots(self) -> list[str]:
        """The session directories it watches, as ``status.json`` lists them (a source that watches its agent's
        own store lists none)."""
        ...

    def prepare(self) -> None: ...
    async def start(self, tg: anyio.abc.TaskGroup) -> None: ...
    async def follow(self, tg: anyio.abc.TaskGroup) -> None: ...
    async def scan(self, *, dry_run: bool, force: bool = False) -> None: ...
    def ready(self, now: float, *, force: bool = False) -> Sequence[S]: ...
    def next_wake(self, now: float) -> float: ...
    async def act(self, session: S, *, force: bool = False, dry_run: bool = False) -> Outcome: ...
    def waiting(self, session: S, now: float) -> Outcome: ...
    def unreadable(self) -> list[Outcome]: ...
    def states(self) -> dict[str, SessionState]: ...
    def annotate(self, status: dict[str, Any]) -> None: ...
    def configure(self, config: Config) -> None: ...
    def save(self) -> None: ...
    def stop(self) -> None: ...


# Every source, in the order status rows and ``once`` list them: (module exposing ``build(host)``, whether it
# reads files named on the command line). Only the file source serves ``once --sessions`` and dry runs, and the
# others' modules (SQLite, the gateway, the rollouts) are not imported then.
SOURCES: tuple[tuple[str, bool], ...] = (
    ("compactd.sources.files", True),
    ("compactd.sources.openclaw", False),
    ("compactd.sources.codex", False),
)


def build_sources(host: Host, *, files_only: bool = False) -> list[Source[Any]]:
    sources: list[Source[Any]] = []
    for module, named_files in SOURCES:
        if files_only and not named_files:
            continue
        sources.append(importlib.import_module(module).build(host))
    return sources


async def one_pass(source: Source[Any], *, force: bool = False, dry_run: bool = False) -> list[Outcome]:
    """``once`` over one source: every session read and decided, the ready ones acted on (a dry run acts on
    every due one, writing nothing), the others reported as they wait; sessions in the order of their keys."""
    if not source.enabled:
        return []
    await source.scan(dry_run=dry_run, force=force)
    outcomes = source.unreadable()
    now = time.time()
    ready = {id(s) for s in source.ready(now, force=force or dry_run)}
    for _key, session in sorted(source.sessions.items()):
        if id(session) in ready:
            outcomes.append(await source.act(session, force=force, dry_run=dry_run))
        else:
            outcomes.append(source.waiting(session, now))
    return outcomes


class Unawaited:
    """A source's ``wakeup`` until a worker waits on one (:func:`work` gives it a fresh ``anyio.Event`` each
    time): nothing waits on it, so setting it does nothing. ``once`` never waits, and an ``anyio.Event`` would
    load anyio's synchronisation primitives (about 12 ms with what they import) for nothing."""

    __slots__ = ()

    def set(self) -> None:
        """Nothing to wake."""


class _Owner(Protocol):
    stopping: bool
    wakeup: anyio.Event | Unawaited

    def next_wake(self, now: float) -> float: ...


T = TypeVar("T")


async def work(
    owner: _Owner, ready: Callable[[float], Sequence[T]], act: Callable[[T], Awaitable[object]]
) -> None:
    """One worker: act on the fullest ready session, else sleep until a change wakes it or time alone may make
    one ready (idle, a turn abandoned, a back-off over)."""
    import anyio  # here: ``once`` and ``inspect`` run no worker, and anyio is 2 ms to import

    while not owner.stopping:
        now = time.time()
        due = ready(now)
        if due:
            await act(due[0])
            continue
        owner.wakeup = anyio.Event()
        with anyio.move_on_after(owner.next_wake(now)):
            await owner.wakeup.wait()
