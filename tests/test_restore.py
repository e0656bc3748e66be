"""``compactd restore`` (issue 23, item 1): a session put back as an archive holds it, through the commit's
checks and rewrite protocol, with every line written since the compaction carried onto the restored branch."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from compactd.commit import CRASH_POINTS, commit, recover
from compactd.commit.restore import plan_restore
from compactd.core.context import build_context
from compactd.reading import read_transcript

from tests.support import crash
from tests.support import messages as msgs
from tests.support.cli import compactd
from tests.support.crash import (
    ThreadAppender,
    archives_of,
    file_lines,
    fork,
    make_entries,
    seq_of,
    session_ops,
)
from tests.support.pi import NodeAppender

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

HEADER = {
    "type": "session",
    "version": 3,
    "id": "sess-r",
    "timestamp": "2026-01-01T00:00:00.000Z",
    "cwd": "/tmp",
}


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def write_session(path: Path, turns: int) -> Path:
    """A pi v3 session of ``turns`` question/answer turns."""
    out = [_line(HEADER)]
    parent: str | None = None
    for n in range(turns):
        for i, message in enumerate((msgs.user(f"question {n}", ts=n), msgs.assistant(f"answer {n}", ts=n))):
            entry_id = f"t{n:03d}{i}"
            stamp = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.00{i}Z"
            out.append(
                _line(
                    {
                        "type": "message",
                        "id": entry_id,
                        "parentId": parent,
                        "timestamp": stamp,
                        "message": message,
                    }
                )
            )
            parent = entry_id
    path.write_bytes(b"".join(out))
    return path


def append_turn(path: Path, text: str) -> list[str]:
    """An agent's turn appended by path from the file's leaf, as pi does; the new ids."""
    leaf = read_transcript(path).leaf_id
    ids = []
    with open(path, "ab") as handle:
        for message in (msgs.user(text, ts=1), msgs.assistant(f"re: {text}", ts=2)):
            entry_id = secrets.token_hex(4)
            handle.write(
                _line(
                    {
                        "type": "message",
                        "id": entry_id,
                        "parentId": leaf,
                        "timestamp": "2026-01-02T00:00:00.000Z",
                        "message": message,
                    }
                )
            )
            leaf = entry_id
            ids.append(entry_id)
    return ids


def texts(path: Path) -> list[str]:
    out = []
    for m in build_context(read_transcript(path)).messages:
        content = m.get("content")
        out.append(
            content[0]["text"]
            if isinstance(content, list) and content and "text" in content[0]
            else str(m.get("role"))
        )
    return out


def rotate(path: Path, state: Path) -> str:
    result = commit(path, make_entries(path, keep_turns=2), mode="rotate", state_dir=state, idle_seconds=0)
    assert result.committed, result.reason
    assert result.archive is not None
    return result.archive


def test_restore_puts_the_archive_back_with_the_turns_written_since(tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", 8)
    state = tmp_path / "state"
    before = texts(path)
    archive = rotate(path, state)
    assert texts(path)[0] == "compactionSummary"
    new_ids = append_turn(path, "after the compaction") + append_turn(path, "and later")
    compacted = path.read_bytes()

    result = commit(path, None, mode="rotate", state_dir=state, idle_seconds=0, restore_from=archive)

    assert result.committed, result.reason
    assert texts(path) == [
        *before,
        "after the compaction",
        "re: after the compaction",
        "and later",
        "re: and later",
    ]
    branch = [e.get("id") for e in read_transcript(path).branch()]
    assert branch[-4:] == new_ids
    assert not [e for e in read_transcript(path).branch() if e.get("type") == "compaction"]
    # The compacted file, appends included, is itself kept as an archive, and listed for retention.
    assert result.archive is not None and Path(result.archive).read_bytes() == compacted
    assert Path(archive).exists()
    assert read_transcript(path).problems == []


def test_restore_without_the_journal_record_carries_every_agent_entry_but_compactd_own(
    tmp_path: Path,
) -> None:
    """The fallback (journal compacted, file rewritten since): entries the archive lacks, minus compactd's."""
    path = write_session(tmp_path / "s.jsonl", 6)
    archive = rotate(path, tmp_path / "state")
    new_ids = append_turn(path, "late one")
    data = path.read_bytes()
    archived = Path(archive).read_bytes()
    plan = plan_restore(archived, data, None)
    assert not plan.journaled
    assert plan.carried == 2 and plan.leaf_id == new_ids[-1]
    assert plan.data.startswith(archived)
    carried = [json.loads(x) for x in plan.data[len(archived) :].splitlines()]
    assert [e["id"] for e in carried] == new_ids
    assert carried[0]["parentId"] == read_transcript(archive).leaf_id  # re-attached onto the archive's leaf


