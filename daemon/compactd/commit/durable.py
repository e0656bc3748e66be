"""The one whole-file replace of compactd's own files (state, status, metrics, the speed file, the journal).

A temp file in the same directory, written and ``fsync``'d, renamed over the target, then the directory
``fsync``'d: a reader (``compactd status``, node_exporter, the next start after a crash or a power loss) sees
the old file or the new one, never half of one. Transcripts are not written here: their replace is the
validated rotation of :mod:`compactd.commit.atomic`, which carries over lines appended meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from compactd.patterns import lazy_pattern

__all__ = ["TEMP_NAME", "fsync_dir", "os_reason", "write_all", "write_atomic"]


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def os_reason(exc: OSError) -> str:
    """``ENOSPC: No space left on device`` — the errno's name first, for logs and JSON."""
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return f"{name}: {exc.strerror or exc}"


# ``.<target name>.<pid>.<random>.tmp``: the pid tells a live writer's from a dead one's, and the name does
# not end in the target's suffix, so node_exporter (``*.prom``) never reads a half-written one.
TEMP_NAME = lazy_pattern(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]+\.tmp\Z")


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` all at once; the file gets exactly ``mode``, whatever the umask."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")  # secrets.token_hex(4)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not decide who may read metrics.prom
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
