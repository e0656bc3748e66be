"""Paths, the environment and small files: ``~`` expansion, the state directory, the bounded read of the
configuration and key files, and the masking of key shapes in what a configuration prints."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from compactd.patterns import lazy_pattern

_GLOB_CHARS = frozenset("*?[")
# Redaction for free-form strings shown by repr/redacted_dict (hook commands, prompts): common key shapes. A
# pattern compiled on first use: most commands never show one.
_SECRET_SHAPES = lazy_pattern(
    r"\bsk-[A-Za-z0-9_-]{12,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{16,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{8,}"
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"
    r"|(?i:\b(?:api[_-]?key|token|secret|password|passwd)\s*[=:]\s*)\S+"
)


def expand_user(path: str, env: Mapping[str, str] | None = None) -> str:
    """Expand a leading ``~`` using ``env['HOME']`` (so tests can pass an environment), else the real home."""
    environ = os.environ if env is None else env
    if path == "~" or path.startswith("~/"):
        home = environ.get("HOME") or os.path.expanduser("~")
        return home + path[1:]
    return os.path.expanduser(path) if path.startswith("~") else path


def resolve_state_dir(
    env: Mapping[str, str], configured: str | None = None, base_dir: Path | None = None
) -> Path:
    """The state directory: the configured one, else systemd's, else XDG's, else ``~/.local/state/compactd``.

    ``$STATE_DIRECTORY`` may list several directories separated by ``:`` (systemd); the first is ours. A
    relative ``$XDG_STATE_HOME`` is ignored, as the XDG spec requires.
    """
    if configured:
        path = Path(expand_user(configured, env))
        return path if path.is_absolute() else (base_dir or Path.cwd()) / path
    systemd = env.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd)
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "compactd"
    return Path(expand_user("~/.local/state/compactd", env))


def agent_id_for(session_file: str | os.PathLike[str]) -> str | None:
    """OpenClaw's agent id from ``.../agents/<id>/sessions/<file>.jsonl``; None for other layouts."""
    parts = Path(session_file).parts
    if len(parts) >= 4 and parts[-2] == "sessions" and parts[-4] == "agents":
        return parts[-3]
    return None


def _redact(text: str) -> str:
    return _SECRET_SHAPES().sub("***", text)


def _is_path_pattern(key: str) -> bool:
    return "/" in key or key.startswith("~") or any(c in _GLOB_CHARS for c in key)


# A real configuration is a few kilobytes; PyYAML takes about a second per MiB and far more memory, so a
# larger file is refused before it is parsed (a 100 MB one took 93 s).
CONFIG_MAX_BYTES = 1 << 20
# An API key file holds one key.
KEY_FILE_MAX_BYTES = 64 << 10
_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a directory``...: what a file that is not a regular file is, for an error message."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


class _Refused(Exception):
    """A file that is not read at all: not a regular file, or larger than its limit."""


def read_small_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (symlinks followed).

    Opened non-blocking, so a FIFO cannot hang us, and checked on the open descriptor, so ``/dev/zero`` or
    a file growing while we read cannot exhaust memory: at most ``limit + 1`` bytes are ever read. Raises
    OSError, or ``_Refused`` with the reason.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused(f"not a regular file ({file_kind(st.st_mode)})")
        too_big = f"larger than {_size(limit)}, refusing to parse it"
        if st.st_size > limit:
            raise _Refused(f"{too_big} ({st.st_size:,} bytes)")
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, limit + 1 - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > limit:
            raise _Refused(too_big)
        return b"".join(parts)
    finally:
        os.close(fd)
