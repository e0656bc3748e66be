"""Incremental tailing: one ~1 KB line appended to a 50 MB transcript costs what it costs on a 5 KB one.

Both files are warm-started through ``SessionTracker.refresh`` (one full read each), then lines are appended to
them alternately (open/O_APPEND/write/close, as the agents do) and each ``refresh`` that folds one in is timed;
the write itself is not. Every update must read exactly the bytes appended (``FileCursor.bytes_read``) and never
reload. For comparison, the full re-read + parse + ledger of the big file (what a reload costs).

    python -m bench.bench_tail [--big-mb 50] [--small-kb 5] [--appends 2000] [--line-bytes 1024]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from compactd.sources.files.tail import Change
from compactd.sources.files.tracker import SessionTracker

from bench.corpus import generate_session

DEFAULT_BIG_MB = 50.0
DEFAULT_SMALL_KB = 5.0
DEFAULT_APPENDS = 2000
DEFAULT_LINE_BYTES = 1024
DEFAULT_REPARSE_RUNS = 3


def append_line(path: str | os.PathLike[str], line: bytes) -> None:
    """One line by path, the way pi's appendFileSync writes it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


_FILLER = "tail the cursor, read the offset, append to the ledger; 日本語 inode bytes " * 64


def make_line(parent_id: str | None, entry_id: str, size: int, index: int, rng: random.Random) -> bytes:
    """A message entry of exactly ``size`` bytes (newline included) extending ``parent_id``.

    Lines alternate between a user prompt and an assistant answer with usage, so the ledger's anchor and
    trailing paths both run.
    """
    timestamp = 1_767_225_600_000 + index * 1000
    if index % 2:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": [{"type": "text", "text": ""}],
            "api": "anthropic-messages",
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {
                "input": 3,
                "output": 41,
                "cacheRead": 10_000 + index,
                "cacheWrite": 0,
                "totalTokens": 10_044 + index,
            },
            "stopReason": "stop",
            "timestamp": timestamp,
        }
    else:
        message = {"role": "user", "content": [{"type": "text", "text": ""}], "timestamp": timestamp}
    entry = {
        "type": "message",
        "id": entry_id,
        "parentId": parent_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": message,
    }
    bare = len(orjson.dumps(entry)) + 1
    if bare > size:
        raise ValueError(f"line size {size} is below the entry's {bare} bytes of structure")
    start = rng.randrange(len(_FILLER) // 2)
    # Cut by bytes (the filler has 3-byte CJK), dropping a split character, then pad with ASCII to the byte.
    text = _FILLER.encode()[start:][: size - bare].decode("utf-8", "ignore")
    text += "x" * (size - bare - len(text.encode()))
    message["content"][0]["text"] = text
    line = orjson.dumps(entry) + b"\n"
    assert len(line) == size, (len(line), size)
    return line


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(us: list[float]) -> dict[str, float]:
    return {
        "median_us": round(statistics.median(us), 2),
        "p90_us": round(_pct(us, 0.9), 2),
        "p99_us": round(_pct(us, 0.99), 2),
        "max_us": round(max(us), 2),
    }


def run(
    *,
    big_mb: float = DEFAULT_BIG_MB,
    small_kb: float = DEFAULT_SMALL_KB,
    appends: int = DEFAULT_APPENDS,
    line_bytes: int = DEFAULT_LINE_BYTES,
    reparse_runs: int = DEFAULT_REPARSE_RUNS,
    seed: int = 3,
    directory: Path | None = None,
) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="compactd-bench-tail-") as tmp:
        root = directory or Path(tmp)
        files = {"big": root / "big.jsonl", "small": root / "small.jsonl"}
        generate_session(files["big"], int(big_mb * 1_000_000), seed)
        generate_session(files["small"], int(small_kb * 1000), seed + 1)
        sizes = {name: path.stat().st_size for name, path in files.items()}

        trackers = {name: SessionTracker(str(path)) for name, path in files.items()}
        warm_ms: dict[str, float] = {}
        for name, tracker in trackers.items():
            start = time.perf_counter()
            update = tracker.refresh()
            warm_ms[name] = (time.perf_counter() - start) * 1000
            assert update.change is Change.RELOADED and tracker.ledger is not None

        times: dict[str, list[float]] = {name: [] for name in files}
        floor: list[float] = []
        exact: dict[str, int] = {name: 0 for name in files}
        reads: dict[str, set[int]] = {name: set() for name in files}
        reloads_before = {name: t.reloads for name, t in trackers.items()}
        order = list(files)
        counter = 0
        gc.collect()
        for index in range(appends):
            rng.shuffle(order)
            for name in order:
                tracker = trackers[name]
                assert tracker.ledger is not None
                counter += 1
                line = make_line(
                    tracker.ledger.leaf_id, f"{0xB0000000 + counter:08x}", line_bytes, index, rng
                )
                append_line(files[name], line)
                before = tracker.cursor.bytes_read
                entries_before = tracker.ledger.entries
                start = time.perf_counter_ns()
                update = tracker.refresh()
                elapsed = time.perf_counter_ns() - start
                read = tracker.cursor.bytes_read - before
                reads[name].add(read)
                ok = (
                    update.change is Change.APPENDED
                    and len(update.entries) == 1
                    and read == len(line)
                    and tracker.ledger is not None
                    and tracker.ledger.entries == entries_before + 1
                )
                exact[name] += ok
                times[name].append(elapsed / 1000)
                if name == "big":
                    floor.append(_floor_us(files[name], len(line)))

        # What a reload costs: a fresh tracker reads, parses and folds the whole big file.
        reparse_ms = []
        for _ in range(reparse_runs):
            gc.collect()
            fresh = SessionTracker(str(files["big"]))
            start = time.perf_counter()
            fresh.refresh()
            reparse_ms.append((time.perf_counter() - start) * 1000)
        matches = {name: fresh_figures(files[name]) == _figures(trackers[name]) for name in files}

    result: dict[str, Any] = {
        "appends": appends,
        "line_bytes": line_bytes,
        "file_bytes": sizes,
        "warm_start_ms": {k: round(v, 2) for k, v in warm_ms.items()},
        "big": _summary(times["big"]),
        "small": _summary(times["small"]),
        "bytes_read_per_update": {name: sorted(v) for name, v in reads.items()},
        "bytes_appended_per_update": line_bytes,
        "updates_exact": exact,
        "reloads_during_appends": {name: t.reloads - reloads_before[name] for name, t in trackers.items()},
        "ledger_matches_full_read": matches,
        "full_reparse_big_ms": round(min(reparse_ms), 2),
        "full_reparse_big_ms_median": round(statistics.median(reparse_ms), 2),
    }
    result["floor"] = _summary(floor)
    result["big_over_floor"] = round(result["big"]["median_us"] / result["floor"]["median_us"], 2)
    result["ratio_big_small"] = round(result["big"]["median_us"] / result["small"]["median_us"], 3)
    result["reparse_over_append"] = round(result["full_reparse_big_ms"] * 1000 / result["big"]["median_us"])
    result["bytes_read_equals_appended"] = all(v == {line_bytes} for v in reads.values()) and all(
        n == appends for n in exact.values()
    )
    return result


