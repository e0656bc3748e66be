"""The one entry point that writes into a sessions directory: :func:`commit`.

Rules it enforces, whoever calls it:
- a session is touched only after ``idle_seconds`` without a write (mtime), unless ``force``;
- never while a live process holds the session's OpenClaw lock (``force`` does not skip this); the lock is
  taken for the commit only, which takes well under a second plus the grace period;
- a symlinked path, or one whose real location leaves its directory, is refused;
- a torn last line of an idle file is sealed with a newline first;
- every plan is re-checked against the file as it is now (the branch must still hold the cut point and the
  leaf the plan was made from) and the result is checked by loading it before anything is written; the file
  is read once here, and parsed again only if it is no longer the reading the plan was made from
  (``planned``, compared by inode, size and the bytes at the cut);
- ordinary failures (ENOSPC, EACCES, EROFS, a file deleted or replaced mid-commit, a live lock, not idle) give
  ``committed=False`` with a ``reason``, the original untouched, and a log line; they never raise.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any, Literal

from compactd.commit.append import append_commit
from compactd.commit.atomic import Abandon, Written, checked_path, crash_point, os_reason
from compactd.commit.journal import Journal
from compactd.commit.locks import SessionBusy, hold_session_lock
from compactd.commit.request import CommitRequest
from compactd.commit.restore import restore_commit
from compactd.commit.retention import apply_retention
from compactd.commit.rotate import rotate_commit
from compactd.commit.seal import seal_if_torn
from compactd.commit.successor import PlanError
from compactd.core.context import rules_of
from compactd.core.messages import PI_1
from compactd.core.reader import Transcript
from compactd.datarecord import datarecord
from compactd.defaults import ARCHIVE_KEEP_COUNT, ARCHIVE_KEEP_DAYS, ROTATE_GRACE_SECONDS
from compactd.reading import read_transcript

__all__ = ["MODES", "CommitMode", "CommitResult", "CommitStatus", "CompactionEntries", "Successor", "commit"]

log = logging.getLogger(__name__)

CommitMode = Literal["append", "rotate"]
MODES: tuple[CommitMode, ...] = ("rotate", "append")


@datarecord
class CompactionEntries:
    """What the compaction engine produced, and the snapshot it planned from."""

    compaction: dict[
        str, Any
    ]  # {"type":"compaction","id","parentId":None,"timestamp","summary","firstKeptEntryId",
    #                              "tokensBefore","details":{"readFiles","modifiedFiles"},"fromHook":False}
    post_message: (
        dict[str, Any] | None
    )  # {"type":"custom_message",...,"customType":"compactd.post_compaction_context"}
    snapshot_size: int  # bytes (complete lines) of the file the plan was made from
    snapshot_leaf_id: str  # the leaf when planned
    replacements: dict[str, dict[str, Any]] = field(default_factory=dict)  # entry id -> pruned entry


@datarecord(frozen=True)
class Successor:
    """The file as a commit left it, parsed by the commit's own check: the caller's next reading of it, so the
    file just written is not read again (the inode and size say which file and how much of it)."""

    transcript: Transcript
    inode: int
    size: int


class CommitStatus(enum.Enum):
    """Why a commit ended as it did (its ``reason`` is the human words)."""

    COMMITTED = "committed"
    NOTHING = "nothing"  # nothing to commit
    NOT_IDLE = "not_idle"  # the agent wrote within idle_seconds: not now
    LOCKED = "locked"  # a live process holds the session lock: not now
    TURN = "turn"  # a turn started since the plan: not now
    ABANDONED = (
        "abandoned"  # the file is not what the plan needs (moved branch, swapped path, would not load)
    )
    FAILED = "failed"  # an OS error, or the file changed mid-commit


@datarecord
class CommitResult:
    """A commit's outcome, for the job and the log: committed or why not, the archive, the sizes, lines carried."""

    committed: bool
    mode: str
    archive: str | None
    reason: str | None
    leaf_id: str | None
    bytes_before: int
    bytes_after: int
    carried_lines: int = 0
    rescued_lines: int = 0
    corrections: int = 0
    sealed: bool = False
    archives_removed: list[str] = field(default_factory=list)
    successor: Successor | None = field(default=None, repr=False)
    status: CommitStatus = CommitStatus.FAILED

    def as_json(self) -> dict[str, Any]:
        return {
            "committed": self.committed,
            "mode": self.mode,
            "archive": self.archive,
            "reason": self.reason,
            "leaf_id": self.leaf_id,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "carried_lines": self.carried_lines,
            "rescued_lines": self.rescued_lines,
            "corrections": self.corrections,
            "sealed": self.sealed,
            "archives_removed": self.archives_removed,
        }


