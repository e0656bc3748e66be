"""Which directory a session may use as its workspace (AGENTS.md read, ``memory/`` written), and acting there.

A transcript's header ``cwd`` is a claim made by whoever can write the file. It is believed only when the
directory belongs to the session file's owner, is not a system or shared directory and not writable by
everyone; otherwise the session is compacted without workspace features and the reason is logged (and shown by
``compactd doctor``). A workspace configured under ``agents.workspaces`` is the operator's word and is used as
configured.

When compactd runs as root, every read and write in a workspace happens in a short-lived forked child that has
dropped to the workspace owner's uid, gid and groups: the kernel then checks that user's permissions, so
compactd never reads a file the user could not read and never leaves a root-owned file in the user's tree.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import stat
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from compactd.datarecord import datarecord
from compactd.roots import within

if TYPE_CHECKING:
    from compactd.config import Config

logger = logging.getLogger(__name__)

__all__ = [
    "Identity",
    "Workspace",
    "WorkspaceChildError",
    "choose_workspace",
    "claimed_workspace",
    "configured_workspace",
    "identity_of",
    "read_agents_md",
    "run_as",
    "trusted_workspace",
]

# The operating system's and the kernel's directories: never a workspace, nor anything beneath them.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/cache",
    "/var/lock",
    "/var/log",
    "/var/mail",
    "/var/run",
    "/var/spool",
)
# Shared parents: never a workspace themselves (homes and projects live beneath them).
SHARED_DIRS = (
    "/",
    "/home",
    "/media",
    "/mnt",
    "/opt",
    "/srv",
    "/tmp",
    "/var",
    "/var/lib",
    "/var/local",
    "/var/opt",
    "/var/tmp",
)
# A child acting in a workspace reads one small file or appends one block; a hung filesystem gets this long.
CHILD_TIMEOUT_SECONDS = 30.0
# What a child may send back: an AGENTS.md (capped at 1 MiB by agents_md) as JSON, with room to spare.
CHILD_MAX_REPLY_BYTES = 8 * 1024 * 1024


@datarecord(frozen=True, slots=True, rare=True)
class Identity:
    """A user to act as: uid, primary gid and supplementary groups (looked up before forking)."""

    uid: int
    gid: int
    groups: tuple[int, ...]


@datarecord(frozen=True, slots=True, rare=True)
class Workspace:
    """A directory a session may use. ``owner``: the uid AGENTS.md and ``memory/`` must belong to (None for a
    configured workspace, which is not checked); ``identity``: whom to act as (None: compactd itself)."""

    path: Path
    source: Literal["config", "cwd", "caller"]
    owner: int | None = None
    identity: Identity | None = None

    @classmethod
    def trusted(cls, path: Path) -> Workspace:
        """A workspace the caller vouches for, used as given and acted on as compactd itself."""
        return cls(Path(path), "caller")

    @property
    def memory_dir(self) -> Path:
        return self.path / "memory"


@datarecord(frozen=True, slots=True, rare=True)
class WorkspaceChoice:
    """The workspace a session gets, or None with the reason a header ``cwd`` was not believed."""

    workspace: Workspace | None
    reason: str | None = None
    cwd: str | None = None


def _system_reason(path: str) -> str | None:
    for tree in SYSTEM_TREES:
        if within(path, tree):
            return f"{path} is a system directory"
    if path in SHARED_DIRS:
        return f"{path} is a shared system directory"
    return None


def identity_of(uid: int, fallback_gid: int) -> Identity:
    """The user ``uid`` with its primary group and supplementary groups, from the passwd and group files."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:  # a uid without a passwd entry (a container's): its own group only
        return Identity(uid, fallback_gid, (fallback_gid,))
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    return Identity(uid, entry.pw_gid, groups)


def _acting_as(owner: int, gid: int) -> tuple[Identity | None, str | None]:
    """Whom to act as for a workspace owned by ``owner``: nobody new when that is us, the owner when we are
    root, and a refusal otherwise (we cannot take the owner's identity)."""
    me = os.geteuid()
    if owner == me:
        return None, None
    if me == 0:
        return identity_of(owner, gid), None
    return None, f"compactd runs as uid {me} and cannot act as its owner uid {owner}"


def claimed_workspace(cwd: object, session_file: str | os.PathLike[str]) -> WorkspaceChoice:
    """The trust rule for a header ``cwd``: an absolute directory (after resolving symlinks) owned by the
    session file's owner, not a system or shared directory, not writable by everyone."""
    if not isinstance(cwd, str) or not cwd:
        return WorkspaceChoice(None)
    shown = cwd if len(cwd) <= 200 else cwd[:197] + "..."
    if "\x00" in cwd or not os.path.isabs(cwd):
        return WorkspaceChoice(None, "cwd is not an absolute path", shown)
    try:
        session_owner = os.lstat(session_file).st_uid
    except OSError as exc:
        return WorkspaceChoice(None, f"cannot stat the session file: {exc.strerror}", shown)
    lexical = os.path.normpath(cwd)
    real = os.path.realpath(lexical)
    for candidate in (lexical, real):
        why = _system_reason(candidate)
        if why is not None:
            return WorkspaceChoice(None, why, shown)
    try:
        info = os.stat(real)
    except OSError as exc:
        return WorkspaceChoice(None, f"cannot stat {real}: {exc.strerror}", shown)
    if not stat.S_ISDIR(info.st_mode):
        return WorkspaceChoice(None, f"{real} is not a directory", shown)
    if info.st_uid != session_owner:
        reason = f"{real} is owned by uid {info.st_uid}, not by the session file's owner uid {session_owner}"
        return WorkspaceChoice(None, reason, shown)
    if info.st_mode & stat.S_IWOTH:
        return WorkspaceChoice(None, f"{real} is writable by everyone", shown)
    identity, refusal = _acting_as(info.st_uid, info.st_gid)
    if refusal is not None:
        return WorkspaceChoice(None, refusal, shown)
    return WorkspaceChoice(Workspace(Path(real), "cwd", owner=info.st_uid, identity=identity), None, shown)


