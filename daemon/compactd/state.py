"""The state directory: per-session state that survives a restart, ``status.json`` and ``metrics.prom``.

Everything here is written atomically (a temp file in the same directory, fsync, rename, fsync of the
directory), so a reader — ``compactd status``, node_exporter's textfile collector, the next start after a
crash — sees the old file or the new one, never half of one. Back-offs live in ``sessions.json`` so that a
session that keeps failing is not retried in a loop just because the daemon was restarted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from compactd.commit.atomic import fsync_dir, os_reason
from compactd.commit.locks import pid_alive, process_starttime
from compactd.defaults import BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS, STATUS_REFRESH_SECONDS

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS_FILE",
    "SESSIONS_FILE",
    "STATUS_FILE",
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
    "load_json",
    "read_status",
    "render_status_table",
    "write_atomic",
    "write_metrics",
    "write_status",
]

SESSIONS_FILE = "sessions.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.prom"
# Bumped when a file's shape changes incompatibly; a file of another format is set aside, not misread.
SESSIONS_FORMAT = 1
STATUS_FORMAT = 1

# --- algorithm constants (not configurable) -----------------------------------------------------------------
# State files hold paths and session ids of the user's agents: owner only. metrics.prom is read by
# node_exporter, usually another user, so it is world-readable (the directory still decides who gets in).
STATE_FILE_MODE = 0o600
METRICS_FILE_MODE = 0o644
STATE_DIR_MODE = 0o700
# A session at this share of its compaction threshold counts as "near" when it has no flush threshold.
NEAR_THRESHOLD_RATIO = 0.9
# status.json is rewritten every few seconds; past this many sessions (fullest first) it lists only a count,
# since a table of 10,000 rows helps no one and the file would cost megabytes per refresh.
STATUS_MAX_SESSIONS = 500
# status.json older than this while the daemon runs means its loop is stuck, not merely between refreshes.
STATUS_STALE_SECONDS = 3 * STATUS_REFRESH_SECONDS
# Summarizer calls last from a second (GPU) to minutes (CPU); the default timeout is 300 s.
LATENCY_BUCKETS_SECONDS: tuple[float, ...] = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Our temp files: ``.<target name>.<pid>.<random>.tmp``; the pid tells a live writer's from a dead one's.
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]+\.tmp\Z")


# --- atomic writes ------------------------------------------------------------------------------------------


def write_atomic(path: Path, data: bytes, *, mode: int = STATE_FILE_MODE) -> None:
    """Replace ``path`` with ``data`` all at once: temp file in the same directory, fsync, rename, fsync dir.

    The temp name does not end in the target's suffix, so node_exporter (``*.prom``) never reads it.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not decide who may read metrics.prom
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def dump_json(doc: Any) -> bytes:
    """A state document as JSON. File names that are not UTF-8 and ids with a lone surrogate reach us as
    strings orjson refuses; one such session must not stop every state write, so the standard library then
    writes the document with those characters escaped (``load_json`` reads them back exactly)."""
    try:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    except TypeError:
        return (json.dumps(doc, indent=2, ensure_ascii=True, default=str) + "\n").encode()


