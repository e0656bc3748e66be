"""The incremental tailer: it reads exactly the bytes appended since the last poll, and reloads only when the file
was replaced or shrunk. Costs are asserted in bytes read (``FileCursor.bytes_read``), never in time.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from compactd.core.reader import parse_transcript
from compactd.reading import read_transcript
from compactd.sources.files.tail import Change, FileCursor, _more_lines_than
from compactd.sources.files.tracker import SessionTracker
from hypothesis import given
from hypothesis import strategies as st

from tests.support.scans import OpeningScans

Json = dict[str, Any]


def header(session_id: str = "sess-tail") -> Json:
    return {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2025-06-01T10:00:00.000Z",
        "cwd": "/w",
    }


def entry(n: int, parent: str | None, text: str = "") -> Json:
    role = "user" if n % 2 == 0 else "assistant"
    message: Json
    if role == "user":
        message = {
            "role": "user",
            "content": [{"type": "text", "text": text or f"question {n} é中😀"}],
            "timestamp": n,
        }
    else:
        message = {
            "role": "assistant",
            "content": [{"type": "text", "text": text or f"answer {n}"}],
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1000 + n},
            "stopReason": "stop",
            "timestamp": n,
        }
    return {
        "type": "message",
        "id": f"e{n}",
        "parentId": parent,
        "timestamp": "2025-06-01T10:00:01.000Z",
        "message": message,
    }


def line(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def chain(count: int, start: int = 0, parent: str | None = None) -> list[Json]:
    out = []
    for n in range(start, start + count):
        out.append(entry(n, parent))
        parent = f"e{n}"
    return out


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def new_session(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_bytes(line(header()) + b"".join(line(e) for e in chain(count)))
    return path


# ------------------------------------------------------------------------------------------------------------


def test_first_poll_reads_the_whole_file_then_nothing(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    first = cursor.poll()
    assert first.change is Change.RELOADED
    assert first.transcript is not None and [e["id"] for e in first.transcript.entries] == ["e0", "e1", "e2"]
    assert cursor.bytes_read == path.stat().st_size
    again = cursor.poll()
    assert again.change is Change.UNCHANGED and again.entries == []
    assert cursor.bytes_read == path.stat().st_size


def test_bytes_read_per_update_equal_bytes_appended(tmp_path: Path) -> None:
    """Many appends of random sizes, often ending inside a line or inside a multibyte character."""
    path = new_session(tmp_path, count=1)
    cursor = FileCursor(str(path))
    cursor.poll()
    rng = random.Random(7)
    stream = b"".join(line(e) for e in chain(300, start=1, parent="e0"))
    position = 0
    seen: list[str] = []
    while position < len(stream):
        piece = stream[position : position + rng.randint(1, 700)]
        position += len(piece)
        append(path, piece)
        before = cursor.bytes_read
        update = cursor.poll()
        assert cursor.bytes_read - before == len(piece)
        assert update.change in (Change.APPENDED, Change.UNCHANGED)
        seen.extend(e["id"] for e in update.entries)
        assert update.malformed == 0
    assert seen == [f"e{n}" for n in range(1, 301)]  # every line parsed exactly once, in order
    assert cursor.bytes_read == path.stat().st_size
    assert cursor.offset == path.stat().st_size and cursor.partial == b""


def test_torn_line_is_held_until_complete_then_parsed_once(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    data = line(entry(3, "e2", text="torn 😀 line"))
    cut = data.index("😀".encode()) + 2  # inside the four-byte character
    append(path, data[:cut])
    held = cursor.poll()
    assert held.change is Change.UNCHANGED and held.entries == []
    assert cursor.partial == data[:cut]
    append(path, data[cut:-1])  # everything but the newline: still torn
    assert cursor.poll().entries == []
    append(path, b"\n")
    done = cursor.poll()
    assert done.change is Change.APPENDED
    assert [e["id"] for e in done.entries] == ["e3"]
    assert done.entries[0]["message"]["content"][0]["text"] == "torn 😀 line"
    assert cursor.poll().entries == []
    assert cursor.bytes_read == path.stat().st_size


def test_torn_tail_at_first_poll_is_held(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    data = line(entry(3, "e2"))
    append(path, data[:10])
    cursor = FileCursor(str(path))
    first = cursor.poll()
    assert first.change is Change.RELOADED
    assert first.transcript is not None and first.transcript.leaf_id == "e2"
    assert first.transcript.problems == []  # the held bytes are not the cursor's transcript's torn line
    append(path, data[10:])
    update = cursor.poll()
    assert [e["id"] for e in update.entries] == ["e3"]
    assert cursor.bytes_read == path.stat().st_size


def test_malformed_appended_lines_are_counted_not_returned(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    append(path, b"{broken\n" + line(entry(3, "e2")) + b"[1,2]\n\n")
    update = cursor.poll()
    assert [e["id"] for e in update.entries] == ["e3"]
    assert update.malformed == 1 and update.non_objects == 1


def test_replaced_file_is_reloaded(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    replacement = tmp_path / ".s.jsonl.tmp"
    replacement.write_bytes(line(header("sess-new")) + line(entry(0, None, text="fresh")))
    os.replace(replacement, path)
    update = cursor.poll()
    assert update.change is Change.RELOADED
    assert "inode" in update.reason
    assert update.transcript is not None
    assert update.transcript.session_id == "sess-new"
    assert [e["id"] for e in update.transcript.entries] == ["e0"]
    assert cursor.ino == path.stat().st_ino
    append(path, line(entry(1, "e0")))
    assert [e["id"] for e in cursor.poll().entries] == ["e1"]


def test_replaced_file_of_the_same_size_is_reloaded(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    data = path.read_bytes()
    replacement = tmp_path / ".s.jsonl.tmp"
    replacement.write_bytes(data.replace(b"question 0", b"QUESTION 0"))
    os.replace(replacement, path)
    update = cursor.poll()
    assert update.change is Change.RELOADED
    assert update.transcript is not None
    assert "QUESTION 0" in update.transcript.entries[0]["message"]["content"][0]["text"]


def test_shrunk_file_is_reloaded(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    keep = line(header()) + line(entry(0, None))
    with open(path, "r+b") as handle:
        handle.truncate(len(keep))
    update = cursor.poll()
    assert update.change is Change.RELOADED
    assert update.reason == "shrunk"
    assert update.transcript is not None and update.transcript.leaf_id == "e0"
    assert cursor.offset == len(keep)


def test_shrunk_below_a_held_torn_line_is_reloaded(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    size = path.stat().st_size
    append(path, b'{"type":"message","id":"x')
    cursor.poll()
    with open(path, "r+b") as handle:
        handle.truncate(size + 5)  # still longer than the offset, shorter than offset + held bytes
    assert cursor.poll().change is Change.RELOADED


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "never.jsonl"
    assert FileCursor(str(path)).poll().change is Change.MISSING
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    path.unlink()
    assert cursor.poll().change is Change.MISSING
    path.write_bytes(line(header("sess-back")))
    back = cursor.poll()
    assert back.change is Change.RELOADED
    assert back.transcript is not None and back.transcript.session_id == "sess-back"


def test_missing_file_clears_the_trackers_ledger(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    tracker = SessionTracker(str(path))
    tracker.refresh()
    assert tracker.ledger is not None
    path.unlink()
    assert tracker.refresh().change is Change.MISSING
    assert tracker.ledger is None


def test_symlink_path_is_not_followed(tmp_path: Path) -> None:
    target = new_session(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    cursor = FileCursor(str(link))
    assert cursor.poll().change is Change.MISSING
    assert cursor.bytes_read == 0
    tracker = SessionTracker(str(link))
    assert tracker.refresh().change is Change.MISSING
    assert tracker.ledger is None


def test_path_that_becomes_a_symlink_is_refused(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(line(header("sess-other")))
    cursor = FileCursor(str(path))
    cursor.poll()
    path.unlink()
    path.symlink_to(elsewhere)
    assert cursor.poll().change is Change.MISSING


def test_appending_one_line_to_a_large_transcript_reads_only_that_line(tmp_path: Path) -> None:
    """~20 MB of realistic lines; the append after the first read costs exactly its own bytes."""
    path = tmp_path / "large.jsonl"
    big_output = ("drwxr-xr-x  2 user user 4096 Jun  1 10:00 dir-é-中\n" * 400)[:20_000]
    with open(path, "wb") as handle:
        handle.write(line(header()))
        parent: str | None = None
        n = 0
        while handle.tell() < 20 * 1024 * 1024:
            value = entry(n, parent, text=big_output if n % 2 == 0 else "")
            handle.write(line(value))
            parent = value["id"]
            n += 1
    size = path.stat().st_size
    tracker = SessionTracker(str(path))
    tracker.refresh()
    assert tracker.cursor.bytes_read == size
    assert tracker.ledger is not None and tracker.ledger.entries == n
    extra = line(entry(n, parent, text="one more question"))
    append(path, extra)
    update = tracker.refresh()
    assert update.change is Change.APPENDED
    assert tracker.cursor.bytes_read - size == len(extra)
    assert tracker.reloads == 1
    assert tracker.ledger.leaf_id == f"e{n}"
    assert tracker.ledger.entries == n + 1


def test_reset_forces_a_reload(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    cursor.reset()
    update = cursor.poll()
    assert update.change is Change.RELOADED
    assert update.transcript is not None
    assert update.transcript.entries == read_transcript(path).entries


def test_oversized_torn_line_is_reread_once_complete_and_parsed_once(tmp_path: Path) -> None:
    path = new_session(tmp_path)
    cursor = FileCursor(str(path))
    cursor.poll()
    big = line(entry(3, "e2", text="x" * (3 << 20)))
    for start in range(0, len(big) - 1, 1 << 20):
        append(path, big[start : min(start + (1 << 20), len(big) - 1)])
        assert cursor.poll().entries == []
    append(path, b"\n" + line(entry(4, "e3")))
    update = cursor.poll()
    assert [e["id"] for e in update.entries] == ["e3", "e4"]
    assert cursor.poll().entries == []
    assert cursor.offset == path.stat().st_size


def test_a_giant_unfinished_line_costs_its_appended_bytes_not_a_reread_per_poll(tmp_path: Path) -> None:
    """A line growing past MAX_PARTIAL_BYTES, 64 KiB per poll: each poll reads what was appended, and the
    line's start is read once more only when its newline arrives (before: the whole line on every poll)."""
    from compactd.sources.files.tail import MAX_PARTIAL_BYTES

    path = new_session(tmp_path)
    tracker = SessionTracker(str(path))
    tracker.refresh()
    start = tracker.cursor.bytes_read
    giant = line(entry(3, "e2", text="x" * (4 * MAX_PARTIAL_BYTES)))
    step = 64 * 1024
    appended = 0
    for at in range(0, len(giant) - 1, step):
        piece = giant[at : min(at + step, len(giant) - 1)]  # everything but the newline
        append(path, piece)
        appended += len(piece)
        assert tracker.refresh().change is Change.UNCHANGED
        assert tracker.cursor.bytes_read - start == appended  # the appended bytes, nothing again
    append(path, b"\n")
    update = tracker.refresh()
    assert update.change is Change.APPENDED and [e["id"] for e in update.entries] == ["e3"]
    assert tracker.ledger is not None and tracker.ledger.leaf_id == "e3" and tracker.reloads == 1
    # the one re-read: the line's start, which was too long to keep in memory
    assert tracker.cursor.bytes_read - start <= len(giant) + tracker.cursor.offset
    assert tracker.cursor.bytes_read - start <= 2 * len(giant)
    assert tracker.cursor.partial == b"" and tracker.cursor.offset == path.stat().st_size
    more = line(entry(4, "e3"))
    append(path, more)
    before = tracker.cursor.bytes_read
    assert [e["id"] for e in tracker.refresh().entries] == ["e4"]
    assert tracker.cursor.bytes_read - before == len(more)


