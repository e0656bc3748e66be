"""Restore mode: put a session back as an archive holds it, keeping every line written since (issue 23).

A restore is a rotation whose successor is the archive's complete lines followed by what agents appended to
the live file after the compaction that made the archive, re-attached onto the archive's branch the way
recovery re-attaches late lines (:func:`compactd.commit.successor.plan_rescue`: ids and content kept, a line
whose parent only the compacted file had re-parented onto the archive's leaf). It goes through
:func:`compactd.commit.commit` like any commit (claim by the caller; idle, lock, turn check, journal), and
through the same rewrite protocol: the live file is archived first (a hard link to its inode), lines appended
during the restore are carried over and rescued, and recovery finishes a killed restore as it finishes a
killed rotation.

Which of the live file's lines came after the compaction: the journal's rotate intent that made the archive
records the successor's size and digest; when the live file still starts with that successor, every line
after it is an agent's. Otherwise (the journal was compacted, or the file was rewritten since: compacted again,
or restored) every entry whose id the archive lacks is carried, from compactd's later archives of the session
(what a later compaction summarized away) and then the live file, except compactd's own (its compactions,
context edits and ``compactd.*`` custom entries), since a restored branch must not end on a compaction that
undoes it.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable
from typing import Any

from compactd.commit.atomic import (
    ARCHIVE_INFIX,
    Abandon,
    Written,
    archive_path_for,
    crash_point,
    open_snapshot,
    pread_all,
    replace_with_successor,
    tmp_path_for,
)
from compactd.commit.journal import Journal, successor_digest
from compactd.commit.request import CommitRequest
from compactd.commit.retention import archive_time
from compactd.commit.rotate import last_id
from compactd.commit.successor import plan_rescue
from compactd.core.reader import parse_line, parse_transcript
from compactd.datarecord import datarecord

__all__ = ["RestorePlan", "plan_restore", "restore_commit"]

log = logging.getLogger(__name__)

# Entries compactd writes into a successor: never carried onto a restored branch in the fallback.
_OURS_TYPES = ("compaction", "context_edit")
_OURS_CUSTOM_PREFIX = "compactd."


@datarecord(frozen=True)
class RestorePlan:
    """A restore worked out before anything is written: the file's new bytes and what of the live file it carries."""

    data: bytes  # the restored file: the archive's complete lines, then the carried lines
    carried: int  # agent lines from the live file put onto the restored branch
    reattached: int  # of those, re-parented (their parent was compactd's or summarized away)
    leaf_id: str | None
    journaled: bool  # the post-compaction lines were found through the journal's record of the rotation


def _ours(value: dict[str, Any]) -> bool:
    custom = value.get("customType")
    return value.get("type") in _OURS_TYPES or (
        isinstance(custom, str) and custom.startswith(_OURS_CUSTOM_PREFIX)
    )


def _rotation_of(journal: Journal, archive: str) -> tuple[int, str] | None:
    """(successor size, digest) of the committed rotation that made ``archive``, from the journal."""
    records = journal.records()
    done = {
        r.get("tx")
        for r in records
        if r.get("rec") == "done" and r.get("status") in ("committed", "finished")
    }
    for record in reversed(records):
        if record.get("rec") == "intent" and record.get("archive") == archive and record.get("tx") in done:
            size, digest = record.get("succ_size"), record.get("succ_hash")
            if isinstance(size, int) and isinstance(digest, str):
                return size, digest
    return None


def plan_restore(
    archive_data: bytes,
    live_data: bytes,
    rotation: tuple[int, str] | None,
    newer: Callable[[], Iterable[bytes]] = tuple,
) -> RestorePlan:
    """The restored file's bytes (pure but for ``newer``): ``archive_data`` and ``live_data`` are complete
    lines; ``newer`` gives the complete lines of the session's later archives, oldest first (what later
    compactions summarized away), asked only when the live file is no longer the successor ``rotation``
    describes."""
    archived = parse_transcript(archive_data)
    if not archived.usable or archived.header is None:
        raise Abandon("the archive is not a loadable transcript")
    header = archive_data[: archive_data.find(b"\n") + 1]
    if live_data[: live_data.find(b"\n") + 1] != header:
        raise Abandon("the archive's session header is not the live file's: an archive of another session")
    journaled = (
        rotation is not None
        and len(live_data) >= rotation[0]
        and successor_digest(live_data[: rotation[0]]) == rotation[1]
    )
    if journaled and rotation is not None:
        late = _agent_lines(live_data[rotation[0] :], set(), every=True)
    else:
        present = set(archived.by_id())
        late = []
        for data in (*newer(), live_data):
            if data[: data.find(b"\n") + 1] == header:
                late.extend(_agent_lines(data[len(header) :], present, every=False))
    rescue = plan_rescue(late, archive_data, archived, direct=False)
    data = archive_data + b"".join(rescue.lines)
    restored = parse_transcript(data)
    if not restored.usable:
        raise Abandon("the restored file would not load")
    return RestorePlan(data, len(rescue.lines), rescue.reattached, restored.leaf_id, journaled)


