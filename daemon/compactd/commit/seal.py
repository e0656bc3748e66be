"""Seal a torn last line (no trailing newline) of an idle transcript with one ``\\n``.

pi appends straight after whatever the file ends with: after a torn line its next entry joins the partial
bytes in one malformed line, that entry is lost and its children are cut off (design.md §6.12). A
newline turns the partial bytes into a line of their own, which every loader skips. We never truncate: the
partial bytes stay (they are all that is left of that entry), and if a writer was in fact still mid-line, its
bytes complete first (O_APPEND writes do not interleave) and our newline only adds a blank line, which loaders
also skip. The file's mtime is restored: sealing is a repair, not activity.
"""

from __future__ import annotations

import logging
import os
import time

from compactd.commit.atomic import Abandon, checked_path, crash_point, os_reason
from compactd.commit.locks import SessionBusy, hold_session_lock

__all__ = ["seal_if_torn", "seal_torn_line"]

log = logging.getLogger(__name__)


def seal_if_torn(path: str, idle_seconds: float, now: float | None = None) -> bool:
    """Append ``\\n`` to a file ending mid-line, quiet for ``idle_seconds``; the caller holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_size == 0 or os.pread(fd, 1, st.st_size - 1) == b"\n":
            return False
        if (time.time() if now is None else now) - st.st_mtime < idle_seconds:
            return False
        crash_point("seal_before_write")
        os.write(fd, b"\n")
        os.fsync(fd)
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)
    log.warning("sealed a torn last line with a newline path=%s", path)
    return True


def seal_torn_line(path: str | os.PathLike[str], idle_seconds: float, *, now: float | None = None) -> bool:
    """Seal ``path``'s torn last line if it is idle and no live process holds its lock; True when sealed.

    Refuses symlinks like every commit. Never raises for file-system errors (logged, returns False).
    """
    try:
        absolute = checked_path(path)
        with hold_session_lock(absolute):
            return seal_if_torn(absolute, idle_seconds, now)
    except (Abandon, SessionBusy) as exc:
        log.info("not sealing %s: %s", path, exc)
    except OSError as exc:
        log.warning("cannot seal %s: %s", path, os_reason(exc))
    return False
