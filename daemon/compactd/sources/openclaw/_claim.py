"""An agent's database is a claim, like a transcript's ``cwd``: believed only when it is the agent owner's own.

Whoever owns ``<state>/agents/<id>`` can put anything there, a symlink to another user's private database
included; the transcript read from it would then be flushed into the first user's workspace. So the agent
directory's owner is the agent's owner, and its ``agent/`` directory, database, ``-wal`` and ``-shm`` (and the
install's ``openclaw.json``) are used only when each is a directory or regular file, not a symlink, owned by
that user. The checks are ``lstat`` calls, made at discovery and again before every read; as root the read
itself is made with the owner's identity (:mod:`compactd.fs_identity`), so a file swapped in between the check
and the open still opens only if that user could open it.
"""

from __future__ import annotations

import os
import stat

from compactd.sources.openclaw._guard import AGENT_SUBDIR
from compactd.workspace import Identity, identity_of

_KINDS = {"directory": stat.S_ISDIR, "regular file": stat.S_ISREG}


def owner_of(agent_dir: str) -> tuple[int, int] | None:
    """The agent directory's owner uid and group (None when it is not a directory reached without symlinks)."""
    try:
        info = os.lstat(agent_dir)
    except OSError:
        return None
    return (info.st_uid, info.st_gid) if stat.S_ISDIR(info.st_mode) else None


def identity_for(uid: int, gid: int) -> Identity | None:
    """Whom to read an agent's files as: its owner when compactd is root, compactd itself otherwise (the
    kernel then checks compactd's own permissions)."""
    if os.geteuid() == 0 and uid != 0:
        return identity_of(uid, gid)
    return None


def path_refusal(path: str, owner: int, kind: str, *, optional: bool = False) -> str | None:
    """Why ``path`` is not the owner's own ``kind`` (a symlink, another type, another owner), or None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None if optional else f"{path} does not exist"
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink"
    if not _KINDS[kind](info.st_mode):
        return f"{path} is not a {kind}"
    if info.st_uid != owner:
        return f"{path} is owned by uid {info.st_uid}, not by the agent's owner uid {owner}"
    return None


def database_refusal(database: str, owner: int) -> str | None:
    """The checks made before every read of an agent's database: its ``agent/`` directory, the database and
    its ``-wal`` and ``-shm`` when they exist."""
    directory = os.path.dirname(database)
    if os.path.basename(directory) != AGENT_SUBDIR:  # pragma: no cover - discovery builds the path
        return f"{database} is not in an {AGENT_SUBDIR}/ directory"
    return (
        path_refusal(directory, owner, "directory")
        or path_refusal(database, owner, "regular file")
        or path_refusal(database + "-wal", owner, "regular file", optional=True)
        or path_refusal(database + "-shm", owner, "regular file", optional=True)
    )


def agent_refusal(agent_dir: str, database: str, config_owner: int | None) -> str | None:
    """Why an agent must not be followed, or None. ``config_owner``: the owner of the ``openclaw.json`` in
    use (None when there is none): the agent's workspace and model come from it, so it must be the agent
    owner's too."""
    agents_root = os.path.dirname(agent_dir)
    if os.path.islink(agents_root):
        return f"{agents_root} is a symlink"
    found = owner_of(agent_dir)
    if found is None:
        return f"{agent_dir} is not a directory reached without symlinks"
    owner = found[0]
    if config_owner is not None and config_owner != owner:
        return f"its openclaw.json is owned by uid {config_owner}, not by the agent's owner uid {owner}"
    return database_refusal(database, owner)