def test_restoring_an_older_archive_keeps_what_a_later_compaction_summarized(tmp_path: Path) -> None:
    """Two compactions, then the first one undone directly: the turns written between them exist only in the
    second's archive, and come back onto the restored branch with the turns written since."""
    path = write_session(tmp_path / "s.jsonl", 8)
    state = tmp_path / "state"
    before = texts(path)
    first = rotate(path, state)
    between = [f"between {n}" for n in range(4)]
    for text in between:
        append_turn(path, text)
    second = commit(
        path,
        make_entries(path, keep_turns=1, stamp_ms=crash.BASE_MS + 2 * 86_400_000),
        mode="rotate",
        state_dir=state,
        idle_seconds=0,
        now=time.time() + 1,
    )
    assert second.committed, second.reason
    assert "between 0" not in texts(path)  # summarized away by the second compaction
    append_turn(path, "after both")
    result = commit(
        path, None, mode="rotate", state_dir=state, idle_seconds=0, restore_from=first, now=time.time() + 2
    )
    assert result.committed, result.reason
    expected = [*before]
    for text in [*between, "after both"]:
        expected += [text, f"re: {text}"]
    assert texts(path) == expected
    assert not [e for e in read_transcript(path).branch() if e.get("type") == "compaction"]


def test_restore_refuses_an_archive_of_another_session_and_changes_nothing(tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", 6)
    other = write_session(tmp_path / "o.jsonl", 6)
    other.write_bytes(other.read_bytes().replace(b"sess-r", b"sess-o"))
    state = tmp_path / "state"
    foreign = tmp_path / "s.jsonl.bak.2026-01-01T00-00-00.000Z"
    foreign.write_bytes(other.read_bytes())
    before = path.read_bytes()
    result = commit(path, None, mode="rotate", state_dir=state, idle_seconds=0, restore_from=str(foreign))
    assert not result.committed
    assert result.reason is not None and "another session" in result.reason
    assert path.read_bytes() == before and archives_of(path) == [foreign]
    elsewhere = tmp_path / "x.jsonl.bak.2026-01-01T00-00-00.000Z"
    elsewhere.write_bytes(before)
    result = commit(path, None, mode="rotate", state_dir=state, idle_seconds=0, restore_from=str(elsewhere))
    assert not result.committed and "not an archive of this session" in str(result.reason)


def test_restore_refuses_a_session_mid_turn_or_not_idle(tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", 6)
    state = tmp_path / "state"
    archive = rotate(path, state)
    result = commit(path, None, mode="rotate", state_dir=state, idle_seconds=3600, restore_from=archive)
    assert not result.committed and result.reason == "not idle"
    leaf = read_transcript(path).leaf_id
    with open(path, "ab") as handle:  # a question without its answer: the agent is working
        handle.write(
            _line(
                {
                    "type": "message",
                    "id": "ask1",
                    "parentId": leaf,
                    "timestamp": "2026-01-02T00:00:00.000Z",
                    "message": msgs.user("busy?", ts=1),
                }
            )
        )
    before = path.read_bytes()

    def busy(current: Any) -> str | None:
        return "busy: mid-turn" if current.leaf_id == "ask1" else None

    result = commit(
        path, None, mode="rotate", state_dir=state, idle_seconds=0, restore_from=archive, check=busy
    )
    assert not result.committed and result.reason == "busy: mid-turn"
    assert path.read_bytes() == before


def test_restore_under_a_live_appender_loses_nothing(tmp_path: Path) -> None:
    """An agent appending as fast as it can by path during the restore: every line it wrote is in the live
    file exactly once and on its branch, after every message the archive held."""
    path = write_session(tmp_path / "s.jsonl", 10)
    state = tmp_path / "state"
    before = texts(path)
    archive = rotate(path, state)
    with ThreadAppender(str(path), read_transcript(path).leaf_id, pause_every=20) as appender:
        while sum(seq_of(e) is not None for e in file_lines(path)) < 200:
            pass  # the agent is well under way before the restore starts (polled: no sleep stands in)
        result = commit(
            path,
            None,
            mode="rotate",
            state_dir=state,
            idle_seconds=30,
            force=True,
            grace_seconds=0.25,
            restore_from=archive,
        )
    written = appender.parent
    assert result.committed, result.reason
    live = file_lines(path)
    seqs = [s for e in live if (s := seq_of(e)) is not None]
    count = max(seqs) + 1
    assert Counter(seqs) == Counter(range(count)), "a line was lost or doubled"
    transcript = read_transcript(path)
    branch = transcript.branch()
    on_branch = [seq_of(e) for e in branch]
    assert [s for s in on_branch if s is not None] == list(range(count))
    assert branch[-1]["id"] == written
    assert texts(path)[: len(before)] == before
    assert not [p for p in transcript.problems if p.kind in ("dangling_parent", "malformed_line")]
    print(
        f"restore under a live appender: {count} lines appended, carried {result.carried_lines}, rescued {result.rescued_lines}"
    )


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "sessions": {"idle_seconds": 0}}))
    return config


