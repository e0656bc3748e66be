"""Commits that must not happen, or must stop cleanly: the original untouched, a reason given, nothing left
behind (issue 5, proof 5)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.commit import Journal, commit, recover, seal_torn_line
from compactd.commit.locks import lock_path_for

from tests.support.crash import TEST_HOOKS, archives_of, fork, make_entries, session_ops, temp_files

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

MODES = ("rotate", "append")
NOBODY = 65534


@dataclass(frozen=True)
class FileState:
    data: bytes
    inode: int
    mtime_ns: int
    mode: int

    @classmethod
    def of(cls, path: Path) -> FileState:
        st = path.stat()
        return cls(path.read_bytes(), st.st_ino, st.st_mtime_ns, st.st_mode)


def assert_untouched(path: Path, before: FileState) -> None:
    assert FileState.of(path) == before
    assert temp_files(path.parent) == []
    assert archives_of(path) == []
    assert not lock_path_for(path).exists()


@pytest.fixture
def session(pi: Pi, tmp_path: Path) -> Path:
    return Path(pi.write(tmp_path / "sessions", session_ops(6))["path"])


@contextlib.contextmanager
def hook(name: str, action: Callable[[], None]) -> Iterator[None]:
    TEST_HOOKS[name] = action
    try:
        yield
    finally:
        TEST_HOOKS.pop(name, None)


# --- permission and file-system errors ------------------------------------------------------------------------


def _commit_as_nobody(path: Path, state: Path, mode: str) -> dict[str, Any]:
    """Run the commit in a child that dropped root (root ignores directory permissions)."""
    entries = make_entries(path)
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            result = commit(path, entries, mode=mode, state_dir=state, idle_seconds=0)  # type: ignore[arg-type]
            os.write(write_end, json.dumps(result.as_json()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    result: dict[str, Any] = json.loads(payload)
    return result


@pytest.mark.parametrize("mode", MODES)
def test_unwritable_directory_gives_eacces(session: Path, mode: str) -> None:
    # A world-traversable tree outside pytest's private tmp dir, so the unprivileged child can reach it.
    root = Path(tempfile.mkdtemp(prefix="compactd-eacces-"))
    try:
        root.chmod(0o755)
        folder = root / "sessions"
        folder.mkdir()
        path = folder / session.name
        shutil.copyfile(session, path)
        path.chmod(0o644)
        folder.chmod(0o555)
        state = root / "state"
        state.mkdir(mode=0o777)
        state.chmod(0o777)
        before = FileState.of(path)
        result = _commit_as_nobody(path, state, mode)
        assert not result["committed"]
        assert result["reason"].startswith("EACCES"), result["reason"]
        assert_untouched(path, before)
    finally:
        (root / "sessions").chmod(0o755)
        shutil.rmtree(root)


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("mode", MODES)
def test_read_only_file_system_gives_erofs(session: Path, tmp_path: Path, mode: str) -> None:
    with tmpfs(tmp_path / "mnt", "1m") as mnt:
        path = mnt / session.name
        shutil.copyfile(session, path)
        entries = make_entries(path)
        remount = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True, check=False)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        before = FileState.of(path)
        result = commit(path, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
        assert not result.committed
        assert result.reason is not None and result.reason.startswith("EROFS"), result.reason
        assert_untouched(path, before)


@pytest.mark.parametrize("mode", MODES)
def test_disk_full_gives_enospc_and_leaves_the_original(session: Path, tmp_path: Path, mode: str) -> None:
    with tmpfs(tmp_path / "mnt", "256k") as mnt:
        path = mnt / session.name
        shutil.copyfile(session, path)
        # A summary larger than what is left, so the write runs out of space mid-way.
        entries = make_entries(path, summary="## Decisions\n" + "- a decision\n" * 2000)
        stats = os.statvfs(mnt)
        free = stats.f_bavail * stats.f_frsize
        (mnt / "filler").write_bytes(b"\0" * (free - 2 * stats.f_frsize))  # the lock file gets a page
        before = FileState.of(path)
        result = commit(path, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
        assert not result.committed
        assert result.reason is not None
        assert result.reason.startswith("ENOSPC") or result.reason.startswith("short write"), result.reason
        assert_untouched(path, before)
        records = Journal(tmp_path / "state").records()
        assert [r["status"] for r in records if r.get("rec") == "done"] == ["abandoned"]
        assert recover(tmp_path / "state").errors == []
        assert_untouched(path, before)


# --- the file changes under us ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "point"),
    [
        ("rotate", "rotate_after_intent"),
        ("rotate", "rotate_after_tmp_write"),
        ("rotate", "rotate_before_rename"),
        ("append", "append_after_intent"),
    ],
)
def test_file_replaced_mid_commit(pi: Pi, session: Path, tmp_path: Path, mode: str, point: str) -> None:
    other = Path(pi.write(tmp_path / "other", session_ops(3, side_branch=False))["path"])
    replacement = other.read_bytes()
    entries = make_entries(session)
    with hook(point, lambda: os.replace(other, session)):
        result = commit(session, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
    assert not result.committed and result.reason == "file replaced mid-commit"
    assert session.read_bytes() == replacement  # whatever replaced it is left as it is
    assert temp_files(session.parent) == [] and archives_of(session) == []
    assert not lock_path_for(session).exists()


@pytest.mark.parametrize(
    ("mode", "point"),
    [("rotate", "rotate_after_intent"), ("rotate", "rotate_after_carry"), ("append", "append_after_intent")],
)
def test_file_deleted_mid_commit(session: Path, tmp_path: Path, mode: str, point: str) -> None:
    entries = make_entries(session)
    with hook(point, session.unlink):
        result = commit(session, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
    assert not result.committed and result.reason == "file deleted mid-commit"
    assert not session.exists()  # never resurrected: whoever deleted it meant it
    assert temp_files(session.parent) == [] and archives_of(session) == []


def test_file_shrunk_since_the_plan(session: Path, tmp_path: Path) -> None:
    entries = make_entries(session)
    entries.snapshot_size += 10_000
    before = FileState.of(session)
    for mode in MODES:
        result = commit(session, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
        assert not result.committed and result.reason == "file shrank since the plan was made"
    assert_untouched(session, before)


# --- locks and idleness ---------------------------------------------------------------------------------------


def _write_lock(path: Path, pid: int, created: datetime) -> Path:
    lock = lock_path_for(path)
    stamp = created.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    lock.write_text(json.dumps({"pid": pid, "createdAt": stamp}))
    return lock


@pytest.mark.parametrize("mode", MODES)
def test_live_openclaw_lock_blocks_even_with_force(session: Path, tmp_path: Path, mode: str) -> None:
    lock = _write_lock(session, os.getpid(), datetime.now(UTC))
    body = lock.read_bytes()
    before = FileState.of(session)
    for force in (False, True):
        result = commit(
            session,
            make_entries(session),
            mode=mode,  # type: ignore[arg-type]
            state_dir=tmp_path / "state",
            idle_seconds=0,
            force=force,
        )
        assert not result.committed
        assert result.reason is not None and result.reason.startswith("locked"), result.reason
    assert lock.read_bytes() == body
    lock.unlink()
    assert_untouched(session, before)


def test_stale_lock_is_reclaimed_and_ours_is_released(session: Path, tmp_path: Path) -> None:
    _write_lock(session, os.getpid(), datetime.now(UTC) - timedelta(hours=2))  # older than 30 minutes
    result = commit(
        session, make_entries(session), mode="rotate", state_dir=tmp_path / "state", idle_seconds=0
    )
    assert result.committed, result.reason
    assert not lock_path_for(session).exists()


@pytest.mark.parametrize("mode", MODES)
def test_not_idle_is_not_touched_unless_forced(session: Path, tmp_path: Path, mode: str) -> None:
    before = FileState.of(session)
    entries = make_entries(session)
    result = commit(session, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=3600)  # type: ignore[arg-type]
    assert not result.committed and result.reason == "not idle"
    assert_untouched(session, before)
    # The clock given decides: an hour later the same file is idle.
    later = commit(
        session,
        entries,
        mode=mode,  # type: ignore[arg-type]
        state_dir=tmp_path / "state",
        idle_seconds=3600,
        now=time.time() + 3601,
    )
    assert later.committed, later.reason


def test_force_skips_the_idle_check(session: Path, tmp_path: Path) -> None:
    result = commit(
        session,
        make_entries(session),
        mode="rotate",
        state_dir=tmp_path / "state",
        idle_seconds=3600,
        force=True,
    )
    assert result.committed, result.reason


# --- torn lines -------------------------------------------------------------------------------------------------

TORN = b'{"type":"message","id":"deadbeef","parentId":"x","timestamp":"2026-01-'


def _tear(path: Path, age: float) -> None:
    with open(path, "ab") as f:
        f.write(TORN)
    old = time.time() - age
    os.utime(path, (old, old))


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_torn_line_of_an_idle_file_is_sealed_not_truncated(pi: Pi, session: Path, tmp_path: Path) -> None:
    _tear(session, age=120)
    control = tmp_path / "control" / session.name
    control.parent.mkdir()
    shutil.copyfile(session, control)
    before = FileState.of(session)
    assert seal_torn_line(session, idle_seconds=30)
    after = FileState.of(session)
    assert after.data == before.data + b"\n"  # one newline appended, nothing removed
    assert after.mtime_ns == before.mtime_ns and after.inode == before.inode
    assert not seal_torn_line(session, idle_seconds=30)  # already sealed
    # pi's next append now lands on a line of its own; without the seal it is swallowed with the torn bytes.
    pi.append_exchange(session, "question after the crash", "answer")
    pi.append_exchange(control, "question after the crash", "answer")
    sealed, unsealed = pi.load_many([session, control])
    texts = [m["content"][0]["text"] for m in sealed["messages"][-2:]]
    assert texts == ["question after the crash", "answer"]
    assert "question after the crash" not in json.dumps(unsealed["messages"])


def test_torn_line_of_a_busy_file_is_left_alone(session: Path) -> None:
    _tear(session, age=0)
    before = FileState.of(session)
    assert not seal_torn_line(session, idle_seconds=30)
    assert FileState.of(session) == before


@pytest.mark.parametrize("mode", MODES)
def test_commit_seals_a_torn_line_first(pi: Pi, session: Path, tmp_path: Path, mode: str) -> None:
    entries = make_entries(session)
    _tear(session, age=120)
    before = session.read_bytes()
    result = commit(session, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=30)  # type: ignore[arg-type]
    assert result.committed and result.sealed, result.reason
    if mode == "rotate":
        assert result.archive is not None
        assert Path(result.archive).read_bytes() == before + b"\n"  # the torn bytes stay, in the archive
    else:
        assert session.read_bytes().startswith(before + b"\n")
    pi.append_exchange(session, "next", "ok")
    loaded = pi.load(session)
    assert loaded["messages"][0]["role"] == "compactionSummary"
    assert [m["content"][0]["text"] for m in loaded["messages"][-2:]] == ["next", "ok"]


def test_append_waits_out_a_line_being_written_then_gives_up(session: Path, tmp_path: Path) -> None:
    """A torn line in a file that is not idle (force) may be a write in progress: append mode does not write
    after it; it gives up when the line does not complete."""
    entries = make_entries(session)
    _tear(session, age=0)
    before = FileState.of(session)
    result = commit(
        session, entries, mode="append", state_dir=tmp_path / "state", idle_seconds=30, force=True
    )
    assert not result.committed and result.reason is not None and result.reason.startswith("torn last line")
    assert FileState.of(session) == before


def test_rotate_with_force_leaves_an_unfinished_line_in_the_archive(session: Path, tmp_path: Path) -> None:
    entries = make_entries(session)
    _tear(session, age=0)
    before = session.read_bytes()
    result = commit(
        session,
        entries,
        mode="rotate",
        state_dir=tmp_path / "state",
        idle_seconds=30,
        force=True,
        grace_seconds=0.05,
    )
    assert result.committed, result.reason
    assert result.archive is not None and Path(result.archive).read_bytes() == before
    assert session.read_bytes().endswith(b"\n") and TORN not in session.read_bytes()


# --- paths ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_symlinked_path_is_refused(session: Path, tmp_path: Path, mode: str) -> None:
    link = session.parent / "link.jsonl"
    link.symlink_to(session)
    before = FileState.of(session)
    result = commit(link, make_entries(session), mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
    assert not result.committed and result.reason is not None and "symlink" in result.reason
    assert FileState.of(session) == before and link.is_symlink()
    _tear(session, age=120)
    assert not seal_torn_line(link, idle_seconds=30)


def test_a_directory_or_missing_path_is_refused(tmp_path: Path) -> None:
    entries = make_entries_stub()
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    assert commit(folder, entries, mode="rotate", state_dir=tmp_path / "st", idle_seconds=0).reason == (
        "path is not a regular file"
    )
    assert commit(
        tmp_path / "none.jsonl", entries, mode="rotate", state_dir=tmp_path / "st", idle_seconds=0
    ).reason == ("file does not exist")


def make_entries_stub() -> Any:
    from compactd.commit import CompactionEntries

    return CompactionEntries({"type": "compaction", "id": "00000001", "firstKeptEntryId": "x"}, None, 0, "x")


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_rotation_keeps_a_foreign_owner(session: Path, tmp_path: Path) -> None:
    os.chown(session, NOBODY, NOBODY)
    result = commit(
        session, make_entries(session), mode="rotate", state_dir=tmp_path / "state", idle_seconds=0
    )
    assert result.committed, result.reason
    st = session.stat()
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)


def test_append_refuses_an_old_format_file(tmp_path: Path) -> None:
    fixture = (
        Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real" / "pi-large-session.v1.jsonl"
    )
    if not fixture.exists():
        pytest.skip("the real pi fixtures are not on this machine")
    path = tmp_path / "s" / "old.jsonl"
    path.parent.mkdir()
    shutil.copyfile(fixture, path)
    path.chmod(0o644)
    before = FileState.of(path)
    result = commit(path, make_entries(path), mode="append", state_dir=tmp_path / "state", idle_seconds=0)
    assert not result.committed and result.reason is not None and "version 3" in result.reason
    assert FileState.of(path) == before
