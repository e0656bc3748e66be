"""Filesystem events → "this path may have changed". Knows nothing of JSON.

Events are hints (watchfiles coalesces, drops on queue overflow and reports kinds unreliably): every batch is
reconciled against the cursors by the caller, and a periodic rescan catches whatever inotify lost.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import anyio
from watchfiles import Change, awatch

from daemon.config import expand_user

log = logging.getLogger(__name__)

# OpenClaw's pre-compaction copies and trajectories end in .jsonl but are not transcripts.
_NOT_TRANSCRIPTS = (".trajectory.jsonl",)


def is_transcript_name(name: str) -> bool:
    """A primary transcript: ``*.jsonl``, not hidden (our temp files), not a checkpoint or trajectory.

    Archives (``.jsonl.bak.<ts>``, ``.reset.``, ``.deleted.``) and locks (``.jsonl.lock``) do not end in
    ``.jsonl`` and so are excluded by the suffix rule.
    """
    return (
        name.endswith(".jsonl")
        and not name.startswith(".")
        and ".checkpoint." not in name
        and not name.endswith(_NOT_TRANSCRIPTS)
    )


def expand_roots(patterns: Iterable[str]) -> list[str]:
    """Existing directories matching the configured globs, as real paths (a root that appears later is
    found by the next call)."""
    found: dict[str, None] = {}
    for pattern in patterns:
        for match in sorted(glob.glob(expand_user(pattern))):
            if os.path.isdir(match):
                found[os.path.realpath(match)] = None
    return list(found)


def scan_root(root: str) -> list[str]:
    """Transcripts directly inside ``root``; symlinks are never followed (one could lead out of the root)."""
    paths: list[str] = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if not is_transcript_name(entry.name) or entry.is_symlink():
                    continue
                if entry.is_file(follow_symlinks=False):
                    paths.append(os.path.join(root, entry.name))
    except OSError as exc:
        log.warning("cannot scan root %s: %s", root, exc.strerror)
    return sorted(paths)


def _filter(change: Change, path: str) -> bool:
    return is_transcript_name(os.path.basename(path))


async def watch_root(
    root: str, stop: anyio.Event, *, debounce_ms: int, step_ms: int, rust_timeout_ms: int = 1000
) -> AsyncIterator[set[str]]:
    """Batches of transcript paths that may have changed under ``root`` (an empty batch is a heartbeat)."""
    async for changes in awatch(
        root,
        watch_filter=_filter,
        debounce=debounce_ms,
        step=step_ms,
        stop_event=stop,
        recursive=False,
        rust_timeout=rust_timeout_ms,
        yield_on_timeout=True,
        ignore_permission_denied=True,
    ):
        yield {p for _, p in changes if Path(p).parent == Path(root)}
