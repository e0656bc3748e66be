"""One watched transcript: its cursor and its ledger, kept in step."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from compactd.ledger import SessionLedger
from compactd.tail import Change, FileCursor, Update

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SessionTracker:
    path: str
    cursor: FileCursor = field(init=False)
    ledger: SessionLedger | None = None
    reloads: int = 0

    def __post_init__(self) -> None:
        self.cursor = FileCursor(self.path)

    def refresh(self) -> Update:
        """Bring the ledger up to date with the file; appended bytes only, unless a reload is needed."""
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
        return update

    def _apply(self, ledger: SessionLedger, entries: Iterable[dict[str, Any]]) -> bool:
        """The fast path; anything it cannot fold in (or any failure in it) means a reload instead."""
        try:
            return ledger.apply(entries)
        except Exception as exc:
            log.warning("appended lines not folded in, reloading path=%s reason=%r", self.path, exc)
            return False
