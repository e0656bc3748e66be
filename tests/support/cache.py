"""The test cache (``~/.cache/compactd-tests/``): each pinned npm install lives there, made once and shared by
every pytest process."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path


def cache_dir(name: str, env_var: str) -> Path:
    """``$env_var`` when set, else ``~/.cache/compactd-tests/<name>``."""
    configured = os.environ.get(env_var)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.home() / ".cache" / "compactd-tests" / name


def installed_version(package: Path, marker: str) -> str | None:
    """The ``package.json`` version of a complete npm install (its ``marker`` file, written last, is there),
    or None: missing, partial or unreadable."""
    if not (package / marker).is_file():
        return None
    try:
        version = json.loads((package / "package.json").read_text("utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def install_once(root: Path, ready: Callable[[], bool], install: Callable[[], None]) -> None:
    """Run ``install`` unless ``ready()``. Several pytest processes may race here: readers check under a shared
    ``flock``, the installer holds it exclusively, so nobody sees a half-installed tree."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        done = ready()
        fcntl.flock(lock, fcntl.LOCK_UN)
        if done:
            return
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not ready():
                install()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
