"""OpenClaw's per-session write lock, and compactd's single-instance lock.

Session locks follow OpenClaw's ``session-write-lock.ts`` (design.md §6.12): ``<realpath of
dir>/<file>.jsonl.lock``, created exclusively, body ``{"pid", "createdAt", "starttime"}``. A lock is stale
when its pid is dead or recycled or it is older than 30 minutes; a lock lacking pid/createdAt (a garbage body,
or one caught between create and write) is stale only once its mtime is 30 minutes old. We apply these rules
exactly as OpenClaw does, so neither side reclaims a lock the other still considers live.

``hold_session_lock`` is for the commit only: OpenClaw waits at most 10 s for the lock before failing its run,
so the caller must never hold it across a model call or anything else slow.

pi itself takes no lock (it reopens the path per line); the idle check is what protects pi sessions. These
locks also cannot see across PID namespaces: an agent in a container holding a lock looks dead to us.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import logging
import math
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from compactd.core.timestamps import js_iso, parse_iso
from compactd.datarecord import datarecord
from compactd.defaults import LOCK_STALE_SECONDS

log = logging.getLogger(__name__)

__all__ = [
    "INSTANCE_LOCK_NAME",
    "AlreadyRunning",
    "InstanceLock",
    "LockInfo",
    "SessionBusy",
    "flocked",
    "hold_session_lock",
    "lock_holder",
    "lock_is_live",
    "lock_path_for",
    "process_starttime",
    "read_lock",
    "remove_stale_lock",
    "session_is_locked",
    "stale_reasons",
]

LOCK_SUFFIX = ".lock"
INSTANCE_LOCK_NAME = "compactd.lock"
# A lock body is a few dozen bytes; anything past this is garbage and is not worth reading.
_MAX_LOCK_BODY = 64 * 1024
# Lock files are readable by anyone, as OpenClaw's are under a default umask: they hold only a pid and a time.
_LOCK_MODE = 0o644


class SessionBusy(Exception):
    """A live process holds the session's lock file; try again later."""

    def __init__(self, lock_path: Path, info: LockInfo | None) -> None:
        self.lock_path = lock_path
        self.info = info
        self.holder = describe_holder(info.pid if info is not None else None)
        super().__init__(f"session file locked by {self.holder}: {lock_path}")


class AlreadyRunning(Exception):
    """Another compactd holds the state directory."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        self.state_dir = state_dir
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"another compactd ({who}) is already running with state directory {state_dir} "
            f"(lock file {state_dir / INSTANCE_LOCK_NAME}); stop it or use another state directory"
        )


@datarecord(frozen=True, slots=True, rare=True)
class LockInfo:
    """What a lock file says. Fields OpenClaw would ignore (wrong type, unparseable time) are None.

    ``created_at`` is epoch seconds. ``mtime`` is None when the file could not even be stat'ed (treated as
    fresh: never reclaim what we cannot inspect). ``body``, ``dev`` and ``ino`` identify this exact lock, so a
    lock re-taken between our read and our unlink is not removed.
    """

    pid: int | None
    created_at: float | None
    starttime: int | None
    mtime: float | None
    body: bytes = b""
    dev: int = 0
    ino: int = 0


def is_compactd(pid: int) -> bool:
    """Whether ``pid`` is a compactd process: this one, or one whose command line runs compactd.

    Only for messages (who holds a lock): nothing is decided on it. compactd runs as the ``compactd`` console
    script or as ``python -m compactd``.
    """
    if pid == os.getpid():
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return False
    if any(os.path.basename(arg) == b"compactd" for arg in argv[:2]):
        return True
    return any(a == b"-m" and b == b"compactd" for a, b in itertools.pairwise(argv[:4]))


def describe_holder(pid: int | None) -> str:
    """``compactd (pid N)`` or ``an agent (pid N)``: who holds a lock, for a human."""
    if pid is None:
        return "an agent (pid unknown)"
    return f"compactd (pid {pid})" if is_compactd(pid) else f"an agent (pid {pid})"


def lock_holder(transcript: str | os.PathLike[str], *, now: float | None = None) -> str | None:
    """Who holds the transcript's OpenClaw lock (see :func:`describe_holder`), or None when no live lock."""
    info = read_lock(lock_path_for(transcript))
    if info is None or not lock_is_live(info, now=now):
        return None
    return describe_holder(info.pid)


def lock_path_for(transcript: str | os.PathLike[str]) -> Path:
    """``<realpath of dir>/<file name>.lock``, the path OpenClaw computes (symlinked dirs resolve alike)."""
    absolute = os.path.abspath(os.fspath(transcript))
    directory = os.path.realpath(os.path.dirname(absolute))
    return Path(directory, os.path.basename(absolute) + LOCK_SUFFIX)


