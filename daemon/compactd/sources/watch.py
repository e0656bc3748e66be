"""Filesystem events → "this path may have changed". Knows nothing of JSON.

Events are hints (watchfiles coalesces, drops on queue overflow and reports kinds unreliably): every batch is
reconciled against the cursors by the caller, and a periodic rescan catches whatever inotify lost.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from compactd.datarecord import datarecord

if TYPE_CHECKING:
    import anyio
    from watchfiles import Change

from compactd.config import expand_user
from compactd.roots import forbidden_root, literal_base, resolve_links, untrusted_link, within

__all__ = ["discover_roots", "expand_roots", "scan_root", "watch_root"]

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


@datarecord(frozen=True, slots=True, rare=True)
class Refusal:
    """A directory a root pattern matched but compactd will not use, and why."""

    pattern: str
    path: str
    reason: str


def discover_roots(
    patterns: Iterable[str], *, state_dir: str | os.PathLike[str] | None = None
) -> tuple[list[str], list[Refusal]]:
    """Existing directories matching the configured globs, as real paths, and the matches refused.

    A match is refused when it resolves outside its pattern's base (a symlink at or below the wildcards
    leading away), when the base passes through a symlink made by another user, when it is ``/``, ``/proc``,
    ``/sys`` or ``/dev``, or when it holds compactd's state directory (its journal would be taken for a
    session). A root that appears later is found by the next call.
    """
    state = os.path.realpath(state_dir) if state_dir is not None else None
    found: dict[str, None] = {}
    refused: list[Refusal] = []
    for pattern in patterns:
        expanded = expand_user(pattern)
        if not os.path.isabs(expanded):
            refused.append(Refusal(pattern, expanded, "not an absolute path"))
            continue
        try:
            base, links = resolve_links(literal_base(expanded))
        except OSError as exc:
            refused.append(Refusal(pattern, literal_base(expanded), f"cannot resolve: {exc.strerror}"))
            continue
        stranger = untrusted_link(links)
        if stranger is not None:
            link, uid = stranger
            reason = f"its fixed part passes through {link}, a symlink made by uid {uid}"
            refused.append(Refusal(pattern, literal_base(expanded), reason))
            continue
        for match in sorted(glob.glob(expanded)):
            real = os.path.realpath(match)
            if not os.path.isdir(real):
                continue
            why = _refuse(real, base, state)
            if why is not None:
                refused.append(Refusal(pattern, match, why))
            else:
                found[real] = None
    return list(found), refused


def _refuse(real: str, base: str, state: str | None) -> str | None:
    if not within(real, base):
        return f"it resolves to {real}, outside {base}"
    why = forbidden_root(real)
    if why is not None:
        return why
    if state is not None and within(state, real):
        return f"it holds the state directory {state}"
    return None


# Refusals already logged (expand_roots runs at every rescan; one warning per refusal is enough).
_reported: set[Refusal] = set()


def expand_roots(patterns: Iterable[str], *, state_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """:func:`discover_roots`'s directories; each refusal is logged as a warning once."""
    roots, refused = discover_roots(patterns, state_dir=state_dir)
    for refusal in refused:
        if refusal not in _reported:
            _reported.add(refusal)
            log.warning(
                "root=%s action=refused pattern=%s reason=%s", refusal.path, refusal.pattern, refusal.reason
            )
    return roots


def root_is_intact(root: str) -> bool:
    """Whether a root found earlier still resolves to itself (no component swapped for a symlink since)."""
    return os.path.realpath(root) == root


def scan_root(root: str) -> list[str]:
    """Transcripts directly inside ``root``; symlinks are never followed (one could lead out of the root)."""
    if not root_is_intact(root):
        log.warning(
            "root=%s action=skipped reason=it no longer resolves to itself (a symlink was swapped in)", root
        )
        return []
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


class _ArmedStop:
    """The stop event handed to watchfiles. Its watch thread polls ``is_set`` only once the inotify watch is in
    place, so the first poll tells ``armed`` that every change from then on will be reported: a scan made after
    that misses nothing (the start-up reads each file once, after the watch, instead of once before and once
    after)."""

    __slots__ = ("_armed", "_stop")

    def __init__(self, stop: anyio.Event, armed: Callable[[], None]) -> None:
        self._stop = stop
        self._armed: Callable[[], None] | None = armed

    def is_set(self) -> bool:
        armed, self._armed = self._armed, None
        if armed is not None:
            armed()
        return self._stop.is_set()

    def set(self) -> None:
        self._stop.set()


async def watch_root(
    root: str,
    stop: anyio.Event,
    *,
    debounce_ms: int,
    step_ms: int,
    rust_timeout_ms: int = 1000,
    armed: Callable[[], None] | None = None,
    names: Callable[[str], bool] = is_transcript_name,
) -> AsyncIterator[set[str]]:
    """Batches of paths directly under ``root`` whose file name ``names`` accepts (transcripts by default;
    an OpenClaw database's ``-wal`` for the SQLite source) that may have changed (an empty batch is a
    heartbeat). ``armed`` is called (from watchfiles' thread) once the watch is in place."""
    from watchfiles import awatch  # imported here: only ``run`` watches, and watchfiles loads multiprocessing

    def wanted(change: Change, path: str) -> bool:
        return names(os.path.basename(path))

    async for changes in awatch(
        root,
        watch_filter=wanted,
        debounce=debounce_ms,
        step=step_ms,
        # watchfiles calls nothing but is_set() and set() on it
        stop_event=stop if armed is None else cast("anyio.Event", _ArmedStop(stop, armed)),
        recursive=False,
        rust_timeout=rust_timeout_ms,
        yield_on_timeout=True,
        ignore_permission_denied=True,
    ):
        yield {p for _, p in changes if Path(p).parent == Path(root)}
