"""OpenClaw session locks (liveness rules, our hold) and the single-instance flock, with real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from compactd.commit.locks import (
    INSTANCE_LOCK_NAME,
    AlreadyRunning,
    InstanceLock,
    LockInfo,
    SessionBusy,
    hold_session_lock,
    lock_is_live,
    lock_path_for,
    process_starttime,
    read_lock,
    remove_stale_lock,
    session_is_locked,
    stale_reasons,
)

REPO = Path(__file__).resolve().parent.parent
STALE = 30 * 60


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now_iso(minus_seconds: float = 0) -> str:
    return _iso(datetime.now(UTC) - timedelta(seconds=minus_seconds))


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "abc.jsonl"
    path.write_text('{"type":"session","version":3,"id":"abc"}\n')
    return path


def _write_lock(transcript: Path, body: object | bytes) -> Path:
    lock = lock_path_for(transcript)
    lock.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
    return lock


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real live process (blocked on its stdin) that is not us."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)


def _reaped_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


# --- paths and parsing ------------------------------------------------------------------------------------


def test_lock_path_is_next_to_the_real_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert lock_path_for(tmp_path / "link" / "s.jsonl") == real / "s.jsonl.lock"
    assert lock_path_for(real / "s.jsonl") == real / "s.jsonl.lock"


def test_lock_path_of_a_relative_transcript(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert lock_path_for("x.jsonl") == Path(os.path.realpath(tmp_path)) / "x.jsonl.lock"


def test_read_lock_missing_is_none(transcript: Path) -> None:
    assert read_lock(lock_path_for(transcript)) is None
    assert session_is_locked(transcript) is False


def test_read_lock_parses_openclaw_body(transcript: Path) -> None:
    created = datetime(2026, 3, 1, 9, 15, 2, 417000, tzinfo=UTC)
    # OpenClaw writes JSON.stringify(payload, null, 2).
    body = json.dumps({"pid": 4242, "createdAt": _iso(created), "starttime": 987654}, indent=2)
    lock = _write_lock(transcript, body.encode())
    info = read_lock(lock)
    assert info is not None
    assert (info.pid, info.starttime) == (4242, 987654)
    assert info.created_at == pytest.approx(created.timestamp())
    assert info.mtime == pytest.approx(os.stat(lock).st_mtime)
    assert info.body == body.encode()


@pytest.mark.parametrize(
    "body",
    [
        {"pid": True, "createdAt": "2026-03-01T09:15:02.417Z"},
        {"pid": 0, "createdAt": "2026-03-01T09:15:02.417Z"},
        {"pid": -3, "createdAt": "2026-03-01T09:15:02.417Z"},
        {"pid": "123", "createdAt": "2026-03-01T09:15:02.417Z"},
        {"pid": 1.5, "createdAt": "2026-03-01T09:15:02.417Z"},
    ],
)
def test_invalid_pid_is_missing(transcript: Path, body: dict[str, object]) -> None:
    info = read_lock(_write_lock(transcript, body))
    assert info is not None and info.pid is None and info.created_at is not None


@pytest.mark.parametrize("created", [None, 17, "yesterday", ""])
def test_invalid_created_at_is_missing(transcript: Path, created: object) -> None:
    info = read_lock(_write_lock(transcript, {"pid": os.getpid(), "createdAt": created}))
    assert info is not None and info.pid == os.getpid() and info.created_at is None


def test_process_starttime_reads_field_22() -> None:
    raw = Path("/proc/self/stat").read_text()
    expected = int(raw[raw.rfind(")") + 1 :].split()[19])
    assert process_starttime(os.getpid()) == expected
    assert process_starttime(_reaped_pid()) is None


# --- liveness ---------------------------------------------------------------------------------------------


def test_lock_of_our_own_pid_is_live(transcript: Path) -> None:
    _write_lock(
        transcript,
        {"pid": os.getpid(), "createdAt": _now_iso(), "starttime": process_starttime(os.getpid())},
    )
    assert session_is_locked(transcript) is True


def test_lock_of_a_live_child_is_live_until_it_exits(
    transcript: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    lock = _write_lock(
        transcript,
        {"pid": sleeper.pid, "createdAt": _now_iso(), "starttime": process_starttime(sleeper.pid)},
    )
    info = read_lock(lock)
    assert info is not None and lock_is_live(info, now=time.time())
    assert session_is_locked(transcript)
    assert sleeper.stdin is not None
    sleeper.stdin.close()
    sleeper.wait(timeout=30)
    assert not session_is_locked(transcript)
    assert stale_reasons(info, now=time.time()) == ["dead-pid"]


def test_lock_of_a_reaped_child_is_stale(transcript: Path) -> None:
    _write_lock(transcript, {"pid": _reaped_pid(), "createdAt": _now_iso()})
    assert session_is_locked(transcript) is False


def test_lock_of_a_zombie_is_stale(transcript: Path) -> None:
    """An exited process that its parent has not reaped yet holds nothing."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        os.kill(proc.pid, 0)  # the pid still answers
        _write_lock(transcript, {"pid": proc.pid, "createdAt": _now_iso()})
        assert session_is_locked(transcript) is False
    finally:
        proc.wait(timeout=30)


