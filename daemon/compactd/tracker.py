"""One watched transcript: its cursor and its ledger, kept in step."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from compactd.ledger import SessionLedger
from compactd.resume import TAIL_BYTES, Snapshot, mismatch
from compactd.tail import Change, FileCursor, Update

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SessionTracker:
    path: str
    # A saved snapshot to try at the first refresh (``compactd.resume``); used once, then dropped.
    resume: Snapshot | None = None
    cursor: FileCursor = field(init=False)
    ledger: SessionLedger | None = None
    reloads: int = 0
    # The cursor and ledger as of the last refresh that changed them, taken together (so a state writer in
    # another thread never sees a cursor that has moved past what the ledger holds).
    snapshot: Snapshot | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.cursor = FileCursor(self.path)
        self.snapshot = self.resume  # kept as it is until the file is read: it still describes that file

    def refresh(self) -> Update:
        """Bring the ledger up to date with the file; appended bytes only, unless a reload is needed."""
        resumed = self.resume is not None and self._resume(self.resume)
        self.resume = None
        update = self.cursor.poll()
        if update.change is Change.APPENDED and (
            self.ledger is None
            or update.non_objects
            or update.trim_sensitive
            or not self._apply(self.ledger, update.entries)
        ):
            self.cursor.reset()
            update = self.cursor.poll()
        if update.change is Change.RELOADED and update.data is not None:
            self.ledger = SessionLedger.from_bytes(update.data, self.path)
            self.reloads += 1
        elif update.change is Change.MISSING:
            self.ledger = None
        if resumed and update.change is Change.UNCHANGED:
            return Update(Change.RESUMED, reason="snapshot")
        if update.change is not Change.UNCHANGED:
            self.snapshot = self._take_snapshot()
        return update

    def _resume(self, snapshot: Snapshot) -> bool:
        """Start from ``snapshot`` if the file is still the one it describes; else (logged why) read in full."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            reason: str | None = f"cannot open: {exc.strerror}"
        else:
            try:
                reason = mismatch(snapshot, fd)
            except OSError as exc:
                reason = f"cannot check: {exc.strerror}"
            finally:
                os.close(fd)
            if reason is None:
                try:
                    ledger = SessionLedger.from_snapshot(snapshot.ledger)
                except ValueError as exc:
                    reason = f"corrupt snapshot: {exc}"
        if reason is not None:
            log.debug("session=%s resume=no reason=%s", self.path, reason)
            self.snapshot = None
            return False
        self.ledger = ledger
        self.cursor.resume_at(snapshot.dev, snapshot.ino, snapshot.offset)
        self.cursor.bytes_read += min(snapshot.offset, 2 * TAIL_BYTES)  # the check's reads
        log.debug("session=%s resume=yes offset=%d", self.path, snapshot.offset)
        return True

    def _take_snapshot(self) -> Snapshot | None:
        cursor, ledger = self.cursor, self.ledger
        if ledger is None or not cursor.known:
            return None
        return Snapshot(
            cursor.dev, cursor.ino, cursor.offset, cursor.size, cursor.mtime_ns, ledger.to_snapshot()
        )

    def _apply(self, ledger: SessionLedger, entries: Iterable[dict[str, Any]]) -> bool:
        """The fast path; anything it cannot fold in (or any failure in it) means a reload instead."""
        try:
            return ledger.apply(entries)
        except Exception as exc:
            log.warning("appended lines not folded in, reloading path=%s reason=%r", self.path, exc)
            return False
