"""kill -9 at any instant of a commit (issue 5, proof 4), and recovery afterwards.

Each run forks a child that commits (force, since a thread of the child keeps appending numbered lines by
path, as pi does) and dies by SIGKILL: at a named crash point (through the test seam
``compactd.commit.atomic.step_hook``; every point is visited in each mode it belongs to) or at a random
moment chosen by the parent. After every run: the file loads (our reader now, pi's loader for all runs at the end) with its header; nothing any agent wrote is lost (the
original entries and every appended number are in the live file or an archive, the numbers without a gap);
``recover()`` leaves no temp file, no archive that is the live file itself, no unfinished intent, no lock, and
a live branch holding every appended line.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from compactd.commit import (
    CRASH_POINTS,
    LEAF_POINTER_TYPE,
    CommitResult,
    CompactionEntries,
    Journal,
    commit,
    recover,
)
from compactd.commit.append import MAX_CORRECTIONS, MAX_POINTERS
from compactd.commit.locks import lock_is_live, lock_path_for, read_lock
from compactd.reading import read_transcript

from tests.support.crash import (
    archives_of,
    file_lines,
    fork,
    iter_union_entries,
    make_entries,
    run_child_commit,
    seq_of,
    session_ops,
    temp_files,
)

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

RUNS = 104
# The random kills land within this many seconds of the fork: a rotation takes the grace period plus a few ms.
RANDOM_KILL_MAX_SECONDS = 0.32
GRACE_SECONDS = 0.25


def _schedule() -> list[tuple[str, str | None]]:
    """(mode, crash point or None for a random kill): every point in every mode it belongs to, then random."""
    runs: list[tuple[str, str | None]] = []
    for point in CRASH_POINTS:
        if point.startswith("append_"):
            runs.append(("append", point))
        elif point.startswith(("rotate_", "retention_")):
            runs.append(("rotate", point))
        else:
            runs.extend([("rotate", point), ("append", point)])
    rng = random.Random(5)
    while len(runs) < RUNS:
        runs.append((rng.choice(["rotate", "append"]), None))
    return runs


def test_kill_minus_nine_anywhere_loses_nothing(pi: Pi, tmp_path: Path) -> None:
    base = Path(pi.write(tmp_path / "base", session_ops(10, side_branch=False))["path"])
    base_ids = {e["id"] for e in file_lines(base) if "id" in e}
    rng = random.Random(1234)
    to_load: list[tuple[Path, str]] = []
    outcomes: dict[str, int] = {}
    started = time.monotonic()
    for run, (mode, point) in enumerate(_schedule()):
        folder = tmp_path / f"run{run:03d}"
        folder.mkdir()
        path = folder / base.name
        shutil.copyfile(base, path)
        state = folder / "state"
        keep = 5
        if point == "retention_before_unlink":
            # An older archive for retention to remove (keep 1): the kill comes before the unlink.
            first = commit(
                path, make_entries(path, keep_turns=6), mode="rotate", state_dir=state, idle_seconds=0
            )
            assert first.committed, first.reason
            keep = 1
        entries = make_entries(path, keep_turns=3)
        hooks = {}
        with_writer = True
        if point == "seal_before_write":
            # A torn last line, sealed before the commit; no writer (its first line would be swallowed).
            with open(path, "ab") as f:
                f.write(b'{"type":"message","id":"70rn')
            with_writer = False
        if point in ("append_before_correction", "append_after_correction"):
            # An agent line slips in between our read and our write, so a correction is needed. It hangs from
            # the file's last line, as pi's does: from the plan's leaf it would fork below the appender's lines,
            # and a one-against-one fork has no branch holding both (the longer-branch rule is tested below).
            hooks["append_after_intent"] = _agent_line_hook(path, None)
        before_ids = {e["id"] for e in iter_union_entries(path) if "id" in e}
        kill_after = rng.uniform(0.0, RANDOM_KILL_MAX_SECONDS) if point is None else None
        result = run_child_commit(
            path,
            entries,
            mode=mode,
            state_dir=state,
            point=point,
            kill_after=kill_after,
            with_writer=with_writer,
            grace_seconds=GRACE_SECONDS,
            keep_count=keep,
            hooks=hooks,
        )
        label = f"run {run} {mode} {point or f'random {kill_after:.3f}s'}"
        if point is not None:
            assert os.WIFSIGNALED(result.exit_status) and os.WTERMSIG(result.exit_status) == signal.SIGKILL, (
                label
            )
        outcome = (
            "killed"
            if os.WIFSIGNALED(result.exit_status)
            else {0: "committed", 3: "not committed"}.get(os.WEXITSTATUS(result.exit_status), "error")
        )
        assert outcome != "error", label
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

        # Right after the kill: the path holds a complete, loadable transcript with its header.
        transcript = read_transcript(path)
        assert transcript.usable and transcript.session_id == read_transcript(base).session_id, label
        _assert_nothing_lost(path, before_ids, label)

        report = recover(state, roots=[folder])
        assert report.errors == [], (label, report.errors)
        assert temp_files(folder) == [], label
        live = os.stat(path)
        assert all(os.stat(a).st_ino != live.st_ino for a in archives_of(path)), label
        journal = Journal(state)
        assert journal.pending(journal.records()) == [], label
        lock = read_lock(lock_path_for(path))
        assert lock is None or not lock_is_live(lock), (label, lock)
        _assert_nothing_lost(path, before_ids, label)
        # After recovery, the live branch holds every appended number (they all come after the cut point).
        after = read_transcript(path)
        branch_ids = {e.get("id") for e in after.branch()}
        appended = {e["id"] for e in file_lines(path) if seq_of(e) is not None}
        for archive in archives_of(path):
            appended |= {e["id"] for e in file_lines(archive) if seq_of(e) is not None}
        assert appended <= branch_ids, (label, sorted(appended - branch_ids)[:5])
        assert base_ids & before_ids == base_ids
        to_load.append((path, label))
        # And a restarted compactd commits again on the recovered file.
        if run % 10 == 0:
            again = commit(path, make_entries(path), mode=mode, state_dir=state, idle_seconds=0)  # type: ignore[arg-type]
            assert again.committed, (label, again.reason)
    elapsed = time.monotonic() - started

    loads = pi.load_many([p for p, _ in to_load])
    session_id = read_transcript(base).session_id
    for (path, label), loaded in zip(to_load, loads, strict=True):
        assert "error" not in loaded, (label, loaded.get("error"))
        assert not loaded["wiped"], label
        assert loaded["session_id"] == session_id, label
        assert loaded["header"]["type"] == "session", label
        # pi's branch holds every appended line still in the live file.
        live_appended = {e["id"] for e in file_lines(path) if seq_of(e) is not None}
        assert live_appended <= set(loaded["branch_ids"]), label
    print(f"{len(to_load)} kill runs in {elapsed:.1f} s: {outcomes}")
    assert outcomes.get("killed", 0) >= len(CRASH_POINTS)


def _agent_line_hook(path: Path, parent: str | None) -> Callable[[], None]:
    """A hook appending one agent line under ``parent`` (None: under the file's last line at that moment)."""

    def append() -> None:
        under = parent if parent is not None else read_transcript(path).leaf_id
        assert under is not None
        with open(path, "ab") as f:
            f.write(_message_line("a9e17001", under, "an agent line that slipped in"))

    return append


def _assert_nothing_lost(path: Path, before_ids: set[str], label: str) -> None:
    union = list(iter_union_entries(path))
    ids = {e.get("id") for e in union}
    assert before_ids <= ids, (label, sorted(before_ids - ids)[:5])
    seqs = sorted({s for e in union if (s := seq_of(e)) is not None})
    assert seqs == list(range(len(seqs))), (label, "a numbered line is missing", _gaps(seqs))


def _gaps(seqs: list[int]) -> list[int]:
    present = set(seqs)
    return [s for s in range(max(seqs, default=0)) if s not in present][:5]


def test_recovery_rescues_late_lines_left_in_the_old_inode(pi: Pi, tmp_path: Path) -> None:
    """Killed right after the rename, before the grace period: an agent's line landed in the old inode (the
    archive) and the agent went on writing into the new file. Recovery appends the late line and re-points the
    leaf, so pi's branch holds both."""
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    entries = make_entries(path)
    leaf = entries.snapshot_leaf_id
    run = run_child_commit(
        path,
        entries,
        mode="rotate",
        state_dir=state,
        point="rotate_after_dir_fsync",
        kill_after=None,
        with_writer=False,
    )
    assert os.WIFSIGNALED(run.exit_status)
    (archive,) = archives_of(path)
    late = _message_line("1a7e0001", leaf, "late line in the old inode")
    child = _message_line("1a7e0002", "1a7e0001", "written after it, into the new file")
    with open(archive, "ab") as f:
        f.write(late)
    with open(path, "ab") as f:
        f.write(child)
    report = recover(state)
    assert report.finished == [str(path)] and report.rescued_lines == 1 and report.leaf_pointers == 1
    assert recover(state).rescued_lines == 0  # idempotent
    loaded = pi.load(path)
    assert {"1a7e0001", "1a7e0002"} <= set(loaded["branch_ids"])
    texts = [m["content"][0]["text"] for m in loaded["messages"] if m["role"] == "user"]
    assert texts[-2:] == ["late line in the old inode", "written after it, into the new file"]
    assert loaded["messages"][0]["role"] == "compactionSummary"


def test_rescue_during_the_grace_period_repoints_the_leaf(pi: Pi, tmp_path: Path) -> None:
    """A line lands in the old inode after the rename and its child lands in the new file before we rescue it:
    the rescued line would become the last line (the leaf) and cut its child off; a leaf pointer fixes it."""
    from tests.support.crash import TEST_HOOKS

    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    entries = make_entries(path)
    leaf = entries.snapshot_leaf_id
    holder: dict[str, Path] = {}

    def race() -> None:
        (archive,) = archives_of(path)
        holder["archive"] = archive
        with open(archive, "ab") as f:
            f.write(_message_line("1a7e0001", leaf, "late"))
        with open(path, "ab") as f:
            f.write(_message_line("1a7e0002", "1a7e0001", "newer"))

    TEST_HOOKS["rotate_after_dir_fsync"] = race
    try:
        result = commit(path, entries, mode="rotate", state_dir=tmp_path / "state", idle_seconds=0)
    finally:
        TEST_HOOKS.clear()
    assert result.committed and result.rescued_lines == 1
    lines = file_lines(path)
    assert [e["id"] for e in lines[-3:-1]] == ["1a7e0002", "1a7e0001"]
    assert lines[-1]["type"] == "custom" and lines[-1]["parentId"] == "1a7e0002"
    loaded = pi.load(path)
    assert {"1a7e0001", "1a7e0002"} <= set(loaded["branch_ids"])
    assert [m["content"][0]["text"] for m in loaded["messages"][-2:]] == ["late", "newer"]


def _message_line(entry_id: str, parent: str, text: str) -> bytes:
    entry = {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-09T00:00:00.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1},
    }
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def _append_with_hooks(
    path: Path, entries: CompactionEntries, state: Path, hooks: Mapping[str, Callable[[], None]]
) -> CommitResult:
    """An append commit (forced) in this process with ``hooks`` run at its steps; it must commit."""
    from tests.support.crash import TEST_HOOKS

    TEST_HOOKS.update(hooks)
    try:
        result = commit(path, entries, mode="append", state_dir=state, idle_seconds=0, force=True)
    finally:
        TEST_HOOKS.clear()
    assert result.committed, result.reason
    return result


