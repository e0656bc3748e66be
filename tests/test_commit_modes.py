"""Append and rotate on sessions written by pi itself, judged by pi's own loader (issue 5, proof 1 and 6)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.commit import FULL_TEXT_PLACEHOLDER, Journal, commit
from compactd.commit.atomic import utc_stamp
from compactd.reading import read_transcript

from tests.support.crash import (
    archives_of,
    expected_after,
    file_lines,
    make_entries,
    post_message,
    session_ops,
    summary_message,
    temp_files,
    unpaired,
)

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

MODES = ("rotate", "append")
SIDE_TEXTS = ("side question", "side answer")
# The real pi sessions live beside the repository (never copied into it).
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
REAL = sorted(FIXTURES.glob("*.v3.jsonl")) if FIXTURES.exists() else []


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        content = m.get("content")
        out.append(str(content[0].get("text")) if isinstance(content, list) and content else str(content))
    return out


@dataclass
class Staged:
    """A commit whose results pi judges later, all files in one pi load (a pi load costs about 2 s)."""

    mode: str
    original: Path  # copy of the file before the commit
    committed: Path  # copy right after the commit
    appended: Path  # copy after a fresh pi appended an exchange
    expected: list[dict[str, Any]]
    kept_count: int
    leaf_id: str | None


def _stage(dest: Path, source: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    copy = dest / source.name
    shutil.copyfile(source, copy)
    return copy


def commit_and_append(pi: Pi, path: Path, state: Path, mode: str, keep_turns: int = 3) -> Staged:
    """Commit a compaction to ``path`` (checks on our side), then let a fresh pi append an exchange to it."""
    stage = path.parent.parent / f"stage-{path.name}-{mode}-{time.monotonic_ns()}"
    original = _stage(stage / "original", path)
    entries = make_entries(path, keep_turns=keep_turns)
    expected = expected_after(path, entries, mode)
    size_before = path.stat().st_size
    result = commit(path, entries, mode=mode, state_dir=state, idle_seconds=0)  # type: ignore[arg-type]
    assert result.committed, result.reason
    assert result.bytes_before == size_before
    assert result.bytes_after == path.stat().st_size
    if mode == "rotate":
        assert result.archive is not None and not result.archive.endswith(".jsonl")
        assert Path(result.archive).read_bytes() == original.read_bytes()
        assert result.bytes_after < result.bytes_before
    else:
        assert result.archive is None
        assert path.read_bytes().startswith(original.read_bytes())
        assert result.bytes_after > result.bytes_before
    assert temp_files(path.parent) == []
    committed = _stage(stage / "committed", path)
    pi.append_exchange(path, "what next?", "next is this")
    appended = _stage(stage / "appended", path)
    kept_count = len(expected) - 1 - (1 if entries.post_message is not None else 0)
    return Staged(mode, original, committed, appended, expected, kept_count, result.leaf_id)


def judge(pi: Pi, staged: list[Staged]) -> None:
    """pi loads everything: the kept part is what pi saw before, the result is exactly the expected context,
    every tool call is paired, and after pi's own append the context is expected + the new exchange."""
    loads = pi.load_many([p for s in staged for p in (s.original, s.committed, s.appended)])
    for index, s in enumerate(staged):
        original, committed, appended = loads[3 * index : 3 * index + 3]
        for loaded in (original, committed, appended):
            assert "error" not in loaded, loaded
            assert not loaded["wiped"] and not loaded["rewritten"]
            assert loaded["session_id"] == original["session_id"]
        kept = s.expected[2:] if s.mode == "rotate" else s.expected[1 : 1 + s.kept_count]
        assert original["messages"][-s.kept_count :] == kept  # pi's own view of what is kept
        assert committed["messages"] == s.expected
        assert committed["messages"][0]["role"] == "compactionSummary"
        assert unpaired(committed["messages"]) == []
        assert committed["leaf_id"] == s.leaf_id
        if s.mode == "rotate":
            assert committed["leaf_id"] == original["leaf_id"]
        assert appended["messages"][: len(s.expected)] == s.expected
        assert _texts(appended["messages"][len(s.expected) :]) == ["what next?", "next is this"]
        assert unpaired(appended["messages"]) == []


