"""Restart in O(changed bytes): a tracker resumed from a saved snapshot reads only what follows the cursor, ends
with exactly the ledger of a cold read, and trusts a snapshot only for the very file it describes."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from compactd import __version__
from compactd.core.ledger import SessionLedger
from compactd.sources.files.resume import RESUME_DIR, SHARDS, Snapshot, SnapshotStore
from compactd.sources.files.tail import Change
from compactd.sources.files.tracker import SessionTracker
from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli import REPO
from tests.support.properties import ON_DISK
from tests.test_ledger import Session, header, line, one_go, session_bytes
from tests.test_service_e2e import wait_for


@dataclass
class Held:
    """What the store saves from: anything with a ``tracker`` (the service's ``Session``)."""

    tracker: SessionTracker


def save(state: Path, trackers: list[SessionTracker]) -> None:
    store = SnapshotStore(state)
    store.load()
    store.save({t.path: Held(t) for t in trackers})


def restarted(state: Path, path: Path) -> SessionTracker:
    """A tracker as a new process makes it: from the snapshots on disk."""
    store = SnapshotStore(state)
    store.load()
    return SessionTracker(str(path), resume=store.take(str(path)))


def transcript(n_turns: int, text: str = "x" * 300) -> bytes:
    s = Session()
    out = [line(header()), line(s.entry("model_change", provider="anthropic", modelId="claude-sonnet-4-5"))]
    for i in range(n_turns):
        out.append(line(s.user(f"{text} {i}")))
        out.append(line(s.assistant(f"answer {i}", total=1000 + i)))
    return b"".join(out)


def cold(path: Path) -> SessionLedger:
    data = path.read_bytes()
    return SessionLedger.from_bytes(data[: data.rfind(b"\n") + 1])


def started(tmp_path: Path, data: bytes) -> tuple[Path, Path, SessionTracker]:
    path, state = tmp_path / "s.jsonl", tmp_path / "state"
    path.write_bytes(data)
    tracker = SessionTracker(str(path))
    assert tracker.refresh().change is Change.RELOADED
    save(state, [tracker])
    return path, state, tracker


# ------------------------------------------------------------------------------------------------------------
# Resuming


def test_an_untouched_file_is_resumed_without_reading_it(tmp_path: Path) -> None:
    path, state, before = started(tmp_path, transcript(40))
    tracker = restarted(state, path)
    assert tracker.refresh().change is Change.RESUMED
    assert tracker.reloads == 0
    assert tracker.cursor.bytes_read == 0  # same inode, size, mtime and ctime: not even opened
    assert tracker.ledger is not None and before.ledger is not None
    assert tracker.ledger.to_snapshot() == before.ledger.to_snapshot() == cold(path).to_snapshot()


def test_bytes_appended_while_down_are_the_only_ones_parsed(tmp_path: Path) -> None:
    data = transcript(40)
    path, state, _ = started(tmp_path, data)
    s = Session()
    s.counter, s.leaf = 81, "id0081"
    extra = line(s.user("while we were down")) + line(s.assistant("still here", total=5555))
    with open(path, "ab") as handle:
        handle.write(extra)
    tracker = restarted(state, path)
    assert tracker.refresh().change is Change.APPENDED
    assert tracker.reloads == 0
    assert tracker.cursor.bytes_read == 1024 + 4096 + len(
        extra
    )  # the check's head and tail, then the new lines
    assert tracker.ledger is not None
    assert tracker.ledger.figures() == one_go(path).figures()
    assert tracker.ledger.anchor_tokens == 5555


def test_a_touched_file_is_checked_by_its_hash_and_resumed(tmp_path: Path) -> None:
    path, state, before = started(tmp_path, transcript(40))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # newer mtime, new ctime, same bytes
    tracker = restarted(state, path)
    assert tracker.refresh().change is Change.RESUMED
    assert tracker.reloads == 0 and tracker.cursor.bytes_read == 1024 + 4096
    assert tracker.ledger is not None and before.ledger is not None
    assert tracker.ledger.to_snapshot() == before.ledger.to_snapshot()
    save(state, [tracker])  # its new times are saved: the next start need not hash
    again = restarted(state, path)
    assert again.refresh().change is Change.RESUMED and again.cursor.bytes_read == 0


def test_a_torn_last_line_is_reread_after_the_cursor(tmp_path: Path) -> None:
    data = transcript(10)
    s = Session()
    s.counter, s.leaf = 21, "id0021"  # transcript(10)'s last entry
    whole = data + line(s.user("torn at first"))
    path, state, _ = started(tmp_path, whole[:-30])  # the cursor stops before the torn line
    with open(path, "ab") as handle:
        handle.write(whole[-30:])
    tracker = restarted(state, path)
    tracker.refresh()
    assert tracker.reloads == 0
    assert tracker.ledger is not None and tracker.ledger.to_snapshot() == cold(path).to_snapshot()


def test_save_writes_only_the_shards_whose_sessions_changed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    trackers = []
    for i in range(20):
        path = tmp_path / f"s{i}.jsonl"
        path.write_bytes(transcript(2))
        trackers.append(SessionTracker(str(path)))
        trackers[-1].refresh()
    store = SnapshotStore(state)
    store.load()
    held = {t.path: Held(t) for t in trackers}
    assert store.save(held) == len({store.shard(t.path) for t in trackers})
    assert store.save(held) == 0  # nothing changed: nothing written
    trackers[3].refresh()  # unchanged file: same snapshot
    assert store.save(held) == 0
    with open(trackers[3].path, "ab") as handle:
        s = Session()
        s.counter, s.leaf = 5, "id0005"
        handle.write(line(s.user("more")))
    trackers[3].refresh()
    assert store.save(held) == 1
    os.unlink(trackers[5].path)
    del held[trackers[5].path]
    assert store.save(held) == 1  # its record goes
    names = sorted(p.name for p in (state / RESUME_DIR).iterdir())
    assert all(n.endswith(".json") and not n.startswith(".") for n in names) and len(names) <= SHARDS


def test_a_store_that_was_not_loaded_writes_nothing(tmp_path: Path) -> None:
    path, state = tmp_path / "s.jsonl", tmp_path / "state"
    path.write_bytes(transcript(2))
    tracker = SessionTracker(str(path))
    tracker.refresh()
    assert SnapshotStore(state).save({tracker.path: Held(tracker)}) == 0  # `once` over a few sessions
    assert not (state / RESUME_DIR).exists()


# ------------------------------------------------------------------------------------------------------------
# Every reason a snapshot is not trusted: a full read, and a debug line saying why


def shard_file(state: Path, path: Path) -> Path:
    return state / RESUME_DIR / f"{SnapshotStore(state).shard(str(path)):02x}.json"


def edit_record(state: Path, path: Path, index: int, value: object) -> None:
    shard = shard_file(state, path)
    doc = orjson.loads(shard.read_bytes())
    doc["sessions"][str(path)][index] = value
    shard.write_bytes(orjson.dumps(doc))


def _replace(path: Path) -> None:
    tmp = path.with_name("copy.jsonl")
    tmp.write_bytes(path.read_bytes())
    os.replace(tmp, path)  # same bytes, another inode (made while the old one exists: no reuse)


def _shrink(path: Path) -> None:
    data = path.read_bytes()
    os.truncate(path, len(data) - 100)


def _older(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # restored with an old mtime


def _rewrite_tail(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-20] = ord("y") if data[-20] != ord("y") else ord("z")
    with open(path, "r+b") as handle:  # in place: same inode, same size
        handle.write(bytes(data))


def _rewrite_head(path: Path) -> None:
    data = path.read_bytes().replace(b"sess-ledger", b"sess-other!", 1)
    with open(path, "r+b") as handle:
        handle.write(data)


def _symlink(path: Path) -> None:
    other = path.with_name("other.jsonl")
    os.replace(path, other)
    os.symlink(other, path)  # the very same inode, reached through a link


def _device(state: Path, path: Path) -> None:
    edit_record(state, path, 0, path.stat().st_dev + 1)


def _version(state: Path, path: Path) -> None:
    shard = shard_file(state, path)
    doc = orjson.loads(shard.read_bytes())
    doc["compactd"] = "0.0.0-other"
    shard.write_bytes(orjson.dumps(doc))


def _format(state: Path, path: Path) -> None:
    shard = shard_file(state, path)
    doc = orjson.loads(shard.read_bytes())
    doc["format"] = 999
    shard.write_bytes(orjson.dumps(doc))


def _corrupt_shard(state: Path, path: Path) -> None:
    shard = shard_file(state, path)
    shard.write_bytes(shard.read_bytes()[:-7])


def _corrupt_record(state: Path, path: Path) -> None:
    edit_record(state, path, 6, "not hex")


def _corrupt_ledger(state: Path, path: Path) -> None:
    shard = shard_file(state, path)
    doc = orjson.loads(shard.read_bytes())
    doc["sessions"][str(path)][7][4] = "many"  # anchor_tokens
    shard.write_bytes(orjson.dumps(doc))


def _ledger_version(state: Path, path: Path) -> None:
    shard = shard_file(state, path)
    doc = orjson.loads(shard.read_bytes())
    doc["sessions"][str(path)][7][0] = 0
    shard.write_bytes(orjson.dumps(doc))


FILE_CHANGES = [
    ("inode differs", _replace),
    ("smaller than the cursor", _shrink),
    ("mtime older", _older),
    ("the first 1 KB or the 4 KB before the cursor differ", _rewrite_tail),
    ("the first 1 KB or the 4 KB before the cursor differ", _rewrite_head),
    ("not a regular file", _symlink),
]
SNAPSHOT_CHANGES = [
    ("device differs", _device),
    ("no snapshot", _version),  # the whole shard is set aside
    ("no snapshot", _format),
    ("no snapshot", _corrupt_shard),
    ("corrupt snapshot: malformed tail hash", _corrupt_record),
    ("corrupt snapshot: not an integer", _corrupt_ledger),
    ("corrupt snapshot: not a ledger snapshot of this version", _ledger_version),
]


@pytest.mark.parametrize(
    ("reason", "change", "of_file"),
    [pytest.param(r, f, True, id=f.__name__) for r, f in FILE_CHANGES]
    + [pytest.param(r, f, False, id=f.__name__) for r, f in SNAPSHOT_CHANGES],
)
def test_a_snapshot_that_does_not_match_means_a_full_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, reason: str, change: Any, of_file: bool
) -> None:
    path, state, _ = started(tmp_path, transcript(40))
    if of_file:
        change(path)
    else:
        change(state, path)
    with caplog.at_level(logging.DEBUG, logger="compactd"):
        tracker = restarted(state, path)
        update = tracker.refresh()
    messages = [r.getMessage() for r in caplog.records]
    assert any("resume=no" in m and reason in m for m in messages), messages
    assert not any("resume=yes" in m for m in messages)
    if reason == "not a regular file":  # a symlink now: never trusted, never followed
        assert update.change is Change.MISSING and tracker.ledger is None
        return
    assert update.change is Change.RELOADED and tracker.reloads == 1
    assert tracker.ledger is not None and tracker.ledger.to_snapshot() == cold(path).to_snapshot()


def test_a_snapshot_is_taken_for_its_own_path_only(tmp_path: Path) -> None:
    path, state, _ = started(tmp_path, transcript(40))
    twin = tmp_path / "twin.jsonl"
    os.link(path, twin)  # the same inode under another name has no snapshot of its own
    tracker = restarted(state, twin)
    assert tracker.resume is None
    assert tracker.refresh().change is Change.RELOADED


# ------------------------------------------------------------------------------------------------------------
# Property: resumed from a snapshot + the remaining bytes == a cold read of the final file

_names = itertools.count()


_DOWN = st.sampled_from(["append", "append", "truncate", "rewrite", "replace"])
_UP = st.sampled_from(["append", "append", "refresh"])


@st.composite
def histories(draw: st.DrawFn) -> list[list[tuple[str, int]]]:
    """Runs of the daemon: while up, the agent appends (and the tracker refreshes now and then); while down,
    the file may be appended to, truncated, rewritten in place or replaced by another file."""
    cycles = []
    for cycle in range(draw(st.integers(1, 4))):
        ops = _UP if cycle % 2 == 0 else _DOWN
        cycles.append([(draw(ops), draw(st.integers(0, 1 << 16))) for _ in range(draw(st.integers(0, 8)))])
    return cycles


def _other_session(blob: bytes, n: int) -> bytes:
    """Another session's bytes: its own header id, as any other session has."""
    return blob.replace(b'"sess-ledger"', f'"sess-{n:06d}"'.encode(), 1)


@pytest.mark.slow
@ON_DISK
@given(data=st.data())
def test_resumed_ledger_equals_a_cold_read(tmp_path: Path, data: st.DataObject) -> None:
    run = next(_names)
    path, state = tmp_path / f"p{run}.jsonl", tmp_path / f"state{run}"
    stream = data.draw(session_bytes(), label="session")
    written = 0
    path.write_bytes(b"")
    tracker = SessionTracker(str(path))
    for index, cycle in enumerate(data.draw(histories(), label="history")):
        up = index % 2 == 0
        if up:
            tracker = restarted(state, path)
        for op, n in cycle:
            if op == "append":  # the agent's next bytes, up to any point (a torn line too)
                end = min(len(stream), written + 1 + n % 600)
                with open(path, "ab") as handle:
                    handle.write(stream[written:end])
                written = end
            elif op == "refresh":
                tracker.refresh()
            elif op == "truncate":
                os.truncate(path, n % (path.stat().st_size + 1))
            elif op == "rewrite":  # in place, same inode: another session, up to a random point
                other = _other_session(data.draw(session_bytes(), label="rewritten with"), n)
                with open(path, "r+b") as handle:
                    handle.truncate(0)
                    handle.write(other[: n % (len(other) + 1)])
            else:  # another file renamed over it (an editor's or a restore's atomic save)
                other = _other_session(data.draw(session_bytes(), label="replaced by"), n)
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(other[: n % (len(other) + 1)])
                os.replace(tmp, path)
        if up:  # stopping: the last refresh may or may not have seen the last appends
            if data.draw(st.booleans(), label="refresh before stopping"):
                tracker.refresh()
            save(state, [tracker])
    with open(path, "ab") as handle:
        handle.write(stream[written:])
    if not path.read_bytes().endswith(b"\n"):
        with open(path, "ab") as handle:
            handle.write(b"\n")
    tracker = restarted(state, path)
    tracker.refresh()
    assert tracker.ledger is not None
    assert tracker.ledger.figures() == cold(path).figures() == one_go(path).figures()


# ------------------------------------------------------------------------------------------------------------
# The service: `compactd run` resumes every unchanged session at start


def _run(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--config", str(config), "--log-level", "debug"],
            cwd=REPO,
            stdout=out,
            stderr=out,
            env={k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY")},
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.slow  # a daemon; the store's resume rules stay in the inner loop
def test_compactd_run_resumes_unchanged_sessions_and_reads_the_changed_one(tmp_path: Path) -> None:
    root, state = tmp_path / "agents" / "main" / "sessions", tmp_path / "state"
    root.mkdir(parents=True)
    paths = [root / f"s{i}.jsonl" for i in range(5)]
    for path in paths:
        path.write_bytes(transcript(20))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(root)]},
                "service": {"status_refresh_seconds": 0.2},
                "state_dir": str(state),
            }
        )
    )
    log = tmp_path / "compactd.log"
    proc = _run(config, log)
    try:
        wait_for(lambda: "action=ready" in log.read_text(), 60, "the first start", proc)
    finally:
        _stop(proc)
    assert list((state / RESUME_DIR).glob("*.json"))
    s = Session()
    s.counter, s.leaf = 41, "id0041"
    with open(paths[0], "ab") as handle:
        handle.write(line(s.user("while down")) + line(s.assistant("back", total=7777)))
    first = len(log.read_text())
    proc = _run(config, log)
    try:
        wait_for(lambda: "action=ready" in log.read_text()[first:], 60, "the second start", proc)
    finally:
        _stop(proc)
    second = log.read_text()[first:]
    resumed = {p for p in paths if f"session={p} resume=yes" in second}
    assert resumed == set(paths), second
    sessions = orjson.loads((state / "sessions.json").read_bytes())["sessions"]
    assert sessions[str(paths[0])]["tokens"] == one_go(paths[0]).planning_tokens
    assert __version__  # the shards name the version that wrote them
    shard = orjson.loads(shard_file(state, paths[0]).read_bytes())
    assert shard["compactd"] == __version__
    assert Snapshot.from_record(shard["sessions"][str(paths[0])]).offset == paths[0].stat().st_size