def load_json(raw: bytes) -> Any:
    """orjson's fast path; the standard library for what ``dump_json`` wrote with escaped lone surrogates.
    Raises ValueError for anything that is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def describe_error(exc: BaseException) -> str:
    """One line for a log, ``status`` and ``once``: ``EACCES: Permission denied``, else the type and text
    (of the first exception inside a task group's exception group, which says nothing by itself)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, OSError):
        return os_reason(exc)
    return f"{type(exc).__name__}: {exc}"


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _epoch(iso: object) -> float | None:
    if not isinstance(iso, str):
        return None
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# --- per-session state --------------------------------------------------------------------------------------


@dataclass(slots=True)
class SessionState:
    """What compactd knows about one transcript across restarts (the ledger itself is rebuilt by reading).

    ``failures`` counts consecutive failures and drives the back-off; ``failures_total`` never resets.
    ``last_error`` and ``error_stage`` say what the last failure was until a success clears them.
    ``flushed_cycle`` is the value of ``compactions`` when the memory flush last ran, so the flush runs once
    per compaction cycle (OpenClaw's ``memoryFlushCompactionCount``).
    """

    path: str
    session_id: str | None = None
    tokens: int = 0  # raw pi-style estimate
    planning_tokens: int = 0  # with the safety margin; what thresholds compare against
    window: int | None = None
    compact_threshold: int | None = None
    flush_threshold: int | None = None
    last_action: str | None = None
    last_action_at: float | None = None  # epoch seconds
    next_action: str | None = None
    failures: int = 0
    failures_total: int = 0
    backoff_until: float | None = None  # epoch seconds
    last_error: str | None = None
    error_stage: str | None = None  # where last_error happened: read, plan, flush, compact, commit, seal
    skipped: str | None = None  # why compactd leaves this session alone (e.g. a window under the minimum)
    flushed_cycle: int | None = None
    compactions: int = 0
    last_level: str | None = None  # "llm", "llm_partial", "digest"
    last_route: str | None = None
    identifiers_total: int | None = None
    identifiers_kept_by_model: int | None = None
    identifiers_in_summary: int | None = None
    # The last commit's fill (tokens with the margin) before and after, and where the tokens went.
    last_fill_before: int | None = None
    last_fill_after: int | None = None
    last_fill_threshold: int | None = None
    last_summary_tokens: int | None = None
    last_kept_tokens: int | None = None
    last_pruned_chars: int | None = None

    # --- derived ---------------------------------------------------------------------------------------
    @property
    def flushed_this_cycle(self) -> bool:
        return self.flushed_cycle is not None and self.flushed_cycle == self.compactions

    @property
    def identifier_retention(self) -> float | None:
        """Share of ranked identifiers in the last committed summary (after repair)."""
        if not self.identifiers_total or self.identifiers_in_summary is None:
            return None
        return self.identifiers_in_summary / self.identifiers_total

    def backoff_remaining(self, now: float) -> float:
        return max(0.0, self.backoff_until - now) if self.backoff_until is not None else 0.0

    def in_backoff(self, now: float) -> bool:
        return self.backoff_remaining(now) > 0

    def percent_of_budget(self) -> float | None:
        if not self.compact_threshold:
            return None
        return 100.0 * self.planning_tokens / self.compact_threshold

    def near_threshold(self) -> bool:
        if self.skipped:
            return False  # left alone whatever its size: never "about to be compacted"
        if self.flush_threshold:
            return self.planning_tokens >= self.flush_threshold
        if self.compact_threshold:
            return self.planning_tokens >= NEAR_THRESHOLD_RATIO * self.compact_threshold
        return False

    # --- updates ---------------------------------------------------------------------------------------
    def mark_flushed(self, now: float) -> None:
        self.flushed_cycle = self.compactions
        self.last_action, self.last_action_at = "flush", now

    def mark_compacted(
        self,
        now: float,
        *,
        level: str | None,
        route: str | None = None,
        identifiers_total: int | None = None,
        identifiers_kept_by_model: int | None = None,
        identifiers_in_summary: int | None = None,
        fill: Mapping[str, Any] | None = None,
    ) -> None:
        """A compaction was committed: a new cycle starts (the next flush is due again).

        ``fill`` is the job's ``Fill.as_json()``.
        """
        self.compactions += 1
        self.last_level, self.last_route = level, route
        self.last_action, self.last_action_at = route or "compact", now
        self.identifiers_total = identifiers_total
        self.identifiers_kept_by_model = identifiers_kept_by_model
        self.identifiers_in_summary = identifiers_in_summary
        f = fill or {}
        self.last_fill_before, self.last_fill_after = f.get("before"), f.get("after")
        self.last_fill_threshold = f.get("threshold")
        self.last_summary_tokens, self.last_kept_tokens = f.get("summary_tokens"), f.get("kept_tokens")
        self.last_pruned_chars = f.get("pruned_chars")

    def last_fill(self) -> dict[str, Any] | None:
        """The last commit's fill for ``status``: before and after (with the margin), shares, breakdown."""
        if self.last_fill_before is None or self.last_fill_after is None or not self.last_fill_threshold:
            return None
        threshold = self.last_fill_threshold
        return {
            "before": self.last_fill_before,
            "after": self.last_fill_after,
            "threshold": threshold,
            "before_percent": round(100.0 * self.last_fill_before / threshold, 1),
            "after_percent": round(100.0 * self.last_fill_after / threshold, 1),
            "summary_tokens": self.last_summary_tokens,
            "kept_tokens": self.last_kept_tokens,
            "pruned_chars": self.last_pruned_chars,
        }

    # --- persistence -----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "path"}

    @classmethod
    def from_json(cls, path: str, data: Mapping[str, Any]) -> SessionState:
        """Tolerant: unknown keys are ignored and a value of the wrong type falls back to the default, so
        one odd field (a newer version's, a hand edit) does not cost the session its back-off."""
        state = cls(path=path)
        for f in fields(cls):
            if f.name == "path" or f.name not in data:
                continue
            value = data[f.name]
            if _fits(f.type, value):
                setattr(
                    state, f.name, float(value) if _is_float_field(f.type) and value is not None else value
                )
        return state


def _is_float_field(annotation: object) -> bool:
    return str(annotation).startswith("float")


def _fits(annotation: object, value: object) -> bool:
    kinds = str(annotation).replace(" ", "").split("|")
    if value is None:
        return "None" in kinds
    if isinstance(value, bool):
        return False  # never a count, a time or a name here
    if isinstance(value, int) and "int" in kinds:
        return value >= 0
    if isinstance(value, int | float) and "float" in kinds:
        return math.isfinite(value)
    return isinstance(value, str) and "str" in kinds


# --- back-off -----------------------------------------------------------------------------------------------


class Backoff:
    """Exponential back-off per session: ``base × 2^(n−1)`` after the n-th consecutive failure, capped.

    A compaction that failed, or that did not bring the session under its threshold, is a failure; without
    this a session the summarizer cannot handle would be retried on every change, in a loop.
    """

    @staticmethod
    def next_delay(
        failures: int, base: float = BACKOFF_BASE_SECONDS, max_delay: float = BACKOFF_MAX_SECONDS
    ) -> float:
        if failures <= 0:
            return 0.0
        # The exponent is bounded before the power so a long outage cannot overflow the float.
        exponent = min(failures - 1, 64)
        return float(min(max_delay, base * 2.0**exponent))

    @staticmethod
    def record_failure(
        state: SessionState,
        now: float,
        base: float = BACKOFF_BASE_SECONDS,
        max_delay: float = BACKOFF_MAX_SECONDS,
        *,
        error: str | None = None,
        stage: str | None = None,
    ) -> float:
        """Count a failure and set ``backoff_until``; returns the delay."""
        state.failures += 1
        state.failures_total += 1
        delay = Backoff.next_delay(state.failures, base, max_delay)
        state.backoff_until = now + delay
        state.last_error = error
        state.error_stage = stage
        return delay

    @staticmethod
    def record_success(state: SessionState) -> None:
        state.failures = 0
        state.backoff_until = None
        state.last_error = None
        state.error_stage = None


# --- the store ----------------------------------------------------------------------------------------------


class StateStore:
    """The files of one state directory. One daemon per directory (``InstanceLock``) owns the writes."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.sessions_path = self.state_dir / SESSIONS_FILE
        self.status_path = self.state_dir / STATUS_FILE
        self.metrics_path = self.state_dir / METRICS_FILE
        self._last_saved: bytes | None = None

    def ensure(self) -> None:
        """Create the directory (owner only) and remove temp files left by a writer that died."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=STATE_DIR_MODE)
        self.remove_stale_temps()

    def remove_stale_temps(self) -> list[Path]:
        removed: list[Path] = []
        ours = {SESSIONS_FILE, STATUS_FILE, METRICS_FILE}
        try:
            names = os.listdir(self.state_dir)
        except OSError:
            return removed
        for name in names:
            match = _TEMP_NAME.match(name)
            if not match or match["target"] not in ours or pid_alive(int(match["pid"])):
                continue
            path = self.state_dir / name
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode):
                    path.unlink()
                    removed.append(path)
        if removed:
            logger.info("state: removed %d stale temp file(s) in %s", len(removed), self.state_dir)
        return removed

    def load_sessions(self) -> dict[str, SessionState]:
        """The saved sessions; a missing file is a first start, a garbled one is set aside with a warning."""
        try:
            raw = self.sessions_path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            logger.warning(
                "state: cannot read %s (%s); starting without saved state", self.sessions_path, exc
            )
            return {}
        try:
            doc = load_json(raw)
            if not isinstance(doc, dict) or doc.get("format") != SESSIONS_FORMAT:
                raise ValueError(f"not a format-{SESSIONS_FORMAT} sessions file")
            items = doc.get("sessions")
            if not isinstance(items, dict):
                raise ValueError("no sessions object")
        except ValueError as exc:
            aside = self.sessions_path.with_name(f"{SESSIONS_FILE}.corrupt")
            with contextlib.suppress(OSError):
                os.replace(self.sessions_path, aside)
            logger.warning(
                "state: %s is unreadable (%s); moved to %s, starting without saved state",
                self.sessions_path,
                exc,
                aside.name,
            )
            return {}
        sessions = {
            path: SessionState.from_json(path, data)
            for path, data in items.items()
            if isinstance(path, str) and isinstance(data, dict)
        }
        self._last_saved = hashlib.blake2b(raw, digest_size=16).digest()
        return sessions

    def save_sessions(self, sessions: Mapping[str, SessionState] | Iterable[SessionState]) -> bool:
        """Write ``sessions.json`` atomically; False (no write) when nothing changed since the last save."""
        states = sessions.values() if isinstance(sessions, Mapping) else sessions
        doc = {
            "format": SESSIONS_FORMAT,
            "sessions": {s.path: s.to_json() for s in sorted(states, key=lambda s: s.path)},
        }
        data = dump_json(doc)
        digest = hashlib.blake2b(data, digest_size=16).digest()  # not the bytes: they grow with the sessions
        if digest == self._last_saved and self.sessions_path.exists():
            return False
        write_atomic(self.sessions_path, data)
        self._last_saved = digest
        return True

    def write_status(self, status: Mapping[str, Any]) -> None:
        write_status(self.state_dir, status)

    def write_metrics(self, metrics: Metrics, *, now: float | None = None) -> None:
        write_metrics(self.state_dir, metrics, now=now)


