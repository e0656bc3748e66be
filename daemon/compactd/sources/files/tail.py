"""Follow a transcript that another process appends to, reading only the bytes appended since last time.

A ``FileCursor`` is the whole per-file state: device, inode, the offset just past the last complete line, and
the bytes of an unfinished last line (writers' appends become visible page by page, so a reader often sees a
torn line). An unfinished line over ``MAX_PARTIAL_BYTES`` is not kept, only its length: later polls read just
what is appended to it, and the line is read once more when its newline arrives. It never writes to the file.
"""

from __future__ import annotations

import errno
import os
from dataclasses import field
from enum import Enum
from typing import Any

from compactd.core.jsjson import is_js_blank, js_trim_bounds
from compactd.core.reader import Transcript, parse_line, parse_transcript
from compactd.datarecord import datarecord
from compactd.defaults import MAX_COLD_READ_BYTES, MAX_COLD_READ_LINES

__all__ = ["Change", "FileCursor", "Update"]

# A torn tail longer than this is not buffered across polls (only its length is): it is re-read once, complete.
MAX_PARTIAL_BYTES = 1 << 20


class Change(Enum):
    UNCHANGED = "unchanged"
    APPENDED = "appended"
    RELOADED = "reloaded"
    MISSING = "missing"
    RESUMED = "resumed"  # picked up from a saved snapshot (see compactd.sources.files.resume); nothing was appended since
    SKIPPED = "skipped"  # too large to read whole (``reason`` says why); not read again until it shrinks


@datarecord(slots=True)
class Update:
    """What one poll of a transcript found: nothing, new complete lines, a reload, or why it was not read."""

    change: Change
    entries: list[dict[str, Any]] = field(default_factory=list)
    data: bytes | None = None  # a reload's complete lines
    reason: str = ""
    malformed: int = 0
    # Lines that are JSON but not objects: pi takes such a line as its leaf, so only a reload stays exact.
    non_objects: int = 0
    # Malformed lines that parse once trimmed: pi keeps such a line while it is the file's last, so ditto.
    trim_sensitive: int = 0
    _transcript: Transcript | None = None

    @property
    def transcript(self) -> Transcript | None:
        """A reload's lines parsed (lazily: the ledger's cold read does not need every entry kept)."""
        if self._transcript is None and self.data is not None:
            self._transcript = parse_transcript(self.data, check=False)
        return self._transcript