def test_a_shard_whose_write_failed_is_written_at_the_next_save(tmp_path: Path) -> None:
    path, state = tmp_path / "s.jsonl", tmp_path / "state"
    path.write_bytes(transcript(2))
    tracker = SessionTracker(str(path))
    tracker.refresh()
    state.mkdir()
    (state / RESUME_DIR).write_bytes(b"")  # in the way: the directory cannot be made
    store = SnapshotStore(state)
    store.load()
    with pytest.raises(OSError):
        store.save({tracker.path: Held(tracker)})
    (state / RESUME_DIR).unlink()
    assert store.save({tracker.path: Held(tracker)}) == 1  # nothing changed since, and still written
    assert restarted(state, path).refresh().change is Change.RESUMED


@pytest.mark.slow  # the bench as a process
def test_bench_restart_smoke() -> None:
    from bench import bench_restart

    result = bench_restart.main(["--smoke", "--json"])
    assert result["sessions"] == 20 and len(result["warm_seconds"]) == len(result["cold_seconds"]) == 1
    assert result["snapshot_bytes"] > 0


def test_load_removes_the_temp_files_of_a_dead_writer_only(tmp_path: Path) -> None:
    folder = tmp_path / "state" / RESUME_DIR
    folder.mkdir(parents=True)
    dead, live = folder / ".05.json.999999999.abcd1234.tmp", folder / f".06.json.{os.getpid()}.abcd1234.tmp"
    dead.write_bytes(b"{")
    live.write_bytes(b"{")
    SnapshotStore(tmp_path / "state").load()
    assert not dead.exists() and live.exists()


