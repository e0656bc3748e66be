"""The commit journal (intent and completion records) and recovery after a crash.

``<state_dir>/journal.jsonl`` is append-only JSON lines, each ``fsync``'d before the step it announces:

- ``{"rec": "intent", "tx", "op": "rotate"|"append", "path", "pid", "ts", "dev", "inode", "size", ...}`` —
  rotate adds ``archive``, ``tmp``, ``succ_size`` (the successor's length: the carried-over lines start
  there) and ``succ_hash`` (its digest: is the live file still that successor?); append adds ``ids`` (the
  entries it writes);
- ``{"rec": "progress", "tx", "ids"}`` — an append's correction round, with the ids it adds;
- ``{"rec": "done", "tx", "status", "ts", ...}`` — ``committed``/``abandoned`` from the commit, or what
  recovery did; a rotation's ``archive`` is listed here for retention;
- ``{"rec": "archive", "path", "archive"}`` and ``{"rec": "removed", "archive"}`` — archive bookkeeping (the
  first only in a compacted journal).

:func:`recover` runs at start (before any commit). For each intent without completion whose process is gone:

- rotate, path still the old inode → the rename never happened: remove the temp file and the archive link
  (rolled back; the original is untouched);
- rotate, path is a new inode and the archive is the old one → the rename happened: append to the live file
  every line the old inode got after the snapshot that the live file lacks (a kill during the grace period),
  re-attached so none dangles (a line whose parent is gone, or a file rewritten since, gets it re-parented onto
  the active branch, ids and content kept), and re-point the leaf if such a line landed after its own child
  (finished);
- append → seal a torn line our killed write left, and re-point the leaf if our lines cut agent lines off the
  last line's branch (finished).

It also removes our stale temp files (named ``.<name>.compactd.<pid>.tmp``, whose process is gone) and archive
links that are the live file itself, in every directory the journal names plus ``roots``, and stale session
locks our dead processes left. Only archives the journal lists are ever removed by retention: OpenClaw names
its own backups the same way.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import logging
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

from compactd.commit.atomic import (
    ARCHIVE_INFIX,
    fsync_dir,
    is_our_tmp,
    os_reason,
    pread_all,
    tmp_pid,
    write_all,
)
from compactd.commit.locks import (
    LockInfo,
    flocked,
    lock_is_live,
    lock_path_for,
    pid_alive,
    read_lock,
    remove_stale_lock,
)
from compactd.commit.successor import (
    dumps_entry,
    fresh_id,
    iso_timestamp,
    leaf_pointer_entry,
    leaf_to_repoint,
    plan_rescue,
)
from compactd.core.reader import Transcript, parse_line, parse_transcript
from compactd.datarecord import datarecord

log = logging.getLogger(__name__)

JOURNAL_NAME = "journal.jsonl"
RECOVERY_LOCK_NAME = "recovery.lock"
# At recovery a journal larger than this is rewritten with only what is still needed (archive records).
JOURNAL_COMPACT_BYTES = 1 << 20
# A temp file of ours older than this is stale even if a process with its pid exists (pid reuse).
STALE_TMP_SECONDS = 600.0

_tx_counter = itertools.count()

Record = dict[str, Any]


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


class Journal:
    """Append-only intent/completion records in ``<state_dir>/journal.jsonl``."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / JOURNAL_NAME

    def append(self, record: Record, *, sync: bool = True) -> None:
        """Write one record and ``fsync`` it; a torn last record (a killed write) is sealed off first.

        ``sync=False`` is for records that only matter after a process kill (the page cache keeps them), not
        after a power loss, where the extra fsync would slow a loop that must stay short. Writers share a
        ``flock`` on the journal that :meth:`compact` takes exclusively, so a record written by another compactd
        process of this state directory while the journal is rewritten is not lost.
        """
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = self._open_locked(fcntl.LOCK_SH)
        try:
            size = os.fstat(fd).st_size
            prefix = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
            write_all(fd, prefix + dumps_entry(record) + b"\n")
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if size == 0:
            fsync_dir(str(self.state_dir))

    def _open_locked(self, operation: int, *, create: bool = True) -> int:
        """The journal opened for append and ``flock``'d; re-opened if :meth:`compact` replaced it meanwhile."""
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        while True:
            fd = os.open(self.path, flags, 0o600)
            try:
                fcntl.flock(fd, operation)
                st = os.fstat(fd)
                current = _lstat(str(self.path))
            except BaseException:
                os.close(fd)
                raise
            if current is not None and (current.st_dev, current.st_ino) == (st.st_dev, st.st_ino):
                return fd
            os.close(fd)  # renamed over while we waited: the records go to the new file

    def intent(self, op: str, path: str, **fields: Any) -> str:
        tx = f"{time.time_ns():x}-{os.getpid()}-{next(_tx_counter)}"
        self.append(
            {
                "rec": "intent",
                "tx": tx,
                "op": op,
                "path": path,
                "pid": os.getpid(),
                "ts": iso_timestamp(),
                **fields,
            }
        )
        return tx

    def progress(self, tx: str, **fields: Any) -> None:
        self.append({"rec": "progress", "tx": tx, **fields}, sync=False)

    def done(self, tx: str, status: str, **fields: Any) -> None:
        self.append({"rec": "done", "tx": tx, "status": status, "ts": iso_timestamp(), **fields})

    def try_done(self, tx: str, status: str, **fields: Any) -> None:
        """:meth:`done` that only logs a failure (the commit's outcome does not depend on it)."""
        try:
            self.done(tx, status, **fields)
        except OSError as exc:
            log.error("cannot write the journal %s: %s", self.path, os_reason(exc))

    def locking(self, path: str) -> None:
        """Announce that this process is about to take ``path``'s session lock.

        A kill between the lock's exclusive create and the write of its body leaves an empty lock file, which
        OpenClaw (and we) honour for 30 minutes; this record lets recovery recognise it as ours and remove it.
        """
        self.append({"rec": "lock", "path": path, "pid": os.getpid(), "t": time.time()}, sync=False)

    def removed(self, archive: str) -> None:
        self.append({"rec": "removed", "archive": archive, "ts": iso_timestamp()})

    def records(self) -> list[Record]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out: list[Record] = []
        for raw in data.split(b"\n"):
            if not raw.strip():
                continue
            value, _ = parse_line(raw)
            if isinstance(value, dict):
                out.append(value)
        return out

    @staticmethod
    def pending(records: list[Record]) -> list[Record]:
        """Intents without a completion, with the ids of their progress records merged in."""
        finished = {r.get("tx") for r in records if r.get("rec") == "done"}
        intents: dict[str, Record] = {}
        for record in records:
            tx = record.get("tx")
            if not isinstance(tx, str) or tx in finished:
                continue
            if record.get("rec") == "intent":
                intents[tx] = dict(record)
            elif record.get("rec") == "progress" and tx in intents:
                ids = list(intents[tx].get("ids") or []) + list(record.get("ids") or [])
                intents[tx]["ids"] = ids
        return list(intents.values())

    def archives(self, path: str, records: list[Record] | None = None) -> list[str]:
        """Archives of ``path`` made by our rotations that still exist, oldest first."""
        return self.all_archives(records).get(path, [])

    def all_archives(self, records: list[Record] | None = None) -> dict[str, list[str]]:
        """Every session path's archives made by our rotations that still exist, oldest first."""
        records = self.records() if records is None else records
        by_path: dict[str, dict[str, None]] = {}
        owner_of: dict[str, str] = {}
        intents = {r.get("tx"): r for r in records if r.get("rec") == "intent"}
        for record in records:
            kind = record.get("rec")
            archive = record.get("archive")
            if not isinstance(archive, str):
                continue
            owner: object = None
            if kind == "done" and record.get("status") in ("committed", "finished"):
                owner = record.get("path") or intents.get(record.get("tx"), {}).get("path")
            elif kind == "archive":
                owner = record.get("path")
            elif kind == "removed" and archive in owner_of:
                by_path[owner_of.pop(archive)].pop(archive, None)
                continue
            if isinstance(owner, str):
                by_path.setdefault(owner, {})[archive] = None
                owner_of[archive] = owner
        out: dict[str, list[str]] = {}
        for path, archives in by_path.items():
            existing = [a for a in archives if _lstat(a) is not None]
            if existing:
                out[path] = existing
        return out

    def compact(self) -> None:
        """Rewrite the journal keeping unfinished intents and the archives that still exist.

        Under an exclusive ``flock`` (see :meth:`append`): no other process's record can fall between the
        read and the rename.
        """
        try:
            fd = self._open_locked(fcntl.LOCK_EX, create=False)
        except FileNotFoundError:
            return
        try:
            records = self.records()
            keep: list[Record] = []
            pending = {r["tx"] for r in self.pending(records)}
            for record in records:
                if record.get("tx") in pending:
                    keep.append(record)
            for path, archives in sorted(self.all_archives(records).items()):
                keep.extend({"rec": "archive", "path": path, "archive": a} for a in archives)
            from compactd.commit.durable import write_atomic

            write_atomic(self.path, b"".join(dumps_entry(r) + b"\n" for r in keep), mode=0o600)
        finally:
            os.close(fd)


