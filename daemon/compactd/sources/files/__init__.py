"""The file source: pi's and JSONL OpenClaw's transcripts under ``sessions.roots`` (docs/design.md §6.17)."""

from __future__ import annotations

from compactd.sources import Host
from compactd.sources.files._source import FileSession, FileSource, committed_size, seed_tracker

__all__ = ["FileSession", "FileSource", "build", "committed_size", "seed_tracker"]


def build(host: Host) -> FileSource:
    return FileSource(host)