def test_start_up_reads_each_file_once_and_still_sees_one_created_right_after(tmp_path: Path) -> None:
    """The start-up scans each root once (its watcher is in place before the read, not started after it to
    scan again), and a file created between that read and the first rescan is reported by the watcher."""
    import anyio
    from compactd.config import load_config
    from compactd.service import Service

    root, state = tmp_path / "sessions", tmp_path / "state"
    root.mkdir()
    for i in range(3):
        (root / f"s{i}.jsonl").write_bytes(transcript(2))
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(root)]},
                "state_dir": str(state),
                "memory_flush": {"enabled": False},
                "service": {"rescan_seconds": 3600},
            }
        )
    )
    service = Service(load_config(str(config_path)))
    files = service.source("jsonl")
    refreshed: list[str] = []
    refresh, discover = files.refresh, files.discover
    late = root / "late.jsonl"

    def counted(path: str, **kwargs: Any) -> None:
        refreshed.append(path)
        refresh(path, **kwargs)

    def discover_then_create(**kwargs: Any) -> set[str]:
        seen = discover(**kwargs)
        late.write_bytes(transcript(2))  # after the start-up read: only the watcher can report it
        return seen

    files.refresh = counted  # type: ignore[method-assign]
    files.discover = discover_then_create  # type: ignore[method-assign]

    async def until_late_is_watched() -> None:
        with anyio.fail_after(30):
            while str(late) not in files.sessions:
                await anyio.sleep(0.01)  # polling the condition, bounded by the deadline

    assert anyio.run(service.serve, until_late_is_watched) == 0
    early = [p for p in refreshed if p != str(late)]
    assert sorted(early) == [str(root / f"s{i}.jsonl") for i in range(3)]  # each exactly once