def configured_workspace(path: Path) -> Workspace:
    """A workspace from ``agents.workspaces``: used as configured; as root, acted on as its directory's owner
    (so memory files there belong to that user, not to root)."""
    identity = None
    if os.geteuid() == 0:
        with contextlib.suppress(OSError):
            info = os.stat(path)
            identity, _ = _acting_as(info.st_uid, info.st_gid)
    return Workspace(Path(path), "config", identity=identity)


# Reasons already logged per session file: a session is looked at every cycle, one warning is enough.
_reported: dict[str, str] = {}


def choose_workspace(
    config: Config,
    session_file: str | os.PathLike[str],
    header: dict[str, Any] | None,
    *,
    log_refusal: bool = True,
) -> WorkspaceChoice:
    """The configured workspace of a session, else its header ``cwd`` if the trust rule allows it. A refused
    ``cwd`` is logged (once per session file and reason) unless ``log_refusal`` is False."""
    configured = config.agents.workspace_for(session_file)
    if configured is not None:
        return WorkspaceChoice(configured_workspace(configured))
    choice = claimed_workspace((header or {}).get("cwd"), session_file)
    key = os.fspath(session_file)
    if log_refusal and choice.reason is not None and _reported.get(key) != choice.reason:
        _reported[key] = choice.reason
        logger.warning(
            "session=%s action=no_workspace cwd=%r reason=%s (AGENTS.md and memory/ not used)",
            key,
            choice.cwd,
            choice.reason,
        )
    return choice


# --- acting as the owner ------------------------------------------------------------------------------------


class WorkspaceChildError(Exception):
    """The child acting in a workspace failed, died or timed out; nothing it did is trusted."""


def _child(identity: Identity, fn: Callable[[], Any], write_fd: int) -> None:  # pragma: no cover - a child
    import signal  # loaded by ``run_as`` before the fork: the child imports nothing

    code = 1
    try:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)  # the parent's event loop must not hear the child's signals
        os.setgroups(list(identity.groups))
        os.setgid(identity.gid)
        os.setuid(identity.uid)  # real, effective and saved: root cannot be regained
        if os.geteuid() != identity.uid or os.getegid() != identity.gid:
            raise PermissionError("the identity switch did not take")
        try:
            reply = orjson.dumps({"ok": fn()})
        except Exception as exc:  # reported to the parent, never acted on there
            reply = orjson.dumps({"error": f"{type(exc).__name__}: {exc}"})
        view = memoryview(reply)
        while view:
            view = view[os.write(write_fd, view) :]
        code = 0
    finally:
        os._exit(code)


def _read_reply(read_fd: int, timeout: float) -> bytes:
    import select

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    poller = select.poll()
    poller.register(read_fd, select.POLLIN | select.POLLHUP)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            raise WorkspaceChildError(f"timed out after {timeout:g} s")
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > CHILD_MAX_REPLY_BYTES:
            raise WorkspaceChildError("reply too large")
        chunks.append(chunk)


def run_as(
    identity: Identity | None, fn: Callable[[], Any], *, timeout: float = CHILD_TIMEOUT_SECONDS
) -> Any:
    """``fn()`` as ``identity`` (in a forked child that dropped to it), or here when ``identity`` is None.

    ``fn`` must return something JSON can carry and should turn its expected failures into values; anything
    it raises, and a child that dies or overruns ``timeout``, is a :class:`WorkspaceChildError`. Blocking: call
    it from a worker thread in async code.
    """
    if identity is None:
        return fn()
    import signal  # here, not with the module: only acting as another user needs it (and before the fork)

    read_fd, write_fd = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns about forking a threaded process; the child only makes system calls and exits.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        _child(identity, fn, write_fd)
    os.close(write_fd)
    try:
        payload = _read_reply(read_fd, timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        raise WorkspaceChildError(f"the child acting as uid {identity.uid} failed (status {status})")
    try:
        reply = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise WorkspaceChildError("unreadable reply from the child") from None
    if not isinstance(reply, dict):
        raise WorkspaceChildError("unexpected reply from the child")
    if "error" in reply:
        raise WorkspaceChildError(str(reply["error"]))
    return reply.get("ok")


def read_agents_md(workspace: Workspace) -> str | None:
    """The workspace's AGENTS.md as its owner reads it (see :func:`compactd.agents_md.read_agents_md`), or None
    on any error; a file not owned by the workspace owner is ignored for a ``cwd`` workspace."""
    from compactd.agents_md import read_agents_md as read

    def job() -> str | None:
        return read(workspace.path, owner=workspace.owner)

    try:
        text = run_as(workspace.identity, job)
    except WorkspaceChildError as exc:
        logger.warning("cannot read %s/AGENTS.md as its owner: %s", workspace.path, exc)
        return None
    return text if isinstance(text, str) else None


def trusted_workspace(
    config: Config, session_file: str | os.PathLike[str], header: dict[str, Any] | None
) -> Workspace | None:
    """Where AGENTS.md and memory/ live: the configured workspace, else the session header's ``cwd`` when the
    trust rule allows it (a refusal is logged once); None when neither."""
    return choose_workspace(config, session_file, header).workspace
