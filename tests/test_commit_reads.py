"""The commit's reads (issue 22 item 3): ``pread_all`` gives exactly the bytes asked for, from one buffer.

Real files; the memory figure itself is measured in ``bench/bench_compact.py``, never asserted here.
"""

from __future__ import annotations

import os
from pathlib import Path

from compactd.commit.atomic import READ_CHUNK, open_snapshot, pread_all


def test_pread_all_reads_every_byte_asked_for_and_stops_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    data = os.urandom(3 * READ_CHUNK + 12345)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_all(fd, 0, len(data)) == data
        assert pread_all(fd, READ_CHUNK - 7, 2 * READ_CHUNK) == data[READ_CHUNK - 7 : 3 * READ_CHUNK - 7]
        assert pread_all(fd, len(data) - 10, 100) == data[-10:]  # past the end: what there is
        assert pread_all(fd, len(data), 10) == b""
        assert pread_all(fd, 5, 0) == b""
    finally:
        os.close(fd)


def test_a_snapshot_holds_the_complete_lines_of_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * 900) for i in range(5000))
    path.write_bytes(lines + b'{"torn": ')
    snap = open_snapshot(str(path))
    try:
        assert snap.data == lines
        assert snap.size == len(lines) + len(b'{"torn": ')
    finally:
        snap.close()
