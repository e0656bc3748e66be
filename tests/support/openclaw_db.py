"""A small OpenClaw 2026.9 agent database written the way the gateway writes one (for tests without a gateway).

The transcript tables use OpenClaw's own DDL (schema version 23, copied from ``openclaw@2026.9.6``), rows are
stored as OpenClaw stores them: JSON text, or one zstd frame when the JSON is 1024 bytes to 4 MiB, has no
``\\u`` escape and compression saves at least max(64 B, 10 %).
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import zstandard

SCHEMA = """
CREATE TABLE IF NOT EXISTS session_nodes (
  session_key TEXT NOT NULL PRIMARY KEY,
  current_session_id TEXT NOT NULL,
  entry_json TEXT NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS transcript_events (
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  event_json TEXT,
  created_at INTEGER NOT NULL,
  event_zstd BLOB,
  event_utf8_bytes INTEGER CHECK (event_utf8_bytes IS NULL OR event_utf8_bytes >= 0),
  navigation_json TEXT,
  PRIMARY KEY (session_id, seq),
  CHECK (
    (event_json IS NOT NULL AND event_zstd IS NULL)
    OR (event_json IS NULL AND event_zstd IS NOT NULL AND event_utf8_bytes IS NOT NULL AND navigation_json IS NOT NULL)
  )
) STRICT;
CREATE TABLE IF NOT EXISTS transcript_rewrite_watermarks (
  session_id TEXT NOT NULL PRIMARY KEY,
  generation TEXT NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS transcript_event_identities (
  session_id TEXT NOT NULL,
  event_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  event_type TEXT,
  parent_id TEXT,
  message_idempotency_key TEXT,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (session_id, event_id)
) STRICT;
"""

_UNTYPED = re.compile(r" (?:TEXT|INTEGER|BLOB)\b(?= NOT NULL| PRIMARY KEY| CHECK|,|\n)")


# OpenClaw compresses an entry of at most 4 MiB (its CHECK constraint); a larger one stays JSON text.
MAX_COMPRESSED_BYTES = 4 * 1024 * 1024


def _row(data: bytes, is_header: bool) -> tuple[str | None, bytes | None, int | None, str | None]:
    if (
        1024 <= len(data) <= MAX_COMPRESSED_BYTES
        and b"\\u" not in data
        and b"\x00" not in data
        and not is_header
    ):
        frame = zstandard.ZstdCompressor().compress(data)
        if len(data) - len(frame) >= max(64, len(data) // 10):
            return None, frame, len(data), '{"version":1}'
    return data.decode(), None, None, None


class AgentDb:
    """One agent's database, created in WAL mode like the gateway's; ``strict=False`` creates the tables with
    no column types at all (no STRICT, no affinity), so a test can store what a damaged or foreign database may
    hold, kept as given: text in ``seq``, a float in ``event_json``."""

    def __init__(self, path: Path, *, strict: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(SCHEMA if strict else _UNTYPED.sub("", SCHEMA.replace(") STRICT;", ");")))

    def close(self) -> None:
        self.conn.close()

    def set_node(self, session_key: str, session_id: str, entry: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT INTO session_nodes VALUES (?, ?, ?, 0) ON CONFLICT(session_key) DO UPDATE SET "
            "current_session_id = excluded.current_session_id, entry_json = excluded.entry_json",
            (session_key, session_id, orjson.dumps({"sessionId": session_id, **entry}).decode()),
        )

    def next_seq(self, session_id: str) -> int:
        row = self.conn.execute(
            "SELECT coalesce(max(seq), -1) + 1 FROM transcript_events WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0])

    def append(self, session_id: str, lines: list[bytes], *, created_at: int = 0) -> None:
        """Append entries (JSON lines) at the next seqs, in one transaction."""
        seq = self.next_seq(session_id)
        self.conn.execute("BEGIN")
        for offset, line in enumerate(lines):
            entry = orjson.loads(line)
            text, frame, size, nav = _row(line, entry.get("type") == "session")
            self.conn.execute(
                "INSERT INTO transcript_events VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, seq + offset, text, created_at, frame, size, nav),
            )
            self.conn.execute(
                "INSERT OR REPLACE INTO transcript_event_identities VALUES (?, ?, ?, ?, ?, NULL, 0)",
                (
                    session_id,
                    str(entry.get("id", uuid.uuid4())),
                    seq + offset,
                    entry.get("type"),
                    entry.get("parentId"),
                ),
            )
        self.conn.execute("COMMIT")

    def put_event(
        self,
        session_id: str,
        seq: object,
        event_json: object,
        *,
        created_at: object = 0,
        event_zstd: object = None,
        size: object = None,
        navigation: object = None,
    ) -> None:
        """One ``transcript_events`` row exactly as given (whatever the column types; see ``strict``)."""
        self.conn.execute(
            "INSERT INTO transcript_events VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_id, seq, event_json, created_at, event_zstd, size, navigation),
        )

    def rewrite(self, session_id: str, lines: list[bytes]) -> None:
        """What ``--max-lines`` does: delete the rows, renumber from 0 and bump the generation."""
        self.conn.execute("DELETE FROM transcript_events WHERE session_id = ?", (session_id,))
        self.conn.execute("DELETE FROM transcript_event_identities WHERE session_id = ?", (session_id,))
        self.append(session_id, lines)
        self.conn.execute(
            "INSERT OR REPLACE INTO transcript_rewrite_watermarks VALUES (?, ?, 0)",
            (session_id, uuid.uuid4().hex),
        )


class GatewayProcess:
    """A separate process holding the database open as a running gateway does (WAL, its ``-shm`` mapped, its last
    act a write), which can then stop cleanly or crash. A reader in the test's own process would share SQLite's
    in-process ``-shm`` mapping with a writer there, so the writer runs apart, as the gateway does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.openclaw_db", str(path)],
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._ask(["ready"])

    def _ask(self, command: list[Any]) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(orjson.dumps(command) + b"\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if command[0] == "crash":
            self.proc.wait(30)
            return
        assert reply == b"ok\n", reply

    def set_node(self, session_key: str, session_id: str, entry: dict[str, Any]) -> None:
        self._ask(["node", session_key, session_id, entry])

    def append(self, session_id: str, lines: list[bytes]) -> None:
        self._ask(["append", session_id, [line.decode() for line in lines]])

    def stop(self, *, keep_wal: bool) -> None:
        """A clean stop: the WAL checkpointed, then left empty beside its ``-shm`` (``keep_wal``, as the gateway
        leaves it on SIGTERM) or removed with it (SQLite's last close)."""
        self._ask(["stop" if keep_wal else "close"])
        self.proc.wait(30)

    def crash(self) -> None:
        """SIGKILL: the ``-wal`` and ``-shm`` stay as they were, nothing checkpointed."""
        self._ask(["crash"])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _serve(path: Path) -> None:  # pragma: no cover - runs in the GatewayProcess
    db = AgentDb(path)
    db.conn.execute("PRAGMA wal_autocheckpoint=0")  # a checkpoint happens when the test says so
    for raw in sys.stdin.buffer:
        command = orjson.loads(raw)
        if command[0] == "node":
            db.set_node(command[1], command[2], command[3])
        elif command[0] == "append":
            db.append(command[1], [line.encode() for line in command[2]])
        elif command[0] == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif command[0] == "stop":
            db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            sys.stdout.buffer.write(b"ok\n")
            sys.stdout.flush()
            os._exit(0)
        elif command[0] == "close":
            db.close()
        sys.stdout.buffer.write(b"ok\n")
        sys.stdout.flush()
        if command[0] == "close":
            return


if __name__ == "__main__":  # pragma: no cover
    _serve(Path(sys.argv[1]))
