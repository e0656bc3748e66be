"""Progress of long work (a compaction's stages, each summarizer call) as log records of one logger.

The work only logs: ``stage("reading", ...)``, ``call_started(...)``, ``call_finished(...)`` on the
``compactd.progress`` logger, at INFO, each record carrying a :class:`Event` in ``record.progress``. ``run``
lets them through its ordinary handler (a journal line per call start and end); ``compact``, ``once`` and
``summarize`` put a :class:`ProgressHandler` on stderr, which draws one live line on a terminal and writes
plain lines otherwise. ``-q`` raises the logger's level, and nothing is reported.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any, TextIO

from compactd.datarecord import datarecord

__all__ = [
    "ActivityHandler",
    "Event",
    "ProgressHandler",
    "Tally",
    "call_finished",
    "call_started",
    "call_summary",
    "stage",
]

log = logging.getLogger("compactd.progress")


@datarecord(slots=True, rare=True)
class Tally:
    """One summarization's calls so far: how many, how long they took, and how many are still expected."""

    started: float = field(default_factory=time.monotonic)
    label: str | None = None  # the session, named in the log lines of ``run`` (where sessions interleave)
    calls: int = 0
    seconds: float = 0.0  # the finished calls' own time
    expected: int = 1  # this call included: a running estimate (chunks are sized as they come)

    def eta(self, left: int, planned: float | None) -> float | None:
        """Seconds the ``left`` calls still to start should take: at the speed measured in this run, else at
        the endpoint's remembered speed (``planned``, this call's), else unknown."""
        if self.calls:
            return left * self.seconds / self.calls
        return left * planned if planned else None


@datarecord(frozen=True, slots=True, rare=True)
class Event:
    """What a progress record reports; ``kind`` is ``stage``, ``call`` (started) or ``done`` (finished)."""

    kind: str
    text: str
    call: int = 0
    of: int = 0
    elapsed: float = 0.0  # since the summarization started
    eta: float | None = None  # seconds until the summarization ends, at the measured speed
    data: dict[str, Any] = field(default_factory=dict)


def _emit(event: Event, level: int = logging.INFO, label: str | None = None) -> None:
    if log.isEnabledFor(level):
        prefix = f"session={label} " if label else ""
        log.log(level, "%s%s", prefix, event.text, extra={"progress": event, "progress_label": label})


def call_summary(event: Event) -> str | None:
    """A model call's progress in a few words ("call 3 of ~19, ~5m40s left"), None for a stage."""
    if event.kind == "stage":
        return None
    left = f", ~{_duration(event.eta)} left" if event.eta is not None else ""
    return f"call {event.call} of ~{event.of}{left}"


class ActivityHandler(logging.Handler):
    """Hands each model call's progress, by session, to ``note(session, text)`` (the service's status, which
    ``status --watch`` shows live). Called from whichever thread runs the job: ``note`` only stores."""

    def __init__(self, note: Callable[[str, str], None]) -> None:
        super().__init__(logging.INFO)
        self.note = note

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "progress", None)
        label = getattr(record, "progress_label", None)
        if isinstance(event, Event) and isinstance(label, str):
            text = call_summary(event)
            if text is not None:
                self.note(label, text)


def stage(name: str, detail: str = "") -> None:
    """A stage of the work begins (reading, planning, flushing, summarizing, committing)."""
    _emit(Event("stage", f"{name}: {detail}" if detail else name, data={"stage": name}))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def call_started(
    tally: Tally, *, what: str, prompt_tokens: int, max_tokens: int, planned: float | None
) -> None:
    """A summarizer call starts: its number of the expected total, its size and its estimated time."""
    number = tally.calls + 1
    elapsed = time.monotonic() - tally.started
    left_after = max(0, tally.expected - number)
    eta_rest = tally.eta(left_after, planned)
    this_call = tally.seconds / tally.calls if tally.calls else planned
    eta = None if this_call is None or eta_rest is None else this_call + eta_rest
    estimate = (
        f"; this call ~{_duration(this_call)}, ~{_duration(eta)} to finish" if this_call is not None else ""
    )
    text = (
        f"model call {number} of ~{max(number, tally.expected)} ({what}): {prompt_tokens:,} prompt tokens, "
        f"up to {max_tokens:,} out; {_duration(elapsed)} elapsed{estimate}"
    )
    _emit(
        Event(
            "call",
            text,
            number,
            max(number, tally.expected),
            elapsed,
            eta,
            {"what": what, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "planned_s": planned},
        ),
        label=tally.label,
    )


def call_finished(
    tally: Tally, *, seconds: float, output_tokens: int | None, error: str | None = None
) -> None:
    """The call ended (``error``: how it failed): its time and tokens, and the estimate for what is left."""
    tally.calls += 1
    tally.seconds += seconds
    elapsed = time.monotonic() - tally.started
    left = max(0, tally.expected - tally.calls)
    eta = tally.eta(left, None)
    out = f", {output_tokens:,} tokens out" if output_tokens is not None else ""
    rate = f" ({output_tokens / seconds:,.1f} tok/s)" if output_tokens and seconds > 0 else ""
    outcome = f"failed ({error})" if error else "done"
    text = (
        f"model call {tally.calls} of ~{max(tally.calls, tally.expected)} {outcome} in {_duration(seconds)}"
        f"{out}{rate}; {_duration(elapsed)} elapsed"
        + (f", ~{_duration(eta)} left" if left and eta is not None else "")
    )
    _emit(
        Event(
            "done",
            text,
            tally.calls,
            max(tally.calls, tally.expected),
            elapsed,
            eta,
            {"seconds": seconds, "output_tokens": output_tokens, "error": error},
        ),
        logging.WARNING if error else logging.INFO,
        tally.label,
    )


class ProgressHandler(logging.Handler):
    """Progress records on a stream: on a terminal one line redrawn in place (its elapsed time ticking while
    a call runs), elsewhere one plain line per record. Records without a progress event pass through as
    ordinary lines (they end the live line first)."""

    TICK_SECONDS = 1.0

    def __init__(self, stream: TextIO, *, live: bool | None = None) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._open: Event | None = None  # the call being drawn, for the ticker
        self._opened_at = 0.0
        self._drawn = False
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = getattr(record, "progress", None)
            with self._lock_held():
                if not isinstance(event, Event) or not self.live:
                    self._end_line()
                    self.stream.write(
                        (event.text if isinstance(event, Event) else self.format(record)) + "\n"
                    )
                elif event.kind == "call":
                    self._open, self._opened_at = event, time.monotonic()
                    self._draw(event.text)
                    self._start_ticker()
                else:
                    self._open = None
                    self._draw(event.text)
                    if event.kind == "stage":
                        self._end_line()  # a stage stays on screen
                self.stream.flush()
        except Exception:
            self.handleError(record)

    def _lock_held(self) -> Any:
        assert self.lock is not None
        return self.lock

    def _draw(self, text: str) -> None:
        self.stream.write("\r\x1b[K" + text)
        self._drawn = True

    def _end_line(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self._drawn = False

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="compactd-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.TICK_SECONDS):
            with self._lock_held():
                event = self._open
                if event is None or not self._drawn:
                    continue
                waited = time.monotonic() - self._opened_at
                self._draw(f"{event.text} [{_duration(waited)} in this call]")
                self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock_held():
            self._end_line()
            with contextlib.suppress(OSError, ValueError):
                self.stream.flush()
        super().close()