@datarecord
class RecoveryReport:
    """What the start-up recovery finished, rolled back or rescued of commits a killed compactd left."""

    rolled_back: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rescued_lines: int = 0
    reattached_lines: int = 0  # rescued lines whose parent was gone, re-parented onto the active branch
    leaf_pointers: int = 0
    sealed: int = 0
    temps_removed: list[str] = field(default_factory=list)
    self_links_removed: list[str] = field(default_factory=list)
    locks_removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def recover(
    state_dir: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]] | None = None
) -> RecoveryReport:
    """Finish or roll back what the journal shows half done; clean stale temp files and self-links.

    Every command that commits calls this first (``run`` at start, ``once``, ``compact``): a commit must never
    be planned on a file whose late lines still sit in an archive. Concurrent calls (a ``once`` beside a running
    daemon) take turns on ``<state_dir>/recovery.lock``; an intent whose process is alive is left to it. Never
    raises for file-system errors: they are logged and listed in the report, and the intent stays pending so
    the next call tries again.
    """
    directory = Path(state_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with flocked(directory / RECOVERY_LOCK_NAME):
            return _recover(state_dir, roots)
    except OSError as exc:
        log.error("recovery failed in %s: %s", directory, os_reason(exc))
        return RecoveryReport(errors=[f"{directory}: {os_reason(exc)}"])


def _recover(
    state_dir: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]] | None
) -> RecoveryReport:
    journal = Journal(state_dir)
    report = RecoveryReport()
    try:
        records = journal.records()
    except OSError as exc:
        report.errors.append(f"{journal.path}: {os_reason(exc)}")
        log.error("cannot read the journal %s: %s", journal.path, os_reason(exc))
        records = []
    directories: set[str] = set()
    for record in records:
        path = record.get("path")
        if isinstance(path, str):
            directories.add(os.path.dirname(path))
    for root in roots or ():
        directories.add(os.path.abspath(os.fspath(root)))
    for intent in journal.pending(records):
        pid = intent.get("pid")
        path = intent.get("path")
        tx = intent.get("tx")
        if not isinstance(path, str) or not isinstance(tx, str):
            continue
        if isinstance(pid, int) and pid != os.getpid() and pid_alive(pid):
            report.skipped.append(path)  # a commit still running in another process
            continue
        try:
            if intent.get("op") == "rotate":
                status, extra = _recover_rotate(intent, report)
            else:
                status, extra = _recover_append(intent, report)
            journal.done(tx, status, path=path, **extra)
        except OSError as exc:
            message = f"{path}: {os_reason(exc)}"
            log.error("recovery failed for %s", message)
            report.errors.append(message)
            continue
        (report.rolled_back if status == "rolled_back" else report.finished).append(path)
        if isinstance(pid, int):
            _drop_dead_lock(path, pid, report)
    _drop_our_empty_locks(records, report)
    for directory in sorted(directories):
        _clean_directory(directory, report, journal)
    try:
        if journal.path.exists() and journal.path.stat().st_size > JOURNAL_COMPACT_BYTES:
            journal.compact()
    except OSError as exc:
        report.errors.append(f"{journal.path}: {os_reason(exc)}")
    if report.rolled_back or report.finished or report.temps_removed or report.self_links_removed:
        log.info(
            "recovery: rolled back %d, finished %d, rescued %d line(s), removed %d temp file(s) and %d "
            "self-link(s)",
            len(report.rolled_back),
            len(report.finished),
            report.rescued_lines,
            len(report.temps_removed),
            len(report.self_links_removed),
        )
    return report