# The peak RSS is VmHWM, this process's own: ru_maxrss keeps the parent's peak across fork and exec on Linux.
_COLD_READ = """
import json, sys
from compactd.sources.files.tracker import SessionTracker
tracker = SessionTracker(sys.argv[1])
update = tracker.refresh()
with open("/proc/self/status") as status:
    peak = next(int(row.split()[1]) for row in status if row.startswith("VmHWM:"))
print(json.dumps({
    "rss_kib": peak,
    "change": update.change.value,
    "reason": update.reason,
    "ledger": tracker.ledger is not None,
    "bytes_read": tracker.cursor.bytes_read,
}))
"""


def _cold_read_in_a_subprocess(path: Path) -> dict[str, Any]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _COLD_READ, str(path)], capture_output=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_cold_read_over_the_cap_is_skipped_with_bounded_memory(tmp_path: Path) -> None:
    """No file decides the daemon's memory: one over the line cap (tiny entries: ~1.3 KB of records each
    in the cold read) or over the byte cap is skipped with the reason, its peak RSS near a small file's."""
    from compactd.defaults import MAX_COLD_READ_BYTES, MAX_COLD_READ_LINES

    small = new_session(tmp_path)
    many = tmp_path / "many.jsonl"
    tiny = [line(header())] + [line(e) for e in chain(MAX_COLD_READ_LINES + 20_000)]
    many.write_bytes(b"".join(tiny))
    del tiny
    huge = tmp_path / "huge.jsonl"  # sparse: over the byte cap without taking the disk
    huge.write_bytes(line(header()))
    os.truncate(huge, MAX_COLD_READ_BYTES + (1 << 20))

    base = _cold_read_in_a_subprocess(small)
    assert base["change"] == "reloaded" and base["ledger"]
    lines = _cold_read_in_a_subprocess(many)
    assert lines["change"] == "skipped" and not lines["ledger"]
    assert "too large to read" in lines["reason"] and f"{MAX_COLD_READ_LINES}-line cap" in lines["reason"]
    assert (lines["rss_kib"] - base["rss_kib"]) * 1024 < 2 * many.stat().st_size + (16 << 20)
    size = _cold_read_in_a_subprocess(huge)
    assert size["change"] == "skipped" and not size["ledger"] and size["bytes_read"] == 0
    assert f"{MAX_COLD_READ_BYTES}-byte cap" in size["reason"]
    assert (size["rss_kib"] - base["rss_kib"]) * 1024 < 16 << 20


