"""One watched transcript: its cursor and its ledger, kept in step."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import field
from typing import Any

from compactd.core.context import SessionContext, build_context
from compactd.core.ledger import CapFor, SessionLedger
from compactd.core.reader import Transcript, parse_transcript
from compactd.datarecord import datarecord
from compactd.sources.files.resume import Snapshot, hashed_bytes, mismatch, mismatch_of_stat
from compactd.sources.files.tail import Change, FileCursor, Update

__all__ = ["UNTOUCHED", "SessionTracker"]

log = logging.getLogger(__name__)

# The reason of a RESUMED update whose file was not even opened: size, mtime and ctime as the snapshot's read
# left them, so nothing of it (nor what was decided on it) can have changed since.
UNTOUCHED = "snapshot: untouched"


@datarecord(slots=True)
class SessionTracker:
    """One transcript's cursor and ledger, kept in step by each refresh."""

    path: str
    # A saved snapshot to try at the first refresh (``compactd.sources.files.resume``); used once, then dropped.
    resume: Snapshot | None = None
    # The per-result cap for a provider and model (``planning.tool_result_cap``): given, the ledger also counts
    # the route's reducible characters (``SessionLedger.reducible``).
    cap_for: CapFor | None = None
    # Keep the whole reading (``once --dry-run``, which then acts on the due sessions): each file is parsed once
    # (lean, as the action reads it) and its ledger made from that, instead of a cold read and a second parse.
    keep_reading: bool = False
    cursor: FileCursor = field(init=False)
    # The last reload's transcript of the cursor's bytes (with ``keep_reading``); the owner drops it when done.
    reading: Transcript | None = None
    reading_context: SessionContext | None = (
        None  # ``build_context(reading)``, which its ledger was made from
    )
    ledger: SessionLedger | None = None
    reloads: int = 0
    # The cursor and ledger as of the last refresh that changed them, taken together (so a state writer in
    # another thread never sees a cursor that has moved past what the ledger holds).
    snapshot: Snapshot | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.cursor = FileCursor(self.path)
        self.snapshot = self.resume  # kept as it is until the file is read: it still describes that file

    def refresh(self, info: os.stat_result | None = None) -> Update:
        """Bring the ledger up to date with the file; appended bytes only, unless a reload is needed.

        ``info``: the file's ``lstat`` the caller just took (the start-up has one per file already), for the
        snapshot check."""
        resumed: Update | bool = False
        if self.resume is not None:
            snapshot, self.resume = self.resume, None
            resumed = self._resume(snapshot, info)
            if isinstance(resumed, Update):
                return resumed
        update = self.cursor.poll()
        if update.change is Change.APPENDED and (
            self.ledger is None
            or update.non_objects
            or update.trim_sensitive
            or not self._apply(self.ledger, update.entries)
        ):
            self.cursor.reset()
            update = self.cursor.poll()
        self.drop_reading()
        if update.change is Change.RELOADED and update.data is not None:
            if self.keep_reading:
                # The same ledger as the cold read's (``SessionLedger.from_bytes`` is equal to this by contract).
                reading = self.reading = parse_transcript(update.data, lean=True)
                reading.identity = (self.cursor.dev, self.cursor.ino)
                context = self.reading_context = build_context(reading)
                self.ledger = SessionLedger.from_transcript(reading, cap_for=self.cap_for, context=context)
            else:
                self.ledger = SessionLedger.from_bytes(update.data, self.path, cap_for=self.cap_for)
            self.reloads += 1
        elif update.change in (Change.MISSING, Change.SKIPPED):
            self.ledger = None
        if update.change is not Change.UNCHANGED or resumed:
            self.snapshot = self._take_snapshot()  # touched but unchanged: the next start need not hash
        if resumed and update.change is Change.UNCHANGED:
            return Update(Change.RESUMED, reason="snapshot")
        return update

    def drop_reading(self) -> None:
        self.reading = self.reading_context = None

    def _resume(self, snapshot: Snapshot, info: os.stat_result | None) -> Update | bool:
        """Start from ``snapshot`` if the file is still the one it describes: an untouched one is not even
        opened (RESUMED); True: the cursor is at the snapshot's offset and the caller polls what follows;
        False: a mismatch (logged why), and the caller's poll reads the file in full."""
        reason: str | None = None
        untouched = False
        try:
            st = os.lstat(self.path) if info is None else info
        except OSError as exc:
            reason = f"cannot stat: {exc.strerror}"
        else:
            reason = mismatch_of_stat(snapshot, st)
            untouched = reason is None and snapshot.untouched(st)
            if reason is None and not untouched:
                reason = self._check_content(snapshot)
        ledger = None
        if reason is None:
            try:
                ledger = SessionLedger.from_snapshot(snapshot.ledger)
            except ValueError as exc:
                reason = f"corrupt snapshot: {exc}"
        if ledger is None:
            log.debug("session=%s resume=no reason=%s", self.path, reason)
            self.snapshot = None
            return False
        self.ledger = ledger
        self.cursor.resume_at(snapshot.dev, snapshot.ino, snapshot.offset)
        log.debug("session=%s resume=yes offset=%d untouched=%s", self.path, snapshot.offset, untouched)
        if not untouched:
            return True
        self.cursor.seen(st)
        return Update(Change.RESUMED, reason=UNTOUCHED)

    def _check_content(self, snapshot: Snapshot) -> str | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            return f"cannot open: {exc.strerror}"
        try:
            self.cursor.bytes_read += hashed_bytes(snapshot.offset)
            return mismatch(snapshot, fd)
        except OSError as exc:
            return f"cannot check: {exc.strerror}"
        finally:
            os.close(fd)

    def _take_snapshot(self) -> Snapshot | None:
        cursor, ledger = self.cursor, self.ledger
        if ledger is None or not cursor.known:
            return None
        return Snapshot(
            cursor.dev,
            cursor.ino,
            cursor.offset,
            cursor.size,
            cursor.mtime_ns,
            cursor.ctime_ns,
            ledger.to_snapshot(),
        )

    def _apply(self, ledger: SessionLedger, entries: Iterable[dict[str, Any]]) -> bool:
        """The fast path; anything it cannot fold in (or any failure in it) means a reload instead."""
        try:
            return ledger.apply(entries)
        except Exception as exc:
            log.warning("appended lines not folded in, reloading path=%s reason=%r", self.path, exc)
            return False
