"""Read-only access to one agent's ``openclaw-agent.sqlite`` (schema version 23, OpenClaw 2026.9).

Every read opens the file with ``mode=ro`` for that read only: no write lock, no file descriptor held across
the gateway's checkpoints. Nothing under the agent's directory is created or changed, whatever the gateway's
state (design.md §6.13), which a plain ``mode=ro`` reader does not ensure: it sets a read mark in the ``-shm``
(a write), rebuilds the ``-shm`` after a crash and creates a missing ``-wal`` or ``-shm``. So the reader picks by
what is on disk:

- ``-wal`` missing, or empty without a ``-shm`` (the gateway stopped and checkpointed it, no connection is
  open): the main file holds everything and is read ``immutable``.
- ``-wal`` and ``-shm`` both there (the gateway running, stopped, or crashed): ``readonly_shm`` maps the
  ``-shm`` read-only; SQLite reads with an existing read mark, or from the ``-wal`` into its own memory when no
  connection holds the ``-shm`` (a crash).
- a non-empty ``-wal`` without a ``-shm``: no connection can be open (each holds the ``-shm``), so the files stay
  still while they are copied into a private temporary directory, and the copy is read; a copy that changed
  while it was made (a gateway starting) is made again. The copy serves every read until the files change
  (each rescan would otherwise copy the whole database again) and is removed then.

Before every read the files are checked as a claim (:mod:`compactd.sources.openclaw._claim`) and, as root, opened with
the agent owner's identity (:mod:`compactd.fs_identity`). ``event_zstd`` rows hold one standard
zstd frame; the ``zstandard`` package decodes it (the standard library has zstd only from Python 3.14).

Every column read is type-checked against OpenClaw's schema (its tables are STRICT, but a damaged or foreign
file need not be): a value of the wrong type is a :class:`StoreError` naming the row, never a ``TypeError``
deep in a caller, so the source can fail that one session (or that one database) and go on with the others.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import field
from typing import Any
from urllib.parse import quote

import orjson

from compactd.core.reader import parse_line
from compactd.datarecord import datarecord
from compactd.fs_identity import IdentityError, files_as
from compactd.sources.openclaw._claim import database_refusal
from compactd.workspace import Identity

# The largest entry OpenClaw compresses (larger ones stay JSON text): a frame claiming more is refused, not inflated.
MAX_EVENT_BYTES = 4 * 1024 * 1024
# The largest window such a frame needs (zstd's window is at most the content size, rounded up to a power of 2).
MAX_WINDOW_BYTES = 8 * 1024 * 1024
# OpenClaw's own readers page the transcript at most 64 MiB at a time (MAX_RAW_TRANSCRIPT_BYTES in 2026.9.6) and
# cannot return a row larger than that: neither can compactd. SQLite's SQLITE_LIMIT_LENGTH is set to it, so no
# larger string or blob is ever materialized (without it, ``length()`` of a 200 MiB text took 617 MiB).
MAX_ROW_BYTES = 64 * 1024 * 1024
BUSY_TIMEOUT_MS = 2_000
_IN_CHUNK = 500  # bound parameters per IN (...) list, well under SQLite's limit
# How many times a copy of a database without a running gateway is made before giving up (one is the rule).
COPY_ATTEMPTS = 3
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


@datarecord(frozen=True, slots=True)
class Node:
    """One ``session_nodes`` row: a session key, its current transcript and its entry (JSON object)."""

    session_key: str
    session_id: str
    entry: dict[str, Any] = field(repr=False)
    # Why the row cannot be used (a column of the wrong type, an entry that is not an object); None: it can.
    problem: str | None = None

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


@datarecord(frozen=True, slots=True)
class Event:
    """One transcript event read from an agent's database."""

    seq: int
    data: bytes  # the entry's JSON, decoded from its zstd frame when it had one
    created_at: float  # seconds since the epoch


def _kind(value: object) -> str:
    return {str: "text", bytes: "a blob", int: "an integer", float: "a float"}.get(
        type(value), type(value).__name__
    )


def _int(value: object, what: str) -> int:
    if type(value) is not int:
        raise StoreError(f"{what} is {_kind(value)}, not an integer")
    return value