def _same(st: os.stat_result | None, intent: Record) -> bool:
    return st is not None and (st.st_dev, st.st_ino) == (intent.get("dev"), intent.get("inode"))


def _recover_rotate(intent: Record, report: RecoveryReport) -> tuple[str, dict[str, Any]]:
    path = str(intent["path"])
    archive = intent.get("archive")
    tmp = intent.get("tmp")
    st_path = _lstat(path)
    st_archive = _lstat(archive) if isinstance(archive, str) else None
    st_tmp = _lstat(tmp) if isinstance(tmp, str) else None
    if (
        isinstance(tmp, str)
        and st_tmp is not None
        and stat.S_ISREG(st_tmp.st_mode)
        and (st_path is None or (st_tmp.st_dev, st_tmp.st_ino) != (st_path.st_dev, st_path.st_ino))
    ):
        os.unlink(tmp)
        report.temps_removed.append(tmp)
    if _same(st_path, intent):
        # Never renamed: the original is live and untouched; the archive is a second name for it.
        if isinstance(archive, str) and _same(st_archive, intent):
            os.unlink(archive)
            report.self_links_removed.append(archive)
        return "rolled_back", {}
    if st_path is None:
        log.warning("recovery: %s is missing (deleted by someone else); archive %s kept", path, archive)
        return "path_missing", ({"archive": archive} if _same(st_archive, intent) else {})
    if isinstance(archive, str) and _same(st_archive, intent):
        digest = intent.get("succ_hash")
        rescued, reattached, pointer = _rescue_from_archive(
            path,
            archive,
            int(intent.get("size", 0)),
            int(intent.get("succ_size", 0)),
            digest if isinstance(digest, str) else None,
        )
        report.rescued_lines += rescued
        report.reattached_lines += reattached
        report.leaf_pointers += pointer
        return "finished", {"archive": archive, "rescued": rescued}
    log.warning("recovery: %s was replaced by another program and its archive is gone", path)
    return "replaced", {}