def _forked_below_the_leaf(pi: Pi, tmp_path: Path) -> tuple[Path, CompactionEntries, bytes]:
    """A session whose agent appended two lines (s1, s2) after the plan was made, and a line from a writer
    with a stale leaf (f1, under the plan's leaf, below s1 and s2) that slips in between our read and write."""
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    entries = make_entries(path)
    leaf = entries.snapshot_leaf_id
    with open(path, "ab") as f:
        f.write(_message_line("5e000001", leaf, "on the branch planned on"))
        f.write(_message_line("5e000002", "5e000001", "its tip when the commit reads the file"))
    return path, entries, _message_line("f0000001", leaf, "forked below the tip")


def test_append_correction_keeps_the_longer_branch_when_a_line_forks_below_the_leaf(
    pi: Pi, tmp_path: Path
) -> None:
    """The correction chains from the agent's newest line, which is the tip of the longest chain, not the last
    line in the file: chaining from f1 cut s1 and s2 (after the cut point) off the branch."""
    path, entries, forked = _forked_below_the_leaf(pi, tmp_path)

    def slip_in() -> None:
        with open(path, "ab") as f:
            f.write(forked)

    result = _append_with_hooks(path, entries, tmp_path / "state", {"append_after_intent": slip_in})
    branch = [e.get("id") for e in read_transcript(path).branch()]
    assert {"5e000001", "5e000002"} <= set(branch), branch[-6:]
    assert read_transcript(path).leaf_id == result.leaf_id
    assert branch[-3] == "5e000002"  # our compaction and post hang from s2: nothing cut off, f1 left aside
    assert [e["type"] for e in read_transcript(path).branch()[-2:]] == ["compaction", "custom_message"]
    loaded = pi.load_many([path])[0]
    assert {"5e000001", "5e000002"} <= set(loaded["branch_ids"])