@datarecord(slots=True)
class FileCursor:
    """Where the reading of one file stands: its identity, the offset of its last complete line, its torn tail."""

    path: str
    dev: int = -1
    ino: int = -1
    offset: int = 0
    partial: bytes = b""
    # The unfinished line's length past ``offset``: ``len(partial)``, or more when it was too long to keep.
    pending: int = 0
    mtime: float = 0.0
    mtime_ns: int = 0
    ctime_ns: int = 0
    size: int = 0
    bytes_read: int = 0
    # The cold read's caps: a file over either is not read whole (``skipped`` says why) so that no file
    # decides how much memory the daemon takes.
    max_bytes: int = MAX_COLD_READ_BYTES
    max_lines: int = MAX_COLD_READ_LINES
    skipped: str = ""

    @property
    def known(self) -> bool:
        return self.ino >= 0

    def poll(self) -> Update:
        """Reconcile with the file as it is now: nothing, new complete lines, or a reload."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return Update(Change.MISSING, reason=exc.strerror or "missing")
            raise
        try:
            st = os.fstat(fd)
            self.seen(st)
            if not self.known or (st.st_dev, st.st_ino) != (self.dev, self.ino):
                reason = "new file" if not self.known else "replaced (new inode)"
                return self._reload(fd, st, reason)
            if self.skipped:  # still too large (it only grew): nothing read; smaller, it is read afresh
                if st.st_size >= self.offset:
                    return Update(Change.UNCHANGED)
                return self._reload(fd, st, "shrunk")
            start = self.offset + self.pending
            if st.st_size < start:
                return self._reload(fd, st, "shrunk")
            if st.st_size == start:
                return Update(Change.UNCHANGED)
            chunk = os.pread(fd, st.st_size - start, start)
            self.bytes_read += len(chunk)
            newline = chunk.rfind(b"\n")
            if newline < 0:  # the unfinished line grows: keep it if small, else only its length
                kept = len(self.partial) == self.pending
                self.pending += len(chunk)
                self.partial = self.partial + chunk if kept and self.pending <= MAX_PARTIAL_BYTES else b""
                return Update(Change.UNCHANGED)
            head = self.partial
            if len(head) != self.pending:  # the line's start was not kept: read it once, now that it ends
                head = os.pread(fd, self.pending, self.offset)
                self.bytes_read += len(head)
                if len(head) != self.pending:
                    return self._reload(fd, st, "shrunk")
        finally:
            os.close(fd)
        cut = newline + 1
        data = head + chunk[:cut] if head else chunk[:cut]
        rest = chunk[cut:]
        self.partial = rest if len(rest) <= MAX_PARTIAL_BYTES else b""
        self.pending = len(rest)
        self.offset += len(data)
        entries, malformed, non_objects, trim_sensitive = _parse_lines(data)
        return Update(
            Change.APPENDED,
            entries=entries,
            malformed=malformed,
            non_objects=non_objects,
            trim_sensitive=trim_sensitive,
        )

    def _reload(self, fd: int, st: os.stat_result, reason: str) -> Update:
        self.dev, self.ino, self.skipped = st.st_dev, st.st_ino, ""
        if st.st_size > self.max_bytes:
            return self._skip(
                st, f"too large to read: {st.st_size} bytes, over the {self.max_bytes}-byte cap"
            )
        data = _read_all(fd, st.st_size, self.max_bytes)
        self.bytes_read += len(data)
        if len(data) > self.max_bytes:  # grew past the cap since the fstat
            return self._skip(st, f"too large to read: over the {self.max_bytes}-byte cap")
        cut = data.rfind(b"\n") + 1
        complete = data[:cut]  # ``data`` itself (no copy) when it ends with a newline
        if _more_lines_than(data, self.max_lines):
            lines = data.count(b"\n")
            return self._skip(st, f"too large to read: {lines} lines, over the {self.max_lines}-line cap")
        self.offset = cut
        self.pending = len(data) - cut
        self.partial = data[cut:] if self.pending <= MAX_PARTIAL_BYTES else b""
        return Update(Change.RELOADED, data=complete, reason=reason)

    def _skip(self, st: os.stat_result, reason: str) -> Update:
        """Not read whole: remembered by identity and size, so polls of it growing read nothing."""
        self.skipped = reason
        self.offset, self.partial, self.pending = st.st_size, b"", 0
        return Update(Change.SKIPPED, reason=reason)

    def seen(self, st: os.stat_result) -> None:
        """The file's size and times as of this look at it (its identity is ``dev``/``ino``, set on a read)."""
        self.mtime, self.mtime_ns, self.ctime_ns, self.size = (
            st.st_mtime,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_size,
        )

    def resume_at(self, dev: int, ino: int, offset: int) -> None:
        """Take up a file at ``offset`` (just past a complete line) without reading what precedes it: the
        caller has checked that those bytes are the ones its ledger was built from (``compactd.sources.files.resume``)."""
        self.dev, self.ino, self.offset, self.partial, self.pending = dev, ino, offset, b"", 0
        self.skipped = ""

    def reset(self) -> None:
        """Forget the file: the next poll reloads it (after our own rewrite, or on request)."""
        self.dev = self.ino = -1
        self.offset = self.pending = 0
        self.partial, self.skipped = b"", ""


def _more_lines_than(data: bytes, limit: int) -> bool:
    """``data.count(b"\\n") > limit``, stopping at the newline past the limit: a transcript's lines are long
    (kilobytes), and finding each newline (memchr) then costs a fraction of counting every byte."""
    if len(data) <= limit:
        return False
    find = data.find
    pos = 0
    for _ in range(limit + 1):
        pos = find(b"\n", pos) + 1
        if not pos:
            return False
    return True


def _read_all(fd: int, size_hint: int, limit: int) -> bytes:
    """The file to its end, or its first ``limit`` + 1 bytes when it is longer (the caller's cap exceeded)."""
    parts: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, min(max(size_hint - offset, 1 << 16), limit + 1 - offset), offset)
        if chunk:
            parts.append(chunk)
        if not chunk or offset + len(chunk) > limit:
            return b"".join(parts)  # one part: that very object, not a copy
        offset += len(chunk)


def _parse_lines(data: bytes) -> tuple[list[dict[str, Any]], int, int, int]:
    entries: list[dict[str, Any]] = []
    malformed = non_objects = trim_sensitive = 0
    for line in data.split(b"\n")[:-1]:  # data ends with a newline
        if not line or line.isspace():  # no copy of a long line just to test it
            continue
        value, reason = parse_line(line)
        if reason is not None:
            if is_js_blank(line):
                continue  # pi skips a line that trim() empties
            malformed += 1
            start, end = js_trim_bounds(line, 0, len(line))
            if (start, end) != (0, len(line)) and start < end and parse_line(line[start:end])[1] is None:
                trim_sensitive += 1
        elif isinstance(value, dict):
            entries.append(value)
        else:
            non_objects += 1
    return entries, malformed, non_objects, trim_sensitive
