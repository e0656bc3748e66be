"""Restart in O(changed bytes): each session's cursor and ledger, saved in the state directory with the
identity of the file they were read from, so that a restart reads only what was appended while it was down.

A snapshot is trusted only for the very file it describes: same device and inode, not shorter than the cursor,
not modified before the snapshot was taken, and — unless its size, mtime and ctime are all as they were, which
means untouched — the same 4 KB before the cursor and the same first 1 KB (a file restored or rewritten in
place under its old inode shows there). Anything else — or a snapshot of another format or compactd
version, or one that does not parse — means the file is read in full, as on a first start, with a debug line
saying why. Snapshots are an optimisation only: losing them all costs one cold read per session.

Layout: ``<state_dir>/resume/NN.json``, sessions sharded by a hash of their path, each shard an orjson
document written with the package's one atomic writer (``durable.write_atomic``). Shards are written with
the other state files (batched, off the append path), and only those holding a session whose snapshot changed.

Each shard also names the configuration (``config_fingerprint``) its sessions' recorded decisions (sessions.json)
were made under, when every one of them was decided (or kept) under it by the process that wrote it: an
untouched session in a shard of the running configuration keeps that decision at start-up instead of being
decided again (``SnapshotStore.decided``); another configuration, a session not decided by the writer (outside
its roots), or a reload since (``fingerprint`` None) means the shard names none and its sessions are decided
afresh.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from compactd import __version__
from compactd.commit.locks import pid_alive
from compactd.datarecord import datarecord

if TYPE_CHECKING:
    from compactd.sources.files.tracker import SessionTracker

log = logging.getLogger(__name__)

__all__ = ["RESUME_DIR", "Snapshot", "SnapshotStore", "config_fingerprint", "mismatch", "mismatch_of_stat"]

RESUME_DIR = "resume"
# Bumped when a shard's layout changes; a shard of another format (or of another compactd) is not trusted.
SNAPSHOT_FORMAT = 1
# Enough that one busy session rewrites a small shard (10,000 sessions: about 60 KB each), few enough that
# loading them all stays a handful of reads.
SHARDS = 64
# The bytes just before the cursor that must be unchanged for a snapshot to be trusted.
TAIL_BYTES = 4096
HEAD_BYTES = 1024
_HASH_BYTES = 16


@datarecord(frozen=True, slots=True)
class Snapshot:
    """One session: where its cursor stood in which file, and its ledger there (``SessionLedger.to_snapshot``).

    ``digest`` (``content_hash``) is None for a snapshot taken in memory and not yet saved: hashing is left to
    the (batched) save, which reads the bytes it covers only if the file is still the one the cursor was in.
    """

    dev: int
    ino: int
    offset: int
    size: int
    mtime_ns: int
    ctime_ns: int
    ledger: tuple[Any, ...]
    digest: bytes | None = None

    def to_record(self, digest: bytes) -> list[Any]:
        stat_part = [self.dev, self.ino, self.offset, self.size, self.mtime_ns, self.ctime_ns]
        return [*stat_part, digest.hex(), self.ledger]

    def untouched(self, st: os.stat_result) -> bool:
        """The file has not changed at all since the snapshot's read: same size, mtime and ctime. ctime cannot
        be set by anyone and moves on every write, truncation, rename onto it or ``utime``, so then no hash is
        needed (nothing is read: a restart costs one ``lstat`` per unchanged session)."""
        return (st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (self.size, self.mtime_ns, self.ctime_ns)

    @classmethod
    def from_record(cls, record: Any) -> Snapshot:
        """ValueError for anything that is not a record ``to_record`` wrote (the ledger is checked on use)."""
        if not isinstance(record, list) or len(record) != 8:
            raise ValueError("not a snapshot record")
        dev, ino, offset, size, mtime_ns, ctime_ns, digest, ledger = record
        # One test per field, not a generator: a restart takes one snapshot per unchanged session.
        if not (
            type(dev) is type(ino) is type(offset) is type(size) is type(mtime_ns) is type(ctime_ns) is int
            and dev >= 0
            and ino >= 0
            and offset >= 0
            and size >= 0
            and mtime_ns >= 0
            and ctime_ns >= 0
            and isinstance(ledger, list)
        ):
            raise ValueError("malformed snapshot record")
        if not isinstance(digest, str) or len(digest) != 2 * _HASH_BYTES:
            raise ValueError("malformed tail hash")
        return cls(dev, ino, offset, size, mtime_ns, ctime_ns, tuple(ledger), bytes.fromhex(digest))


def config_fingerprint(config: object) -> str:
    """A digest of everything in a (frozen) configuration: equal only for configurations that decide alike."""
    import hashlib  # here, as below: a dry run saves and checks no snapshot, and hashlib is 2 ms to load

    return hashlib.blake2b(
        repr(config).encode("utf-8", "surrogateescape"), digest_size=_HASH_BYTES
    ).hexdigest()


def content_hash(fd: int, offset: int) -> bytes:
    """blake2b of the first 1 KB (the session header: another session rewritten in place shows there) and of
    the 4 KB before ``offset`` (a file rewritten or restored near the cursor). An in-place rewrite that keeps
    both and does not shrink is indistinguishable from an append here, as it is to the live tail follower."""
    import hashlib

    digest = hashlib.blake2b(digest_size=_HASH_BYTES)
    start = max(0, offset - TAIL_BYTES)
    if start > HEAD_BYTES:
        digest.update(os.pread(fd, HEAD_BYTES, 0))
        digest.update(b"\0")
    else:
        start = 0  # the two ranges touch or overlap: read them as one
    digest.update(os.pread(fd, offset - start, start))
    return digest.digest()


def hashed_bytes(offset: int) -> int:
    """How many bytes ``content_hash`` reads."""
    return offset if offset - TAIL_BYTES <= HEAD_BYTES else HEAD_BYTES + TAIL_BYTES


def mismatch_of_stat(snapshot: Snapshot, st: os.stat_result) -> str | None:
    """Why a file with this ``lstat`` cannot be the one ``snapshot`` describes, or None (then it is, if
    ``untouched``; else ``content_hash`` decides)."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"  # a symlink now: never followed, never trusted
    if st.st_dev != snapshot.dev:
        return "device differs"
    if st.st_ino != snapshot.ino:
        return "inode differs (another file)"
    if st.st_size < snapshot.offset:
        return f"size {st.st_size} smaller than the cursor {snapshot.offset}"
    if st.st_mtime_ns < snapshot.mtime_ns:
        return "mtime older than the snapshot's"
    return None


