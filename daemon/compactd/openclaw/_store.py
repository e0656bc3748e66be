"""Read-only access to one agent's ``openclaw-agent.sqlite`` (schema version 23, OpenClaw 2026.9).

Every read opens the file with ``mode=ro`` for that read only: no write lock, no file descriptor held across
the gateway's checkpoints. When the database has no ``-wal`` beside it or an empty one (the gateway stopped
and checkpointed it) it is opened ``immutable`` as well: a read-only connection to a WAL database would
otherwise create the ``-wal``/``-shm`` files or rebuild the ``-shm`` (seen on a real gateway's stopped
database), a write under the agent's directory. ``event_zstd`` rows hold one standard
zstd frame; the ``zstandard`` package decodes it (the standard library has zstd only from Python 3.14).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

# The largest entry OpenClaw compresses (larger ones stay JSON text): a frame claiming more is refused, not inflated.
MAX_EVENT_BYTES = 4 * 1024 * 1024
# The largest window such a frame needs (zstd's window is at most the content size, rounded up to a power of 2).
MAX_WINDOW_BYTES = 8 * 1024 * 1024
# OpenClaw's own readers page the transcript at most 64 MiB at a time (MAX_RAW_TRANSCRIPT_BYTES in 2026.9.6) and
# cannot return a row larger than that: neither can compactd. SQLite's SQLITE_LIMIT_LENGTH is set to it, so no
# larger string or blob is ever materialized (without it, ``length()`` of a 200 MiB text took 617 MiB).
MAX_ROW_BYTES = 64 * 1024 * 1024
BUSY_TIMEOUT_MS = 2_000
# Every query ends after this long (the progress handler's deadline): a sane read takes milliseconds.
QUERY_SECONDS = 30.0
_PROGRESS_STEPS = 10_000  # SQLite virtual-machine steps between two looks at the deadline (well under 1 ms)
# The tables read, each a plain table with at least these plain columns (OpenClaw's schema version 23).
EXPECTED_TABLES: dict[str, frozenset[str]] = {
    "session_nodes": frozenset({"session_key", "current_session_id", "entry_json"}),
    "transcript_events": frozenset(
        {"session_id", "seq", "event_json", "event_zstd", "event_utf8_bytes", "created_at"}
    ),
    "transcript_rewrite_watermarks": frozenset({"session_id", "generation"}),
    "transcript_event_identities": frozenset({"session_id", "seq", "event_type"}),
}


class StoreError(Exception):
    """The database cannot be read as an OpenClaw 2026.9 agent store (missing table, bad frame, I/O)."""


@dataclass(frozen=True, slots=True)
class Node:
    """One ``session_nodes`` row: a session key, its current transcript and its entry (JSON object)."""

    session_key: str
    session_id: str
    entry: dict[str, Any] = field(repr=False)

    @property
    def compaction_count(self) -> int:
        value = self.entry.get("compactionCount")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def active_run(self) -> str | None:
        """The run writing this session now, if any: ``activeWriterRunId`` while the entry's ``status`` is
        ``running`` (the id stays behind once the run is ``done``)."""
        value = self.entry.get("activeWriterRunId")
        if self.entry.get("status") != "running":
            return None
        return value if isinstance(value, str) and value else "unknown"

    @property
    def updated_at(self) -> float | None:
        """Seconds since the epoch of the entry's last update (OpenClaw stores milliseconds)."""
        values = [self.entry.get(k) for k in ("updatedAt", "lastInteractionAt")]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        return max(numbers) / 1000 if numbers else None


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    data: bytes  # the entry's JSON, decoded from its zstd frame when it had one
    created_at: float  # seconds since the epoch