# --- archives -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveUsage:
    """The archives our rotations made that still exist (the journal lists them), and their disk use.

    ``disk_bytes`` counts allocated blocks, as ``du`` does; ``by_device`` maps a filesystem (``st_dev``) to
    (bytes on it, one archive path on it) for ``doctor``'s share-of-the-filesystem check.
    """

    count: int = 0
    sessions: int = 0
    disk_bytes: int = 0
    oldest: float | None = None  # epoch seconds of the oldest archive's rotation
    by_device: Mapping[int, tuple[int, str]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "sessions": self.sessions,
            "disk_bytes": self.disk_bytes,
            "oldest": _iso(self.oldest),
        }


def archive_usage(state_dir: str | os.PathLike[str]) -> ArchiveUsage:
    """What the archives listed in ``state_dir``'s journal take on disk (an unreadable journal: nothing)."""
    from compactd.commit.journal import Journal
    from compactd.commit.retention import archive_time

    try:
        by_path = Journal(state_dir).all_archives()
    except OSError as exc:
        logger.warning("state: cannot read the journal in %s: %s", state_dir, exc)
        return ArchiveUsage()
    seen: set[tuple[int, int]] = set()
    devices: dict[int, tuple[int, str]] = {}
    count = 0
    oldest: float | None = None
    for archives in by_path.values():
        for archive in archives:
            try:
                st = os.lstat(archive)
            except OSError:
                continue
            count += 1
            when = archive_time(archive)
            if when is not None and (oldest is None or when < oldest):
                oldest = when
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            used, sample = devices.get(st.st_dev, (0, archive))
            devices[st.st_dev] = (used + st.st_blocks * 512, sample)
    return ArchiveUsage(
        count=count,
        sessions=len(by_path),
        disk_bytes=sum(used for used, _ in devices.values()),
        oldest=oldest,
        by_device=devices,
    )