def test_recovery_repoints_to_the_longer_branch_after_a_correction_onto_a_fork(
    pi: Pi, tmp_path: Path
) -> None:
    """The bytes a commit killed after correcting onto the forked line f1 left (its correction chained from
    f1, cutting s1 and s2 off): recovery points the leaf at s2. Looking only at lines after the snapshot, it
    saw f1 alone, already on the last line's branch, and left s1 and s2 off it."""
    path, entries, forked = _forked_below_the_leaf(pi, tmp_path)
    state = tmp_path / "state"
    size = path.stat().st_size

    def ours(entry_id: str, parent: str, kind: str) -> bytes:
        base = entries.compaction if kind == "compaction" else entries.post_message
        assert base is not None
        return (
            json.dumps({**base, "id": entry_id, "parentId": parent}, separators=(",", ":")).encode() + b"\n"
        )

    st = path.stat()
    journal = Journal(state)
    tx = journal.intent(
        "append", str(path), dev=st.st_dev, inode=st.st_ino, size=size, ids=["c0000001", "90000001"]
    )
    with open(path, "ab") as f:
        f.write(forked)
        f.write(ours("c0000001", "5e000002", "compaction") + ours("90000001", "c0000001", "post"))
    journal.progress(tx, ids=["c0000002", "90000002"])
    with open(path, "ab") as f:
        f.write(ours("c0000002", "f0000001", "compaction") + ours("90000002", "c0000002", "post"))

    report = recover(state, roots=[tmp_path])
    assert report.errors == [] and report.leaf_pointers == 1
    branch = {e.get("id") for e in read_transcript(path).branch()}
    assert {"5e000001", "5e000002"} <= branch
    assert {"5e000001", "5e000002"} <= set(pi.load_many([path])[0]["branch_ids"])
    assert recover(state, roots=[tmp_path]).leaf_pointers == 0