def successor_digest(data: bytes) -> str:
    """What a rotate intent records of its successor, so recovery can tell whether the live file still is it."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _rescue_from_archive(
    path: str, archive: str, size: int, succ_size: int, succ_hash: str | None
) -> tuple[int, int, int]:
    """Append to ``path`` the complete lines the old inode got after ``size`` that ``path`` lacks, attached so
    that none dangles and all are on the active branch (:func:`plan_rescue`); (rescued, re-attached, leaf
    pointers)."""
    fd_old = os.open(archive, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        old = pread_all(fd_old, 0, os.fstat(fd_old).st_size)
    finally:
        os.close(fd_old)
    late = old[size : old.rfind(b"\n") + 1] if len(old) > size else b""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        live = pread_all(fd, 0, os.fstat(fd).st_size)
        complete = live[: live.rfind(b"\n") + 1]
        # Still the successor this rotation wrote (plus appends)? Then its offsets and parents hold; a file
        # rewritten since (compacted again before this recovery ran) gets the late lines at its leaf instead.
        direct = succ_hash is None or (
            len(complete) >= succ_size and successor_digest(complete[:succ_size]) == succ_hash
        )
        rescue = plan_rescue(late.split(b"\n"), complete, parse_transcript(complete), direct=direct)
        if rescue.lines:
            prefix = b"\n" if live and not live.endswith(b"\n") else b""
            write_all(fd, prefix + b"".join(rescue.lines))
            os.fsync(fd)
            log.warning(
                "recovery: rescued %d late line(s) from %s into %s (%d re-attached)",
                len(rescue.lines),
                archive,
                path,
                rescue.reattached,
            )
        if direct:
            # Even with nothing left to rescue: the killed commit may have rescued lines itself, after their
            # children, and died before re-pointing the leaf.
            pointer = _repoint_leaf(fd, succ_size, exclude=set())
        else:
            pointer = _point_leaf_at(fd, rescue.tip) if rescue.lines else 0
    finally:
        os.close(fd)
    return len(rescue.lines), rescue.reattached, pointer


def _append_leaf_pointer(fd: int, data: bytes, transcript: Transcript, target: str) -> int:
    """Append (and fsync) a leaf pointer to ``target`` after ``data``, the file's bytes as parsed."""
    entry = leaf_pointer_entry(fresh_id(set(transcript.by_id())), target)
    prefix = b"\n" if not data.endswith(b"\n") else b""
    write_all(fd, prefix + dumps_entry(entry) + b"\n")
    os.fsync(fd)
    log.warning("recovery: re-pointed the leaf to %s", target)
    return 1


