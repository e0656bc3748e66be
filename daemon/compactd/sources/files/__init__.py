"""The file source: pi's and JSONL OpenClaw's transcripts under ``sessions.roots`` (docs/design.md §6.17).

The source itself loads on first use (PEP 562): a command that needs only :mod:`compactd.sources.files.job`
(``inspect``, ``compact``) does not import the service's side of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactd.sources import Host
    from compactd.sources.files._source import FileSession, FileSource, committed_size, seed_tracker

__all__ = ["FileSession", "FileSource", "build", "committed_size", "seed_tracker"]


def build(host: Host) -> FileSource:
    from compactd.sources.files._source import FileSource

    return FileSource(host)


def __getattr__(name: str) -> Any:
    if name in ("FileSession", "FileSource", "committed_size", "seed_tracker"):
        value = getattr(importlib.import_module("compactd.sources.files._source"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