@pytest.mark.parametrize("mode", MODES)
def test_commit_on_a_pi_written_session_loads_in_pi_with_the_expected_context(
    pi: Pi, tmp_path: Path, mode: str
) -> None:
    written = pi.write(tmp_path / "sessions", session_ops(8))
    judge(pi, [commit_and_append(pi, Path(written["path"]), tmp_path / "state", mode)])


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@pytest.mark.parametrize("mode", MODES)
def test_two_commits_in_a_row_keep_loading_in_pi(pi: Pi, tmp_path: Path, mode: str) -> None:
    path = Path(pi.write(tmp_path / "sessions", session_ops(10))["path"])
    state = tmp_path / "state"
    first = commit_and_append(pi, path, state, mode, keep_turns=4)
    second = commit_and_append(pi, path, state, mode, keep_turns=2)
    judge(pi, [first, second])


def test_rotation_keeps_unchanged_lines_byte_for_byte_and_the_header(pi: Pi, tmp_path: Path) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(8))["path"])
    before = path.read_bytes()
    before_lines = set(before.split(b"\n"))
    entries = make_entries(path)
    result = commit(path, entries, mode="rotate", state_dir=tmp_path / "state", idle_seconds=0)
    assert result.committed, result.reason
    after = path.read_bytes().split(b"\n")
    assert after[0] == before.split(b"\n")[0]  # the header line, byte for byte
    rewritten = [json.loads(line)["type"] for line in after if line and line not in before_lines]
    # New: the compaction and the post message. Re-serialized because re-parented (and so possibly equal to
    # the original bytes): the chain (model, thinking level, session name, extension state), the first kept
    # entry and the side branch's first entry. Every other line is the original's, byte for byte.
    allowed = [
        "compaction",
        "custom_message",
        "model_change",
        "thinking_level_change",
        "session_info",
        "custom",
    ]
    assert rewritten.count("compaction") == rewritten.count("custom_message") == 1
    assert rewritten.count("message") == 2
    assert set(rewritten) <= {*allowed, "message"}
    # The archive is the original itself (same bytes), named <name>.bak.<UTC ms>, and listed in the journal.
    assert result.archive is not None
    assert Path(result.archive).read_bytes() == before
    assert Path(result.archive).name.startswith(path.name + ".bak.")
    assert Journal(tmp_path / "state").archives(str(path)) == [result.archive]


def test_rotation_layout_side_branch_label_and_extension_state(pi: Pi, tmp_path: Path) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(8))["path"])
    original = read_transcript(path)
    entries = make_entries(path)
    result = commit(path, entries, mode="rotate", state_dir=tmp_path / "state", idle_seconds=0)
    assert result.committed, result.reason
    lines = file_lines(path)
    by_id = {e["id"]: e for e in lines if "id" in e}
    assert lines[0]["type"] == "session"
    compaction = lines[1]
    assert compaction["type"] == "compaction" and compaction["parentId"] is None
    # The chain after the compaction: the latest model change, thinking level, session name, extension state.
    chain_types = [e["type"] for e in lines[2:6]]
    assert sorted(chain_types) == ["custom", "model_change", "session_info", "thinking_level_change"]
    assert lines[6]["type"] == "custom_message" and lines[6]["parentId"] == lines[5]["id"]
    assert lines[7]["id"] == compaction["firstKeptEntryId"] and lines[7]["parentId"] == lines[6]["id"]
    # The active leaf is the last line.
    assert lines[-1]["id"] == original.leaf_id
    # The side branch forked inside the summarized part: kept, hanging from the post-compaction message.
    side = [e for e in lines if e.get("type") == "message" and _texts([e["message"]])[0] in SIDE_TEXTS]
    assert len(side) == 2
    assert side[0]["parentId"] == lines[6]["id"] and side[1]["parentId"] == side[0]["id"]
    # The label targeted turn 0's user message, which was summarized: dropped.
    assert not [e for e in lines if e["type"] == "label"]
    # Every parent exists.
    assert all(e.get("parentId") is None or e["parentId"] in by_id for e in lines[1:])
    # pi sees the side branch with the summary in front.
    side_copy = tmp_path / "side" / "s.jsonl"
    side_copy.parent.mkdir()
    shutil.copyfile(path, side_copy)
    with open(side_copy, "ab") as f:  # pi's leaf is the last line: re-point it to the side branch's end
        label = {
            "type": "label",
            "id": "0000beef",
            "parentId": side[1]["id"],
            "timestamp": "2026-01-03T00:00:00.000Z",
            "targetId": side[1]["id"],
            "label": "side",
        }
        f.write(json.dumps(label).encode() + b"\n")
    loaded = pi.load(side_copy)
    assert [m["role"] for m in loaded["messages"]] == ["compactionSummary", "custom", "user", "assistant"]