def _point_leaf_at(fd: int, target: str | None) -> int:
    """Append a leaf pointer to ``target`` unless the file's last line already is it."""
    data = pread_all(fd, 0, os.fstat(fd).st_size)
    transcript = parse_transcript(data[: data.rfind(b"\n") + 1])
    if target is None or transcript.leaf_id == target:
        return 0
    return _append_leaf_pointer(fd, data, transcript, target)


def _repoint_leaf(fd: int, start: int, exclude: set[str], *, planned: bool = False) -> int:
    """Append a leaf pointer when the last line does not lead to the agent's newest line after ``start``.

    ``planned`` (append mode): the branch the commit planned on (the leaf at ``start``) competes too, depth
    counted from the root (see :func:`newest_tip`), as in the commit's own correction: a line forking below
    its tip does not cut the agent lines already on it off. Not for a rotation's successor, whose rescued
    lines may hang from the compaction root on purpose.
    """
    data = pread_all(fd, 0, os.fstat(fd).st_size)
    transcript = parse_transcript(data[: data.rfind(b"\n") + 1])
    if not transcript.entries:
        return 0
    agent: list[dict[str, Any]] = []
    anchor: str | None = None  # the leaf at ``start``: the tip of the branch the commit planned on
    for entry, (begin, _) in zip(transcript.entries, transcript.spans, strict=True):
        entry_id = entry.get("id")
        if begin < start:
            anchor = entry_id if planned and isinstance(entry_id, str) else anchor
        elif entry_id not in exclude:
            agent.append(entry)
    target = leaf_to_repoint(agent, transcript.entries[-1], transcript.by_id(), anchor)
    if target is None:
        return 0
    return _append_leaf_pointer(fd, data, transcript, target)


def _recover_append(intent: Record, report: RecoveryReport) -> tuple[str, dict[str, Any]]:
    path = str(intent["path"])
    st = _lstat(path)
    if not _same(st, intent):
        return "replaced", {}
    size = int(intent.get("size", 0))
    ours = {i for i in intent.get("ids") or [] if isinstance(i, str)}
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if now.st_size > size and os.pread(fd, 1, now.st_size - 1) != b"\n":
            write_all(
                fd, b"\n"
            )  # our killed write left a torn line: the agent's next append must not join it
            os.fsync(fd)
            report.sealed += 1
        pointer = _repoint_leaf(fd, size, exclude=ours, planned=True)
    finally:
        os.close(fd)
    report.leaf_pointers += pointer
    return "finished", {}