def row_node(key: object, session_id: object, entry_json: object) -> Node:
    """A ``session_nodes`` row; one that cannot be used carries its ``problem`` (the session's failure)."""
    name = key if isinstance(key, str) else repr(key)
    sid = session_id if isinstance(session_id, str) else ""
    if not isinstance(key, str):
        return Node(name, sid, {}, f"session_key is {_kind(key)}, not text")
    if not sid:
        return Node(name, sid, {}, f"current_session_id is {_kind(session_id)}, not a session id")
    if not isinstance(entry_json, str):
        return Node(name, sid, {}, f"entry_json is {_kind(entry_json)}, not text")
    try:
        entry = orjson.loads(entry_json)
    except orjson.JSONDecodeError as exc:
        return Node(name, sid, {}, f"entry_json is not JSON: {exc}")
    if not isinstance(entry, dict):
        return Node(name, sid, {}, f"entry_json is {_kind(entry)}, not an object")
    return Node(name, sid, entry)


def _check_event(data: bytes, where: str) -> None:
    """OpenClaw reads each row with ``JSON.parse`` and uses it as an event object: a row that is not one fails
    its session (it would fail OpenClaw's read too), rather than being skipped like a torn line of a file."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        value, reason = parse_line(
            data
        )  # what JavaScript accepts and orjson does not (lone surrogates, depth)
        if reason is not None:
            raise StoreError(f"{where}: event_json is not JSON ({reason})") from None
    if not isinstance(value, dict):
        raise StoreError(f"{where}: the event is {_kind(value)}, not a JSON object")


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
    if not found and conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0:
        return  # no table at all yet: OpenClaw creates the file, then its schema (no sessions, no failure)
    for table, needed in EXPECTED_TABLES.items():
        kind, sql = found.get(table, ("missing", ""))
        if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            what = "a virtual table" if kind == "table" else kind
            raise StoreError(f"{table} is {what}, not a table")
        # table_xinfo's hidden: 0 a plain column, 1 a virtual table's hidden one, 2/3 a generated one
        plain = {str(row[1]) for row in conn.execute(f"PRAGMA table_xinfo({table})") if row[6] == 0}
        if not needed <= plain:
            raise StoreError(f"{table} lacks the plain columns {', '.join(sorted(needed - plain))}")


def _on_disk(path: str) -> tuple[tuple[int, int, int] | None, ...]:
    """The database's, its ``-wal``'s and its ``-shm``'s inode, size and mtime (None: absent)."""
    out: list[tuple[int, int, int] | None] = []
    for name in (path, path + "-wal", path + "-shm"):
        try:
            info = os.lstat(name)
        except FileNotFoundError:
            out.append(None)
        else:
            out.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(out)