def test_a_skipped_file_is_not_read_again_until_it_shrinks_or_is_replaced(tmp_path: Path) -> None:
    path = new_session(tmp_path, count=10)
    tracker = SessionTracker(str(path))
    tracker.cursor.max_lines = 5
    update = tracker.refresh()
    assert update.change is Change.SKIPPED and tracker.ledger is None
    assert update.reason == "too large to read: 11 lines, over the 5-line cap"
    read = tracker.cursor.bytes_read
    append(path, line(entry(10, "e9")))
    assert tracker.refresh().change is Change.UNCHANGED  # still too large: it only grew
    assert tracker.cursor.bytes_read == read and tracker.ledger is None
    path.write_bytes(line(header()) + b"".join(line(e) for e in chain(2)))  # shrunk under the cap
    update = tracker.refresh()
    assert update.change is Change.RELOADED and update.reason == "shrunk"
    assert tracker.ledger is not None and tracker.ledger.leaf_id == "e1" and not tracker.cursor.skipped
    tracker.cursor.max_bytes = 10
    replaced = tmp_path / "next.jsonl"
    replaced.write_bytes(line(header()) + line(entry(0, None)))
    os.replace(replaced, path)
    update = tracker.refresh()
    assert update.change is Change.SKIPPED and tracker.ledger is None
    assert update.reason.startswith("too large to read: ") and "over the 10-byte cap" in update.reason


