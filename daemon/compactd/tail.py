"""Follow a transcript that another process appends to, reading only the bytes appended since last time.

A ``FileCursor`` is the whole per-file state: device, inode, the offset just past the last complete line, and
the bytes of an unfinished last line (writers' appends become visible page by page, so a reader often sees a
torn line). It never writes to the file.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from compactd.transcript.jsjson import is_js_blank, js_trim_bounds
from compactd.transcript.reader import Transcript, parse_line, parse_transcript

__all__ = ["Change", "FileCursor", "Update"]

# A torn tail longer than this is not buffered across polls; it is re-read once it completes.
MAX_PARTIAL_BYTES = 1 << 20


class Change(Enum):
    UNCHANGED = "unchanged"
    APPENDED = "appended"
    RELOADED = "reloaded"
    MISSING = "missing"
    RESUMED = "resumed"  # picked up from a saved snapshot (see compactd.resume); nothing was appended since


@dataclass(slots=True)
class Update:
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


@dataclass(slots=True)
class FileCursor:
    path: str
    dev: int = -1
    ino: int = -1
    offset: int = 0
    partial: bytes = b""
    mtime: float = 0.0
    mtime_ns: int = 0
    ctime_ns: int = 0
    size: int = 0
    bytes_read: int = 0

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
            if st.st_size < self.offset + len(self.partial):
                return self._reload(fd, st, "shrunk")
            start = self.offset + len(self.partial)
            if st.st_size == start:
                return Update(Change.UNCHANGED)
            chunk = os.pread(fd, st.st_size - start, start)
        finally:
            os.close(fd)
        self.bytes_read += len(chunk)
        data = self.partial + chunk if self.partial else chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:] if len(data) - cut <= MAX_PARTIAL_BYTES else b""
        if cut == 0:
            return Update(Change.UNCHANGED)  # an oversized torn line is not kept; it is re-read once complete
        self.offset += cut
        entries, malformed, non_objects, trim_sensitive = _parse_lines(data[:cut])
        return Update(
            Change.APPENDED,
            entries=entries,
            malformed=malformed,
            non_objects=non_objects,
            trim_sensitive=trim_sensitive,
        )

    def _reload(self, fd: int, st: os.stat_result, reason: str) -> Update:
        data = _read_all(fd, st.st_size)
        self.bytes_read += len(data)
        self.dev, self.ino = st.st_dev, st.st_ino
        cut = data.rfind(b"\n") + 1
        self.offset = cut
        self.partial = data[cut:] if len(data) - cut <= MAX_PARTIAL_BYTES else b""
        return Update(Change.RELOADED, data=data[:cut], reason=reason)

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
        caller has checked that those bytes are the ones its ledger was built from (``compactd.resume``)."""
        self.dev, self.ino, self.offset, self.partial = dev, ino, offset, b""

    def reset(self) -> None:
        """Forget the file: the next poll reloads it (after our own rewrite, or on request)."""
        self.dev = self.ino = -1
        self.offset = 0
        self.partial = b""


def _read_all(fd: int, size_hint: int) -> bytes:
    parts: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size_hint - offset, 1 << 16), offset)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
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