def mismatch(snapshot: Snapshot, fd: int) -> str | None:
    """Why ``snapshot`` does not describe the file open at ``fd`` (opened without following symlinks), or None
    when it does. Reads the bytes ``content_hash`` covers."""
    reason = mismatch_of_stat(snapshot, os.fstat(fd))
    if reason is None and (snapshot.digest is None or content_hash(fd, snapshot.offset) != snapshot.digest):
        return "the first 1 KB or the 4 KB before the cursor differ"
    return reason


class _Tracked(Protocol):
    @property
    def tracker(self) -> SessionTracker: ...


class SnapshotStore:
    """The snapshots of one state directory. Only a store that was ``load``-ed saves (the process that owns
    the state directory at start-up: ``compactd run``); saving writes only the shards whose sessions changed."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(state_dir) / RESUME_DIR
        self.loaded = False
        self._records: dict[str, list[Any]] = {}  # path -> its record as saved (or as loaded)
        self._saved: dict[str, Snapshot] = {}  # path -> the snapshot object its record was made from
        self._shards: dict[str, int] = {}
        self._dirty: set[int] = set()
        # The configuration the recorded decisions are made under (the owner sets it; None: not one known,
        # e.g. after a reload), and the one each loaded shard names.
        self.fingerprint: str | None = None
        self._stamps: dict[int, str | None] = {}
        self._decided: set[str] = set()  # paths decided (or kept) under ``fingerprint`` by this process

    def shard(self, path: str) -> int:
        number = self._shards.get(path)
        if number is None:
            import zlib  # here: a dry run loads, saves and checks no snapshot

            number = self._shards[path] = zlib.crc32(path.encode("utf-8", "surrogateescape")) % SHARDS
        return number

    def _shard_path(self, number: int) -> Path:
        return self.directory / f"{number:02x}.json"

    def load(self) -> int:
        """Read every shard; a missing, corrupt or foreign one just means its sessions are read in full."""
        self.loaded = True
        self._remove_stale_temps()
        for number in range(SHARDS):
            path = self._shard_path(number)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.debug("resume: cannot read %s (%s); its sessions are read in full", path, exc)
                continue
            try:
                doc = orjson.loads(raw)
                if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
                    raise ValueError(f"not a format-{SNAPSHOT_FORMAT} snapshot shard")
                if doc.get("compactd") != __version__:
                    raise ValueError(f"written by compactd {doc.get('compactd')!r}, this is {__version__}")
                sessions = doc.get("sessions")
                if not isinstance(sessions, dict):
                    raise ValueError("no sessions object")
            except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
                log.debug("resume: %s not used (%s); its sessions are read in full", path.name, exc)
                continue
            stamp = doc.get("config")
            self._stamps[number] = stamp if isinstance(stamp, str) else None
            for key, record in sessions.items():
                if self.shard(key) == number:  # a record in the wrong shard would be lost at its next write
                    self._records[key] = record
        return len(self._records)

    def decided(self, path: str) -> bool:
        """The decision recorded for ``path`` was made under the running configuration (see the module)."""
        return self.fingerprint is not None and self._stamps.get(self.shard(path)) == self.fingerprint

    def mark_decided(self, path: str) -> None:
        """``path``'s decision, as recorded now, was made under ``fingerprint``."""
        self._decided.add(path)

    def take(self, path: str) -> Snapshot | None:
        """The saved snapshot of ``path`` for its tracker to try (once), or None (logged at debug: why)."""
        record = self._records.get(path)
        if record is None:
            if self.loaded:
                log.debug("session=%s resume=no reason=no snapshot", path)
            return None
        try:
            snapshot = Snapshot.from_record(record)
        except ValueError as exc:
            log.debug("session=%s resume=no reason=corrupt snapshot: %s", path, exc)
            return None
        self._saved[path] = snapshot  # unchanged until its tracker takes another
        return snapshot

    def save(self, sessions: Mapping[str, _Tracked]) -> int:
        """Write the shards holding a session whose snapshot changed, appeared or went away; the number written.

        Safe to call from a worker thread while the event loop refreshes: each tracker's snapshot is an
        immutable object replaced whole, and a tracker only ever holds one it took at a consistent moment.
        """
        if not self.loaded:
            return 0
        current: dict[str, Snapshot] = {}
        for path, session in list(sessions.items()):
            snapshot = session.tracker.snapshot
            if snapshot is not None:
                current[path] = snapshot
        dirty = self._dirty  # kept across calls: a shard whose write failed is written next time
        for path in [p for p in self._records if p not in current and not os.path.lexists(p)]:
            del self._records[path]  # the transcript is gone (untracked ones that exist are kept: `once`)
            self._saved.pop(path, None)
            dirty.add(self.shard(path))
        for path, snapshot in current.items():
            if self._saved.get(path) is not snapshot:
                record = _record_for(path, snapshot)
                if record is None:
                    continue  # tried again at the next save
                self._saved[path] = snapshot
                if record != self._records.get(path):
                    self._records[path] = record
                    dirty.add(self.shard(path))
        # The configuration each shard can name (see the module); a shard naming another one is rewritten.
        stamps: dict[int, str | None] = dict.fromkeys(self._stamps, self.fingerprint)
        for path in self._records:
            number = self.shard(path)
            if path not in self._decided:
                stamps[number] = None
            else:
                stamps.setdefault(number, self.fingerprint)
        if self.fingerprint is None:
            stamps = dict.fromkeys(stamps)
        dirty.update(n for n, stamp in stamps.items() if stamp != self._stamps.get(n))
        if not dirty:
            return 0
        from compactd.commit.durable import write_atomic
        from compactd.state import STATE_DIR_MODE

        self.directory.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
        by_shard: dict[int, dict[str, list[Any]]] = {number: {} for number in dirty}
        for path, record in self._records.items():
            members = by_shard.get(self.shard(path))
            if members is not None:
                members[path] = record
        written = 0
        for number in sorted(dirty):
            write_atomic(self._shard_path(number), _dump_shard(by_shard[number], stamps.get(number)))
            self._stamps[number] = stamps.get(number)
            dirty.discard(number)
            written += 1
        return written

    def _remove_stale_temps(self) -> None:
        """Temp files of a writer that died mid-save (``durable.write_atomic``'s names)."""
        from compactd.commit.durable import TEMP_NAME

        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                match = TEMP_NAME().match(name)
                if match and not pid_alive(int(match["pid"])):
                    with contextlib.suppress(OSError):
                        os.unlink(self.directory / name)