class _RacingWriter:
    """An agent that appends a line, chained from its own previous one (pi's in-memory leaf), each time the
    commit is about to write (its first write and every correction), ``races`` times in all."""

    def __init__(self, path: Path, leaf: str, races: int) -> None:
        self.path, self.leaf, self.races = path, leaf, races
        self.ids: list[str] = []

    def __call__(self) -> None:
        if self.races == 0:
            return
        self.races -= 1
        entry_id = f"a9{len(self.ids):06x}"
        with open(self.path, "ab") as f:
            f.write(_message_line(entry_id, self.leaf, f"slipped in, {len(self.ids)}"))
        self.leaf = entry_id
        self.ids.append(entry_id)


def _commit_racing(pi: Pi, tmp_path: Path, races: int) -> tuple[Path, _RacingWriter, CommitResult]:
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    entries = make_entries(path)
    writer = _RacingWriter(path, entries.snapshot_leaf_id, races)
    hooks = {"append_after_intent": writer, "append_before_correction": writer}
    return path, writer, _append_with_hooks(path, entries, tmp_path / "state", hooks)


@pytest.mark.parametrize("pointer_races", [0, 3])
def test_append_points_the_leaf_at_a_writer_that_races_every_correction(
    pi: Pi, tmp_path: Path, pointer_races: int
) -> None:
    """A writer slips a line in before each of our writes, more often than we correct (as a node appender did
    on a loaded CI machine): our last correction hangs from the line before the writer's last, so pi, loading
    the branch of the file's last line, would cut the writer's last line off. A leaf pointer to it (raced
    ``pointer_races`` times too) keeps every agent line on the branch; our compaction is bypassed."""
    races = 1 + MAX_CORRECTIONS + pointer_races
    path, writer, result = _commit_racing(pi, tmp_path, races)
    assert len(writer.ids) == races and result.corrections == MAX_CORRECTIONS
    last = file_lines(path)[-1]
    assert last.get("customType") == LEAF_POINTER_TYPE and last["parentId"] == writer.ids[-1]
    assert read_transcript(path).leaf_id == result.leaf_id == last["id"]
    assert set(writer.ids) <= set(pi.load_many([path])[0]["branch_ids"])
    assert recover(tmp_path / "state", roots=[tmp_path]).leaf_pointers == 0