def _in_process(
    tmp_path: Path, window: int, *, roots: tuple[str, ...] = ("sessions",), only: str = ""
) -> Any:
    """A prepared and started-up ``Service`` (the start-up read done, nothing served) over ``tmp_path``;
    ``only``: the one root it reads (as ``compactd once <dir>``)."""
    from compactd.config import load_config
    from compactd.service import Service

    config_path = tmp_path / "config.yaml"
    windows = {"anthropic": {"models": {"claude-sonnet-4-5": {"context_tokens": window}}}}
    config_path.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(tmp_path / r) for r in roots]},
                "state_dir": str(tmp_path / "state"),
                "models": {"providers": windows},
                "memory_flush": {"enabled": False},
            }
        )
    )
    roots = [str(tmp_path / only)] if only else None
    service = Service(load_config(str(config_path)), config_path=str(config_path), roots=roots)
    service.prepare()
    service.source("jsonl").discover()
    return service


def test_an_untouched_session_keeps_its_decision_under_the_same_config_only(tmp_path: Path) -> None:
    """A restart does not decide an untouched session again when sessions.json recorded its decision under
    the very same configuration; under another one (a window changed) it is decided afresh."""
    root = tmp_path / "sessions"
    root.mkdir()
    paths = [root / f"s{i}.jsonl" for i in range(3)]
    for path in paths:
        path.write_bytes(transcript(20))
    first = _in_process(tmp_path, 1_000_000)
    assert all(
        first.source("jsonl").sessions[str(p)].decision is not None for p in paths
    )  # a cold read decides
    shown = {p: first.source("jsonl").state[p].to_json() for p in first.source("jsonl").state}
    first.write_state()

    same = _in_process(tmp_path, 1_000_000)
    for path in paths:
        session = same.source("jsonl").sessions[str(path)]
        assert session.decision is None and not session.due  # kept, not decided again
        assert same.source("jsonl").state[str(path)].window == 1_000_000
    assert {p: s.to_json() for p, s in same.source("jsonl").state.items()} == shown
    same.write_state()

    other = _in_process(tmp_path, 500_000)
    for path in paths:
        assert other.source("jsonl").sessions[str(path)].decision is not None  # another config: decided again
        assert other.source("jsonl").state[str(path)].window == 500_000
    other.write_state()
    again = _in_process(tmp_path, 500_000)  # ... and the shards now name that config
    assert all(again.source("jsonl").sessions[str(p)].decision is None for p in paths)