def _record_for(path: str, snapshot: Snapshot) -> list[Any] | None:
    """``snapshot`` as a record, hashing the bytes its check covers if need be; None when the file is not as the
    snapshot's read left it (same inode, size, mtime and ctime), so the bytes hashed now may not be the ones the ledger
    was built from: the previous record stays until a later save finds the file quiet."""
    if snapshot.digest is not None:
        return snapshot.to_record(snapshot.digest)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (snapshot.dev, snapshot.ino) or not snapshot.untouched(st):
            return None
        return snapshot.to_record(content_hash(fd, snapshot.offset))
    except OSError:
        return None
    finally:
        os.close(fd)


def _dump_shard(records: Mapping[str, list[Any]], fingerprint: str | None) -> bytes:
    """One shard; a session orjson cannot write (a file name that is not UTF-8, an id past 64 bits) is left
    out, so it is read in full next time, rather than costing every other session its snapshot."""
    doc = {
        "format": SNAPSHOT_FORMAT,
        "compactd": __version__,
        "config": fingerprint,
        "sessions": dict(records),
    }
    try:
        return orjson.dumps(doc)
    except TypeError:
        kept = {}
        for path, record in records.items():
            with contextlib.suppress(TypeError):
                orjson.dumps([path, record])
                kept[path] = record
        doc["sessions"] = kept
        return orjson.dumps(doc)
