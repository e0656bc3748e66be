"""The rewrite protocol (design.md §7.1), path safety, and the crash-test hooks.

A rotation replaces a transcript that agents may append to at any moment, by path, without a lock. The
protocol loses nothing an agent wrote:

1. hard-link the original to its archive name (the archive is the old inode itself: every byte written to it,
   before or after the rename, stays reachable);
2. write the successor to a dot-named temp file in the same directory, with the original's mode and owner;
   ``fsync``;
3. carry over every complete line appended to the original meanwhile (loop ``fstat`` on the old fd until the
   size is stable); ``fsync``;
4. ``rename`` over the path; ``fsync`` the directory;
5. keep reading the old inode for a grace period and append any late complete line to the new file (a writer
   that opened the path just before the rename lands there);
6. if a rescued line now sits after a line that descends from it, append a small ``custom`` entry under the
   true leaf, so the last line still leads to a branch holding every agent line (pi's leaf is the last line);
7. restore the original's mtime (``pi -c`` resumes the newest file).

A kill at any instant leaves the path holding either the old or the new transcript, complete: ``rename`` is
atomic and the temp file is complete and synced before it. What a kill leaves behind (temp file, archive link,
late lines in the old inode) is cleaned up or finished by :func:`compactd.commit.journal.recover`.

Test seam: the commit path calls :func:`crash_point` at each step of :data:`CRASH_POINTS`, which calls
:data:`step_hook`, a no-op. Only a test replaces it (``tests/support/crash.py``: kill the process at a step,
replace or delete the file mid-commit); no environment variable or other input of a production process
reaches it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from collections.abc import Callable
from typing import Literal

import orjson

from compactd.commit.durable import fsync_dir, os_reason, write_all
from compactd.commit.notes import ARCHIVE_INFIX
from compactd.commit.successor import dumps_entry, fresh_id, leaf_pointer_entry, misplaced_leaf
from compactd.core.reader import Transcript, parse_line, parse_transcript, same_reading
from compactd.core.timestamps import archive_stamp
from compactd.datarecord import datarecord

__all__ = [
    "ARCHIVE_INFIX",
    "CRASH_POINTS",
    "Abandon",
    "FileSnapshot",
    "Written",
    "archive_path_for",
    "checked_path",
    "crash_point",
    "current_transcript",
    "fsync_dir",
    "is_our_tmp",
    "open_snapshot",
    "os_reason",
    "pread_all",
    "replace_with_successor",
    "step_hook",
    "tmp_path_for",
    "tmp_pid",
    "utc_stamp",
    "write_all",
]

log = logging.getLogger(__name__)

# Every step of the commit path where a kill test may kill the committing process, in the order they run.
CRASH_POINTS: tuple[str, ...] = (
    "commit_after_lock",
    "seal_before_write",
    "rotate_after_intent",
    "rotate_after_link",
    "rotate_after_tmp_create",
    "rotate_after_tmp_write",
    "rotate_after_tmp_fsync",
    "rotate_after_carry",
    "rotate_before_rename",
    "rotate_after_rename",
    "rotate_after_dir_fsync",
    "rotate_during_grace",
    "rotate_after_grace",
    "rotate_after_leaf_fix",
    "rotate_after_mtime",
    "rotate_after_done",
    "retention_before_unlink",
    "append_after_intent",
    "append_after_write",
    "append_after_fsync",
    "append_before_correction",
    "append_after_correction",
    "append_after_done",
)


def _no_step_hook(name: str) -> None:
    """Production's hook: nothing happens at a step."""


# Called with the step's name at every crash point; replaced by tests only (see the module docstring).
step_hook: Callable[[str], None] = _no_step_hook

# The rescue loop polls the old inode this often during the grace period: cheap, and well under the time a
# writer needs to notice nothing.
GRACE_POLL_SECONDS = 0.005
# A line still incomplete in the old inode when the grace period ends is waited for this much longer (a writer
# in the middle of a multi-megabyte line); after that its bytes stay in the archive only.
TORN_GRACE_EXTRA_SECONDS = 2.0
# The carry-over loop stops after this long even if a writer never pauses; the rescue picks up the rest.
CARRY_MAX_SECONDS = 2.0
READ_CHUNK = 1 << 20
TMP_MARK = ".compactd."
TMP_SUFFIX = ".tmp"


def crash_point(name: str) -> None:
    """A named step of the commit path (one of :data:`CRASH_POINTS`): the test seam, a no-op in production."""
    step_hook(name)


