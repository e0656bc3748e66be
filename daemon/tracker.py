"""One watched transcript: its cursor and its ledger, kept in step."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.ledger import SessionLedger
from daemon.tail import Change, FileCursor, Update


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
            self.ledger is None or update.non_objects or not self.ledger.apply(update.entries)
        ):
            self.cursor.reset()
            update = self.cursor.poll()
        if update.change is Change.RELOADED and update.data is not None:
            self.ledger = SessionLedger.from_bytes(update.data)
            self.reloads += 1
        elif update.change is Change.MISSING:
            self.ledger = None
        return update