def _decompress(frame: bytes, size: int | None) -> bytes:
    """The frame's content, which must be the row's ``event_utf8_bytes``: the header's declared size is checked
    first (python-zstandard ignores ``max_output_size`` when the frame states its size, so a 65 KB frame
    declaring 2 GiB was inflated in full), then at most ``size + 1`` bytes are ever produced."""
    import zstandard

    if size is None or not 0 < size <= MAX_EVENT_BYTES:
        raise StoreError(f"compressed event with an invalid length {size!r}")
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as exc:
        raise StoreError(f"undecodable zstd frame: {exc}") from None
    if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size != size:
        raise StoreError(f"zstd frame declares {params.content_size} bytes, the row says {size}")
    if params.window_size > MAX_WINDOW_BYTES:
        raise StoreError(f"zstd frame needs a {params.window_size}-byte window")
    parts: list[bytes] = []
    got = 0
    try:
        dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW_BYTES)
        with dctx.stream_reader(frame, read_across_frames=False) as reader:
            while got <= size:
                chunk = reader.read(size + 1 - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
    except zstandard.ZstdError as exc:
        raise StoreError(f"undecodable zstd frame: {exc}") from None
    if got != size:
        gave = f"more than {size}" if got > size else str(got)
        raise StoreError(f"zstd frame gave {gave} bytes, the row says {size}")
    return b"".join(parts)


class _Connection(sqlite3.Connection):
    """A connection whose every statement gets a fresh deadline (checked by the store's progress handler)."""

    deadline = 0.0
    query_seconds = QUERY_SECONDS

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        self.deadline = time.monotonic() + self.query_seconds
        return super().execute(sql, parameters)


def check_schema(conn: sqlite3.Connection) -> None:
    """Refuse a database whose tables read are not plain tables with plain columns (see the module's doc)."""
    names = ",".join(f"'{name}'" for name in EXPECTED_TABLES)
    found = {
        str(name).lower(): (str(kind), str(sql or ""))
        for name, kind, sql in conn.execute(
            f"SELECT name, type, sql FROM sqlite_schema WHERE lower(name) IN ({names})"
        )
    }
    for table, needed in EXPECTED_TABLES.items():
        kind, sql = found.get(table, ("missing", ""))
        if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            what = "a virtual table" if kind == "table" else kind
            raise StoreError(f"{table} is {what}, not a table")
        # table_xinfo's hidden: 0 a plain column, 1 a virtual table's hidden one, 2/3 a generated one
        plain = {str(row[1]) for row in conn.execute(f"PRAGMA table_xinfo({table})") if row[6] == 0}
        if not needed <= plain:
            raise StoreError(f"{table} lacks the plain columns {', '.join(sorted(needed - plain))}")


class Store:
    """One agent database; ``rows_read`` counts the transcript rows fetched (the follower's cost)."""

    def __init__(self, path: str, *, query_seconds: float = QUERY_SECONDS) -> None:
        self.path = path
        self.rows_read = 0
        self.query_seconds = query_seconds
        self._stopped = threading.Event()

    def stop(self) -> None:
        """End the running query, and refuse every later one (the service is stopping)."""
        self._stopped.set()

    def _why(self, conn: _Connection, exc: sqlite3.Error) -> str:
        if self._stopped.is_set():
            return "stopping"
        if isinstance(exc, sqlite3.OperationalError) and time.monotonic() >= conn.deadline:
            return f"a query took longer than {self.query_seconds:g}s"
        if isinstance(exc, sqlite3.DataError) and "too big" in str(exc):
            return f"a value is larger than {MAX_ROW_BYTES} bytes"
        return str(exc)

    @contextlib.contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        if not os.path.isfile(self.path):
            raise StoreError(f"{self.path} does not exist")
        uri = f"file:{quote(self.path)}?mode=ro"
        try:
            wal_bytes = os.stat(self.path + "-wal").st_size
        except FileNotFoundError:
            wal_bytes = 0
        if wal_bytes == 0:  # everything is in the main file; a WAL reader would rebuild the -shm (a write)
            uri += "&immutable=1"
        if self._stopped.is_set():
            raise StoreError(f"cannot read {self.path}: stopping")
        try:
            conn = sqlite3.connect(
                uri,
                uri=True,
                timeout=BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False,
                factory=_Connection,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from None
        assert isinstance(conn, _Connection)
        conn.query_seconds = self.query_seconds
        stopped = self._stopped

        def overdue() -> int:
            return 1 if stopped.is_set() or time.monotonic() >= conn.deadline else 0

        conn.set_progress_handler(overdue, _PROGRESS_STEPS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_ROW_BYTES)
        try:
            conn.execute("PRAGMA trusted_schema = OFF")
            check_schema(conn)
            yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {self.path}: {self._why(conn, exc)}") from None
        except StoreError as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from None
        finally:
            conn.close()

    def nodes(self, conn: sqlite3.Connection) -> list[Node]:
        out: list[Node] = []
        rows = conn.execute("SELECT session_key, current_session_id, entry_json FROM session_nodes")
        for key, session_id, entry_json in rows:
            try:
                entry = orjson.loads(entry_json)
            except orjson.JSONDecodeError:
                entry = {}
            out.append(Node(str(key), str(session_id), entry if isinstance(entry, dict) else {}))
        return out

    def node(self, conn: sqlite3.Connection, session_key: str) -> Node | None:
        row = conn.execute(
            "SELECT session_key, current_session_id, entry_json FROM session_nodes WHERE session_key = ?",
            (session_key,),
        ).fetchone()
        if row is None:
            return None
        try:
            entry = orjson.loads(row[2])
        except orjson.JSONDecodeError:
            entry = {}
        return Node(str(row[0]), str(row[1]), entry if isinstance(entry, dict) else {})

    def generation(self, conn: sqlite3.Connection, session_id: str) -> str | None:
        """The rewrite generation: it changes when ``--max-lines`` renumbers ``seq`` (a re-read is due)."""
        row = conn.execute(
            "SELECT generation FROM transcript_rewrite_watermarks WHERE session_id = ?", (session_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def events(self, conn: sqlite3.Connection, session_id: str, after_seq: int = -1) -> list[Event]:
        """The transcript rows after ``after_seq``, oldest first (all of them with the default)."""
        # A frame larger than any OpenClaw writes is not fetched (a blob's length is read without its content).
        rows = conn.execute(
            "SELECT seq, event_json, CASE WHEN length(event_zstd) <= ? THEN event_zstd END, length(event_zstd), "
            "event_utf8_bytes, created_at FROM transcript_events WHERE session_id = ? AND seq > ? ORDER BY seq",
            (MAX_EVENT_BYTES, session_id, after_seq),
        ).fetchall()
        self.rows_read += len(rows)
        out: list[Event] = []
        for seq, text, frame, frame_bytes, size, created in rows:
            if frame_bytes is not None and frame is None:
                raise StoreError(f"event {session_id}:{seq} has a {frame_bytes}-byte frame")
            # A table that is not STRICT may hold any type anywhere (``bytes(10**12)`` would allocate a TB).
            if not isinstance(seq, int):
                raise StoreError(f"event {session_id}:{seq!r} has a seq that is not an integer")
            if isinstance(text, str):
                data = text.encode("utf-8", "surrogatepass")
            elif isinstance(text, bytes):
                data = text
            elif text is not None:
                raise StoreError(f"event {session_id}:{seq} has an event_json that is not text")
            elif isinstance(frame, bytes) and isinstance(size, int):
                data = _decompress(frame, size)
            elif frame is not None:
                raise StoreError(f"event {session_id}:{seq} has a frame that is not a blob with its size")
            else:
                raise StoreError(f"event {session_id}:{seq} has neither JSON nor a frame")
            when = created / 1000 if isinstance(created, int | float) else 0.0
            out.append(Event(seq, data, when))
        return out

    def last_compaction_seq(self, conn: sqlite3.Connection, session_id: str) -> int | None:
        """The seq of the session's newest ``compaction`` event (from the identities, nothing decoded)."""
        row = conn.execute(
            "SELECT max(seq) FROM transcript_event_identities WHERE session_id = ? AND event_type = 'compaction'",
            (session_id,),
        ).fetchone()
        return row[0] if row is not None and isinstance(row[0], int) else None