class Abandon(Exception):
    """The commit cannot go on; ``reason`` says why. Nothing has been changed when this is raised. ``busy``:
    the agent is at work (``"not_idle"``, ``"turn"``), not a failure; None for every other reason."""

    def __init__(self, reason: str, *, busy: Literal["not_idle", "turn"] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.busy = busy


# --- paths --------------------------------------------------------------------------------------------------


def checked_path(path: str | os.PathLike[str]) -> str:
    """The absolute path of a regular transcript file we may write next to; Abandon otherwise.

    Refuses a symlink (we would write where it points) and a path that leads through one anywhere: callers pass
    the real path found under a root, so a directory swapped for a symlink since (during a model call, say)
    would send the commit out of the root.
    """
    absolute = os.path.abspath(os.fspath(path))
    try:
        st = os.lstat(absolute)
    except FileNotFoundError:
        raise Abandon("file does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise Abandon("path is a symlink: refusing to follow it")
    if not stat.S_ISREG(st.st_mode):
        raise Abandon("path is not a regular file")
    if os.path.realpath(absolute) != absolute:
        raise Abandon("path leads through a symlink: refusing to follow it")
    return absolute


def utc_stamp(now: float) -> str:
    """OpenClaw's archive timestamp: ISO, UTC, milliseconds, ``:`` replaced by ``-``."""
    return archive_stamp(now)


def archive_path_for(path: str, now: float) -> str:
    """``<name>.bak.<UTC ts>``, a name that does not end in ``.jsonl`` (pi would list it as a session)."""
    stamp_ms = int(now * 1000)
    while True:
        candidate = f"{path}{ARCHIVE_INFIX}{utc_stamp(stamp_ms / 1000)}"
        if not os.path.lexists(candidate):
            return candidate
        stamp_ms += 1


def tmp_path_for(path: str) -> str:
    """``.<name>.compactd.<pid>.tmp`` in the same directory (same filesystem, so the rename is atomic)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}{TMP_MARK}{os.getpid()}{TMP_SUFFIX}")


def is_our_tmp(name: str) -> bool:
    return name.startswith(".") and TMP_MARK in name and name.endswith(TMP_SUFFIX)


def tmp_pid(name: str) -> int | None:
    """The pid in one of our temp file names, or None."""
    if not is_our_tmp(name):
        return None
    middle = name[: -len(TMP_SUFFIX)].rsplit(TMP_MARK, 1)[-1]
    return int(middle) if middle.isdigit() else None


def pread_all(fd: int, offset: int, length: int) -> bytes:
    """``length`` bytes from ``offset`` (fewer at the end of the file). One read into one buffer first: reading
    a whole transcript in chunks and joining them held it twice at the commit's peak."""
    if length <= 0:
        return b""
    first = os.pread(fd, length, offset)
    if len(first) == length or not first:
        return first
    parts: list[bytes] = [first]  # a short read (over 2 GiB, or a signal): the rest a chunk at a time
    offset += len(first)
    length -= len(first)
    while length > 0:
        chunk = os.pread(fd, min(length, READ_CHUNK), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(parts)


# --- snapshots ----------------------------------------------------------------------------------------------


@datarecord
class FileSnapshot:
    """The file as opened for a commit: an fd on its inode, and its complete lines."""

    path: str
    fd: int
    st: os.stat_result
    data: bytes  # every byte up to and including the last newline
    size: int  # bytes read, including an unterminated tail

    @property
    def cut(self) -> int:
        return len(self.data)

    @property
    def torn(self) -> bool:
        return self.size > len(self.data)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_snapshot(path: str) -> FileSnapshot:
    """Open without following a symlink and read the whole file; Abandon if it is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Abandon("file deleted before the commit") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Abandon("path is a symlink: refusing to follow it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Abandon("path is not a regular file")
        raw = pread_all(fd, 0, st.st_size)
        size = len(raw)
        # A writer may have appended since fstat: read to the real end.
        while True:
            more = os.pread(fd, READ_CHUNK, size)
            if not more:
                break
            raw += more
            size += len(more)
    except BaseException:
        os.close(fd)
        raise
    end = raw.rfind(b"\n") + 1
    return FileSnapshot(path, fd, st, raw[:end], size)


def current_transcript(
    snap: FileSnapshot, planned: Transcript | None, check: Callable[[Transcript], str | None] | None
) -> Transcript:
    """The snapshot parsed: the plan's own reading when the file is still the one it was made from (no second
    parse of an unchanged file), else a fresh parse. Abandon with ``check``'s reason when it has one."""
    if same_reading(planned, snap.data, (snap.st.st_dev, snap.st.st_ino)):
        assert planned is not None
        transcript = planned
        held = planned.file_bytes()
        if held is not None and held == snap.data:
            snap.data = held  # one copy of the file's bytes at the commit's peak, not two
    else:
        transcript = parse_transcript(snap.data, lean=True)
    reason = check(transcript) if check is not None else None
    if reason is not None:
        raise Abandon(reason, busy="turn")
    return transcript


# --- the rewrite --------------------------------------------------------------------------------------------


@datarecord
class ReplaceResult:
    """What an atomic replace did: the new file's inode and size, the agent's lines it carried or rescued."""

    new_inode: int
    size: int
    carried_lines: int
    rescued_lines: int
    leaf_pointer: str | None
    mtime_restored: bool


def _link_inode(path: str, archive: str, expect: os.stat_result) -> None:
    """Hard-link the path to ``archive`` and check it is the inode we read (else someone replaced the file).

    (Linking ``/proc/self/fd/N`` would name the inode directly, but recent kernels refuse it with EXDEV.)
    """
    try:
        os.link(path, archive, follow_symlinks=False)
    except FileNotFoundError:
        raise Abandon("file deleted mid-commit") from None
    st = os.lstat(archive)
    if (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
        os.unlink(archive)
        raise Abandon("file replaced mid-commit")


def _copy_lines(src_fd: int, dst_fd: int, pos: int) -> tuple[int, int, int]:
    """Append the complete lines in ``src[pos:EOF]`` to ``dst`` in one write; (new pos, lines, src size)."""
    size = os.fstat(src_fd).st_size
    if size < pos:
        raise Abandon("file truncated mid-commit")
    if size == pos:
        return pos, 0, size
    chunk = pread_all(src_fd, pos, size - pos)
    end = chunk.rfind(b"\n") + 1
    if end == 0:
        return pos, 0, size
    write_all(dst_fd, chunk[:end])
    return pos + end, chunk.count(b"\n", 0, end), size


def carry_over(src_fd: int, dst_fd: int, pos: int) -> tuple[int, int]:
    """Copy complete lines appended to ``src`` since ``pos`` until its size stops changing; (pos, lines)."""
    lines = 0
    last_size = -1
    deadline = time.monotonic() + CARRY_MAX_SECONDS
    while True:
        pos, copied, size = _copy_lines(src_fd, dst_fd, pos)
        lines += copied
        if copied == 0 and size == last_size:
            return pos, lines
        if time.monotonic() > deadline:
            log.warning("carry-over stopped after %.1f s: the writer never paused", CARRY_MAX_SECONDS)
            return pos, lines
        last_size = size


def _clone_owner(tmp_fd: int, st: os.stat_result) -> None:
    """The temp file gets the original's mode and owner: an agent must keep being able to append.

    The owner first: a ``chown`` clears set-id bits, which the ``chmod`` then restores.
    """
    mine = os.fstat(tmp_fd)
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.fchown(tmp_fd, st.st_uid, st.st_gid)
        except PermissionError:
            raise Abandon(
                "cannot give the successor the original's owner (run compactd as that user)"
            ) from None
    os.fchmod(tmp_fd, stat.S_IMODE(st.st_mode))


def replace_with_successor(
    snap: FileSnapshot,
    successor: bytes,
    *,
    archive: str,
    tmp: str,
    grace_seconds: float,
) -> ReplaceResult:
    """Run the protocol; Abandon (with everything undone) before the rename, best effort after it."""
    path = snap.path
    directory = os.path.dirname(path)
    _link_inode(path, archive, snap.st)
    crash_point("rotate_after_link")
    tmp_fd = -1
    try:
        tmp_fd = os.open(
            tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        _clone_owner(tmp_fd, snap.st)
        crash_point("rotate_after_tmp_create")
        write_all(tmp_fd, successor)
        crash_point("rotate_after_tmp_write")
        os.fsync(tmp_fd)
        crash_point("rotate_after_tmp_fsync")
        pos, carried = carry_over(snap.fd, tmp_fd, snap.cut)
        os.fsync(tmp_fd)
        pos, more = carry_over(snap.fd, tmp_fd, pos)  # cheap, and closes most of the fsync window
        if more:
            carried += more
            os.fsync(tmp_fd)
        crash_point("rotate_after_carry")
        crash_point("rotate_before_rename")
        try:
            now_st = os.lstat(path)
        except FileNotFoundError:
            raise Abandon("file deleted mid-commit") from None
        if (now_st.st_dev, now_st.st_ino) != (snap.st.st_dev, snap.st.st_ino):
            raise Abandon("file replaced mid-commit")
        os.rename(tmp, path)
    except BaseException:
        _undo(tmp, tmp_fd, archive, snap)
        raise
    # The rename happened: the commit stands. What follows is best effort; a failure is logged, not raised,
    # and recovery finishes the rescue from the archive if we die here.
    ours = len(successor) + (pos - snap.cut)  # bytes in the new file that we wrote
    rescued_lines = 0
    pointer: str | None = None
    restored = False
    try:
        crash_point("rotate_after_rename")
        fsync_dir(directory)
        crash_point("rotate_after_dir_fsync")
        pos, rescued_lines, rescued_bytes = _rescue(snap.fd, tmp_fd, pos, grace_seconds)
        ours += rescued_bytes
        crash_point("rotate_after_grace")
        # An agent that wrote to the new file directly made its mtime the truth; else restore the old one.
        direct_writes = os.fstat(tmp_fd).st_size != ours
        if rescued_lines:
            pointer = fix_leaf(tmp_fd, len(successor))
        crash_point("rotate_after_leaf_fix")
        if not direct_writes:
            old = os.fstat(snap.fd)
            os.utime(tmp_fd, ns=(old.st_atime_ns, old.st_mtime_ns))
            restored = True
        crash_point("rotate_after_mtime")
    except (OSError, Abandon) as exc:
        reason = exc.reason if isinstance(exc, Abandon) else os_reason(exc)
        log.error("after the rename of %s: %s (the archive keeps every line)", path, reason)
    try:
        final = os.fstat(tmp_fd)
    finally:
        os.close(tmp_fd)
    return ReplaceResult(final.st_ino, final.st_size, carried, rescued_lines, pointer, restored)


def _undo(tmp: str, tmp_fd: int, archive: str, snap: FileSnapshot) -> None:
    """Before the rename: remove the temp file and the archive link, leaving the directory as it was."""
    if tmp_fd >= 0:
        with contextlib.suppress(OSError):
            os.close(tmp_fd)
    for name in (tmp, archive):
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot inspect %s while undoing a commit: %s", name, os_reason(exc))
            continue
        if name == archive and (st.st_dev, st.st_ino) != (snap.st.st_dev, snap.st.st_ino):
            continue  # not our link
        try:
            os.unlink(name)
        except OSError as exc:
            log.warning("cannot remove %s while undoing a commit: %s", name, os_reason(exc))


def _rescue(src_fd: int, dst_fd: int, pos: int, grace_seconds: float) -> tuple[int, int, int]:
    """Read the old inode for the grace period; append late complete lines to the new file.

    Returns (pos, lines rescued, bytes rescued).
    """
    lines = 0
    copied_bytes = 0
    deadline = time.monotonic() + grace_seconds
    hard_deadline = deadline + TORN_GRACE_EXTRA_SECONDS
    first = True
    while True:
        new_pos, copied, size = _copy_lines(src_fd, dst_fd, pos)
        if copied:
            lines += copied
            copied_bytes += new_pos - pos
            log.info("rescued %d late line(s) from the old inode", copied)
        pos = new_pos
        if first:
            crash_point("rotate_during_grace")
            first = False
        now = time.monotonic()
        if now >= deadline and (size == pos or now >= hard_deadline):
            if size > pos:
                log.warning(
                    "a line in the old inode stayed incomplete after the grace period; it stays in the "
                    "archive"
                )
            return pos, lines, copied_bytes
        time.sleep(GRACE_POLL_SECONDS)


def fix_leaf(fd: int, start: int) -> str | None:
    """If the last line no longer leads to the newest agent line (a rescued line landed after its own child),
    append a ``custom`` entry under the true leaf; returns its id."""
    size = os.fstat(fd).st_size
    region = pread_all(fd, start, size - start)
    end = region.rfind(b"\n") + 1
    entries: list[dict[str, object]] = []
    for raw in region[:end].split(b"\n"):
        if not raw.strip():
            continue
        value, _ = parse_line(raw)
        if isinstance(value, dict):
            entries.append(value)
    target = misplaced_leaf(entries)
    if target is None:
        return None
    taken = _ids_in(fd)
    entry = leaf_pointer_entry(fresh_id(taken), target)
    line = dumps_entry(entry) + b"\n"
    if end < len(region):
        line = b"\n" + line  # never glue our line onto a torn one
    write_all(fd, line)
    os.fsync(fd)
    log.warning("late lines landed after newer ones; re-pointed the leaf to %s", target)
    return str(entry["id"])


def _ids_in(fd: int) -> set[str]:
    data = pread_all(fd, 0, os.fstat(fd).st_size)
    ids: set[str] = set()
    for raw in data.split(b"\n"):
        if b'"id"' not in raw:
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            ids.add(value["id"])
    return ids


@datarecord
class Written:
    """What a committed append or rotation did (the parts of CommitResult the modes fill in)."""

    leaf_id: str | None
    bytes_after: int
    archive: str | None = None
    carried_lines: int = 0
    rescued_lines: int = 0
    corrections: int = 0
    leaf_pointer: str | None = None
    # The file as left (its inode), as verification parsed it; None when other lines went in too.
    successor: Transcript | None = None
    inode: int | None = None
