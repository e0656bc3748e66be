"""The real ``compactd`` command as a subprocess (``python -m compactd`` from the repository), for tests that judge
what a user sees: its output, its exit code and what it leaves on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

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
