"""Agents that keep running across a commit: a live pi session, and a node process appending thousands of
lines while compactd commits again and again (issue 5, proofs 2 and 3)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.commit import LEAF_POINTER_TYPE, commit
from compactd.reading import read_transcript

from tests.support.crash import (
    archives_of,
    expected_after,
    file_lines,
    make_entries,
    seq_of,
    session_ops,
    temp_files,
    unpaired,
)

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"][0].get("text")) if isinstance(m.get("content"), list) else "" for m in messages]


def test_live_pi_session_opened_before_a_rotation_appends_after_it(pi: Pi, tmp_path: Path) -> None:
    path = Path(pi.write(tmp_path / "s", session_ops(8))["path"])
    with pi.LiveSession(path) as live:
        entries = make_entries(path)
        expected = expected_after(path, entries, "rotate")
        result = commit(path, entries, mode="rotate", state_dir=tmp_path / "state", idle_seconds=0)
        assert result.committed, result.reason
        # pi still holds the old leaf in memory and appends from it, into the new file (same path).
        live.append_exchange("question after the rotation", "answer after the rotation")
        live.append_exchange("and another", "fine")
    loaded = pi.load(path)
    assert loaded["messages"][0]["role"] == "compactionSummary"
    assert loaded["messages"] == expected + loaded["messages"][len(expected) :]
    assert _texts(loaded["messages"][len(expected) :]) == [
        "question after the rotation",
        "answer after the rotation",
        "and another",
        "fine",
    ]
    assert unpaired(loaded["messages"]) == []


def test_live_pi_session_bypasses_an_appended_compaction(pi: Pi, tmp_path: Path) -> None:
    """The known limit of append mode: a running agent appends from its in-memory leaf, a sibling of our
    compaction, so on reload the compaction is off the branch and the full history is back (nothing lost)."""
    path = Path(pi.write(tmp_path / "s", session_ops(8))["path"])
    with pi.LiveSession(path) as live:
        before = pi.load(path)
        entries = make_entries(path)
        result = commit(path, entries, mode="append", state_dir=tmp_path / "state", idle_seconds=0)
        assert result.committed, result.reason
        live.append_exchange("question after the append", "answer after the append")
    loaded = pi.load(path)
    assert [m["role"] for m in loaded["messages"]].count("compactionSummary") == 0
    assert loaded["messages"][:-2] == before["messages"]
    assert _texts(loaded["messages"][-2:]) == ["question after the append", "answer after the append"]
    # Our entries are still in the file, on an abandoned branch.
    ids = {e.get("id") for e in file_lines(path)}
    assert entries.compaction["id"] in ids


def _last_seq_written(path: Path, last: int) -> bool:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        return f'"seq {last}"'.encode() in f.read()


@pytest.mark.parametrize("mode", ["rotate", "append"])
def test_torture_node_appender_while_committing(pi: Pi, tmp_path: Path, mode: str) -> None:
    """A node process appends numbered entries by path (appendFileSync, as pi does) while we commit again and
    again with force. Every number must survive exactly once in the live file (plus the archives, for the
    summarized ones), and the live branch as pi loads it must hold every entry after the last cut point."""
    count = 6000
    path = Path(pi.write(tmp_path / "s", session_ops(4, side_branch=False))["path"])
    state = tmp_path / "state"
    appender = pi.Appender(path, count, pause_every=10, pause_ms=5).start()
    results = []
    cuts: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while not _last_seq_written(path, count - 1) and time.monotonic() < deadline and len(results) < 300:
            entries = make_entries(path, keep_turns=6)
            result = commit(
                path,
                entries,
                mode=mode,  # type: ignore[arg-type]
                state_dir=state,
                idle_seconds=30,
                force=True,
                grace_seconds=0.25,
                archive_keep_count=10_000,
            )
            results.append(result)
            if result.committed:
                cuts.append(entries.compaction["firstKeptEntryId"])
    finally:
        written = appender.wait()
    committed = [r for r in results if r.committed]
    reasons = Counter(r.reason for r in results if not r.committed)
    assert len(committed) >= 3, (len(results), reasons)
    if mode == "rotate":
        # The appender never branches: a rotation can only fail if a line went missing ("branch moved").
        assert reasons == Counter(), reasons
    assert written.seqs == list(range(count))

    live = file_lines(path)
    live_seqs = Counter(s for e in live if (s := seq_of(e)) is not None)
    assert max(live_seqs.values()) == 1, "a number appears twice in the live file"
    union = set(live_seqs)
    for archive in archives_of(path):
        union.update(s for e in file_lines(archive) if (s := seq_of(e)) is not None)
    assert union == set(range(count)), f"lost: {sorted(set(range(count)) - union)[:20]}"
    assert temp_files(path.parent) == []
    transcript = read_transcript(path)
    assert not [p for p in transcript.problems if p.kind in ("dangling_parent", "malformed_line")]
    after_torture = tmp_path / "after-torture" / path.name
    after_torture.parent.mkdir()
    after_torture.write_bytes(path.read_bytes())

    # One last commit once the writer is quiet: it must take effect and keep everything after its cut.
    final_entries = make_entries(path, keep_turns=3)
    final = commit(path, final_entries, mode=mode, state_dir=state, idle_seconds=0)  # type: ignore[arg-type]
    assert final.committed, final.reason

    loaded_torture, loaded = pi.load_many([after_torture, path])
    seq_by_id = dict(zip(written.ids, range(count), strict=True))
    # Right after the torture, pi's branch holds every entry written after the last commit's cut point
    # (append mode: every entry, since nothing is ever removed).
    last_cut_seq = seq_by_id.get(cuts[-1], 0) if mode == "rotate" else 0
    branch = set(loaded_torture["branch_ids"])
    missing = [
        seq for seq, entry_id in enumerate(written.ids) if seq >= last_cut_seq and entry_id not in branch
    ]
    assert missing == [], missing[:20]
    if mode == "rotate":
        assert loaded_torture["messages"][0]["role"] == "compactionSummary"
    # After the final commit too, from its own cut point.
    branch = set(loaded["branch_ids"])
    final_cut_seq = seq_by_id.get(final_entries.compaction["firstKeptEntryId"], 0)
    assert all(entry_id in branch for seq, entry_id in enumerate(written.ids) if seq >= final_cut_seq)
    assert loaded["messages"][0]["role"] == "compactionSummary"
    assert unpaired(loaded["messages"]) == []
    pointers = [e for e in live if e.get("customType") == LEAF_POINTER_TYPE]
    carried = sum(r.carried_lines for r in committed)
    rescued = sum(r.rescued_lines for r in committed)
    corrections = sum(r.corrections for r in committed)
    print(
        f"{mode}: {len(results)} commits ({len(committed)} committed, {reasons}), carried {carried}, "
        f"rescued {rescued}, corrections {corrections}, leaf pointers {len(pointers)}"
    )