@pytest.mark.parametrize("mode", MODES)
def test_mode_owner_and_mtime_are_kept(pi: Pi, tmp_path: Path, mode: str) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(6))["path"])
    os.chmod(path, 0o640)
    old = time.time() - 3600
    os.utime(path, (old, old))
    st = path.stat()
    result = commit(path, make_entries(path), mode=mode, state_dir=tmp_path / "state", idle_seconds=30)  # type: ignore[arg-type]
    assert result.committed, result.reason
    after = path.stat()
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (st.st_uid, st.st_gid)
    assert after.st_mtime_ns == st.st_mtime_ns  # pi -c must not start resuming this session
    assert (after.st_ino == st.st_ino) == (mode == "append")


def _prune_plan(path: Path, entries_first_kept: str | None = None) -> dict[str, dict[str, Any]]:
    """Cut every tool result on the branch (after ``entries_first_kept`` when given) to a marker."""
    transcript = read_transcript(path)
    branch = transcript.branch()
    ids = [e["id"] for e in branch]
    start = ids.index(entries_first_kept) if entries_first_kept else 0
    plan: dict[str, dict[str, Any]] = {}
    for entry in branch[start:]:
        message = entry.get("message") or {}
        if message.get("role") == "toolResult":
            new = dict(entry)
            new["message"] = {
                **message,
                "content": [{"type": "text", "text": f"[... truncated; {FULL_TEXT_PLACEHOLDER}]"}],
            }
            plan[entry["id"]] = new
    return plan