def human_bytes(value: int) -> str:
    """``1.5 GiB``: binary units, one decimal."""
    if value < 1024:
        return f"{value} B"
    size = value / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


# --- status.json --------------------------------------------------------------------------------------------


def _session_row(state: SessionState, now: float) -> dict[str, Any]:
    percent = state.percent_of_budget()
    retention = state.identifier_retention
    return {
        "path": state.path,
        "file": os.path.basename(state.path),
        "session_id": state.session_id,
        "tokens": state.tokens,
        "planning_tokens": state.planning_tokens,
        "window": state.window,
        "compact_threshold": state.compact_threshold,
        "flush_threshold": state.flush_threshold,
        "percent_of_budget": None if percent is None else round(percent, 1),
        "near_threshold": state.near_threshold(),
        "last_action": state.last_action,
        "last_action_at": _iso(state.last_action_at),
        "next_action": state.next_action,
        "failures": state.failures,
        "backoff_until": _iso(state.backoff_until) if state.in_backoff(now) else None,
        "last_error": state.last_error,
        "error_stage": state.error_stage,
        "skipped": state.skipped,
        "compactions": state.compactions,
        "last_level": state.last_level,
        "identifier_retention": None if retention is None else round(retention, 4),
        "last_fill": state.last_fill(),
    }


