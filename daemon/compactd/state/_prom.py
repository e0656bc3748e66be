"""The Prometheus text exposition of :class:`compactd.state._metrics.Metrics`, by prometheus_client.

A collector over the recorded values in a registry of its own (never the global one: a test or a reload builds
several Metrics in one process), rendered by ``generate_latest``. Imported only when metrics are written, so
``compactd once`` and ``status`` never load prometheus_client.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from compactd import __version__
from compactd.display import display_name
from compactd.state._metrics import Labels, Metrics


def _utf8(value: str) -> str:
    """A label value with nothing invisible: a file name's controls, format characters and lone surrogates (a
    name that is not UTF-8) written as escapes. Newlines are kept: prometheus_client escapes them, with
    backslash and double quote, by the text format's rules, so a sample stays one line and the name exact."""
    return "\n".join(map(display_name, value.split("\n")))


def _family(
    kind: type[CounterMetricFamily | GaugeMetricFamily],
    name: str,
    doc: str,
    values: Mapping[Labels, float],
    labels: Sequence[str] = (),
) -> CounterMetricFamily | GaugeMetricFamily:
    """A counter or gauge family of ``values`` (label pairs -> value), its series in label order."""
    family = kind(name, doc, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric([_utf8(v) for _, v in key], value)
    return family


def _counter(name: str, doc: str, values: Mapping[Labels, float], labels: Sequence[str] = ()) -> Metric:
    return _family(CounterMetricFamily, name, doc, values, labels)


def _gauge(name: str, doc: str, values: Mapping[Labels, float], labels: Sequence[str] = ()) -> Metric:
    return _family(GaugeMetricFamily, name, doc, values, labels)


class _Collector(Collector):
    def __init__(self, metrics: Metrics, now: float) -> None:
        self._metrics, self._now = metrics, now

    def collect(self) -> Iterable[Metric]:
        return list(_families(self._metrics, self._now))


def exposition(metrics: Metrics, now: float) -> str:
    """The text format 0.0.4 of ``metrics``, ``compactd_last_update_timestamp_seconds`` being ``now``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics, now))
    return generate_latest(registry).decode("utf-8")


def _families(metrics: Metrics, now: float) -> Iterator[Metric]:
    yield _gauge(
        "compactd_build_info",
        "compactd's version and Python's, as labels (the value is always 1).",
        {(("version", __version__), ("python", platform.python_version())): 1},
        ("version", "python"),
    )
    yield _gauge(
        "compactd_start_time_seconds",
        "When this compactd process started (Unix time).",
        {(): metrics.started_at},
    )
    yield _gauge(
        "compactd_last_update_timestamp_seconds",
        "When this file was written (Unix time); a stale value means a stuck daemon.",
        {(): now},
    )
    yield _gauge(
        "compactd_sessions_watched", "Session transcripts being watched.", {(): metrics.sessions_watched}
    )
    yield _gauge(
        "compactd_sessions_near_threshold",
        "Sessions past their memory-flush threshold or close to compaction.",
        {(): metrics.sessions_near_threshold},
    )
    yield _gauge(
        "compactd_archives", "Archives compactd's rotations made that still exist.", {(): metrics.archives}
    )
    yield _gauge(
        "compactd_archive_bytes",
        "Disk space those archives take (allocated blocks, as du counts).",
        {(): metrics.archive_bytes},
    )
    tokens: dict[Labels, float] = {}
    windows: dict[Labels, float] = {}
    retention: dict[Labels, float] = {}
    # list() copies the items at once (the OpenClaw source updates its sessions from a worker thread).
    everything = list(metrics._sessions.items())
    # The fullest sessions get their own series (ties by path, so the set is stable between writes); every
    # session counts in the totals.
    shown = sorted(everything, key=lambda item: (-item[1].fill, item[0]))[: max(0, metrics.session_series)]
    for _path, g in sorted(shown, key=lambda item: item[0]):
        base: Labels = (("session_id", g.session_id), ("file", g.file))
        if base in tokens:
            continue  # two copies of one session in different roots: one series, never a duplicate
        tokens[base] = g.tokens
        if g.window is not None:
            windows[base] = g.window
        for stage, ratio in sorted(g.retention.items()):
            retention[(*base, ("stage", stage))] = ratio
    yield _gauge(
        "compactd_sessions_tokens",
        "Estimated context tokens of every tracked session, summed (pi's estimate).",
        {(): sum(g.tokens for _, g in everything)},
    )
    yield _gauge(
        "compactd_session_series_omitted",
        "Tracked sessions without their own series (service.metrics_top_sessions shows the fullest only).",
        {(): max(0, len(everything) - len(shown))},
    )
    session = ("session_id", "file")
    yield _gauge(
        "compactd_session_tokens",
        "Estimated context tokens of a session (pi's estimate).",
        tokens,
        session,
    )
    yield _gauge("compactd_session_context_window", "Resolved context window of a session.", windows, session)
    yield _counter(
        "compactd_compactions_total",
        "Compactions committed, by route and summary level.",
        metrics._compactions,
        ("route", "level"),
    )
    yield _counter(
        "compactd_failures_total",
        "Failed actions (each one backs its session off).",
        metrics._failures,
        ("action",),
    )
    yield _counter(
        "compactd_memory_flushes_total",
        "Built-in memory flushes, by outcome.",
        metrics._flushes,
        ("status",),
    )
    yield _counter(
        "compactd_hooks_total", "Before-compaction hook runs, by outcome.", metrics._hooks, ("status",)
    )
    latency = HistogramMetricFamily(
        "compactd_summarizer_latency_seconds",
        "Summarizer call latency, back-off included, by purpose.",
        labels=["purpose"],
    )
    for key, h in sorted(metrics._latency.items()):
        counts = h.counts or [0] * len(h.buckets)
        buckets = [(repr(float(b)), c) for b, c in zip(h.buckets, counts, strict=True)]
        latency.add_metric([_utf8(v) for _, v in key], [*buckets, ("+Inf", h.count)], h.total)
    yield latency
    yield _gauge(
        "compactd_identifier_retention_ratio",
        "Share of ranked identifiers kept in a session's last summary: by the model, and final.",
        retention,
        (*session, "stage"),
    )
    yield _counter(
        "compactd_identifiers_total",
        "Ranked identifiers across committed summaries.",
        {(): metrics.identifiers_total},
    )
    yield _counter(
        "compactd_identifiers_kept_by_model_total",
        "Ranked identifiers the model kept on its own.",
        {(): metrics.identifiers_kept_by_model},
    )
    yield _counter(
        "compactd_identifiers_kept_total",
        "Ranked identifiers kept in committed summaries, after repair.",
        {(): metrics.identifiers_in_summary},
    )
    yield _counter(
        "compactd_prepared_messages_total",
        "Appended messages redacted and scanned for identifiers as they were read (compaction.prepare_as_read).",
        {(): metrics.prepared_messages},
    )
    yield _counter(
        "compactd_prepare_dropped_total",
        "Appended messages left to their compaction because the preparing thread was too far behind.",
        {(): metrics.prepare_dropped},
    )
    yield _counter(
        "compactd_prepare_cpu_seconds_total",
        "CPU time of the thread that prepares appended messages.",
        {(): metrics.prepare_cpu_seconds},
    )
    yield _counter(
        "compactd_compaction_span_messages_total",
        "Messages summarized by committed compactions.",
        {(): metrics.span_messages},
    )
    yield _counter(
        "compactd_compaction_span_messages_prepared_total",
        "Of those, the messages whose redaction and identifiers were made as they were read.",
        {(): metrics.span_messages_prepared},
    )
    yield _counter(
        "compactd_digest_fallbacks_total",
        "Digests committed because the summarizer model failed (summarizer.fallback: digest).",
        {(): metrics.digest_fallbacks},
    )
