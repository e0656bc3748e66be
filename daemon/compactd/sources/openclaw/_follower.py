"""One OpenClaw session followed through its database rows into the file tailer's ledger.

The rows are pi entries (header version 4), so the ledger, the reader and the token accounting are the same
as for a transcript file: new rows are folded in with :meth:`SessionLedger.apply`; what it cannot fold in (a
compaction, a branch switch), a new session id, a gap in ``seq`` or a new rewrite generation means the whole
session is read again, as the file tailer reloads a rewritten file.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import field

from compactd.core.ledger import SessionLedger
from compactd.core.reader import Entry, Transcript, parse_line, parse_transcript
from compactd.datarecord import datarecord
from compactd.sources.openclaw._store import Event, Node, Store

log = logging.getLogger(__name__)


def as_jsonl(events: list[Event]) -> bytes:
    """The rows as the transcript file OpenClaw ≤ 2026.7 would have written."""
    return b"".join(e.data.replace(b"\n", b"") + b"\n" for e in events)


def read_session_rows(store: Store, conn: sqlite3.Connection, session_id: str) -> Transcript:
    """The whole session, parsed by compactd's transcript reader (for the memory flush)."""
    return parse_transcript(as_jsonl(store.events(conn, session_id)), check=False)


@datarecord(slots=True)
class Follower:
    """One OpenClaw session followed in its agent's database: the generation and event read up to, its ledger."""

    session_key: str
    session_id: str | None = None
    generation: str | None = None
    last_seq: int = -1
    last_event_at: float = 0.0
    ledger: SessionLedger | None = None
    reloads: int = 0
    node: Node | None = field(default=None, repr=False)

    def refresh(self, store: Store, conn: sqlite3.Connection, node: Node) -> bool:
        """Bring the ledger up to date with the database; True when something changed."""
        self.node = node
        generation = store.generation(conn, node.session_id)
        if node.session_id != self.session_id or generation != self.generation or self.ledger is None:
            self._reload(store, conn, node.session_id, generation)
            return True
        events = store.events(conn, node.session_id, self.last_seq)
        if not events:
            return False
        entries = [value for value, reason in map(parse_line, (e.data for e in events)) if reason is None]
        whole = len(entries) == len(events) and all(isinstance(e, dict) for e in entries)
        contiguous = events[0].seq == self.last_seq + 1 and events[-1].seq == self.last_seq + len(events)
        if not (whole and contiguous and self._apply(entries)):
            self._reload(store, conn, node.session_id, generation)
            return True
        self.last_seq = events[-1].seq
        self.last_event_at = events[-1].created_at
        return True

    def forget(self) -> None:
        """Drop what was read (after a failed read): the next refresh reads the whole session again."""
        self.session_id, self.generation, self.ledger, self.last_seq = None, None, None, -1

    def _apply(self, entries: list[Entry]) -> bool:
        assert self.ledger is not None
        try:
            return self.ledger.apply(entries)
        except Exception as exc:  # as the file tracker: anything odd means a full read instead
            log.warning("session_key=%s rows not folded in, re-reading: %r", self.session_key, exc)
            return False

    def _reload(
        self, store: Store, conn: sqlite3.Connection, session_id: str, generation: str | None
    ) -> None:
        events = store.events(conn, session_id)
        self.session_id, self.generation = session_id, generation
        self.ledger = SessionLedger.from_bytes(as_jsonl(events), f"openclaw:{self.session_key}")
        self.last_seq = events[-1].seq if events else -1
        self.last_event_at = events[-1].created_at if events else 0.0
        self.reloads += 1