def test_append_gives_up_on_a_writer_that_never_stops_racing(
    pi: Pi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer that races every write: the commit still ends, after a bounded number of writes, says so, and
    loses nothing (every line in the file, no dangling parent)."""
    path, writer, _ = _commit_racing(pi, tmp_path, races=10_000)
    assert len(writer.ids) == 1 + MAX_CORRECTIONS + MAX_POINTERS
    assert f"gave up after {MAX_CORRECTIONS} corrections and {MAX_POINTERS} leaf pointers" in caplog.text
    ids = {e.get("id") for e in file_lines(path)}
    assert set(writer.ids) <= ids
    assert not [p for p in read_transcript(path).problems if p.kind == "dangling_parent"]


def test_recovery_removes_an_empty_lock_our_killed_process_left(tmp_path: Path) -> None:
    """Killed between the lock's exclusive create and the write of its body: an empty lock file, which OpenClaw
    would honour for 30 minutes. The journal's lock record lets recovery remove it (and only it)."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"type":"session","id":"x"}\n')
    state = tmp_path / "state"
    lock = lock_path_for(path)
    pid = fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            Journal(state).locking(str(path))
            lock.touch()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    info = read_lock(lock)
    assert info is not None and lock_is_live(info)  # by OpenClaw's rules: no pid, fresh mtime
    other = tmp_path / "t.jsonl"
    other.write_bytes(b'{"type":"session","id":"y"}\n')
    lock_path_for(other).touch()  # an empty lock we know nothing about: not ours to remove
    report = recover(state)
    assert report.locks_removed == [str(lock)]
    assert not lock.exists() and lock_path_for(other).exists()


