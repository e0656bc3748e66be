"""compactd's own per-session claim, shared by every compactd process of one state directory.

``run``, ``once`` and ``compact`` hold a session's claim across everything they do to it (memory flush, model
call, commit), so two of them never flush or compact one session at the same time; the loser is told which
compactd (its pid) holds it. The claim is a ``flock`` on ``<state_dir>/claims/<digest of the real path>.lock``
(dropped by the kernel when the holder dies, so it never goes stale), and the file also records the cycle in
which the memory flush last ran: a second runner sees the flush was done even if it never saw the first
runner's ``sessions.json``. The OpenClaw session lock is still taken for the commit itself: it is what agents
honour, and it must be held for well under 10 s, which a model call is not.

A cycle is named by the id of the newest compaction on the session's branch ("" before the first), so it
changes whoever compacts: this daemon, another compactd, or the agent itself.

Claims of sessions that are gone, or untouched (the transcript and the claim) for longer than the archive
retention, are removed by the retention sweep (:func:`prune_claims`), so ``claims/`` does not keep a file per
session ever acted on. Only an unheld claim is removed, under its own lock; a taker that locked a claim file
just removed sees that the path no longer names its inode and takes the new one instead.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from compactd.commit.durable import fsync_dir
from compactd.core.reader import Transcript

__all__ = ["ClaimBusy", "SessionClaim", "flush_cycle", "prune_claims"]

log = logging.getLogger(__name__)

CLAIMS_DIR = "claims"
# The record is one JSON line; a claim file is a few hundred bytes.
_MAX_RECORD = 64 * 1024
_DAY = 86_400.0


def flush_cycle(transcript: Transcript) -> str:
    """The id of the newest compaction on the current branch, "" when there is none."""
    for entry in reversed(transcript.branch()):
        if entry.get("type") == "compaction":
            entry_id = entry.get("id")
            return entry_id if isinstance(entry_id, str) else ""
    return ""


class ClaimBusy(Exception):
    """Another compactd process is working on this session."""

    def __init__(self, path: str, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        # Only compactd takes claims, so the holder is compactd whatever its command line looks like.
        who = f"compactd (pid {pid})" if pid is not None else "another compactd (pid unknown)"
        super().__init__(f"{who} is already working on this session")


def _claim_path(state_dir: str | os.PathLike[str], transcript: str | os.PathLike[str]) -> Path:
    import hashlib  # here: a dry run and ``inspect`` take no claim, and hashlib is 2 ms to load

    real = os.path.realpath(os.fspath(transcript))
    digest = hashlib.blake2b(real.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
    return Path(state_dir, CLAIMS_DIR, f"{digest}.lock")


def _read_record(fd: int) -> dict[str, Any]:
    raw = os.pread(fd, _MAX_RECORD, 0)
    line = raw.split(b"\n", 1)[0]
    try:
        value = json.loads(line) if line.strip() else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


class SessionClaim:
    """The claim on one session; :meth:`acquire` never blocks (:class:`ClaimBusy` instead)."""

    def __init__(self, state_dir: str | os.PathLike[str], transcript: str | os.PathLike[str]) -> None:
        self.transcript = os.path.abspath(os.fspath(transcript))
        self.path = _claim_path(state_dir, transcript)
        self._fd: int | None = None
        self._record: dict[str, Any] = {}

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> SessionClaim:
        if self._fd is not None:
            raise RuntimeError(f"claim {self.path} is already held by this object")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        while True:
            fd = self._lock()
            try:
                current = os.stat(self.path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
            if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                break
            os.close(fd)  # pruned between our open and our lock: that inode is no one's claim any more
        self._fd = fd
        try:
            self._record = _read_record(fd)
            self._write(pid=os.getpid(), since=time.time())
        except BaseException:
            self.release()
            raise
        return self

    def _lock(self) -> int:
        """The claim file opened (created if need be) and locked; :class:`ClaimBusy` when another holds it."""
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        if created:
            try:
                fsync_dir(self.path.parent)  # the flush record it will hold must survive a power loss
            except OSError:
                os.close(fd)
                raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            record = _read_record(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                pid = record.get("pid")
                raise ClaimBusy(self.transcript, pid if isinstance(pid, int) else None) from None
            raise
        return fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            self._record.pop("pid", None)
            self._record.pop("since", None)
            self._put(fd, sync=False)
        except OSError:
            pass  # the flush record stays as last written; only the holder's pid may linger
        finally:
            os.close(fd)  # drops the flock

    def flushed_in(self, cycle: str) -> bool | None:
        """Whether the memory flush ran in ``cycle``; None when no flush was ever recorded for this session."""
        recorded = self._record.get("flushed_cycle")
        if not isinstance(recorded, str):
            return None
        return recorded == cycle

    def mark_flushed(self, cycle: str, now: float | None = None) -> None:
        """Record (durably) that the flush of ``cycle`` is done: the next runner must not repeat it."""
        self._write(flushed_cycle=cycle, flushed_at=time.time() if now is None else now, sync=True)

    def _write(self, *, sync: bool = False, **fields: Any) -> None:
        if self._fd is None:
            raise RuntimeError("claim not held")
        self._record.update(fields)
        self._record["path"] = self.transcript
        self._put(self._fd, sync=sync)

    def _put(self, fd: int, *, sync: bool) -> None:
        # One line, written over the old one, then the rest cut off: a reader (a loser reading the holder's
        # pid) sees the old line or the new one up to its newline, never an empty file.
        data = json.dumps(self._record, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
        if sync:
            os.fsync(fd)

    def __enter__(self) -> SessionClaim:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def prune_claims(state_dir: str | os.PathLike[str], *, keep_days: float, now: float) -> list[str]:
    """Remove the claims of sessions that are gone, or whose transcript and claim were both last written more
    than ``keep_days`` ago (0: gone sessions only); a held claim is never touched. Returns those removed.
    Failures are logged, never raised: the sweep goes on."""
    directory = Path(state_dir, CLAIMS_DIR)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("claims sweep skipped: %s", exc.strerror or exc)
        return []
    removed: list[str] = []
    for name in names:
        if not name.endswith(".lock"):
            continue
        path = directory / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot open claim %s: %s", path, exc.strerror or exc)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use: its holder is working on that session now
            reason = _stale(fd, _read_record(fd), keep_days, now)
            if reason is None:
                continue
            os.unlink(path)  # under our lock: a taker that opened it before sees the path moved on
            removed.append(str(path))
            log.info("retention removed claim %s reason=%s", path, reason)
        except OSError as exc:
            log.warning("cannot prune claim %s: %s", path, exc.strerror or exc)
        finally:
            os.close(fd)
    return removed


def _stale(fd: int, record: dict[str, Any], keep_days: float, now: float) -> str | None:
    """Why a claim may go ("session gone", "untouched"), or None to keep it."""
    transcript = record.get("path")
    claim_age = now - os.fstat(fd).st_mtime
    old = keep_days > 0 and claim_age > keep_days * _DAY
    if not isinstance(transcript, str) or not transcript:
        return "untouched" if old else None  # no session named: only its own age can say
    try:
        st = os.stat(transcript, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return "session gone"
    if old and now - st.st_mtime > keep_days * _DAY:
        return "untouched"
    return None
