"""The test cache (``~/.cache/compactd-tests/``): each pinned npm install lives there, made once and shared by
every pytest process, by the one installer here (:func:`npm_install_pinned`)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest


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


# npm fetches a few hundred packages for the largest install; a slow mirror can take minutes.
NPM_TIMEOUT_SECONDS = 900
# What npm prints when the registry cannot be reached at all (as opposed to a failing install).
_OFFLINE_MARKERS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ENETUNREACH", "ETIMEDOUT", "ECONNRESET")


def unavailable(message: str) -> None:
    """CI must install every pinned package (a failure); a developer without network gets a skip."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def npm_install_pinned(folder: Path, name: str, dependency: str, version: str, path: str) -> None:
    """``npm install`` exactly ``dependency@version`` into ``folder`` (a ``package.json`` with the exact pin, no
    older lockfile) with ``path`` as PATH, so install scripts run on the Node the package will run on."""
    npm = shutil.which("npm", path=path) or shutil.which("npm")
    if npm is None:
        unavailable(f"npm is not on PATH: cannot install {dependency}@{version} into {folder}")
        return
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"name": name, "private": True, "dependencies": {dependency: version}}
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    (folder / "package-lock.json").unlink(missing_ok=True)
    command = [npm, "install", "--no-audit", "--no-fund", "--foreground-scripts", "--save-exact"]
    env = {**os.environ, "PATH": path, "npm_config_update_notifier": "false"}
    try:
        done = subprocess.run(
            command,
            cwd=folder,
            capture_output=True,
            text=True,
            env=env,
            timeout=NPM_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(command)}` in {folder} did not finish within {NPM_TIMEOUT_SECONDS} s")
    if done.returncode != 0:
        output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        message = (
            f"`{' '.join(command)}` in {folder} failed with exit code {done.returncode} "
            f"installing {dependency}@{version}:\n{output}"
        )
        if any(marker in output for marker in _OFFLINE_MARKERS):
            unavailable(f"the npm registry cannot be reached; {message}")
        pytest.fail(message)