def test_recovery_repoints_the_leaf_when_the_killed_commit_rescued_but_did_not(
    pi: Pi, tmp_path: Path
) -> None:
    """Killed after the grace period rescued a line after its own child, before the leaf fix: nothing is left
    to rescue, but recovery must still re-point the leaf."""
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    entries = make_entries(path)
    leaf = entries.snapshot_leaf_id

    def race() -> None:
        (archive,) = archives_of(path)
        with open(archive, "ab") as f:
            f.write(_message_line("1a7e0001", leaf, "late"))
        with open(path, "ab") as f:
            f.write(_message_line("1a7e0002", "1a7e0001", "newer"))

    run = run_child_commit(
        path,
        entries,
        mode="rotate",
        state_dir=state,
        point="rotate_after_grace",
        kill_after=None,
        with_writer=False,
        hooks={"rotate_after_dir_fsync": race},
    )
    assert os.WIFSIGNALED(run.exit_status)
    assert file_lines(path)[-1]["id"] == "1a7e0001"  # rescued after its child: the leaf went backwards
    report = recover(state)
    assert report.rescued_lines == 0 and report.leaf_pointers == 1
    loaded = pi.load(path)
    assert {"1a7e0001", "1a7e0002"} <= set(loaded["branch_ids"])
    assert [m["content"][0]["text"] for m in loaded["messages"][-2:]] == ["late", "newer"]


# --- issue 9, item 6: every command that commits recovers first; recovered lines never dangle --------------


def test_compact_after_a_kill_under_a_live_appender_recovers_first(pi: Pi, tmp_path: Path) -> None:
    """Killed right after the rename while pi's appender runs, with its lines landing in the old inode after the
    carry-over: ``compactd compact`` runs recovery before planning, so the file it compacts (its archive) holds
    every appended line on pi's active branch, and nothing dangles before or after."""
    import subprocess
    import sys

    import yaml

    from tests.support.pi import NodeAppender

    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(state), "sessions": {"roots": [str(path.parent)]}}))
    appender = NodeAppender(path, 600, pause_every=2, pause_ms=4).start()

    def late_line() -> None:
        # After the carry-over, before the rename: wait (bounded) until the appender puts a line in the old
        # inode, which then only the grace rescue (never reached: the kill) or recovery can move.
        size = os.stat(path).st_size
        deadline = time.monotonic() + 10
        while os.stat(path).st_size == size and time.monotonic() < deadline:
            time.sleep(0.001)

    try:
        run = run_child_commit(
            path,
            make_entries(path),
            mode="rotate",
            state_dir=state,
            point="rotate_after_rename",
            kill_after=None,
            with_writer=False,
            hooks={"rotate_before_rename": late_line},
        )
    finally:
        appended = appender.wait()
    assert os.WIFSIGNALED(run.exit_status)
    (first_archive,) = archives_of(path)
    live_ids = {e["id"] for e in file_lines(path)}
    only_archived = [i for i in appended.ids if i not in live_ids]
    assert only_archived, "the scenario needs lines the kill left in the old inode only"
    assert {e["id"] for e in file_lines(first_archive)} >= set(only_archived)

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "compactd",
            "compact",
            str(path),
            "--force",
            "--json",
            "--config",
            str(config),
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "COMPACTD_CONFIG")},
    )
    data = json.loads(done.stdout)
    assert data["committed"] is True, (data, done.stderr)
    # The file the compaction was planned on (now its archive) had every appended line on pi's branch.
    planned_on = Path(data["archive"])
    loaded = pi.load(planned_on)
    assert set(appended.ids) <= set(loaded["branch_ids"]), sorted(
        set(appended.ids) - set(loaded["branch_ids"])
    )
    assert _dangling(planned_on) == []
    # And the compacted file loads whole: nothing dangles, the summary is the root of pi's branch.
    assert _dangling(path) == []
    after = pi.load(path)
    assert after["messages"][0]["role"] == "compactionSummary"
    union = {e.get("id") for e in iter_union_entries(path)}
    assert set(appended.ids) <= union
    assert Journal(state).pending(Journal(state).records()) == []


def _dangling(path: Path) -> list[str]:
    return [p.message for p in read_transcript(path).problems if p.kind == "dangling_parent"]


