"""The per-session state that survives a restart: ``sessions.json``, the back-off, and the state directory.

Back-offs live in ``sessions.json`` so that a session that keeps failing is not retried in a loop just because
the daemon was restarted. Every file is replaced whole by :func:`compactd.commit.durable.write_atomic`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from compactd.commit.durable import TEMP_NAME, os_reason, write_atomic
from compactd.commit.locks import pid_alive
from compactd.datarecord import datarecord
from compactd.defaults import BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS, BUSY_RETRY_SECONDS

if TYPE_CHECKING:
    from compactd.state._metrics import Metrics

logger = logging.getLogger("compactd.state")

SESSIONS_FILE = "sessions.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.prom"
# Bumped when a file's shape changes incompatibly; a file of another format is set aside, not misread.
SESSIONS_FORMAT = 1

# --- algorithm constants (not configurable) -----------------------------------------------------------------
# State files hold paths and session ids of the user's agents: owner only. metrics.prom is read by
# node_exporter, usually another user, so it is world-readable (the directory still decides who gets in).
STATE_FILE_MODE = 0o600
METRICS_FILE_MODE = 0o644
STATE_DIR_MODE = 0o700
# A session at this share of its compaction threshold counts as "near" when it has no flush threshold.
NEAR_THRESHOLD_RATIO = 0.9


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


def _digest(data: bytes) -> bytes:
    """What ``save_sessions`` compares to skip an unchanged write."""
    import hashlib  # here: a dry run loads and saves no state, and hashlib is 2 ms to load (OpenSSL)

    return hashlib.blake2b(data, digest_size=16).digest()


def describe_error(exc: BaseException) -> str:
    """One line for a log, ``status`` and ``once``: ``EACCES: Permission denied``, else the type and text
    (of the first exception inside a task group's exception group, which says nothing by itself)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, OSError):
        return os_reason(exc)
    return f"{type(exc).__name__}: {exc}"


# --- per-session state --------------------------------------------------------------------------------------


@datarecord(slots=True)
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
    # The model's error when the last compaction committed the digest in its place (summarizer.fallback).
    fallback_error: str | None = None
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
    compacted_size: int | None = None  # the file's bytes just after the last compaction

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
    def retry_later(self, now: float, idle_seconds: float, reason: str) -> None:
        """Look again after a short wait (``BUSY_RETRY_SECONDS``, or the idle time if longer) without counting
        a failure: the session's agent is at work on it. ``status`` says so until then (:meth:`show_next`)."""
        self.backoff_until = now + max(BUSY_RETRY_SECONDS, idle_seconds)
        self.next_action = f"retry: {reason}"

    def show_next(self, action: str | None, now: float) -> None:
        """What ``status`` shows next: the decision's ``action``, except that a due session waiting out a
        back-off or a busy retry goes on saying ``retry …`` until the wait is over (a new decision while it
        waits changes what will be done, not when); ``busy: …`` (what holds it now) is always shown."""
        waiting = self.in_backoff(now) and (self.next_action or "").startswith("retry")
        if action is None or action.startswith("busy") or not waiting:
            self.next_action = action

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
        size: int | None = None,
        fallback_error: str | None = None,
    ) -> None:
        """A compaction was committed: a new cycle starts (the next flush is due again).

        ``fill`` is the job's ``Fill.as_json()``; ``size`` the file's bytes just after the commit;
        ``fallback_error`` the model's error when the digest was committed in place of its summary.
        """
        self.compacted_size = size
        self.fallback_error = fallback_error
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

    def room_tokens(self) -> int | None:
        """The room the last compaction left (threshold − fill after, tokens with the margin), if known."""
        if self.last_fill_after is None or not self.last_fill_threshold:
            return None
        return max(0, self.last_fill_threshold - self.last_fill_after)

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
        """The saved fields, but those that are None by default and still None: most of a session's fields
        are (a file of 10,000 sessions was 10 MB of them), and ``from_json`` reads an absent one as that."""
        out: dict[str, Any] = {}
        for name, _, _, default in _persisted_fields():
            value = getattr(self, name)
            if value is not None or default is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, path: str, data: Mapping[str, Any]) -> SessionState:
        """Tolerant: unknown keys are ignored and a value of the wrong type falls back to the default, so
        one odd field (a newer version's, a hand edit) does not cost the session its back-off."""
        state = cls(path=path)
        fields_by_name = _persisted_by_name()
        exact = _exact_types()
        for name, value in data.items():
            known = fields_by_name.get(name)
            if known is None:
                continue
            annotation, is_float, default = known
            if value is default:  # None where None is the default: nothing to set (the common case)
                continue
            kind = type(value)
            if ((kind is int and value >= 0) or kind is str) and kind in exact[name]:
                setattr(state, name, value)  # the common values, as ``_fits`` would take them, without it
            elif _fits(annotation, value):
                setattr(state, name, float(value) if is_float and value is not None else value)
        return state


@functools.cache
def _persisted_fields() -> tuple[tuple[str, str, bool, object], ...]:
    """SessionState's saved fields with their annotations and defaults, worked out once (``from_json`` runs
    per session: 10,000 of them at a start)."""
    return tuple(
        (f.name, str(f.type).replace(" ", ""), _is_float_field(f.type), f.default)
        for f in fields(SessionState)
        if f.name != "path"
    )


@functools.cache
def _persisted_by_name() -> dict[str, tuple[str, bool, object]]:
    """``_persisted_fields`` by name: ``from_json`` looks up only the keys a session's record holds."""
    return {
        name: (annotation, is_float, default) for name, annotation, is_float, default in _persisted_fields()
    }


@functools.cache
def _exact_types() -> dict[str, frozenset[type]]:
    """Per saved field, the value types ``from_json`` sets as they are (int where a non-float field takes one,
    str where it takes one): a start-up reads 10,000 records of a handful of such values each."""
    out: dict[str, frozenset[type]] = {}
    for name, annotation, is_float, _ in _persisted_fields():
        kinds = _kinds(annotation)
        out[name] = frozenset(
            [*([int] if "int" in kinds and not is_float else []), *([str] if "str" in kinds else [])]
        )
    return out


def _is_float_field(annotation: object) -> bool:
    return str(annotation).startswith("float")


@functools.cache
def _kinds(annotation: str) -> frozenset[str]:
    return frozenset(annotation.replace(" ", "").split("|"))


def _fits(annotation: object, value: object) -> bool:
    kinds = _kinds(str(annotation))
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
            match = TEMP_NAME().match(name)
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
        self._last_saved = _digest(raw)
        return sessions

    def save_sessions(self, sessions: Mapping[str, SessionState] | Iterable[SessionState]) -> bool:
        """Write ``sessions.json`` atomically; False (no write) when nothing changed since the last save."""
        states = sessions.values() if isinstance(sessions, Mapping) else sessions
        doc = {
            "format": SESSIONS_FORMAT,
            "sessions": {s.path: s.to_json() for s in sorted(states, key=lambda s: s.path)},
        }
        data = dump_json(doc)
        digest = _digest(data)  # not the bytes: they grow with the sessions
        if digest == self._last_saved and self.sessions_path.exists():
            return False
        write_atomic(self.sessions_path, data)
        self._last_saved = digest
        return True

    def write_metrics(self, metrics: Metrics, *, now: float | None = None, path: Path | None = None) -> Path:
        """``metrics.prom``, or ``path`` (``service.metrics_textfile``, node_exporter's textfile directory)."""
        from compactd.state._metrics import write_metrics

        return write_metrics(self.state_dir, metrics, now=now, path=path)
