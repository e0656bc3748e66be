"""``status.json`` and ``compactd status``: what the daemon is doing, written every few seconds and read by
another process at any moment (hence always replaced whole)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from compactd.commit.durable import write_atomic
from compactd.commit.locks import pid_alive, process_starttime
from compactd.core.timestamps import iso_seconds, parse_iso
from compactd.datarecord import datarecord
from compactd.defaults import STATUS_REFRESH_SECONDS
from compactd.display import display_name
from compactd.state._store import STATUS_FILE, SessionState, dump_json, load_json

logger = logging.getLogger("compactd.state")

STATUS_FORMAT = 1
# status.json is rewritten every few seconds; past this many sessions (fullest first) it lists only a count,
# since a table of 10,000 rows helps no one and the file would cost megabytes per refresh.
STATUS_MAX_SESSIONS = 500
# status.json older than this while the daemon runs means its loop is stuck, not merely between refreshes.
STATUS_STALE_SECONDS = 3 * STATUS_REFRESH_SECONDS


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else iso_seconds(epoch)


_epoch = parse_iso

# --- archives -----------------------------------------------------------------------------------------------


@datarecord(frozen=True, slots=True)
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
        "fallback_error": state.fallback_error,
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
    # max_sessions=0: the counts alone (the start-up's, before READY: sorting 10,000 rows can wait)
    ordered = sorted(states, key=lambda s: (-(s.percent_of_budget() or 0.0), s.path)) if max_sessions else []
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
    if row.get("fallback_error"):
        text += " MODEL FAILED"  # the digest replaced the model's summary; status --json has the error
    fill = row.get("last_fill")
    if isinstance(fill, Mapping) and isinstance(fill.get("before_percent"), int | float):
        text += f" {fill['before_percent']:.0f}%->{fill.get('after_percent', 0):.0f}%"
    return f"{text} {_duration(now - when)} ago" if when is not None else text


def _openclaw_lines(section: object) -> list[str]:
    """What stands in the way of OpenClaw's sessions as a whole: its config, an agent's database, the gateway."""
    if not isinstance(section, Mapping):
        return []
    out = []
    if section.get("config_error"):
        out.append(f"openclaw config unusable (defaults apply): {section['config_error']}")
    unreadable = section.get("unreadable")
    for agent, reason in sorted(unreadable.items()) if isinstance(unreadable, Mapping) else []:
        out.append(f"openclaw agent {agent}: database unreadable: {reason}")
    if section.get("gateway_problem"):
        out.append(f"openclaw gateway {section.get('gateway')}: {section['gateway_problem']}")
    return out


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
    lines.extend(_openclaw_lines(status.get("openclaw")))
    rows = [r for r in status.get("sessions", []) if isinstance(r, Mapping)]
    if not rows:
        lines.append("")
        lines.append("no sessions")
        return _lines(lines)
    header = ("SESSION", "TOKENS", "WINDOW", "BUDGET", "LAST ACTION", "NEXT")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        name = row.get("file") or os.path.basename(str(row.get("path", "")))
        percent = row.get("percent_of_budget")
        table.append(
            (
                _cut(display_name(str(name)), 40),
                _int(row.get("tokens")),
                _int(row.get("window")),
                f"{percent:.0f}%" if isinstance(percent, int | float) else "-",
                display_name(_last_column(row, now)),
                display_name(_next_column(row, now)),
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
    return _lines(lines)


# ``status --watch``: a session's fill as a bar this many cells wide, up to its window (or 1.25 x threshold).
WATCH_BAR_CELLS = 30


def fill_bar(tokens: int, threshold: int | None, window: int | None, cells: int = WATCH_BAR_CELLS) -> str:
    """``[#######---|------]``: the fill against the threshold (``|``); ``!`` cells are past it."""
    scale = window or (int(threshold * 1.25) if threshold else 0)
    if scale <= 0:
        return "[" + "?" * cells + "]"
    mark = min(cells - 1, round(cells * threshold / scale)) if threshold else None
    filled = min(cells, round(cells * tokens / scale))
    bar = []
    for i in range(cells):
        past = mark is not None and i >= mark
        bar.append(("!" if past else "#") if i < filled else "-")
    if mark is not None:
        bar[mark] = "|" if mark >= filled else bar[mark]
    return "[" + "".join(bar) + "]"


def render_watch(status: Mapping[str, Any], *, now: float | None = None) -> list[str]:
    """The live view of ``compactd status --watch``: the daemon's line, then per session its fill as a bar
    against its threshold, the action in progress (stage, for how long) or what comes next, and the last
    action's result."""
    now = time.time() if now is None else now
    head = render_status_table({**status, "sessions": []}, now=now).splitlines()[0]
    lines = [head]
    rows = [r for r in status.get("sessions", []) if isinstance(r, Mapping)]
    if not rows:
        return [*lines, "no sessions"]
    for row in rows:
        name = _cut(display_name(str(row.get("file") or os.path.basename(str(row.get("path", ""))))), 32)
        tokens = row.get("planning_tokens") or row.get("tokens") or 0
        threshold = row.get("compact_threshold")
        window = row.get("window")
        bar = fill_bar(
            tokens if isinstance(tokens, int) else 0,
            threshold if isinstance(threshold, int) else None,
            window if isinstance(window, int) else None,
        )
        percent = row.get("percent_of_budget")
        pct = f"{percent:5.0f}%" if isinstance(percent, int | float) else "    -"
        doing = row.get("in_progress")
        if isinstance(doing, Mapping):
            since = _epoch(doing.get("since"))
            now_text = (
                f"NOW {doing.get('stage')} {_duration(now - since) if since is not None else ''}".rstrip()
            )
            if isinstance(doing.get("progress"), str):
                now_text += f" ({doing['progress']})"
        else:
            now_text = f"next {_next_column(row, now)}"
        lines.append(
            f"{name:32} {bar} {pct} {_int(tokens):>9}/{_int(threshold):<9} {now_text:28} "
            f"last {_last_column(row, now)}"
        )
    return [display_name(line.rstrip()) for line in lines]


def _lines(lines: list[str]) -> str:
    """Each line is one line whatever a session's name or error holds (its cells were escaped before the
    columns were measured; escaping again changes nothing)."""
    return "\n".join(map(display_name, lines)) + "\n"
