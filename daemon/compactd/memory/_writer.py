"""The confined memory writer: appends a block to ``<workspace>/memory/YYYY-MM-DD.md`` and nowhere else.

The workspace is the agent's home, and AGENTS.md, MEMORY.md, SOUL.md and their kind are the agent's own
(design.md §6.10). The confinement is enforced with directory file descriptors and ``O_NOFOLLOW``, so a
symlink swapped in after a check still cannot redirect the write; as root the write is made as the workspace's
owner (:mod:`compactd.workspace`), so their permissions apply and the file is theirs.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from compactd.commit.atomic import write_all
from compactd.core.timestamps import local_iso_ms
from compactd.workspace import Workspace, WorkspaceChildError, run_as

MEMORY_DIR_NAME = "memory"
# Workspace bootstrap files the agent reads as instructions (design.md §6.10 lists them as read-only during a flush).
# Never a write target, whatever a caller or a configuration asks; compared case-insensitively because
# case-insensitive filesystems (a mounted macOS or Windows share) alias them.
FORBIDDEN_NAMES = frozenset({"agents.md", "memory.md", "soul.md", "tools.md", "dreams.md"})
_TARGET_NAME = re.compile(r"[^./\\\x00][^/\\\x00]*\.md\Z")


class MemoryWriteRefused(Exception):
    """A memory write that would leave ``<workspace>/memory/<date>.md``; nothing was written."""


def local_date(now: datetime) -> str:
    """``YYYY-MM-DD`` in the machine's local time zone (a naive ``now`` is taken as local already)."""
    return now.astimezone().strftime("%Y-%m-%d")


def memory_file_for(workspace: Path, now: datetime) -> Path:
    """``<workspace>/memory/YYYY-MM-DD.md`` for the local date of ``now``."""
    return Path(workspace) / MEMORY_DIR_NAME / f"{local_date(now)}.md"


def _check_name(name: str) -> None:
    if name.casefold() in FORBIDDEN_NAMES:
        raise MemoryWriteRefused(f"refusing to write {name}: workspace bootstrap files are never touched")
    if not _TARGET_NAME.match(name):
        raise MemoryWriteRefused(f"refusing to write {name!r}: memory files are visible .md files")


def _target_name(workspace: Path, real_workspace: Path, target: Path) -> str:
    """The file name of ``target``, which must lie directly in the workspace's ``memory/`` directory."""
    if not target.is_absolute():
        target = workspace / target
    lexical = Path(os.path.normpath(target))
    relative: tuple[str, ...] | None = None
    for base in (Path(os.path.normpath(workspace.absolute())), real_workspace):
        if lexical.is_relative_to(base):
            relative = lexical.relative_to(base).parts
            break
    if relative is None:
        raise MemoryWriteRefused(f"refusing to write {target}: it is outside the workspace {real_workspace}")
    for part in relative:
        _check_forbidden(part, target)
    if len(relative) != 2 or relative[0] != MEMORY_DIR_NAME:
        raise MemoryWriteRefused(
            f"refusing to write {target}: memory writes are confined to {real_workspace / MEMORY_DIR_NAME}/"
        )
    _check_name(relative[1])
    return relative[1]


def _check_forbidden(part: str, target: Path) -> None:
    if part.casefold() in FORBIDDEN_NAMES:
        raise MemoryWriteRefused(f"refusing to write {target}: workspace bootstrap files are never touched")


def _open_dir(name: str, dir_fd: int, shown: Path) -> int:
    """Open a directory entry without following a symlink, with the reason as a refusal."""
    info = os.lstat(name, dir_fd=dir_fd)  # FileNotFoundError: the caller creates it
    if stat.S_ISLNK(info.st_mode):
        raise MemoryWriteRefused(f"refusing to write into {shown}: it is a symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise MemoryWriteRefused(f"refusing to write into {shown}: it is not a directory")
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a symlink after the check
            raise MemoryWriteRefused(f"refusing to write into {shown}: it is a symlink") from None
        raise


def _check_owner(fd: int, owner: int | None, shown: Path) -> None:
    """Refuse a workspace, ``memory/`` or memory file another user owns: writing there would put this
    session's memories into that user's files (a header ``cwd`` is only a claim)."""
    if owner is None:
        return
    uid = os.fstat(fd).st_uid
    if uid != owner:
        raise MemoryWriteRefused(f"refusing to write into {shown}: owned by uid {uid}, not by uid {owner}")


def _separator(fd: int, size: int) -> bytes:
    """What goes before a new block so that it starts after exactly one blank line."""
    if size == 0:
        return b""
    end = os.pread(fd, 2, max(0, size - 2))
    if end.endswith(b"\n\n") or (size == 1 and end == b"\n"):
        return b""
    return b"\n" if end.endswith(b"\n") else b"\n\n"


def _header(now: datetime, session_id: str | None) -> str:
    """An HTML comment (invisible when rendered) saying who appended the block and when."""
    parts = [f"compactd memory flush {local_iso_ms(now)}"]
    if session_id:
        clean = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._:-]", "_", session_id))[:128].strip("-")
        parts.append(f"session {clean}")
    return f"<!-- {' '.join(parts)} -->"