def build_status(
    sessions: Mapping[str, SessionState] | Iterable[SessionState],
    *,
    now: float,
    started_at: float,
    version: str,
    config_path: str | os.PathLike[str] | None,
    state_dir: str | os.PathLike[str] | None = None,
    pid: int | None = None,
    max_sessions: int = STATUS_MAX_SESSIONS,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The document ``status.json`` holds; times are ISO 8601 UTC, sessions fullest first."""
    states = list(sessions.values() if isinstance(sessions, Mapping) else sessions)
    pid = os.getpid() if pid is None else pid
    ordered = sorted(states, key=lambda s: (-(s.percent_of_budget() or 0.0), s.path))
    doc: dict[str, Any] = {
        "format": STATUS_FORMAT,
        "pid": pid,
        "pid_starttime": process_starttime(pid),
        "version": version,
        "started_at": _iso(started_at),
        "updated_at": _iso(now),
        "config_path": None if config_path is None else os.fspath(config_path),
        "state_dir": None if state_dir is None else os.fspath(state_dir),
        "sessions_watched": len(states),
        "near_threshold": sum(1 for s in states if s.near_threshold()),
        "backing_off": sum(1 for s in states if s.in_backoff(now)),
        "compactions": sum(s.compactions for s in states),
        "failures": sum(s.failures_total for s in states),
        "failing": sum(1 for s in states if s.last_error is not None),
        "skipped": sum(1 for s in states if s.skipped is not None),
        "sessions_listed": min(len(ordered), max_sessions),
        "sessions": [_session_row(s, now) for s in ordered[:max_sessions]],
    }
    if extra:
        doc.update(extra)
    return doc


def write_status(state_dir: Path, status: Mapping[str, Any]) -> None:
    """``status.json``, atomically (``compactd status`` may read it at any moment)."""
    write_atomic(Path(state_dir) / STATUS_FILE, dump_json(dict(status)))


def read_status(state_dir: Path, *, on_problem: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """``status.json`` as a dict, or None when it is missing or garbled; the reason goes to ``on_problem``
    (default: a warning in the log), one line, never a traceback."""
    report = on_problem if on_problem is not None else logger.warning
    path = Path(state_dir) / STATUS_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        report(f"no status file at {path}: compactd has not run with this state directory")
        return None
    except OSError as exc:
        report(f"cannot read {path}: {exc.strerror or exc}")
        return None
    try:
        doc = load_json(raw)
    except ValueError as exc:
        report(f"{path} is not valid JSON ({exc}); it is rewritten within seconds by a running compactd")
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("sessions", []), list):
        report(f"{path} does not hold a compactd status document")
        return None
    return doc


def daemon_running(status: Mapping[str, Any]) -> bool:
    """Whether the process that wrote ``status`` is still alive (the same process, not a reused pid)."""
    pid = status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not pid_alive(pid):
        return False
    recorded = status.get("pid_starttime")
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        current = process_starttime(pid)
        if current is not None and current != recorded:
            return False
    return True


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s" if seconds < 600 else f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _int(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _next_column(row: Mapping[str, Any], now: float) -> str:
    skipped = row.get("skipped")
    if isinstance(skipped, str) and skipped:
        return f"skipped: {skipped}"
    until = _epoch(row.get("backoff_until"))
    if until is not None and until > now:
        failures = row.get("failures")
        count = f", {failures} failure{'s' if failures != 1 else ''}" if isinstance(failures, int) else ""
        return f"back-off {_duration(until - now)}{count}"
    nxt = row.get("next_action")
    return nxt if isinstance(nxt, str) and nxt else "-"


def _last_column(row: Mapping[str, Any], now: float) -> str:
    action = row.get("last_action")
    if not isinstance(action, str) or not action:
        return "-"
    when = _epoch(row.get("last_action_at"))
    level = row.get("last_level")
    text = f"{action} ({level})" if isinstance(level, str) and level and "compact" in action else action
    fill = row.get("last_fill")
    if isinstance(fill, Mapping) and isinstance(fill.get("before_percent"), int | float):
        text += f" {fill['before_percent']:.0f}%->{fill.get('after_percent', 0):.0f}%"
    return f"{text} {_duration(now - when)} ago" if when is not None else text


def render_status_table(status: Mapping[str, Any], *, now: float | None = None) -> str:
    """The human view of ``status.json`` for ``compactd status``: daemon health, then one row per session."""
    now = time.time() if now is None else now
    lines: list[str] = []
    pid = status.get("pid")
    updated = _epoch(status.get("updated_at"))
    age = None if updated is None else now - updated
    refreshed = "never" if age is None else f"{_duration(age)} ago"
    if daemon_running(status):
        started = _epoch(status.get("started_at"))
        up = f", up {_duration(now - started)}" if started is not None else ""
        health = f"compactd: running (pid {pid}{up}); status refreshed {refreshed}"
        if age is not None and age > STATUS_STALE_SECONDS:
            health += " - STALE: the daemon is alive but has stopped refreshing its status"
    else:
        health = f"compactd: not running (pid {pid} is gone); status last refreshed {refreshed}"
    lines.append(health)
    config = status.get("config_path") or "built-in defaults"
    lines.append(f"version {status.get('version', '?')}, config {config}")
    lines.append(
        f"sessions watched {_int(status.get('sessions_watched'))}, near threshold "
        f"{_int(status.get('near_threshold'))}, backing off {_int(status.get('backing_off'))}, "
        f"compactions {_int(status.get('compactions'))}, failures {_int(status.get('failures'))}"
        + (f", failing now {_int(status.get('failing'))}" if status.get("failing") else "")
        + (f", skipped {_int(status.get('skipped'))}" if status.get("skipped") else "")
    )
    archives = status.get("archives")
    if isinstance(archives, Mapping) and isinstance(archives.get("count"), int):
        disk = archives.get("disk_bytes")
        oldest = _epoch(archives.get("oldest"))
        lines.append(
            f"archives {_int(archives.get('count'))} of {_int(archives.get('sessions'))} session(s), "
            f"{human_bytes(disk) if isinstance(disk, int) else '-'} on disk"
            + (f", oldest {_duration(now - oldest)} old" if oldest is not None else "")
        )
    rows = [r for r in status.get("sessions", []) if isinstance(r, Mapping)]
    if not rows:
        lines.append("")
        lines.append("no sessions")
        return "\n".join(lines) + "\n"
    header = ("SESSION", "TOKENS", "WINDOW", "BUDGET", "LAST ACTION", "NEXT")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        name = row.get("file") or os.path.basename(str(row.get("path", "")))
        percent = row.get("percent_of_budget")
        table.append(
            (
                _cut(str(name), 40),
                _int(row.get("tokens")),
                _int(row.get("window")),
                f"{percent:.0f}%" if isinstance(percent, int | float) else "-",
                _last_column(row, now),
                _next_column(row, now),
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    right = {1, 2, 3}
    lines.append("")
    for r in table:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
    listed, watched = len(rows), status.get("sessions_watched")
    if isinstance(watched, int) and watched > listed:
        lines.append(f"... and {watched - listed:,} more sessions (the fullest {listed} are listed)")
    failing = [r for r in rows if isinstance(r.get("last_error"), str) and r["last_error"]]
    if failing:
        lines.append("")
        lines.append("errors (each session backs off; the others are served as usual):")
        for row in failing:
            name = row.get("file") or os.path.basename(str(row.get("path", "")))
            stage = row.get("error_stage")
            where = f"{stage} failed" if isinstance(stage, str) and stage else "failed"
            lines.append(f"  {name}: {where}: {row['last_error']} ({_next_column(row, now)})")
    return "\n".join(lines) + "\n"


# --- metrics.prom -------------------------------------------------------------------------------------------


def _escape_label(value: str) -> str:
    # A lone surrogate (from a file name that is not UTF-8) has no UTF-8 form: written as its escape.
    value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


Labels = tuple[tuple[str, str], ...]


def _labels(pairs: Labels) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in pairs) + "}"


@dataclass(slots=True)
class _Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
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


@dataclass(slots=True)
class _SessionGauges:
    session_id: str
    file: str
    tokens: int
    window: int | None
    retention: dict[str, float] = field(default_factory=dict)  # stage -> ratio


class Metrics:
    """compactd's counters and gauges, rendered in the Prometheus text exposition format (version 0.0.4).

    Counters are per process (they restart at zero, which Prometheus's ``rate`` handles as a reset).
    """

    FLUSH_STATUSES = ("written", "no_reply", "failed", "skipped")

    def __init__(
        self, *, latency_buckets: Sequence[float] = LATENCY_BUCKETS_SECONDS, started_at: float | None = None
    ) -> None:
        self.started_at = time.time() if started_at is None else started_at
        self.sessions_watched = 0
        self.sessions_near_threshold = 0
        self._buckets = tuple(sorted(latency_buckets))
        self._sessions: dict[str, _SessionGauges] = {}
        self._compactions: dict[Labels, int] = {}
        self._failures: dict[Labels, int] = {}
        self._flushes: dict[Labels, int] = {(("status", s),): 0 for s in self.FLUSH_STATUSES}
        self._hooks: dict[Labels, int] = {}
        self._latency: dict[Labels, _Histogram] = {}
        self.identifiers_total = 0
        self.identifiers_kept_by_model = 0
        self.identifiers_in_summary = 0

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

    # --- rendering ------------------------------------------------------------------------------------
    def render(self, *, now: float | None = None) -> str:
        now = time.time() if now is None else now
        out: list[str] = []

        def family(
            name: str, kind: str, help_text: str, samples: Iterable[tuple[str, Labels, float]]
        ) -> None:
            out.append(f"# HELP {name} {_escape_help(help_text)}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{n}{_labels(labels)} {_number(v)}" for n, labels, v in samples)

        def simple(name: str, kind: str, help_text: str, values: Mapping[Labels, float]) -> None:
            family(name, kind, help_text, ((name, k, v) for k, v in sorted(values.items())))

        simple(
            "compactd_start_time_seconds",
            "gauge",
            "When this compactd process started (Unix time).",
            {(): self.started_at},
        )
        simple(
            "compactd_last_update_timestamp_seconds",
            "gauge",
            "When this file was written (Unix time); a stale value means a stuck daemon.",
            {(): now},
        )
        simple(
            "compactd_sessions_watched",
            "gauge",
            "Session transcripts being watched.",
            {(): self.sessions_watched},
        )
        simple(
            "compactd_sessions_near_threshold",
            "gauge",
            "Sessions past their memory-flush threshold or close to compaction.",
            {(): self.sessions_near_threshold},
        )

        tokens: dict[Labels, float] = {}
        windows: dict[Labels, float] = {}
        retention: dict[Labels, float] = {}
        for path in sorted(self._sessions):
            g = self._sessions[path]
            base: Labels = (("session_id", g.session_id), ("file", g.file))
            if base in tokens:
                continue  # two copies of one session in different roots: one series, never a duplicate
            tokens[base] = g.tokens
            if g.window is not None:
                windows[base] = g.window
            for stage, ratio in sorted(g.retention.items()):
                retention[(*base, ("stage", stage))] = ratio
        simple(
            "compactd_session_tokens",
            "gauge",
            "Estimated context tokens of a session (pi's estimate).",
            tokens,
        )
        simple("compactd_session_context_window", "gauge", "Resolved context window of a session.", windows)
        simple(
            "compactd_compactions_total",
            "counter",
            "Compactions committed, by route and summary level.",
            self._compactions,
        )
        simple(
            "compactd_failures_total",
            "counter",
            "Failed actions (each one backs its session off).",
            self._failures,
        )
        simple(
            "compactd_memory_flushes_total", "counter", "Built-in memory flushes, by outcome.", self._flushes
        )
        simple("compactd_hooks_total", "counter", "Before-compaction hook runs, by outcome.", self._hooks)

        samples: list[tuple[str, Labels, float]] = []
        for key, h in sorted(self._latency.items()):
            counts = h.counts or [0] * len(h.buckets)
            for bound, count in zip(h.buckets, counts, strict=True):
                samples.append(
                    ("compactd_summarizer_latency_seconds_bucket", (*key, ("le", _number(bound))), count)
                )
            samples.append(("compactd_summarizer_latency_seconds_bucket", (*key, ("le", "+Inf")), h.count))
            samples.append(("compactd_summarizer_latency_seconds_sum", key, h.total))
            samples.append(("compactd_summarizer_latency_seconds_count", key, h.count))
        family(
            "compactd_summarizer_latency_seconds",
            "histogram",
            "Summarizer call latency, back-off included, by purpose.",
            samples,
        )

        simple(
            "compactd_identifier_retention_ratio",
            "gauge",
            "Share of ranked identifiers kept in a session's last summary: by the model, and final.",
            retention,
        )
        simple(
            "compactd_identifiers_total",
            "counter",
            "Ranked identifiers across committed summaries.",
            {(): self.identifiers_total},
        )
        simple(
            "compactd_identifiers_kept_by_model_total",
            "counter",
            "Ranked identifiers the model kept on its own.",
            {(): self.identifiers_kept_by_model},
        )
        simple(
            "compactd_identifiers_in_summary_total",
            "counter",
            "Ranked identifiers in committed summaries after repair.",
            {(): self.identifiers_in_summary},
        )
        return "\n".join(out) + "\n"


def write_metrics(
    state_dir: Path, metrics: Metrics, *, now: float | None = None, path: Path | None = None
) -> Path:
    """``metrics.prom`` (or ``path``, e.g. in node_exporter's textfile directory), atomically."""
    target = Path(path) if path is not None else Path(state_dir) / METRICS_FILE
    write_atomic(target, metrics.render(now=now).encode(), mode=METRICS_FILE_MODE)
    return target
