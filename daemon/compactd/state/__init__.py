"""The state directory: per-session state that survives a restart, ``status.json`` and ``metrics.prom``.

A facade over :mod:`._store` (``sessions.json``, the back-off), :mod:`._status` (``status.json`` and the
``compactd status`` table) and :mod:`._metrics` / :mod:`._prom` (the Prometheus textfile; prometheus_client is
loaded only when metrics are first written), so ``from compactd.state import ...`` keeps working.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from compactd.commit.durable import write_atomic
from compactd.state._metrics import LATENCY_BUCKETS_SECONDS, Metrics, write_metrics
from compactd.state._store import (
    METRICS_FILE,
    METRICS_FILE_MODE,
    NEAR_THRESHOLD_RATIO,
    SESSIONS_FILE,
    SESSIONS_FORMAT,
    STATE_DIR_MODE,
    STATE_FILE_MODE,
    STATUS_FILE,
    Backoff,
    SessionState,
    StateStore,
    describe_error,
    dump_json,
    load_json,
)

if TYPE_CHECKING:
    from compactd.state._status import (
        STATUS_FORMAT,
        STATUS_MAX_SESSIONS,
        STATUS_STALE_SECONDS,
        ArchiveUsage,
        archive_usage,
        build_status,
        daemon_running,
        human_bytes,
        read_status,
        render_status_table,
        render_watch,
        write_status,
    )

__all__ = [
    "LATENCY_BUCKETS_SECONDS",
    "METRICS_FILE",
    "METRICS_FILE_MODE",
    "NEAR_THRESHOLD_RATIO",
    "SESSIONS_FILE",
    "SESSIONS_FORMAT",
    "STATE_DIR_MODE",
    "STATE_FILE_MODE",
    "STATUS_FILE",
    "STATUS_FORMAT",
    "STATUS_MAX_SESSIONS",
    "STATUS_STALE_SECONDS",
    "ArchiveUsage",
    "Backoff",
    "Metrics",
    "SessionState",
    "StateStore",
    "archive_usage",
    "build_status",
    "daemon_running",
    "describe_error",
    "dump_json",
    "human_bytes",
    "load_json",
    "read_status",
    "render_status_table",
    "render_watch",
    "write_atomic",
    "write_metrics",
    "write_status",
]

# status.json and the ``status`` table load on first use (PEP 562): ``once --dry-run`` and ``inspect`` write and
# show no status, and the module (a dataclass, its readers and renderers) is about 1.5 ms to import.
_STATUS = frozenset(
    {
        "STATUS_FORMAT",
        "STATUS_MAX_SESSIONS",
        "STATUS_STALE_SECONDS",
        "ArchiveUsage",
        "archive_usage",
        "build_status",
        "daemon_running",
        "human_bytes",
        "read_status",
        "render_status_table",
        "render_watch",
        "write_status",
    }
)


def __getattr__(name: str) -> Any:
    if name not in _STATUS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("compactd.state._status"), name)
    globals()[name] = value
    return value
