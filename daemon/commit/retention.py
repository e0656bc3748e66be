"""Archive retention: keep a session's newest ``keep_count`` archives, none older than ``keep_days``.

Only archives our own rotations made (listed in the journal) are candidates: OpenClaw names its backups
``<file>.jsonl.bak.<ts>`` too, and those are not ours to delete. An archive's age is the UTC time in its name
(the moment of the rotation), not its mtime, which is the old inode's last write.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from datetime import UTC, datetime

from daemon.commit.atomic import crash_point, os_reason
from daemon.commit.journal import Journal

log = logging.getLogger(__name__)

_STAMP = re.compile(r"\.bak\.(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2})\.(\d{3})Z$")
_DAY = 86_400.0


def archive_time(name: str) -> float | None:
    """Epoch seconds of the timestamp in an archive name, or None when it has none."""
    match = _STAMP.search(name)
    if match is None:
        return None
    day, hours, minutes, seconds, millis = match.groups()
    try:
        when = datetime.fromisoformat(f"{day}T{hours}:{minutes}:{seconds}.{millis}+00:00")
    except ValueError:
        return None
    return when.astimezone(UTC).timestamp()


def expired(archives: list[str], *, keep_count: int, keep_days: float, now: float) -> list[str]:
    """Which archives retention removes: beyond the newest ``keep_count``, or older than ``keep_days``."""
    dated = sorted(((archive_time(a) or 0.0, a) for a in archives), reverse=True)
    return [
        archive
        for rank, (when, archive) in enumerate(dated)
        if rank >= max(0, keep_count) or now - when > keep_days * _DAY
    ]


def apply_retention(
    path: str, journal: Journal, *, keep_count: int, keep_days: float, now: float
) -> list[str]:
    """Remove the expired archives of ``path``; returns those removed. Failures are logged, never raised."""
    removed: list[str] = []
    try:
        archives = journal.archives(path)
    except OSError as exc:
        log.warning("retention skipped for %s: %s", path, os_reason(exc))
        return removed
    for archive in expired(archives, keep_count=keep_count, keep_days=keep_days, now=now):
        try:
            st = os.lstat(archive)
            if not stat.S_ISREG(st.st_mode):
                continue
            crash_point("retention_before_unlink")
            os.unlink(archive)
            journal.removed(archive)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove archive %s: %s", archive, os_reason(exc))
            continue
        removed.append(archive)
        log.info("retention removed archive %s", archive)
    return removed