def append_memory(
    workspace: Path,
    text: str,
    *,
    now: datetime,
    session_id: str | None = None,
    target: Path | None = None,
    owner: int | None = None,
) -> Path | None:
    """Append ``text`` as one block to ``<workspace>/memory/YYYY-MM-DD.md``; None when ``text`` is blank.

    The file is opened ``O_APPEND|O_CREAT`` (never truncated), the block is a header comment plus the text,
    separated from earlier content by a blank line, and it is fsynced. ``memory/`` is created with the
    workspace's permissions when missing. Raises :class:`MemoryWriteRefused` when the write would leave that
    one file (a symlinked ``memory/`` or target, a path outside ``memory/``, a bootstrap file name, a hard
    link, something that is not a regular file, or, when ``owner`` is given, a workspace, ``memory/`` or
    memory file that user does not own); OSError for a failed write.
    """
    body = text.strip("\n").rstrip()
    if not body.strip():
        return None
    workspace = Path(workspace)
    try:
        real_workspace = workspace.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise MemoryWriteRefused(f"refusing to write: workspace {workspace} does not exist ({exc})") from None
    if not real_workspace.is_dir():
        raise MemoryWriteRefused(f"refusing to write: workspace {workspace} is not a directory")
    wanted = target if target is not None else memory_file_for(workspace, now)
    name = _target_name(workspace, real_workspace, Path(wanted))
    memory_dir = real_workspace / MEMORY_DIR_NAME
    path = memory_dir / name

    ws_fd = os.open(real_workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    mem_fd = fd = -1
    try:
        _check_owner(ws_fd, owner, real_workspace)
        try:
            mem_fd = _open_dir(MEMORY_DIR_NAME, ws_fd, memory_dir)
        except FileNotFoundError:
            mode = stat.S_IMODE(os.fstat(ws_fd).st_mode) or 0o755
            try:
                os.mkdir(MEMORY_DIR_NAME, mode, dir_fd=ws_fd)
                os.fsync(ws_fd)
            except FileExistsError:
                pass  # created meanwhile; checked like any other below
            mem_fd = _open_dir(MEMORY_DIR_NAME, ws_fd, memory_dir)
        _check_owner(mem_fd, owner, memory_dir)
        try:
            existing = os.lstat(name, dir_fd=mem_fd)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISLNK(existing.st_mode):
            raise MemoryWriteRefused(f"refusing to write {path}: it is a symlink")
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise MemoryWriteRefused(f"refusing to write {path}: it is not a regular file")
        file_mode = stat.S_IMODE(os.fstat(mem_fd).st_mode) & 0o666 or 0o644
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, file_mode, dir_fd=mem_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MemoryWriteRefused(f"refusing to write {path}: it is a symlink") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MemoryWriteRefused(f"refusing to write {path}: it is not a regular file")
        _check_owner(fd, owner, path)
        if info.st_nlink > 1:
            # A hard link could alias a bootstrap file; appending would edit it behind its name.
            raise MemoryWriteRefused(f"refusing to write {path}: it has {info.st_nlink} hard links")
        block = f"{_header(now, session_id)}\n{body}\n".encode()
        write_all(fd, _separator(fd, info.st_size) + block)
        os.fsync(fd)
        if existing is None:
            os.fsync(mem_fd)  # the new directory entry
    finally:
        for descriptor in (fd, mem_fd, ws_fd):
            if descriptor >= 0:
                os.close(descriptor)
    return path


def append_memory_as_owner(
    workspace: Workspace, text: str, *, now: datetime, session_id: str | None = None
) -> Path | None:
    """:func:`append_memory` done as the workspace's owner (see :mod:`compactd.workspace`): a forked child
    with that user's identity when compactd is root, so the file is the user's and their permissions apply.
    Raises what ``append_memory`` raises; a child that fails otherwise is an OSError."""

    def job() -> dict[str, Any]:
        try:
            path = append_memory(workspace.path, text, now=now, session_id=session_id, owner=workspace.owner)
        except MemoryWriteRefused as exc:
            return {"refused": str(exc)}
        except OSError as exc:
            return {"errno": exc.errno or 0, "strerror": exc.strerror or str(exc)}
        return {"path": None if path is None else str(path)}

    try:
        reply = run_as(workspace.identity, job)
    except WorkspaceChildError as exc:
        raise OSError(errno.EIO, f"writing as the workspace owner failed: {exc}") from None
    if not isinstance(reply, dict):
        raise OSError(errno.EIO, "writing as the workspace owner failed: no answer")
    if "refused" in reply:
        raise MemoryWriteRefused(str(reply["refused"]))
    if "errno" in reply:
        raise OSError(int(reply["errno"]), str(reply["strerror"]))
    path = reply.get("path")
    return Path(path) if isinstance(path, str) else None