def process_starttime(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks after boot), the pid-recycling discriminator."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def _process_state(pid: int) -> bytes | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (state) on; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # comm (field 2) is in parentheses and may contain spaces or ")": split after the last ")".
    return raw[raw.rfind(b")") + 1 :].split()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs: it exists (even as another user's) and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except (OverflowError, OSError):
        return False  # no such pid can exist
    # A zombie has exited and holds no file; only its parent has not reaped it yet.
    return _process_state(pid) != b"Z"


def _valid_int(value: object) -> int | None:
    # JSON true/false are not numbers for OpenClaw's Number.isInteger.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _parse_created_at(value: object) -> float | None:
    # Like JS Date.parse, a date-time without an offset is local time.
    seconds = parse_iso(value, naive="local")
    return seconds if seconds is not None and math.isfinite(seconds) else None


def _parse_body(body: bytes) -> tuple[int | None, float | None, int | None]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    pid = _valid_int(data.get("pid"))
    return (pid if pid else None), _parse_created_at(data.get("createdAt")), _valid_int(data.get("starttime"))


def read_lock(path: str | os.PathLike[str]) -> LockInfo | None:
    """The lock at ``path`` (a lock file path, not the transcript), or None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        # Unreadable, or a symlink/FIFO in its place: something holds the name; judge it by its mtime.
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError:
            return LockInfo(None, None, None, None)
        return LockInfo(None, None, None, st.st_mtime, b"", st.st_dev, st.st_ino)
    try:
        st = os.fstat(fd)
        body = b""
        if stat.S_ISREG(st.st_mode):
            try:
                body = os.read(fd, _MAX_LOCK_BODY)
            except OSError:
                body = b""
    finally:
        os.close(fd)
    pid, created_at, starttime = _parse_body(body)
    return LockInfo(pid, created_at, starttime, st.st_mtime, body, st.st_dev, st.st_ino)


def stale_reasons(info: LockInfo, *, now: float, stale_seconds: float = LOCK_STALE_SECONDS) -> list[str]:
    """OpenClaw's ``inspectLockPayload`` reasons: missing-pid, dead-pid, recycled-pid, invalid-createdAt,
    too-old."""
    reasons: list[str] = []
    if info.pid is None:
        reasons.append("missing-pid")
    elif not pid_alive(info.pid):
        reasons.append("dead-pid")
    elif info.starttime is not None:
        current = process_starttime(info.pid)
        if current is not None and current != info.starttime:
            reasons.append("recycled-pid")
    if info.created_at is None:
        reasons.append("invalid-createdAt")
    elif max(0.0, now - info.created_at) > stale_seconds:
        reasons.append("too-old")
    return reasons


_MTIME_FALLBACK_REASONS = frozenset({"missing-pid", "invalid-createdAt"})


def lock_is_live(
    info: LockInfo, *, now: float | None = None, stale_seconds: float = LOCK_STALE_SECONDS
) -> bool:
    """Whether OpenClaw would still honour this lock (True) or reclaim it (False)."""
    now = time.time() if now is None else now
    reasons = stale_reasons(info, now=now, stale_seconds=stale_seconds)
    if not reasons:
        return True
    if not _MTIME_FALLBACK_REASONS.issuperset(reasons):
        return False
    # Only fields are missing (garbage body, or a lock caught between create and write): judge by mtime.
    if info.mtime is None:
        return True
    return max(0.0, now - info.mtime) <= stale_seconds


def session_is_locked(transcript: str | os.PathLike[str], *, now: float | None = None) -> bool:
    """True when a live process holds the transcript's OpenClaw lock."""
    info = read_lock(lock_path_for(transcript))
    return info is not None and lock_is_live(info, now=now)


def _same_lock(a: LockInfo, b: LockInfo) -> bool:
    return (a.dev, a.ino, a.mtime, a.body) == (b.dev, b.ino, b.mtime, b.body)


def remove_stale_lock(lock_path: str | os.PathLike[str], seen: LockInfo) -> bool:
    """Unlink the lock only if it is still exactly the one ``seen`` (re-read first); True when removed.

    A lock released and re-taken by its agent after we judged it stale has another inode or body and stays.
    The remaining window between the re-read and the unlink is a few microseconds.
    """
    again = read_lock(lock_path)
    if again is None or not _same_lock(again, seen):
        return False
    try:
        os.unlink(lock_path)
    except OSError:  # gone already, or not unlinkable (a directory in its place): not ours to force
        return False
    return True


def _create_lock(lock_path: Path) -> tuple[int, bytes]:
    """Create the lock with its body already in it: write a temp file, then ``link`` it to the lock name.

    ``link`` fails when the name exists, like ``O_EXCL``, but the lock never exists empty: a kill between
    create and write would otherwise leave a body-less lock that OpenClaw honours for 30 minutes.
    """
    payload: dict[str, object] = {
        "pid": os.getpid(),
        "createdAt": js_iso(),
    }  # toISOString(), as OpenClaw writes it
    starttime = process_starttime(os.getpid())
    if starttime is not None:
        payload["starttime"] = starttime
    body = json.dumps(payload, indent=2).encode()  # the same layout OpenClaw writes
    temp = lock_path.with_name(f".{lock_path.name}.compactd.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, _LOCK_MODE)
    try:
        os.fchmod(fd, _LOCK_MODE)  # the umask (UMask=0077 in the unit) must not make it private
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
        os.link(temp, lock_path)
    finally:
        os.close(fd)
        with suppress(OSError):
            os.unlink(temp)
    return os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), body


@contextmanager
def hold_session_lock(transcript: str | os.PathLike[str], *, now: float | None = None) -> Iterator[Path]:
    """Hold the transcript's OpenClaw lock for one commit; yields the lock path.

    Raises :class:`SessionBusy` when a live process holds it; a stale lock is reclaimed once. Other errors
    (EACCES, EROFS, ENOSPC) propagate as OSError. Not re-entrant: a second hold in the same process sees our
    own live pid and raises SessionBusy. Keep the body short (well under OpenClaw's 10 s acquire timeout) and
    never hold it across a model call.
    """
    lock_path = lock_path_for(transcript)
    fd = -1
    body = b""
    for attempt in range(2):
        try:
            fd, body = _create_lock(lock_path)
            break
        except FileExistsError:
            info = read_lock(lock_path)
            if info is None:
                continue  # released between our create and our read
            if attempt == 1 or lock_is_live(info, now=now):
                raise SessionBusy(lock_path, info) from None
            if not remove_stale_lock(lock_path, info):
                raise SessionBusy(lock_path, read_lock(lock_path)) from None
            log.warning(
                "removed stale session lock lock=%s pid=%s reasons=%s",
                lock_path,
                info.pid,
                ",".join(stale_reasons(info, now=time.time() if now is None else now)),
            )
    if fd < 0:
        raise SessionBusy(lock_path, read_lock(lock_path))
    try:
        yield lock_path
    finally:
        try:
            ours = os.fstat(fd)
        finally:
            os.close(fd)
        mine = (ours.st_dev, ours.st_ino, body)
        current = read_lock(lock_path)
        if current is None:
            log.warning("session lock vanished while we held it lock=%s", lock_path)
        elif (current.dev, current.ino, current.body) == mine:
            with suppress(FileNotFoundError):
                os.unlink(lock_path)
        else:
            log.warning("session lock was taken over while we held it; leaving it lock=%s", lock_path)


@contextmanager
def flocked(path: str | os.PathLike[str], *, exclusive: bool = True) -> Iterator[int]:
    """Hold a blocking ``flock`` on ``path`` (created 0600 if missing, never replaced); yields the fd.

    For short critical sections between compactd processes of one state directory (recovery, the journal's
    rewrite); the kernel drops it if the process dies.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


class InstanceLock:
    """One compactd per state directory: ``flock`` on ``<state_dir>/compactd.lock``.

    ``run`` holds it exclusively; ``once`` holds it ``shared`` (several may run together, their per-session
    claims keep them apart), so a ``once`` and a ``run`` exclude each other.

    The file is never renamed or removed, so every instance locks the same inode (a lock on a file that is
    later replaced protects nothing, design.md §7.2). The holder's pid is written into it for humans and
    for the error message; the lock itself is the flock, dropped by the kernel when the process dies.
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, shared: bool = False) -> None:
        self.state_dir = Path(state_dir)
        self.shared = shared
        self.path = self.state_dir / INSTANCE_LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError(f"instance lock {self.path} is already held by this object")
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # O_CLOEXEC (Python's default, stated here): a hook child outliving us must not keep the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, _LOCK_MODE)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise AlreadyRunning(self.state_dir, holder) from None
            raise
        if self.shared:  # the pid in the file is the exclusive holder's; sharers leave it alone
            self._fd = fd
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self.shared:
            os.close(fd)
            return
        try:
            os.ftruncate(fd, 0)  # no stale pid for humans; the file itself stays
        except OSError:
            pass
        finally:
            os.close(fd)  # drops the flock

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