def _drop_dead_lock(path: str, pid: int, report: RecoveryReport) -> None:
    lock = lock_path_for(path)
    info = read_lock(lock)
    if info is None or info.pid != pid or lock_is_live(info):
        return
    _remove_lock(lock, info, report)


def _remove_lock(lock: Path, info: LockInfo, report: RecoveryReport) -> None:
    """Remove a dead process's lock file (if it is still the one read), noting the outcome in ``report``."""
    try:
        if remove_stale_lock(lock, info):
            report.locks_removed.append(str(lock))
    except OSError as exc:
        report.errors.append(f"{lock}: {os_reason(exc)}")


# An empty lock file whose mtime is this close to one of our "lock" records was created by that process.
_LOCK_RECORD_SLACK_SECONDS = 5.0


def _drop_our_empty_locks(records: list[Record], report: RecoveryReport) -> None:
    """Remove lock files our killed processes created but never filled in (see :meth:`Journal.locking`)."""
    latest: dict[str, Record] = {}
    for record in records:
        if record.get("rec") == "lock" and isinstance(record.get("path"), str):
            latest[record["path"]] = record
    for path, record in latest.items():
        pid, when = record.get("pid"), record.get("t")
        if (
            not isinstance(pid, int)
            or not isinstance(when, int | float)
            or pid == os.getpid()
            or pid_alive(pid)
        ):
            continue
        lock = lock_path_for(path)
        info = read_lock(lock)
        if info is None:
            continue
        ours = info.pid == pid or (
            info.pid is None
            and info.mtime is not None
            and abs(info.mtime - when) <= _LOCK_RECORD_SLACK_SECONDS
        )
        if ours:
            _remove_lock(lock, info, report)


def _in_use(journal: Journal) -> set[str]:
    """Temp files and archive links named by unfinished intents of live processes (commits running now).

    Between its hard link and its rename a rotation's archive *is* the live file: removing that "self-link"
    would leave the original's lines without a name once the rename lands.
    """
    names: set[str] = set()
    for intent in journal.pending(journal.records()):
        pid = intent.get("pid")
        if isinstance(pid, int) and (pid == os.getpid() or pid_alive(pid)):
            names.update(v for k in ("archive", "tmp") if isinstance(v := intent.get(k), str))
    return names


def _clean_directory(directory: str, report: RecoveryReport, journal: Journal) -> None:
    try:
        names = os.listdir(directory)
    except OSError:
        return
    # Read after the listing: an archive link listed above was announced in the journal before it was made.
    in_use = _in_use(journal)
    now = time.time()
    for name in names:
        full = os.path.join(directory, name)
        if full in in_use:
            continue
        try:
            if is_our_tmp(name):
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode):
                    continue
                pid = tmp_pid(name)
                alive = pid is not None and (pid == os.getpid() or pid_alive(pid))
                if not alive or now - st.st_mtime > STALE_TMP_SECONDS:
                    os.unlink(full)
                    report.temps_removed.append(full)
            elif ARCHIVE_INFIX in name:
                live = os.path.join(directory, name[: name.rindex(ARCHIVE_INFIX)])
                st_archive = os.lstat(full)
                st_live = _lstat(live)
                if (
                    st_live is not None
                    and stat.S_ISREG(st_archive.st_mode)
                    and (st_archive.st_dev, st_archive.st_ino) == (st_live.st_dev, st_live.st_ino)
                ):
                    os.unlink(full)
                    report.self_links_removed.append(full)
        except FileNotFoundError:
            continue
        except OSError as exc:
            report.errors.append(f"{full}: {os_reason(exc)}")


__all__ = ["Journal", "RecoveryReport", "recover"]