def _agent_lines(region: bytes, present: set[str], *, every: bool) -> list[bytes]:
    """The lines of ``region`` to carry: ``every`` (the journal says they all came after the compaction) but
    compactd's own custom entries; otherwise only entries ``present`` lacks that compactd did not write."""
    out: list[bytes] = []
    for raw in region.split(b"\n"):
        if not raw.strip():
            continue
        value, _ = parse_line(raw)
        if isinstance(value, dict):
            custom = value.get("customType")
            if isinstance(custom, str) and custom.startswith(_OURS_CUSTOM_PREFIX):
                continue  # a leaf pointer or a post-compaction message: about the compacted file only
            if not every and (_ours(value) or value.get("id") in present or value.get("type") == "session"):
                continue
        elif not every:
            continue  # not an entry, and no record says it came after the compaction
        out.append(raw)
    return out


def _newer_archives(journal: Journal, path: str, archive: str) -> list[bytes]:
    """The complete lines of compactd's archives of ``path`` made after ``archive``, oldest first."""
    since = archive_time(archive)
    out: list[bytes] = []
    for other in journal.archives(path):
        when = archive_time(other)
        if other == archive or (since is not None and (when is None or when <= since)):
            continue
        try:
            out.append(read_archive(path, other))
        except (Abandon, OSError) as exc:
            log.warning("restore: archive %s not read: %s", other, exc)
    return out


def read_archive(path: str, archive: str) -> bytes:
    """An archive of ``path``'s complete lines: a regular file (not a symlink) named ``<name>.bak.*`` beside it
    and not the live file itself; Abandon otherwise."""
    if os.path.dirname(os.path.abspath(archive)) != os.path.dirname(path) or not os.path.basename(
        archive
    ).startswith(os.path.basename(path) + ARCHIVE_INFIX):
        raise Abandon(f"not an archive of this session (expected {os.path.basename(path)}{ARCHIVE_INFIX}*)")
    try:
        fd = os.open(archive, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise Abandon("the archive does not exist") from None
    except OSError as exc:
        raise Abandon(f"cannot open the archive: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Abandon("the archive is not a regular file")
        live = os.lstat(path)
        if (st.st_dev, st.st_ino) == (live.st_dev, live.st_ino):
            raise Abandon("the archive is the live file itself")
        data = pread_all(fd, 0, st.st_size)
    finally:
        os.close(fd)
    return data[: data.rfind(b"\n") + 1]


def restore_commit(request: CommitRequest, *, archive: str, grace_seconds: float, now: float) -> Written:
    """Replace ``request.path`` with ``archive`` plus the lines written since, by the rewrite protocol."""
    path, journal = request.path, request.journal
    archived = read_archive(path, archive)
    snap = open_snapshot(path)
    try:
        request.transcript(snap)  # the turn check, on the file as it is now
        plan = plan_restore(
            archived,
            snap.data,
            _rotation_of(journal, archive),
            lambda: _newer_archives(journal, path, archive),
        )
        new_archive = archive_path_for(path, now)
        tmp = tmp_path_for(path)
        tx = journal.intent(
            "rotate",
            path,
            archive=new_archive,
            tmp=tmp,
            dev=snap.st.st_dev,
            inode=snap.st.st_ino,
            size=snap.cut,
            succ_size=len(plan.data),
            succ_hash=successor_digest(plan.data),
            restored_from=archive,
        )
        with request.abandoning(tx):
            crash_point("rotate_after_intent")
            result = replace_with_successor(
                snap, plan.data, archive=new_archive, tmp=tmp, grace_seconds=grace_seconds
            )
        journal.try_done(
            tx,
            "committed",
            path=path,
            archive=new_archive,
            inode=result.new_inode,
            carried=result.carried_lines,
            rescued=result.rescued_lines,
        )
        crash_point("rotate_after_done")
        log.info(
            "restored path=%s from=%s archive=%s carried_after_compaction=%d reattached=%d carried=%d "
            "rescued=%d",
            path,
            os.path.basename(archive),
            os.path.basename(new_archive),
            plan.carried,
            plan.reattached,
            result.carried_lines,
            result.rescued_lines,
        )
        moved = result.carried_lines or result.rescued_lines or result.leaf_pointer
        return Written(
            leaf_id=last_id(path, plan.leaf_id) if moved else plan.leaf_id,
            bytes_after=result.size,
            archive=new_archive,
            carried_lines=result.carried_lines + plan.carried,
            rescued_lines=result.rescued_lines,
            leaf_pointer=result.leaf_pointer,
            inode=result.new_inode,
        )
    finally:
        snap.close()