def test_starttime_mismatch_means_recycled_pid(transcript: Path, sleeper: subprocess.Popen[bytes]) -> None:
    real = process_starttime(sleeper.pid)
    assert real is not None
    lock = _write_lock(transcript, {"pid": sleeper.pid, "createdAt": _now_iso(), "starttime": real + 1})
    info = read_lock(lock)
    assert info is not None
    assert stale_reasons(info, now=time.time()) == ["recycled-pid"]
    assert not session_is_locked(transcript)


@pytest.mark.parametrize(("age", "live"), [(STALE - 60, True), (STALE + 60, False)])
def test_created_at_age(transcript: Path, age: float, live: bool) -> None:
    _write_lock(transcript, {"pid": os.getpid(), "createdAt": _now_iso(age)})
    assert session_is_locked(transcript) is live


def test_created_at_in_the_future_is_not_old(transcript: Path) -> None:
    _write_lock(transcript, {"pid": os.getpid(), "createdAt": _now_iso(-3600)})
    assert session_is_locked(transcript)


def test_stale_seconds_is_a_parameter(transcript: Path) -> None:
    info = read_lock(_write_lock(transcript, {"pid": os.getpid(), "createdAt": _now_iso(120)}))
    assert info is not None
    assert lock_is_live(info, now=time.time(), stale_seconds=300)
    assert not lock_is_live(info, now=time.time(), stale_seconds=60)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json at all",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'{"pid": 123',
        json.dumps({"createdAt": "x"}).encode(),
        json.dumps({"hello": "world"}).encode(),
    ],
)
@pytest.mark.parametrize(("mtime_age", "live"), [(5, True), (STALE + 60, False)])
def test_garbage_or_fieldless_body_is_judged_by_mtime(
    transcript: Path, body: bytes, mtime_age: float, live: bool
) -> None:
    lock = _write_lock(transcript, body)
    _age(lock, mtime_age)
    assert session_is_locked(transcript) is live


@pytest.mark.parametrize(("mtime_age", "live"), [(5, True), (STALE + 60, False)])
def test_live_pid_without_created_at_is_judged_by_mtime(
    transcript: Path, mtime_age: float, live: bool
) -> None:
    lock = _write_lock(transcript, {"pid": os.getpid()})
    _age(lock, mtime_age)
    assert session_is_locked(transcript) is live


def test_missing_pid_with_old_created_at_is_stale_even_with_fresh_mtime(transcript: Path) -> None:
    """OpenClaw reclaims when any reason other than missing fields applies (here: too-old)."""
    _write_lock(transcript, {"createdAt": _now_iso(STALE + 60)})
    assert not session_is_locked(transcript)


def test_dead_pid_without_created_at_is_stale_even_with_fresh_mtime(transcript: Path) -> None:
    _write_lock(transcript, {"pid": _reaped_pid()})
    assert not session_is_locked(transcript)


def test_unstatable_lock_counts_as_live() -> None:
    info = LockInfo(pid=None, created_at=None, starttime=None, mtime=None)
    assert lock_is_live(info, now=time.time())


def test_a_directory_in_place_of_the_lock_is_judged_by_mtime(transcript: Path) -> None:
    lock = lock_path_for(transcript)
    lock.mkdir()
    assert session_is_locked(transcript)
    _age(lock, STALE + 60)
    assert not session_is_locked(transcript)


def test_hold_refuses_an_old_directory_in_place_of_the_lock(transcript: Path) -> None:
    lock = lock_path_for(transcript)
    lock.mkdir()
    _age(lock, STALE + 60)
    with pytest.raises(SessionBusy), hold_session_lock(transcript):
        pytest.fail("must not enter")
    assert lock.is_dir()