@given(st.lists(st.sampled_from([b"\n", b"x", b"{}"]), max_size=60).map(b"".join), st.integers(0, 30))
def test_the_line_cap_counts_newlines_as_count_does(data: bytes, limit: int) -> None:
    assert _more_lines_than(data, limit) == (data.count(b"\n") > limit)


@pytest.mark.parametrize("cap", [None, 1_000])
def test_a_dry_runs_reading_is_checked_for_nesting_only_when_its_problems_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: int | None
) -> None:
    """A dry run's tracker (``keep_reading``) reads each file lean. Its ledger asks whether the reading is
    committable only for a session that needs a route (``cap_for`` gives a cap): one that fits (None) is never
    scanned for its nesting (``opening_bytes``, 0.5 ns a byte over every byte read), yet its reading's problems,
    once read, hold the deep line where the full reading has it. The cursor's line cap needs no such scan."""
    from compactd.core import reader

    deep: Any = "x"
    for _ in range(reader.MAX_DEPTH + 3):
        deep = [deep]
    rows = chain(6)
    rows[3] = {**rows[3], "deep": deep}
    path = tmp_path / "s.jsonl"
    path.write_bytes(line(header()) + b"".join(line(e) for e in rows))
    append(path, b'{"type":"message","id":"torn","content":[' + b"[" * 300)  # not in the reading
    whole = path.read_bytes()
    complete = whole[: whole.rfind(b"\n") + 1]
    calls = OpeningScans(monkeypatch).sizes
    for max_lines, change in ((6, Change.SKIPPED), (7, Change.RELOADED)):
        cursor = FileCursor(str(path), max_lines=max_lines)
        polled = cursor.poll()
        assert polled.change is change
        assert change is Change.RELOADED or polled.reason == "too large to read: 7 lines, over the 6-line cap"
    tracker = SessionTracker(str(path), cap_for=lambda _ledger: cap, keep_reading=True)
    assert tracker.refresh().change is Change.RELOADED and tracker.ledger is not None
    assert calls == ([] if cap is None else [len(complete)])  # due: committable? (no: nothing counted)
    assert tracker.ledger.reducible is None
    reading, full = tracker.reading, parse_transcript(complete)
    assert reading is not None and reading.lean
    assert [(p.kind, p.line) for p in reading.problems if p.kind == "too_deep"] == [("too_deep", 5)]
    assert reading.problems == full.problems and not reading.committable and calls == [len(complete)]
