"""compactd's Prometheus metrics, written as a textfile for node_exporter's textfile collector.

The values are kept here as plain counters (recording is a dict update in the service's loop); the exposition
is prometheus_client's: :class:`Metrics` is a collector in its own :class:`CollectorRegistry`, rendered by
``generate_latest`` when the file is refreshed. The file itself is replaced by the one atomic writer
(:func:`compactd.commit.durable.write_atomic`, mode 0644 whatever the umask, fsync'd) rather than by
``write_to_textfile``, which neither fsyncs nor sets the mode node_exporter, another user, needs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path

from compactd.commit.durable import write_atomic
from compactd.datarecord import datarecord
from compactd.state._store import METRICS_FILE, METRICS_FILE_MODE

__all__ = ["LATENCY_BUCKETS_SECONDS", "SESSION_SERIES_TOP_N", "Metrics", "write_metrics"]

# The per-session series shown (the fullest sessions); the rest are counted in the totals only, so a host with
# 10,000 sessions does not export 10,000 series of each per-session metric.
SESSION_SERIES_TOP_N = 50
# Outcomes whose counters exist from the start, at zero: ``rate()`` and ``increase()`` need the series before
# the first event, and an alert on "any failure" needs a 0 to compare with.
FAILURE_ACTIONS = ("read", "claim", "flush", "summarize", "compact", "commit", "seal")
COMPACTION_KINDS = (
    ("compact_only", "llm"),
    ("compact_only", "llm_partial"),
    ("compact_only", "digest"),
    ("compact_then_truncate", "llm"),
    ("compact_then_truncate", "llm_partial"),
    ("compact_then_truncate", "digest"),
    ("truncate_tool_results_only", "none"),
)

# Summarizer calls last from a second (GPU) to minutes (CPU); the default timeout is 300 s.
LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

Labels = tuple[tuple[str, str], ...]


@datarecord(slots=True, rare=True)
class _Histogram:
    """A Prometheus histogram: cumulative bucket counts, their sum and count."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # cumulative, one per bucket
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1


@datarecord(slots=True)
class _SessionGauges:
    """The gauges one session contributes to the metrics (the top-N fullest are exported)."""

    session_id: str
    file: str
    tokens: int
    window: int | None
    retention: dict[str, float] = field(default_factory=dict)  # stage -> ratio

    @property
    def fill(self) -> float:
        """How full the session's window is (its tokens alone when the window is unknown): the top-N's key."""
        return self.tokens / self.window if self.window else float(self.tokens)