@pytest.mark.parametrize("mode", MODES)
def test_pruning_only_commit(pi: Pi, tmp_path: Path, mode: str) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    before = _stage(tmp_path / "before", path)
    plan = _prune_plan(path)
    result = commit(path, None, mode=mode, state_dir=tmp_path / "state", idle_seconds=0, prune=plan)  # type: ignore[arg-type]
    assert result.committed, result.reason
    committed = _stage(tmp_path / "committed", path)
    if mode == "append":
        # OpenClaw's way: the old entries stay, as an abandoned branch; the full texts are still in the file.
        assert path.read_bytes().startswith(before.read_bytes())
    pi.append_exchange(path, "and now?", "now this")
    original, loaded, appended = pi.load_many([before, committed, path])
    assert len(loaded["messages"]) == len(original["messages"])
    results = [m for m in loaded["messages"] if m["role"] == "toolResult"]
    assert len(results) == len(plan) == 6
    for message in results:
        text = message["content"][0]["text"]
        if mode == "rotate":
            assert result.archive is not None
            assert text == f"[... truncated; full text in {Path(result.archive).name}]"
        else:
            assert text.startswith("[... truncated; full text in entry ")
    # Everything else is unchanged, message for message.
    for old, new in zip(original["messages"], loaded["messages"], strict=True):
        if old["role"] != "toolResult":
            assert old == new
    assert unpaired(loaded["messages"]) == []
    assert appended["messages"][:-2] == loaded["messages"]
    assert _texts(appended["messages"][-2:]) == ["and now?", "now this"]


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@pytest.mark.parametrize("mode", MODES)
def test_compaction_with_pruning_of_kept_results(pi: Pi, tmp_path: Path, mode: str) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(8, side_branch=False))["path"])
    entries = make_entries(path, keep_turns=3)
    entries.replacements = _prune_plan(path, entries.compaction["firstKeptEntryId"])
    assert len(entries.replacements) == 3
    result = commit(path, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
    assert result.committed, result.reason
    loaded = pi.load(path)
    roles = [m["role"] for m in loaded["messages"]]
    assert roles[0] == "compactionSummary"
    assert loaded["messages"][0] == summary_message(entries)
    assert (loaded["messages"][1] if mode == "rotate" else loaded["messages"][-1]) == post_message(entries)
    results = [m for m in loaded["messages"] if m["role"] == "toolResult"]
    assert len(results) == 3 and all(m["content"][0]["text"].startswith("[... truncated") for m in results)
    assert unpaired(loaded["messages"]) == []


def test_branch_moved_abandons_the_plan(pi: Pi, tmp_path: Path) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    entries = make_entries(path)
    # The agent went back in the tree to before the cut point and wrote there.
    transcript = read_transcript(path)
    early = transcript.branch()[3]["id"]
    with open(path, "ab") as f:
        entry = {
            "type": "message",
            "id": "feedf00d",
            "parentId": early,
            "timestamp": "2026-01-05T00:00:00.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "elsewhere"}], "timestamp": 1},
        }
        f.write(json.dumps(entry).encode() + b"\n")
    before = path.read_bytes()
    for mode in MODES:
        result = commit(path, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
        assert not result.committed and result.reason == "branch moved"
        assert path.read_bytes() == before


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@pytest.mark.parametrize("mode", MODES)
def test_lines_appended_after_the_plan_are_kept(pi: Pi, tmp_path: Path, mode: str) -> None:
    """The plan was made from a snapshot; the agent wrote more before the commit: those lines stay on the
    branch after the compaction (rotate) or before it (append)."""
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    entries = make_entries(path)
    pi.append_exchange(path, "one more", "sure")
    expected = expected_after(path, entries, mode)
    assert _texts(expected[-3:] if mode == "append" else expected[-2:])[:2] == ["one more", "sure"]
    result = commit(path, entries, mode=mode, state_dir=tmp_path / "state", idle_seconds=0)  # type: ignore[arg-type]
    assert result.committed, result.reason
    assert pi.load(path)["messages"] == expected


@pytest.mark.slow  # waits for archives to age; test_retention keeps retention in the inner loop
def test_retention_keeps_count_and_age(pi: Pi, tmp_path: Path) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(12, side_branch=False))["path"])
    state = tmp_path / "state"
    # An OpenClaw backup with our very name format is never ours to remove.
    foreign = Path(f"{path}.bak.2020-01-01T00-00-00.000Z")
    foreign.write_bytes(b"openclaw's\n")
    made = []
    # Whole seconds: an archive is named by its floored millisecond, which a float like …15.3019998 would
    # put one millisecond before the stamp the assertion below formats.
    now = float(int(time.time()) + 1)  # not before the file was written (the idle check)
    for round_ in range(4):
        entries = make_entries(path, keep_turns=8 - round_)
        result = commit(
            path,
            entries,
            mode="rotate",
            state_dir=state,
            idle_seconds=0,
            archive_keep_count=2,
            now=now + round_,
        )
        assert result.committed, result.reason
        made.append(result.archive)
    existing = [str(p) for p in archives_of(path) if p != foreign]
    assert existing == made[-2:]
    assert foreign.exists()
    # Age: everything older than 1 day goes, whatever the count.
    entries = make_entries(path, keep_turns=3)
    result = commit(
        path,
        entries,
        mode="rotate",
        state_dir=state,
        idle_seconds=0,
        archive_keep_count=10,
        archive_keep_days=1,
        now=now + 3 * 86_400,
    )
    assert result.committed, result.reason
    assert [str(p) for p in archives_of(path) if p != foreign] == [result.archive]
    assert Path(str(result.archive)).name.endswith(utc_stamp(now + 3 * 86_400))


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@pytest.mark.skipif(not REAL, reason="the real pi fixtures are not on this machine")
@pytest.mark.parametrize("mode", MODES)
def test_real_fixture_sessions(pi: Pi, tmp_path: Path, mode: str) -> None:
    staged = []
    for fixture in REAL:
        folder = tmp_path / fixture.stem / "sessions"
        folder.mkdir(parents=True)
        path = folder / fixture.name
        shutil.copyfile(fixture, path)
        os.chmod(path, 0o644)
        staged.append(commit_and_append(pi, path, tmp_path / "state", mode))
    judge(pi, staged)


@pytest.mark.skipif(not FIXTURES.exists(), reason="the real pi fixtures are not on this machine")
def test_rotation_upgrades_an_old_format_file(pi: Pi, tmp_path: Path) -> None:
    """A v1 file (no ids) is rotated into a version 3 successor, as pi's own migration would write it."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = folder / "old.jsonl"
    shutil.copyfile(FIXTURES / "pi-large-session.v1.jsonl", path)
    path.chmod(0o644)
    entries = make_entries(path)
    expected = expected_after(path, entries, "rotate")
    result = commit(path, entries, mode="rotate", state_dir=tmp_path / "state", idle_seconds=0)
    assert result.committed, result.reason
    assert json.loads(path.read_bytes().split(b"\n", 1)[0])["version"] == 3
    loaded = pi.load(path)
    assert not loaded["rewritten"]  # already version 3: pi does not migrate it again
    assert loaded["messages"] == expected
    assert unpaired(loaded["messages"]) == []
