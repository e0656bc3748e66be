"""Rotate mode: build the successor, check it, and put it at the same path with the rewrite protocol.

The successor (see :mod:`compactd.commit.successor`) is checked by loading it with our reader — pi's loader,
reproduced and differential-tested — and comparing its context with the expected one (summary, post-compaction
message, kept messages) before a byte is written. The original stays reachable as the archive
``<name>.bak.<UTC ts>`` (a hard link: the old inode itself) until retention removes it.
"""

from __future__ import annotations

import logging
import os

from compactd.commit.atomic import (
    Written,
    archive_path_for,
    crash_point,
    open_snapshot,
    replace_with_successor,
    tmp_path_for,
)
from compactd.commit.journal import successor_digest
from compactd.commit.notes import archive_note
from compactd.commit.request import CommitRequest
from compactd.commit.successor import build_successor, verify
from compactd.core.reader import parse_line
from compactd.heap import release_free_memory

__all__ = ["last_id", "rotate_commit"]

log = logging.getLogger(__name__)

# The leaf reported after a rotation is read from the file's last line, found within this many final bytes.
LAST_LINE_WINDOW = 1 << 20


def rotate_commit(request: CommitRequest, *, grace_seconds: float, now: float) -> Written:
    path, journal = request.path, request.journal
    snap = open_snapshot(path)
    try:
        transcript = request.transcript(snap)
        archive = archive_path_for(path, now)
        archive_name = os.path.basename(archive)

        def note(entry_id: str) -> str:
            return archive_note(archive_name)

        plan = build_successor(
            snap.data, transcript, *request.entries, snapshot_leaf_id=request.snapshot_leaf_id, note_for=note
        )
        # The plan's transients (sets and maps over every entry, re-serialised entries, the growing buffer) are
        # freed; handed back, the check's parse reuses their pages instead of adding to the peak (100,000
        # orphans: 347 -> 326 MB).
        release_free_memory()
        loaded = verify(plan.data, plan, strict_structure=True)
        tmp = tmp_path_for(path)
        tx = journal.intent(
            "rotate",
            path,
            archive=archive,
            tmp=tmp,
            dev=snap.st.st_dev,
            inode=snap.st.st_ino,
            size=snap.cut,
            succ_size=len(plan.data),
            succ_hash=successor_digest(plan.data),
        )
        with request.abandoning(tx):
            crash_point("rotate_after_intent")
            result = replace_with_successor(
                snap, plan.data, archive=archive, tmp=tmp, grace_seconds=grace_seconds
            )
        journal.try_done(
            tx,
            "committed",
            path=path,
            archive=archive,
            inode=result.new_inode,
            carried=result.carried_lines,
            rescued=result.rescued_lines,
        )
        crash_point("rotate_after_done")
        log.info(
            "rotated path=%s archive=%s summarized=%d kept=%d reserialized=%d carried=%d rescued=%d",
            path,
            archive_name,
            plan.summarized,
            plan.kept,
            plan.reserialized,
            result.carried_lines,
            result.rescued_lines,
        )
        moved = result.carried_lines or result.rescued_lines or result.leaf_pointer
        exact = not moved and result.size == len(plan.data)
        return Written(
            leaf_id=last_id(path, plan.leaf_id) if moved else plan.leaf_id,
            bytes_after=result.size,
            archive=archive,
            carried_lines=result.carried_lines,
            rescued_lines=result.rescued_lines,
            leaf_pointer=result.leaf_pointer,
            successor=loaded if exact else None,
            inode=result.new_inode,
        )
    finally:
        snap.close()


def last_id(path: str, fallback: str | None) -> str | None:
    """The id on the file's last complete line (after carried-over lines the leaf is an agent's)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - LAST_LINE_WINDOW))
            tail = handle.read()
    except OSError:
        return fallback
    for raw in reversed(tail[: tail.rfind(b"\n") + 1].split(b"\n")):
        if raw.strip():
            value, _ = parse_line(raw)
            entry_id = value.get("id") if isinstance(value, dict) else None
            return entry_id if isinstance(entry_id, str) else fallback
    return fallback
