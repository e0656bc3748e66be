"""The real ``compactd`` command as a subprocess (``python -m compactd`` from the repository), for tests that judge
what a user sees: its output, its exit code and what it leaves on disk; and in this process, for tests that run
it hundreds of times."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What a service manager or a developer's shell may have set; each test gives its own (or none).
INHERITED_NOT = ("NOTIFY_SOCKET", "STATE_DIRECTORY", "COMPACTD_CONFIG")


def compactd(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``compactd ARGS`` with this environment (less :data:`INHERITED_NOT`) plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    return subprocess.run(
        [sys.executable, "-m", "compactd", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
        preexec_fn=preexec_fn,
    )


def in_process(*args: str) -> tuple[int, str]:
    """``compactd ARGS`` run by its ``main`` in this process: the exit code and what it wrote on stdout."""
    from compactd.commands.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """For :func:`in_process`: a state directory of the test's own, no user configuration, none of
    :data:`INHERITED_NOT`."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    for key in INHERITED_NOT:
        if key != "STATE_DIRECTORY":
            monkeypatch.delenv(key, raising=False)