def _size(path: str | os.PathLike[str]) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def commit(
    path: str | os.PathLike[str],
    entries: CompactionEntries | None,
    *,
    mode: CommitMode,
    state_dir: str | os.PathLike[str],
    idle_seconds: float,
    force: bool = False,
    grace_seconds: float = ROTATE_GRACE_SECONDS,
    archive_keep_count: int = ARCHIVE_KEEP_COUNT,
    archive_keep_days: float = ARCHIVE_KEEP_DAYS,
    now: float | None = None,
    prune: dict[str, dict[str, Any]] | None = None,
    planned: Transcript | None = None,
    check: Callable[[Transcript], str | None] | None = None,
    restore_from: str | None = None,
) -> CommitResult:
    """Commit a compaction (``entries``) and/or a pruning (``entries.replacements`` or ``prune``) to ``path``.

    ``prune`` alone (``entries`` None) is a pruning-only commit: the replaced tool results must still be on
    the current branch. ``now`` (epoch seconds) stands for the clock in the idle check and the archive name.
    ``planned`` is the reading the plan was made from (reused when the file is unchanged); ``check`` is asked
    about the file as it is now, under the lock, and its reason (when not None) abandons the commit; it is
    asked first when the file is not idle, so its reason (a turn started meanwhile) is the one reported.
    ``restore_from`` (an archive of ``path``; ``entries`` None, mode ``rotate``) restores it instead, keeping
    the lines written since (:mod:`compactd.commit.restore`).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if entries is None and planned is not None and rules_of(planned.branch()) == PI_1:
        mode = "append"  # pi 1.x prunes with appended context edits: nothing to rotate, nothing to archive
    clock = time.time() if now is None else now
    replacements: dict[str, dict[str, Any]] = {}
    if entries is not None:
        replacements.update(entries.replacements)
    if prune:
        replacements.update(prune)
    result = CommitResult(False, mode, None, None, None, _size(path), _size(path))
    failed = False  # an error worth a warning, as opposed to "not now" (not idle, locked, branch moved)
    if restore_from is not None and (entries is not None or replacements or mode != "rotate"):
        raise ValueError("a restore commits nothing else, as a rotation")
    if entries is None and not replacements and restore_from is None:
        result.reason = "nothing to commit"
        result.status = CommitStatus.NOTHING
        return result
    try:
        absolute = checked_path(path)
        st = os.lstat(absolute)
        result.bytes_before = result.bytes_after = st.st_size
        if not force and clock - st.st_mtime < idle_seconds:
            raise _not_idle(absolute, check)
        journal = Journal(state_dir)
        journal.locking(absolute)
        with hold_session_lock(absolute):
            crash_point("commit_after_lock")
            st = os.lstat(absolute)
            idle = clock - st.st_mtime >= idle_seconds
            if not force and not idle:
                raise _not_idle(absolute, check)
            if idle:
                result.sealed = seal_if_torn(absolute, idle_seconds, clock)
            outcome = _run(
                absolute,
                entries,
                replacements,
                mode,
                journal,
                grace_seconds,
                clock,
                planned,
                check,
                restore_from,
            )
        result.committed = True
        result.status = CommitStatus.COMMITTED
        result.archive = outcome.archive
        result.leaf_id = outcome.leaf_id
        result.bytes_after = outcome.bytes_after
        result.carried_lines = outcome.carried_lines
        result.rescued_lines = outcome.rescued_lines
        result.corrections = outcome.corrections
        if outcome.successor is not None and outcome.inode is not None:
            result.successor = Successor(outcome.successor, outcome.inode, outcome.bytes_after)
        if mode == "rotate":
            result.archives_removed = apply_retention(
                absolute, journal, keep_count=archive_keep_count, keep_days=archive_keep_days, now=clock
            )
    except SessionBusy as exc:
        result.reason = f"locked: {exc}"
        result.status = CommitStatus.LOCKED
    except (Abandon, PlanError) as exc:
        result.reason = exc.reason
        busy = exc.busy if isinstance(exc, Abandon) else None
        result.status = {"not_idle": CommitStatus.NOT_IDLE, "turn": CommitStatus.TURN}.get(
            busy or "", CommitStatus.ABANDONED
        )
    except OSError as exc:
        result.reason = os_reason(exc)
        failed = True
    if result.committed:
        log.info(
            "committed path=%s mode=%s archive=%s bytes_before=%d bytes_after=%d carried=%d rescued=%d corrections=%d",
            path,
            mode,
            result.archive,
            result.bytes_before,
            result.bytes_after,
            result.carried_lines,
            result.rescued_lines,
            result.corrections,
        )
    else:
        failed = failed or (result.reason is not None and "mid-commit" in result.reason)
        if failed:
            result.status = CommitStatus.FAILED
        log.log(
            logging.WARNING if failed else logging.INFO,
            "not committed path=%s mode=%s reason=%s",
            path,
            mode,
            result.reason,
        )
    return result


def _not_idle(path: str, check: Callable[[Transcript], str | None] | None) -> Abandon:
    """ "not idle", unless ``check`` has a reason about the file as it is now (the rare path: a read more)."""
    if check is not None:
        current = read_transcript(path, follow_symlinks=False)
        reason = check(current) if current.usable else None
        if reason is not None:
            return Abandon(reason, busy="turn")
    return Abandon("not idle", busy="not_idle")


def _run(
    path: str,
    entries: CompactionEntries | None,
    replacements: dict[str, dict[str, Any]],
    mode: CommitMode,
    journal: Journal,
    grace_seconds: float,
    now: float,
    planned: Transcript | None,
    check: Callable[[Transcript], str | None] | None,
    restore_from: str | None,
) -> Written:
    request = CommitRequest(
        path,
        entries.compaction if entries is not None else None,
        entries.post_message if entries is not None else None,
        replacements,
        snapshot_size=entries.snapshot_size if entries is not None else 0,
        snapshot_leaf_id=entries.snapshot_leaf_id if entries is not None else None,
        journal=journal,
        planned=planned,
        check=check,
    )
    if restore_from is not None:
        return restore_commit(request, archive=restore_from, grace_seconds=grace_seconds, now=now)
    if mode == "append":
        return append_commit(request)
    return rotate_commit(request, grace_seconds=grace_seconds, now=now)