def test_a_reload_means_the_next_start_decides_every_session(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    (root / "s.jsonl").write_bytes(transcript(5))
    first = _in_process(tmp_path, 1_000_000)
    first.write_state()
    reloaded = _in_process(tmp_path, 1_000_000)
    assert (
        reloaded.source("jsonl").sessions[str(root / "s.jsonl")].decision is None
    )  # kept from the first start
    reloaded.reload()  # the same file: which config decided what is no longer known for sure
    reloaded.write_state()
    after = _in_process(tmp_path, 1_000_000)
    assert after.source("jsonl").sessions[str(root / "s.jsonl")].decision is not None


def test_status_before_ready_has_the_counts_and_the_rows_follow(tmp_path: Path) -> None:
    """The start-up status.json shows the daemon serving N sessions without sorting N rows; the next state
    write lists them."""
    root = tmp_path / "sessions"
    root.mkdir()
    for i in range(3):
        (root / f"s{i}.jsonl").write_bytes(transcript(5))
    service = _in_process(tmp_path, 1_000_000)
    status_path = tmp_path / "state" / "status.json"
    service.write_status()
    early = orjson.loads(status_path.read_bytes())
    assert early["sessions_watched"] == 3 and early["pid"] == os.getpid()
    assert early["sessions_listed"] == 0 and early["sessions"] == []
    service.write_state()
    later = orjson.loads(status_path.read_bytes())
    assert later["sessions_listed"] == 3 and len(later["sessions"]) == 3


def test_a_session_the_last_writer_did_not_decide_is_decided_again(tmp_path: Path) -> None:
    """A process that read one root only (``once <dir>``) under another config does not vouch for the
    sessions of the other root: their shard names no config, and the next start decides them."""
    from compactd.sources.files.resume import SnapshotStore

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "s.jsonl", tmp_path / "b" / "s.jsonl"
    a.write_bytes(transcript(5))
    b.write_bytes(transcript(6))
    assert SnapshotStore(tmp_path).shard(str(a)) != SnapshotStore(tmp_path).shard(str(b))
    _in_process(tmp_path, 1_000_000, roots=("a", "b")).write_state()
    _in_process(tmp_path, 500_000, roots=("a", "b"), only="a").write_state()
    third = _in_process(tmp_path, 500_000, roots=("a", "b"))
    assert (
        third.source("jsonl").sessions[str(a)].decision is None
    )  # decided under this config by the last writer: kept
    assert third.source("jsonl").sessions[str(b)].decision is not None
    assert third.source("jsonl").state[str(b)].window == 500_000


def test_a_transcript_too_large_to_read_is_skipped_and_reported(tmp_path: Path) -> None:
    """A file over the cold read's byte cap is never read whole: the service keeps it as skipped, with the
    reason status shows, reads none of it on the next rescan, and the other sessions are decided as usual."""
    from compactd.defaults import MAX_COLD_READ_BYTES

    root = tmp_path / "sessions"
    root.mkdir()
    fine = root / "fine.jsonl"
    fine.write_bytes(transcript(3))
    huge = root / "huge.jsonl"
    huge.write_bytes(transcript(3))
    os.truncate(huge, MAX_COLD_READ_BYTES + (1 << 20))  # sparse: no disk taken
    service = _in_process(tmp_path, 1_000_000)
    assert service.source("jsonl").sessions[str(fine)].decision is not None
    session = service.source("jsonl").sessions[str(huge)]
    assert session.tracker.ledger is None and not session.due and session.tracker.cursor.bytes_read == 0
    reason = service.source("jsonl").state[str(huge)].skipped
    assert reason is not None and reason.startswith("too large to read") and "byte cap" in reason
    with open(huge, "ab") as handle:
        handle.write(b"more\n")
    service.source("jsonl").rescan(seal=False)
    assert service.source("jsonl").sessions[str(huge)] is session and session.tracker.cursor.bytes_read == 0
    assert service.source("jsonl").state[str(huge)].skipped == reason
