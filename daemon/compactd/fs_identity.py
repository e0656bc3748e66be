"""Opening files as another user from one thread of a root process: Linux's file-system uid and gid.

A forked child (:func:`compactd.workspace.run_as`) suits one small read or write; a SQLite connection is opened
and read in this process, so for it the calling thread alone takes the user's file-system uid, gid and
supplementary groups while it opens and reads. The kernel then checks that user's permissions, and a file
SQLite would create belongs to that user. These credentials are per thread in the kernel; glibc's ``setfsuid``
and ``setfsgid`` stay per thread, but its ``setgroups`` is applied to every thread, so the groups go through
the raw system call. Changing the file-system uid away from 0 also drops root's file capabilities
(``CAP_DAC_OVERRIDE`` and its kind) for this thread until it is set back.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
from collections.abc import Iterator

from compactd.workspace import Identity

log = logging.getLogger(__name__)

__all__ = ["IdentityError", "files_as"]

# setgroups(2)'s number where compactd runs as root (glibc offers no per-thread setgroups).
_SETGROUPS = {"x86_64": 116, "aarch64": 159}


class IdentityError(OSError):
    """This thread could not take (or give back) a user's file-system identity."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _set_groups(libc: ctypes.CDLL, groups: tuple[int, ...]) -> None:
    number = _SETGROUPS.get(platform.machine())
    if number is None:
        raise IdentityError(f"no per-thread setgroups on {platform.machine()}")
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if libc.syscall(number, ctypes.c_size_t(len(groups)), array) != 0:
        err = ctypes.get_errno()
        raise IdentityError(err, f"setgroups: {os.strerror(err)}")


def _set_fs_ids(libc: ctypes.CDLL, uid: int, gid: int) -> None:
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    # Both calls return the previous id whatever happens: asking again (-1 changes nothing) tells.
    if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
        raise IdentityError(f"this thread could not take file-system uid {uid} and gid {gid}")


@contextlib.contextmanager
def files_as(identity: Identity | None) -> Iterator[None]:
    """Inside the block this thread opens files as ``identity`` (as compactd itself when it is None).

    Everything done inside must stay in this thread; the thread's own identity is restored on the way out
    (or the process ends: a thread left with a user's identity must not go on serving others)."""
    if identity is None:
        yield
        return
    libc = _libc()
    uid, gid, groups = os.geteuid(), os.getegid(), tuple(os.getgroups())
    _set_groups(libc, identity.groups)  # nothing changed yet when this fails
    try:
        _set_fs_ids(libc, identity.uid, identity.gid)
    except BaseException:
        _restore(libc, uid, gid, groups)
        raise
    try:
        yield
    finally:
        _restore(libc, uid, gid, groups)


def _restore(libc: ctypes.CDLL, uid: int, gid: int, groups: tuple[int, ...]) -> None:
    try:
        _set_fs_ids(libc, uid, gid)
        _set_groups(libc, groups)
    except IdentityError:  # pragma: no cover - root giving itself back its own ids does not fail
        log.critical("cannot restore this thread's identity after acting as a user; exiting")
        os._exit(70)