# --- holding the lock -------------------------------------------------------------------------------------


def test_hold_creates_our_lock_and_removes_it(transcript: Path) -> None:
    old_umask = os.umask(0o077)
    try:
        with hold_session_lock(transcript) as lock:
            assert lock == lock_path_for(transcript)
            assert (os.stat(lock).st_mode & 0o777) == 0o644
            body = json.loads(lock.read_bytes())
            assert set(body) == {"pid", "createdAt", "starttime"}
            assert body["pid"] == os.getpid()
            assert body["starttime"] == process_starttime(os.getpid())
            created = datetime.fromisoformat(body["createdAt"])
            assert body["createdAt"].endswith("Z")
            assert abs(created.timestamp() - time.time()) < 60
            assert session_is_locked(transcript)
    finally:
        os.umask(old_umask)
    assert not lock.exists()
    assert not session_is_locked(transcript)


def test_hold_removes_the_lock_when_the_body_raises(transcript: Path) -> None:
    with pytest.raises(RuntimeError, match="inside"), hold_session_lock(transcript) as lock:
        raise RuntimeError("inside")
    assert not lock.exists()


def test_hold_refuses_a_live_lock_and_leaves_it(transcript: Path, sleeper: subprocess.Popen[bytes]) -> None:
    lock = _write_lock(
        transcript,
        {"pid": sleeper.pid, "createdAt": _now_iso(), "starttime": process_starttime(sleeper.pid)},
    )
    before = lock.read_bytes()
    with pytest.raises(SessionBusy) as excinfo, hold_session_lock(transcript):
        pytest.fail("must not enter")
    assert f"an agent (pid {sleeper.pid})" in str(excinfo.value)
    assert excinfo.value.lock_path == lock
    assert lock.read_bytes() == before


def test_hold_is_not_reentrant(transcript: Path) -> None:
    with hold_session_lock(transcript) as lock:
        with pytest.raises(SessionBusy), hold_session_lock(transcript):
            pytest.fail("must not enter")
        assert lock.exists()  # the refused inner attempt did not remove the outer lock
    assert not lock.exists()


@pytest.mark.parametrize("kind", ["dead-pid", "too-old", "old-garbage"])
def test_hold_reclaims_a_stale_lock(transcript: Path, kind: str) -> None:
    if kind == "dead-pid":
        lock = _write_lock(transcript, {"pid": _reaped_pid(), "createdAt": _now_iso()})
    elif kind == "too-old":
        lock = _write_lock(transcript, {"pid": os.getpid(), "createdAt": _now_iso(STALE + 60)})
    else:
        lock = _write_lock(transcript, b"garbage")
        _age(lock, STALE + 60)
    with hold_session_lock(transcript):
        assert json.loads(lock.read_bytes())["pid"] == os.getpid()
    assert not lock.exists()


def test_hold_refuses_fresh_garbage(transcript: Path) -> None:
    """An agent caught between its exclusive create and its write leaves an empty lock: it is live."""
    lock = _write_lock(transcript, b"")
    with pytest.raises(SessionBusy, match="pid unknown"), hold_session_lock(transcript):
        pytest.fail("must not enter")
    assert lock.exists()