def _floor_us(path: Path, size: int) -> float:
    """The same update done bare (design.md §7.7's "reopen + seek"): open, fstat, pread the last line,
    close, ``orjson.loads``. Timed on the same file right after our update, so noise hits both alike."""
    start = time.perf_counter_ns()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        end = os.fstat(fd).st_size
        data = os.pread(fd, size, end - size)
    finally:
        os.close(fd)
    orjson.loads(data)
    return (time.perf_counter_ns() - start) / 1000


def _figures(tracker: SessionTracker) -> dict[str, Any] | None:
    ledger = tracker.ledger
    return ledger.figures() if ledger is not None else None


def fresh_figures(path: Path) -> dict[str, Any] | None:
    tracker = SessionTracker(str(path))
    tracker.refresh()
    return _figures(tracker)


def report(r: dict[str, Any]) -> str:
    lines = [
        f"files: big {r['file_bytes']['big'] / 1e6:.1f} MB, small {r['file_bytes']['small'] / 1e3:.1f} KB; "
        f"{r['appends']} appends of {r['line_bytes']} B to each, interleaved",
        f"{'file':<6} {'median µs':>10} {'p90':>8} {'p99':>8} {'max':>9}",
    ]
    for name in ("big", "small"):
        s = r[name]
        lines.append(
            f"{name:<6} {s['median_us']:>10.1f} {s['p90_us']:>8.1f} {s['p99_us']:>8.1f} {s['max_us']:>9.1f}"
        )
    f = r["floor"]
    lines.append(
        f"{'floor':<6} {f['median_us']:>10.1f} {f['p90_us']:>8.1f} {f['p99_us']:>8.1f} {f['max_us']:>9.1f}"
        "   (open+fstat+pread+close+orjson.loads of the same line, no ledger)"
    )
    lines += [
        f"ratio big/small (medians): {r['ratio_big_small']}; big / floor: {r['big_over_floor']}",
        f"bytes read per update: big {r['bytes_read_per_update']['big']}, small {r['bytes_read_per_update']['small']} "
        f"(appended {r['bytes_appended_per_update']}); exact updates {r['updates_exact']}; "
        f"reloads {r['reloads_during_appends']}",
        f"incremental ledger == full read: {r['ledger_matches_full_read']}",
        f"full re-read + parse + ledger of big: {r['full_reparse_big_ms']:.1f} ms (median "
        f"{r['full_reparse_big_ms_median']:.1f}) = {r['reparse_over_append']}x one append",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_tail", description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-mb", type=float, default=DEFAULT_BIG_MB)
    parser.add_argument("--small-kb", type=float, default=DEFAULT_SMALL_KB)
    parser.add_argument("--appends", type=int, default=DEFAULT_APPENDS)
    parser.add_argument("--line-bytes", type=int, default=DEFAULT_LINE_BYTES)
    parser.add_argument("--reparse-runs", type=int, default=DEFAULT_REPARSE_RUNS)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to write the two files (default: a temp dir)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.big_mb, args.appends, args.reparse_runs = 0.2, 20, 1
    result = run(
        big_mb=args.big_mb,
        small_kb=args.small_kb,
        appends=args.appends,
        line_bytes=args.line_bytes,
        reparse_runs=args.reparse_runs,
        seed=args.seed,
        directory=args.dir,
    )
    sys.stdout.write((orjson.dumps(result).decode() if args.json else report(result)) + "\n")
    return result


if __name__ == "__main__":
    main()
