"""The IO edge of the Codex source: where rollouts are, reading them, and whether Codex holds one (design.md §6.16).

- Rollouts live under ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl`` (``CODEX_HOME`` defaults to
  ``~/.codex``); older ones are compressed in place to ``.jsonl.zst``, read here with ``zstandard`` (already a
  dependency, for OpenClaw's frames) and never written.
- A Codex process writing a thread holds an exclusive ``flock`` on ``$CODEX_HOME/thread-writer-locks/<thread
  id>.lock`` for as long as the thread is open; compactd appends only while it holds that same lock itself
  (taken without waiting), so Codex cannot open the thread in the meantime and a live one is never touched.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from compactd.datarecord import datarecord
from compactd.defaults import MAX_COLD_READ_BYTES as MAX_TRANSCRIPT_BYTES

__all__ = [
    "LOCK_DIR",
    "Cursor",
    "ThreadBusy",
    "codex_home",
    "find_rollouts",
    "read_new",
    "read_whole",
    "thread_lock",
]

LOCK_DIR = "thread-writer-locks"
_ROLLOUT = re.compile(
    r"\Arollout-[0-9T:-]+-(?P<id>[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})(?:_\d+)?\.jsonl(?:\.zst)?\Z"
)
_THREAD_ID = re.compile(r"\A[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\Z")


class ThreadBusy(Exception):
    """Codex holds the thread (or compactd cannot tell that it does not)."""


def codex_home(env: Mapping[str, str], configured: str | None = None) -> str:
    """``codex.home`` from the config, else ``$CODEX_HOME``, else ``~/.codex``."""
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    home = env.get("CODEX_HOME")
    if home:
        return os.path.abspath(os.path.expanduser(home))
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".codex")


def thread_id_of(path: str) -> str | None:
    match = _ROLLOUT.match(os.path.basename(path))
    return match.group("id").lower() if match else None


def find_rollouts(home: str) -> list[str]:
    """Every rollout file under ``<home>/sessions``, never through a symlink (a link out of the home is not
    followed; ``os.walk`` does not descend into linked directories)."""
    root = os.path.join(home, "sessions")
    found: list[str] = []
    for directory, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            if _ROLLOUT.match(name) and not os.path.islink(path):
                found.append(path)
    return found


@datarecord(slots=True)
class Cursor:
    """How far a plain rollout was read: its identity, the offset of the first unread byte, a torn tail."""

    dev: int = -1
    ino: int = -1
    offset: int = 0
    pending: bytes = b""
    signature: tuple[int, int, int] | None = None  # (size, mtime_ns, ino) of a compressed one, read whole


def _open(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def read_whole(path: str) -> bytes:
    """The whole rollout, decompressed when it is ``.zst``; capped like every whole-file read (invariant 6, design.md §4)."""
    fd = _open(path)
    with os.fdopen(fd, "rb") as handle:
        if path.endswith(".zst"):
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(handle)
            data = reader.read(MAX_TRANSCRIPT_BYTES + 1)
        else:
            data = handle.read(MAX_TRANSCRIPT_BYTES + 1)
    if len(data) > MAX_TRANSCRIPT_BYTES:
        raise ValueError(f"rollout larger than {MAX_TRANSCRIPT_BYTES} bytes")
    return data


def read_new(path: str, cursor: Cursor) -> tuple[list[bytes], bool]:
    """Complete lines appended since ``cursor`` (a torn last line waits for its newline), and whether the file
    was read from its start (new, replaced, truncated, or compressed and changed)."""
    fd = _open(path)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if path.endswith(".zst"):
            signature = (st.st_size, st.st_mtime_ns, st.st_ino)
            if signature == cursor.signature:
                return [], False
            cursor.signature = signature
            data = read_whole(path)
            return [line for line in data.split(b"\n") if line.strip()], True
        fresh = (st.st_dev, st.st_ino) != (cursor.dev, cursor.ino) or st.st_size < cursor.offset
        if fresh:
            cursor.dev, cursor.ino, cursor.offset, cursor.pending = st.st_dev, st.st_ino, 0, b""
        handle.seek(cursor.offset)
        data = cursor.pending + handle.read(max(0, st.st_size - cursor.offset))
        cursor.offset = st.st_size
    *complete, tail = data.split(b"\n")
    cursor.pending = tail
    return [line for line in complete if line.strip()], fresh


@contextmanager
def thread_lock(home: str, thread_id: str) -> Iterator[None]:
    """Hold Codex's writer lock of ``thread_id`` (raises :class:`ThreadBusy` when Codex holds it, or when its
    lock directory is missing: compactd cannot tell then). The zero-byte lock file is Codex's own; it is created
    if absent, as Codex creates it, so the two cannot both believe the thread is theirs."""
    if not _THREAD_ID.match(thread_id):
        raise ThreadBusy(f"not a thread id: {thread_id!r}")
    directory = os.path.join(home, LOCK_DIR)
    if not os.path.isdir(directory) or os.path.islink(directory):
        raise ThreadBusy(f"{directory} is missing: cannot tell whether Codex has the thread open")
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(directory, thread_id + ".lock"), flags, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ThreadBusy(f"Codex holds {LOCK_DIR}/{thread_id}.lock (the session is open)") from None
            raise
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