def test_cli_restore_lists_archives_and_restores_the_newest(tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", 8)
    state = tmp_path / "state"
    before = texts(path)
    rotate(path, state)
    append_turn(path, "new turn")
    config = _config(tmp_path)
    listed = compactd("restore", str(path), "--list", "--json", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["archives"]
    assert len(rows) == 1 and rows[0]["by"] == "compactd" and rows[0]["tokens"] > 0
    assert rows[0]["bytes"] == os.path.getsize(rows[0]["archive"])
    text = compactd("restore", str(path), "--list", "--config", str(config))
    assert os.path.basename(rows[0]["archive"]) in text.stdout and "tokens" in text.stdout
    done = compactd("restore", str(path), "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout)["committed"] is True
    assert texts(path) == [*before, "new turn", "re: new turn"]
    missing = compactd(
        "restore",
        str(tmp_path / "s.jsonl"),
        "--archive",
        str(tmp_path / "nope.bak.x"),
        "--config",
        str(config),
    )
    assert missing.returncode == 1 and "not an archive of this session" in missing.stdout


def test_cli_restore_without_archives_says_so(tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", 3)
    result = compactd("restore", str(path), "--config", str(_config(tmp_path)))
    assert result.returncode == 1 and "no archive made by compactd" in result.stdout
    assert read_transcript(path).problems == []


@pytest.mark.slow  # node and pi's loader
def test_restore_under_a_node_appender_keeps_every_line_and_pi_loads_the_restored_branch(
    pi: Pi, tmp_path: Path
) -> None:
    """pi's own append (appendFileSync by path, from a node process) during the restore, pi's loader as the
    judge: the archive's messages, then every line the agent wrote, in order, each once, no summary."""
    path = Path(pi.write(tmp_path / "s", session_ops(8, side_branch=False))["path"])
    state = tmp_path / "state"
    before = pi.load(path)["messages"]
    archive = rotate(path, state)
    count = 3_000
    appender = NodeAppender(path, count, pause_every=10, pause_ms=2).start()
    try:
        while sum(seq_of(e) is not None for e in file_lines(path)) < 300:
            pass  # the agent is under way (polled: no sleep stands in)
        result = commit(
            path, None, mode="rotate", state_dir=state, idle_seconds=30, force=True, restore_from=archive
        )
    finally:
        written = appender.wait()
    assert result.committed, result.reason
    assert written.seqs == list(range(count))
    live = Counter(s for e in file_lines(path) if (s := seq_of(e)) is not None)
    assert live == Counter(range(count)), "a line was lost or doubled"
    loaded = pi.load(path)["messages"]
    assert loaded[: len(before)] == before
    texts = [m["content"][0]["text"] for m in loaded[len(before) :]]
    assert texts == [f"seq {n}" for n in range(count)]
    assert "compactionSummary" not in [m["role"] for m in loaded]
    print(
        f"restore under a node appender: {count} lines, carried {result.carried_lines}, rescued {result.rescued_lines}"
    )


RESTORE_POINTS = [p for p in CRASH_POINTS if p.startswith(("commit_", "rotate_"))]


@pytest.mark.slow  # a forked child per step
@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_a_restore_killed_at_any_step_is_finished_or_rolled_back_by_recovery(
    tmp_path: Path, point: str
) -> None:
    """kill -9 at each step of the restore's rewrite while an agent appends: after recovery the live file
    loads, holds every line the agent wrote (once), and is either the compacted file or the restored one."""
    path = write_session(tmp_path / "s.jsonl", 8)
    state = tmp_path / "state"
    archive = rotate(path, state)
    append_turn(path, "after the compaction")
    compacted_inode = path.stat().st_ino
    run = fork()
    if run == 0:  # pragma: no cover - the child
        code = 4
        try:
            crash._crash_at[0] = point
            with ThreadAppender(str(path), read_transcript(path).leaf_id, pause_every=5):
                result = commit(
                    path,
                    None,
                    mode="rotate",
                    state_dir=state,
                    idle_seconds=0,
                    force=True,
                    grace_seconds=0.1,
                    restore_from=archive,
                )
            code = 0 if result.committed else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(run, 0)
    assert os.WIFSIGNALED(status), f"the child was to be killed at {point}, exit status {status}"
    recover(state)
    live = file_lines(path)
    seqs = Counter(s for e in live if (s := seq_of(e)) is not None)
    union = set(seqs)
    for other in archives_of(path):
        union.update(s for e in file_lines(other) if (s := seq_of(e)) is not None)
    assert union == set(range(len(union))), "an agent line is missing"
    assert set(seqs) == union and max(seqs.values(), default=1) == 1, "the live file lacks or doubles a line"
    transcript = read_transcript(path)
    assert not [p for p in transcript.problems if p.kind in ("dangling_parent", "malformed_line")]
    compacted = any(e.get("type") == "compaction" for e in transcript.branch())
    assert compacted == (path.stat().st_ino == compacted_inode)  # rolled back, or restored
    on_branch = [s for e in transcript.branch() if (s := seq_of(e)) is not None]
    assert on_branch == sorted(union)