def test_late_lines_recovered_into_a_file_rewritten_since_are_reattached_not_orphaned(
    pi: Pi, tmp_path: Path
) -> None:
    """The kill left three agent lines in the old inode; before any recovery the live file was compacted again
    (as a compactd without recovery-first did), summarizing their parent. Recovery must not append them as
    orphans: they are re-parented, ids and content kept, onto the end of pi's active branch."""
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    entries = make_entries(path)
    leaf = entries.snapshot_leaf_id
    run = run_child_commit(
        path, entries, mode="rotate", state_dir=state, point="rotate_after_dir_fsync", kill_after=None,
        with_writer=False,
    )  # fmt: skip
    assert os.WIFSIGNALED(run.exit_status)
    (archive,) = archives_of(path)
    late = [
        _message_line("1a7e0001", leaf, "late one"),
        _message_line("1a7e0002", "1a7e0001", "late two"),
        _message_line("1a7e0003", "1a7e0002", "late three"),
    ]
    with open(archive, "ab") as f:
        f.write(b"".join(late))
    # The session went on in the new file from the leaf, and was compacted again past that leaf.
    with open(path, "ab") as f:
        f.write(_message_line("2e000001", leaf, "a new question"))
        f.write(_message_line("2e000002", "2e000001", "and another"))
    again = commit(path, make_entries(path, keep_turns=1), mode="rotate", state_dir=tmp_path / "other-state",
                   idle_seconds=0)  # fmt: skip
    assert again.committed, again.reason
    assert leaf not in {e.get("id") for e in file_lines(path)}  # the late lines' parent is summarized away

    report = recover(state)
    assert report.finished == [str(path)] and report.rescued_lines == 3
    assert _dangling(path) == []
    loaded = pi.load(path)
    assert {"1a7e0001", "1a7e0002", "1a7e0003", "2e000002"} <= set(loaded["branch_ids"])
    texts = [m["content"][0]["text"] for m in loaded["messages"] if m["role"] == "user"]
    assert texts[-4:] == ["and another", "late one", "late two", "late three"]
    assert loaded["messages"][0]["role"] == "compactionSummary"
    # Ids and content kept; only the first one's parent changed.
    rescued = {e["id"]: e for e in file_lines(path) if e["id"].startswith("1a7e")}
    originals = {json.loads(line)["id"]: json.loads(line) for line in late}
    for entry_id, entry in rescued.items():
        assert {k: v for k, v in entry.items() if k != "parentId"} == {
            k: v for k, v in originals[entry_id].items() if k != "parentId"
        }
    assert rescued["1a7e0002"]["parentId"] == "1a7e0001"
    assert report.reattached_lines == 1
    assert recover(state).rescued_lines == 0  # idempotent


def test_a_late_line_whose_parent_was_summarized_goes_above_its_children(pi: Pi, tmp_path: Path) -> None:
    """In the successor itself: an agent wrote a line into the old inode whose parent the rotation summarized,
    and its child into the new file. Recovery hangs the late line from the successor's anchor (as the rotation
    hangs branches that fork in the summarized part), so its child is reachable and nothing dangles or cycles."""
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    entries = make_entries(path)
    summarized_parent = file_lines(path)[3]["id"]
    run = run_child_commit(
        path, entries, mode="rotate", state_dir=state, point="rotate_after_dir_fsync", kill_after=None,
        with_writer=False,
    )  # fmt: skip
    assert os.WIFSIGNALED(run.exit_status)
    assert summarized_parent not in {e.get("id") for e in file_lines(path)}
    (archive,) = archives_of(path)
    with open(archive, "ab") as f:
        f.write(_message_line("1a7e0001", summarized_parent, "from an old leaf"))
    with open(path, "ab") as f:
        f.write(_message_line("1a7e0002", "1a7e0001", "its child, in the new file"))
    report = recover(state)
    assert report.rescued_lines == 1
    assert _dangling(path) == []
    loaded = pi.load(path)
    assert {"1a7e0001", "1a7e0002"} <= set(loaded["branch_ids"])
    texts = [m["content"][0]["text"] for m in loaded["messages"] if m["role"] == "user"]
    assert texts[-2:] == ["from an old leaf", "its child, in the new file"]
    assert loaded["messages"][0]["role"] == "compactionSummary"
    assert report.reattached_lines == 1
