"""Which directories may be sessions roots, and which paths stay inside one. Pure path logic plus ``lstat``.

compactd rewrites and archives every transcript it finds under a root, often as root, so a root must be a
place the operator chose: a symlink planted at (or below) a root pattern's wildcards must not lead the daemon
elsewhere. A pattern's *base* is its fixed part, the components before the first wildcard; whatever the
wildcards match must resolve inside the base's real path. The base itself is the operator's, but a symlink in
it is followed only when root or the user compactd runs as made it (a symlink's owner is whoever created it).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Sequence

__all__ = [
    "IntactDirs",
    "forbidden_root",
    "is_session_path",
    "literal_base",
    "pattern_may_match",
    "resolve_links",
    "untrusted_link",
    "within",
]

# Kernel pseudo-filesystems: never a sessions root, nor anything beneath them. "/" itself is refused too.
FORBIDDEN_ROOT_TREES = ("/proc", "/sys", "/dev")
_WILDCARDS = frozenset("*?[")
# As the kernel's MAXSYMLINKS: more hops than this is a loop.
_MAX_LINK_HOPS = 40


def _has_wildcard(part: str) -> bool:
    return any(c in _WILDCARDS for c in part)


def literal_base(pattern: str) -> str:
    """The fixed part of an absolute glob: its components before the first wildcard (all of a plain path)."""
    parts = pattern.split("/")
    fixed: list[str] = []
    for part in parts:
        if _has_wildcard(part):
            break
        fixed.append(part)
    return "/".join(fixed) or "/"


def within(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or lies beneath it (both absolute and normalized)."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def forbidden_root(real: str) -> str | None:
    """Why a directory can never be a sessions root, or None: ``/``, or ``/proc``, ``/sys``, ``/dev``."""
    if real == "/":
        return "it is the filesystem root"
    for tree in FORBIDDEN_ROOT_TREES:
        if within(real, tree):
            return f"it is under {tree}, a kernel pseudo-filesystem"
    return None


def resolve_links(path: str) -> tuple[str, list[tuple[str, int]]]:
    """``os.path.realpath`` of an absolute path, with every symlink followed on the way and its owner's uid.

    Components that do not exist are kept as written (as the non-strict realpath does). Raises OSError
    (ELOOP) on a symlink loop.
    """
    pending = [p for p in reversed(path.split("/")) if p]
    real = "/"
    links: list[tuple[str, int]] = []
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            real = os.path.dirname(real)
            continue
        candidate = os.path.join(real, part)
        try:
            info = os.lstat(candidate)
        except OSError:
            real = candidate
            continue
        if not stat.S_ISLNK(info.st_mode):
            real = candidate
            continue
        if len(links) >= _MAX_LINK_HOPS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        links.append((candidate, info.st_uid))
        target = os.readlink(candidate)
        if target.startswith("/"):
            real = "/"
        pending.extend(p for p in reversed(target.split("/")) if p)
    return real, links


def untrusted_link(links: Sequence[tuple[str, int]], euid: int | None = None) -> tuple[str, int] | None:
    """The first symlink made by someone other than root or the user compactd runs as, or None."""
    me = os.geteuid() if euid is None else euid
    for link, uid in links:
        if uid not in (0, me):
            return link, uid
    return None


def _component_matches(part: str, name: str) -> bool:
    if part == name:
        return True
    if not _has_wildcard(part):
        return False
    if name.startswith(".") and not part.startswith("."):
        return False  # glob's rule: a wildcard does not match a leading dot
    return fnmatch.fnmatchcase(name, part)


def pattern_may_match(pattern: str, path: str) -> bool:
    """Whether the (normalized, absolute) glob ``pattern`` matches ``path`` or one of its ancestors, component
    by component as ``glob.glob`` would (``**`` is ``*``: compactd's globs are not recursive)."""
    want = [p for p in pattern.split("/") if p]
    have = [p for p in path.split("/") if p]
    if len(want) > len(have):
        return False
    return all(_component_matches(p, n) for p, n in zip(want, have, strict=False))


def is_session_path(path: str) -> bool:
    """Whether ``path`` is a regular file reached without any symlink (its real path is itself)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and os.path.realpath(path) == path


class IntactDirs:
    """Whether directories still resolve to themselves, with ``realpath`` paid once per directory instead of
    once per file: a directory found intact is remembered with the identity ``stat`` gave it just before the
    check, and checked in full again as soon as its path leads to another directory (a component swapped for
    a symlink that leads elsewhere). A symlink swapped in that leads back to the very same directory changes
    nothing of what is reached through it."""

    __slots__ = ("_known", "_this_pass")

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, int]] = {}
        # Directories found intact during one pass over many files (``begin_pass``): not ``stat``-ed again for
        # each of their files until the pass ends (a start-up reads 10,000 files of one directory).
        self._this_pass: set[str] | None = None

    def begin_pass(self) -> None:
        self._this_pass = set()

    def end_pass(self) -> None:
        self._this_pass = None

    def intact(self, directory: str) -> bool:
        this_pass = self._this_pass
        if this_pass is not None and directory in this_pass:
            return True
        try:
            st = os.stat(directory)
        except OSError:
            return False
        identity = (st.st_dev, st.st_ino)
        if self._known.get(directory) != identity:
            if os.path.realpath(directory) != directory:
                self._known.pop(directory, None)
                return False
            self._known[directory] = identity
        if this_pass is not None:
            this_pass.add(directory)
        return True

    def is_session_path(self, path: str, info: os.stat_result) -> bool:
        """:func:`is_session_path` for ``path`` whose ``lstat`` is ``info``."""
        return stat.S_ISREG(info.st_mode) and self.intact(os.path.dirname(path))
