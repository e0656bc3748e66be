"""Archive retention: by age (``keep_days``), with an opt-in cap on the count per session (``keep_count``).

An archive is the only copy of every line its rotation summarized (the successor keeps only the summary), and
a session compacted often under a busy agent makes many archives in an hour: a count cap would delete lines
that exist nowhere else within minutes. So the default removes an archive only once it is ``keep_days`` old;
``keep_count`` (0 = no cap) is for operators who accept that trade for disk space. ``compactd status`` shows
the archives' disk use and ``compactd doctor`` warns when it grows large.

Only archives our own rotations made (listed in the journal) are candidates: OpenClaw names its backups
``<file>.jsonl.bak.<ts>`` too, and those are not ours to delete. An archive's age is the UTC time in its name
(the moment of the rotation), not its mtime, which is the old inode's last write. Retention runs after each
rotation (for that session) and over every session at start and hourly (:func:`sweep_archives`), so archives
of sessions that are never compacted again age out too. The same sweep prunes ``<state>/claims/``: the claims
of sessions that are gone or untouched for ``keep_days`` (:func:`compactd.commit.claim.prune_claims`).
"""

from __future__ import annotations

import logging
import os
import re
import stat

from compactd.commit.atomic import crash_point, os_reason
from compactd.commit.claim import prune_claims
from compactd.commit.journal import Journal
from compactd.core.timestamps import parse_archive_stamp

__all__ = ["apply_retention", "archive_time", "expired", "sweep_archives"]

log = logging.getLogger(__name__)

_STAMP = re.compile(r"\.bak\.(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2})\.(\d{3})Z$")
_DAY = 86_400.0


def archive_time(name: str) -> float | None:
    """Epoch seconds of the timestamp in an archive name, or None when it has none."""
    match = _STAMP.search(name)
    return None if match is None else parse_archive_stamp(match.group(0))


def expired(archives: list[str], *, keep_count: int, keep_days: float, now: float) -> list[str]:
    """Which archives retention removes: older than ``keep_days`` (0: no age limit), or beyond the newest
    ``keep_count`` (0: no count cap). An archive without a readable time in its name is never removed by age."""
    dated = sorted(((archive_time(a), a) for a in archives), key=lambda p: p[0] or 0.0, reverse=True)
    return [
        archive
        for rank, (when, archive) in enumerate(dated)
        if (keep_count > 0 and rank >= keep_count)
        or (keep_days > 0 and when is not None and now - when > keep_days * _DAY)
    ]


def apply_retention(
    path: str,
    journal: Journal,
    *,
    keep_count: int,
    keep_days: float,
    now: float,
    archives: list[str] | None = None,
) -> list[str]:
    """Remove the expired archives of ``path``; returns those removed. Failures are logged, never raised."""
    removed: list[str] = []
    if archives is None:
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


def sweep_archives(
    state_dir: str | os.PathLike[str], *, keep_count: int, keep_days: float, now: float
) -> list[str]:
    """:func:`apply_retention` over every session the journal lists, then the claims of sessions gone or
    untouched past ``keep_days`` pruned; returns the archives removed."""
    claims = prune_claims(state_dir, keep_days=keep_days, now=now)
    if claims:
        log.info("action=retention removed=%d claim(s)", len(claims))
    journal = Journal(state_dir)
    try:
        by_path = journal.all_archives()
    except OSError as exc:
        log.warning("retention sweep skipped: %s", os_reason(exc))
        return []
    removed: list[str] = []
    for path, archives in sorted(by_path.items()):
        removed += apply_retention(
            path, journal, keep_count=keep_count, keep_days=keep_days, now=now, archives=archives
        )
    return removed