def _copy_file(source: str, target: str) -> None:
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            raise StoreError(f"{source} is not a regular file")
        with open(target, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


@datarecord(slots=True)
class _Copy:
    """A private copy of the database and its ``-wal``, and what they were on disk when it was made."""

    on_disk: tuple[tuple[int, int, int] | None, ...]
    directory: tempfile.TemporaryDirectory[str]
    path: str


def _private_copy(path: str) -> _Copy:
    """The database and its ``-wal`` copied into a private directory (see the module's docstring)."""
    for _ in range(COPY_ATTEMPTS):
        before = _on_disk(path)
        directory = tempfile.TemporaryDirectory(prefix="compactd-openclaw-")
        copy = os.path.join(directory.name, os.path.basename(path))
        try:
            _copy_file(path, copy)
            _copy_file(path + "-wal", copy + "-wal")
        except BaseException:
            directory.cleanup()
            raise
        if _on_disk(path) == before:
            return _Copy(before, directory, copy)
        directory.cleanup()
    raise StoreError(f"{path} kept changing while it was copied")


class Store:
    """One agent database; ``rows_read`` counts the transcript rows fetched and ``queries`` the statements run
    (the follower's cost, which must follow the rows appended, not the sessions held), ``copies`` the reads
    made from a private copy. ``owner``: the agent's owner, whose files alone are read (None: not
    checked); ``identity``: whom to open them as (None: compactd itself)."""

    def __init__(
        self,
        path: str,
        owner: int | None = None,
        identity: Identity | None = None,
        *,
        query_seconds: float = QUERY_SECONDS,
    ) -> None:
        self.path = path
        self.owner = owner
        self.identity = identity
        self.rows_read = 0
        self.queries = 0
        self.query_seconds = query_seconds
        self._stopped = threading.Event()
        self.copies = 0
        self._copy: _Copy | None = None  # kept while the files it was made from are unchanged
        self._copy_lock = threading.Lock()

    def _execute(self, conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        self.queries += 1
        return conn.execute(sql, params)

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
        """A read-only connection, opened and used in this thread (as the owner, when compactd is root)."""
        if self.owner is not None:
            refusal = database_refusal(self.path, self.owner)
            if refusal is not None:
                raise StoreError(f"refused: {refusal}")
        if not os.path.isfile(self.path):
            raise StoreError(f"{self.path} does not exist")
        if self._stopped.is_set():
            raise StoreError(f"cannot read {self.path}: stopping")
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(files_as(self.identity))
                _db, wal, shm = _on_disk(self.path)
                target, query = self.path, "mode=ro"
                if wal is None or (wal[1] == 0 and shm is None):
                    query += "&immutable=1"  # everything is in the main file, and nobody is writing it
                elif shm is not None:
                    query += "&readonly_shm=1"
                else:  # our own private copy: read-only too (SQLite makes the copy's -shm, in our directory)
                    target, query = self._copied().path, "mode=ro"
                if target == self.path:
                    self.drop_copy()  # a gateway started, or stopped cleanly: the files are read again
            except IdentityError as exc:
                raise StoreError(f"cannot read {self.path} as uid {self.owner}: {exc}") from None
            except OSError as exc:
                raise StoreError(f"cannot read {self.path}: {exc.strerror or exc}") from None
            yield stack.enter_context(self._open(f"file:{quote(target)}?{query}"))

    def _copied(self) -> _Copy:
        with self._copy_lock:  # the watcher's and the worker's threads may both read
            if self._copy is None or self._copy.on_disk != _on_disk(self.path):
                self._drop_copy()
                self._copy = _private_copy(self.path)
                self.copies += 1
            return self._copy

    def drop_copy(self) -> None:
        """Remove the private copy, if any (it holds the agent's transcripts: kept no longer than needed)."""
        with self._copy_lock:
            self._drop_copy()

    def _drop_copy(self) -> None:
        if self._copy is not None:
            self._copy.directory.cleanup()
            self._copy = None

    @contextlib.contextmanager
    def _open(self, uri: str) -> Iterator[sqlite3.Connection]:
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
        """Every session's row; none from a database without any table yet (OpenClaw creates the file, then
        its schema), while one with other tables but no ``session_nodes`` is no OpenClaw store."""
        if self.empty(conn):
            return []
        return [row_node(*row) for row in self.node_rows(conn)]

    def empty(self, conn: sqlite3.Connection) -> bool:
        """No table at all yet: OpenClaw creates the file, then its schema (no sessions, not a failure)."""
        return bool(self._execute(conn, "SELECT count(*) FROM sqlite_master").fetchone()[0] == 0)

    def node_rows(
        self,
        conn: sqlite3.Connection,
        *,
        keys: list[str] | None = None,
        session_ids: list[str] | None = None,
    ) -> list[tuple[object, object, object]]:
        """``session_nodes`` rows as stored (key, session id, entry JSON; not type-checked: :func:`_node` does
        that): compared, not parsed, so a refresh parses only the entries that changed. Every row, or (``keys``
        or ``session_ids`` given) only the rows of those keys and of the keys whose current session is one of
        ``session_ids``."""
        select = "SELECT session_key, current_session_id, entry_json FROM session_nodes"
        if keys is None and session_ids is None:
            found = list(self._execute(conn, select))
        else:
            found = []
            for column, values in (("session_key", keys or []), ("current_session_id", session_ids or [])):
                for at in range(0, len(values), _IN_CHUNK):
                    chunk = tuple(values[at : at + _IN_CHUNK])
                    marks = ",".join("?" * len(chunk))
                    found += self._execute(conn, f"{select} WHERE {column} IN ({marks})", chunk)
        out = {(key if isinstance(key, str) else repr(key)): (key, sid, raw) for key, sid, raw in found}
        return list(out.values())

    def node(self, conn: sqlite3.Connection, session_key: str) -> Node | None:
        row = self._execute(
            conn,
            "SELECT session_key, current_session_id, entry_json FROM session_nodes WHERE session_key = ?",
            (session_key,),
        ).fetchone()
        return None if row is None else row_node(*row)

    def appended_since(
        self, conn: sqlite3.Connection, after_rowid: int | None
    ) -> tuple[set[str] | None, int]:
        """The sessions with transcript rows past ``after_rowid`` (a range of the table's rowid b-tree: the cost
        follows the rows appended), and the rowid to pass next time. None instead of the set: every session
        must be looked at (the first look, or rows were deleted so rowids may be reused)."""
        row = self._execute(conn, "SELECT max(rowid) FROM transcript_events").fetchone()
        top = -1 if row is None or row[0] is None else int(row[0])
        if after_rowid is None or top < after_rowid:
            return None, top
        # no DISTINCT: SQLite would answer it by scanning the whole (session_id, seq) index instead
        rows = self._execute(conn, "SELECT session_id FROM transcript_events WHERE rowid > ?", (after_rowid,))
        return {r[0] if isinstance(r[0], str) else repr(r[0]) for r in rows}, top

    def last_seqs(self, conn: sqlite3.Connection) -> dict[str, object]:
        """Every session's newest ``seq`` (one walk of the primary key's b-tree in SQLite, no row decoded):
        what a full look compares with each follower's (a value of the wrong type never equals one, so that
        session is read, and fails, by itself)."""
        rows = self._execute(conn, "SELECT session_id, max(seq) FROM transcript_events GROUP BY session_id")
        return {session_id: seq for session_id, seq in rows if isinstance(session_id, str)}

    def generations(self, conn: sqlite3.Connection) -> dict[str, object]:
        """Every rewritten session's generation (one row per session ``--max-lines`` ever rewrote); checked
        for its type when the session is read (:meth:`generation`)."""
        rows = self._execute(conn, "SELECT session_id, generation FROM transcript_rewrite_watermarks")
        return {session_id: generation for session_id, generation in rows if isinstance(session_id, str)}

    def generation(self, conn: sqlite3.Connection, session_id: str) -> str | None:
        """The rewrite generation: it changes when ``--max-lines`` renumbers ``seq`` (a re-read is due)."""
        row = self._execute(
            conn, "SELECT generation FROM transcript_rewrite_watermarks WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        if not isinstance(row[0], str):
            raise StoreError(f"the rewrite generation of {session_id} is {_kind(row[0])}, not text")
        return row[0]

    def events(self, conn: sqlite3.Connection, session_id: str, after_seq: int = -1) -> list[Event]:
        """The transcript rows after ``after_seq``, oldest first (all of them with the default)."""
        # A frame larger than any OpenClaw writes is not fetched (a blob's length is read without its content).
        rows = self._execute(
            conn,
            "SELECT seq, event_json, CASE WHEN length(event_zstd) <= ? THEN event_zstd END, length(event_zstd), "
            "event_utf8_bytes, created_at FROM transcript_events WHERE session_id = ? AND seq > ? ORDER BY seq",
            (MAX_EVENT_BYTES, session_id, after_seq),
        ).fetchall()
        self.rows_read += len(rows)
        out: list[Event] = []
        for seq, text, frame, frame_bytes, size, created in rows:
            where = f"event {session_id}:{seq!r}"
            number = _int(seq, f"{where}: seq")
            if text is not None:
                if not isinstance(text, str):
                    raise StoreError(f"{where}: event_json is {_kind(text)}, not text")
                data = text.encode("utf-8", "surrogatepass")
            elif frame_bytes is not None and frame is None:
                raise StoreError(f"{where} has a {frame_bytes}-byte frame, larger than any OpenClaw writes")
            elif frame is not None:
                if not isinstance(frame, bytes):
                    raise StoreError(f"{where}: event_zstd is {_kind(frame)}, not a blob")
                length = _int(size, f"{where}: event_utf8_bytes")
                try:
                    data = _decompress(frame, length)
                except StoreError as exc:
                    raise StoreError(f"{where}: {exc}") from None
            else:
                raise StoreError(f"{where} has neither JSON nor a frame")
            if type(created) not in (int, float) or not math.isfinite(created):
                raise StoreError(f"{where}: created_at is {_kind(created)}, not a time")
            _check_event(data, where)
            out.append(Event(number, data, created / 1000))
        return out

    def last_compaction_seq(self, conn: sqlite3.Connection, session_id: str) -> int | None:
        """The seq of the session's newest ``compaction`` event (from the identities, nothing decoded)."""
        row = self._execute(
            conn,
            "SELECT max(seq) FROM transcript_event_identities WHERE session_id = ? AND event_type = 'compaction'",
            (session_id,),
        ).fetchone()
        return None if row is None or row[0] is None else _int(row[0], f"the compaction seq of {session_id}")