def test_hold_never_removes_a_lock_it_does_not_own(
    transcript: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """If another process replaced our lock while we held it (it judged ours stale), its lock stays."""
    theirs = json.dumps({"pid": sleeper.pid, "createdAt": _now_iso()}).encode()
    with hold_session_lock(transcript) as lock:
        lock.unlink()
        lock.write_bytes(theirs)
    assert lock.read_bytes() == theirs


def test_hold_keeps_a_lock_rewritten_in_place(transcript: Path) -> None:
    with hold_session_lock(transcript) as lock:
        rewritten = json.dumps({"pid": 1, "createdAt": _now_iso()}).encode()
        lock.write_bytes(rewritten)  # same inode, someone else's body
    assert lock.read_bytes() == rewritten


def test_hold_does_not_remove_an_unrelated_lock_when_released_and_gone(transcript: Path) -> None:
    with hold_session_lock(transcript) as lock:
        lock.unlink()
    assert not lock.exists()


def test_remove_stale_lock_only_removes_what_was_seen(transcript: Path) -> None:
    lock = _write_lock(transcript, {"pid": _reaped_pid(), "createdAt": _now_iso()})
    seen = read_lock(lock)
    assert seen is not None and not lock_is_live(seen, now=time.time())
    # The agent releases and re-takes it between our judgement and our unlink.
    lock.unlink()
    _write_lock(transcript, {"pid": os.getpid(), "createdAt": _now_iso()})
    assert remove_stale_lock(lock, seen) is False
    assert json.loads(lock.read_bytes())["pid"] == os.getpid()
    # Unchanged: removed.
    again = read_lock(lock)
    assert again is not None
    assert remove_stale_lock(lock, again) is True
    assert not lock.exists()
    assert remove_stale_lock(lock, again) is False


def test_hold_blocks_a_second_process(transcript: Path) -> None:
    """A separate process sees our hold as a live lock, and can take it once we let go."""
    code = (
        "import sys\n"
        "from compactd.commit.locks import SessionBusy, hold_session_lock\n"
        "try:\n"
        "    with hold_session_lock(sys.argv[1]):\n"
        "        pass\n"
        "except SessionBusy as e:\n"
        "    print(e); raise SystemExit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "daemon")}
    with hold_session_lock(transcript):
        proc = subprocess.run(
            [sys.executable, "-c", code, str(transcript)], env=env, capture_output=True, text=True, timeout=60
        )
    assert proc.returncode == 3, proc.stderr
    assert f"(pid {os.getpid()})" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-c", code, str(transcript)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- single instance --------------------------------------------------------------------------------------

_CHILD_ACQUIRE = (
    "import sys\n"
    "from compactd.commit.locks import AlreadyRunning, InstanceLock\n"
    "try:\n"
    "    InstanceLock(sys.argv[1]).acquire()\n"
    "except AlreadyRunning as e:\n"
    "    print(e, file=sys.stderr); raise SystemExit(3)\n"
)


def _child_acquire(state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD_ACQUIRE, str(state_dir)],
        env={**os.environ, "PYTHONPATH": str(REPO / "daemon")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _held(lock: InstanceLock) -> bool:
    return lock.held  # a call, so mypy does not carry the narrowing from inside the with block


def test_second_instance_in_another_process_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    lock = InstanceLock(state)
    with lock:
        assert lock.held
        assert (state / INSTANCE_LOCK_NAME).read_text() == f"{os.getpid()}\n"
        proc = _child_acquire(state)
        assert proc.returncode == 3, proc.stderr
        assert f"pid {os.getpid()}" in proc.stderr
        assert str(state) in proc.stderr
        assert "already running" in proc.stderr
    assert not _held(lock)
    assert (state / INSTANCE_LOCK_NAME).exists()  # never removed: every instance locks the same inode
    proc = _child_acquire(state)
    assert proc.returncode == 0, proc.stderr


def test_instance_held_by_another_process_names_its_pid(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from compactd.commit.locks import InstanceLock\n"
        "lock = InstanceLock(sys.argv[1]); lock.acquire()\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "daemon")},
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "locked\n"
        with pytest.raises(AlreadyRunning) as excinfo:
            InstanceLock(tmp_path).acquire()
        assert excinfo.value.pid == child.pid
        assert excinfo.value.state_dir == tmp_path
        assert f"pid {child.pid}" in str(excinfo.value)
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    # The kernel dropped the flock with the process; the pid left in the file does not matter.
    with InstanceLock(tmp_path):
        pass


def test_second_instance_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with InstanceLock(tmp_path), pytest.raises(AlreadyRunning):
        InstanceLock(tmp_path).acquire()


def test_instance_lock_acquire_twice_on_one_object_is_an_error(tmp_path: Path) -> None:
    lock = InstanceLock(tmp_path)
    lock.acquire()
    try:
        with pytest.raises(RuntimeError):
            lock.acquire()
    finally:
        lock.release()
    lock.release()  # idempotent
    lock.acquire()
    lock.release()


def test_instance_lock_is_not_inherited_by_children(tmp_path: Path) -> None:
    """A hook child outliving compactd must not keep the state directory locked."""
    with InstanceLock(tmp_path) as lock:
        assert lock._fd is not None
        assert os.get_inheritable(lock._fd) is False
        child = subprocess.run(
            [sys.executable, "-c", "import os, sys; os.fstat(int(sys.argv[1]))", str(lock._fd)],
            close_fds=False,
            capture_output=True,
            timeout=60,
        )
        assert child.returncode != 0  # EBADF: the descriptor was closed on exec


def test_instance_lock_creates_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "a" / "b"
    with InstanceLock(state):
        assert (state / INSTANCE_LOCK_NAME).is_file()