class Metrics:
    """compactd's counters and gauges, exposed through a prometheus_client registry (text format 0.0.4).

    Counters are per process (they restart at zero, which Prometheus's ``rate`` handles as a reset).
    """

    FLUSH_STATUSES = ("written", "no_reply", "failed", "skipped")
    HOOK_STATUSES = ("ok", "failed", "timeout", "error")  # memory._hooks.HookStatus

    def __init__(
        self,
        *,
        latency_buckets: Sequence[float] = LATENCY_BUCKETS_SECONDS,
        started_at: float | None = None,
        session_series: int = SESSION_SERIES_TOP_N,
    ) -> None:
        self.started_at = time.time() if started_at is None else started_at
        self.session_series = session_series
        self.sessions_watched = 0
        self.sessions_near_threshold = 0
        self._buckets = tuple(sorted(latency_buckets))
        self._sessions: dict[str, _SessionGauges] = {}
        self._compactions: dict[Labels, int] = {
            (("route", r), ("level", lv)): 0 for r, lv in COMPACTION_KINDS
        }
        self._failures: dict[Labels, int] = {(("action", a),): 0 for a in FAILURE_ACTIONS}
        self._flushes: dict[Labels, int] = {(("status", s),): 0 for s in self.FLUSH_STATUSES}
        self._hooks: dict[Labels, int] = {(("status", s),): 0 for s in self.HOOK_STATUSES}
        self._latency: dict[Labels, _Histogram] = {}
        self.identifiers_total = 0
        self.identifiers_kept_by_model = 0
        self.identifiers_in_summary = 0
        self.archives = 0  # archives our rotations made that still exist (the journal lists them)
        self.archive_bytes = 0  # their disk use, as du counts it
        self.digest_fallbacks = 0
        # Appended messages redacted and scanned as read (issue 22), and how much of the compactions' spans they
        # covered: what share of a compaction's work the daemon did ahead.
        self.prepared_messages = 0
        self.prepare_dropped = 0
        self.prepare_cpu_seconds = 0.0
        self.span_messages = 0
        self.span_messages_prepared = 0

    # --- recording ------------------------------------------------------------------------------------
    def set_sessions(self, watched: int, near_threshold: int = 0) -> None:
        self.sessions_watched, self.sessions_near_threshold = watched, near_threshold

    def set_session(
        self, path: str, *, session_id: str | None, tokens: int, window: int | None = None
    ) -> None:
        gauges = self._sessions.get(path)
        if gauges is None:
            self._sessions[path] = _SessionGauges(session_id or "", os.path.basename(path), tokens, window)
        else:
            gauges.session_id, gauges.tokens, gauges.window = session_id or "", tokens, window

    def set_archives(self, count: int, disk_bytes: int) -> None:
        self.archives, self.archive_bytes = count, disk_bytes

    def forget_session(self, path: str) -> None:
        self._sessions.pop(path, None)

    def record_compaction(self, route: str, level: str) -> None:
        key = (("route", route), ("level", level))
        self._compactions[key] = self._compactions.get(key, 0) + 1

    def record_failure(self, action: str) -> None:
        key = (("action", action),)
        self._failures[key] = self._failures.get(key, 0) + 1

    def record_flush(self, status: str) -> None:
        key = (("status", status),)
        self._flushes[key] = self._flushes.get(key, 0) + 1

    def record_digest_fallback(self) -> None:
        """A digest committed because the model failed (``summarizer.fallback: digest``)."""
        self.digest_fallbacks += 1

    def set_preparer(self, prepared: int, dropped: int, cpu_seconds: float) -> None:
        self.prepared_messages, self.prepare_dropped, self.prepare_cpu_seconds = (
            prepared,
            dropped,
            cpu_seconds,
        )

    def record_span(self, messages: int, prepared: int) -> None:
        """A committed compaction's span: its messages, and how many of them were prepared as read."""
        self.span_messages += messages
        self.span_messages_prepared += prepared

    def record_hook(self, status: str) -> None:
        key = (("status", status),)
        self._hooks[key] = self._hooks.get(key, 0) + 1

    def observe_summarizer_latency(self, seconds: float, *, purpose: str = "compaction") -> None:
        key = (("purpose", purpose),)
        histogram = self._latency.get(key)
        if histogram is None:
            histogram = self._latency[key] = _Histogram(self._buckets)
        histogram.observe(max(0.0, seconds))

    def record_retention(
        self, path: str, *, session_id: str | None, total: int, kept_by_model: int, in_summary: int
    ) -> None:
        """Identifier retention of one committed summary: by the model alone, and after repair."""
        self.identifiers_total += total
        self.identifiers_kept_by_model += kept_by_model
        self.identifiers_in_summary += in_summary
        if total <= 0:
            return
        gauges = self._sessions.get(path)
        if gauges is None:
            gauges = self._sessions[path] = _SessionGauges(session_id or "", os.path.basename(path), 0, None)
        gauges.retention = {"model": kept_by_model / total, "final": in_summary / total}

    # --- exposition -----------------------------------------------------------------------------------
    def render(self, *, now: float | None = None) -> str:
        """The text exposition, ``compactd_last_update_timestamp_seconds`` being ``now``."""
        from compactd.state._prom import exposition  # prometheus_client loads when metrics are first written

        return exposition(self, time.time() if now is None else now)


def write_metrics(
    state_dir: Path, metrics: Metrics, *, now: float | None = None, path: Path | None = None
) -> Path:
    """``metrics.prom`` (or ``path``, e.g. in node_exporter's textfile directory), atomically."""
    target = Path(path) if path is not None else Path(state_dir) / METRICS_FILE
    write_atomic(target, metrics.render(now=now).encode(), mode=METRICS_FILE_MODE)
    return target
