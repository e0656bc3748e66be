"""Costs follow the work (issue 17, item 6): each figure is a ratio against a baseline measured in the same run.

(a) OpenClaw: rows appended one at a time to random sessions of a database holding ``--sessions`` sessions,
    each followed by ``OpenClawSource.refresh``: CPU (thread time) and SQL statements per row, ÷ the same with
    ``--few`` sessions. Flat when a refresh costs the rows appended, not the sessions held.
(b) A giant unfinished line: one line grown to ``--line-mb`` in ``--step-kb`` pieces, ``SessionTracker.refresh``
    after each; bytes read ÷ bytes appended, and CPU ÷ the same bytes appended as complete lines.
(c) Cold read: ``SessionTracker.refresh`` of a fresh file in a child process, peak RSS (VmHWM) and wall time
    for a file of ``--tiny-lines`` tiny entries ÷ a small file's.

    python -m bench.bench_costs [--sessions 5000] [--rows 97] [--line-mb 64] [--tiny-lines 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from compactd.config import Config
from compactd.sources.files.tracker import SessionTracker
from compactd.sources.openclaw._discovery import Agent
from compactd.sources.openclaw._source import OpenClawSource

from tests.support.openclaw_db import SCHEMA

_HEADER = {"type": "session", "version": 3, "timestamp": "2026-09-01T00:00:00.000Z", "cwd": "/w"}


def _message(entry_id: str, parent: str | None, text: str) -> bytes:
    return orjson.dumps(
        {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": "2026-09-01T00:00:01.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1},
        }
    )


# --- (a) OpenClaw ---------------------------------------------------------------------------------------------
def _database(path: Path, sessions: int) -> list[str]:
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    ids = [f"0196a3b2-0000-7000-8000-{i:012d}" for i in range(sessions)]
    conn.execute("BEGIN")
    for i, sid in enumerate(ids):
        conn.execute(
            "INSERT INTO session_nodes VALUES (?, ?, ?, 0)",
            (f"agent:main:s{i}", sid, json.dumps({"sessionId": sid, "status": "done"})),
        )
        rows = [orjson.dumps({**_HEADER, "id": sid}), _message(f"m{i}-0", None, "hello")]
        for seq, row in enumerate(rows):
            conn.execute(
                "INSERT INTO transcript_events (session_id, seq, event_json, created_at) VALUES (?, ?, ?, 0)",
                (sid, seq, row.decode()),
            )
    conn.execute("COMMIT")
    conn.close()
    return ids


def _openclaw_once(directory: Path, sessions: int, rows: int, seed: int) -> dict[str, Any]:
    import sqlite3

    db_path = directory / f"s{sessions}" / "agent" / "openclaw-agent.sqlite"
    ids = _database(db_path, sessions)
    agent = Agent("main", str(db_path.parent), str(db_path), str(directory / "ws"), 32_000, None, os.getuid())
    source = OpenClawSource(Config.defaults(), {})
    started = time.thread_time()
    source.refresh(agent)
    first = time.thread_time() - started
    store = source.stores[agent.database]
    writer = sqlite3.connect(db_path, isolation_level=None)
    rng = random.Random(seed)
    seqs = dict.fromkeys(range(sessions), 1)
    cpu = 0.0
    queries = getattr(store, "queries", None)
    for _ in range(rows):
        i = rng.randrange(sessions)
        seqs[i] += 1
        row = _message(f"m{i}-{seqs[i]}", f"m{i}-{seqs[i] - 1}", "more")
        writer.execute(
            "INSERT INTO transcript_events (session_id, seq, event_json, created_at) VALUES (?, ?, ?, 0)",
            (ids[i], seqs[i], row.decode()),
        )
        started = time.thread_time()
        source.refresh(agent)
        cpu += time.thread_time() - started
    writer.close()
    statements = None if queries is None else (store.queries - queries) / rows
    return {"sessions": sessions, "first_refresh_s": round(first, 3), "ms_per_row": cpu * 1000 / rows,
            "statements_per_row": statements}  # fmt: skip


def openclaw(directory: Path, *, sessions: int, few: int, rows: int, seed: int) -> dict[str, Any]:
    small = _openclaw_once(directory, few, rows, seed)
    big = _openclaw_once(directory, sessions, rows, seed)
    return {"few": small, "many": big, "cpu_ratio": round(big["ms_per_row"] / small["ms_per_row"], 2)}


# --- (b) giant unfinished line --------------------------------------------------------------------------------
def giant_line(directory: Path, *, line_mb: float, step_kb: int) -> dict[str, Any]:
    step = step_kb * 1024
    size = int(line_mb * 1024 * 1024)

    def session(name: str) -> tuple[Path, SessionTracker]:
        path = directory / name
        path.write_bytes(orjson.dumps({**_HEADER, "id": name}) + b"\n" + _message("e0", None, "hi") + b"\n")
        tracker = SessionTracker(str(path))
        tracker.refresh()
        return path, tracker

    # the giant line, appended without its newline in pieces, then ended
    path, tracker = session("giant.jsonl")
    line = _message("e1", "e0", "x" * size) + b"\n"
    read, cpu = tracker.cursor.bytes_read, 0.0
    for at in range(0, len(line), step):
        with open(path, "ab") as handle:
            handle.write(line[at : at + step])
        started = time.thread_time()
        tracker.refresh()
        cpu += time.thread_time() - started
    assert tracker.ledger is not None and tracker.ledger.leaf_id == "e1"
    giant_read = tracker.cursor.bytes_read - read
    # the baseline: as many bytes appended as complete lines of the same step
    path, tracker = session("lines.jsonl")
    read, base_cpu, parent, appended = tracker.cursor.bytes_read, 0.0, "e0", 0
    for n in range((len(line) + step - 1) // step):
        piece = _message(f"l{n}", parent, "y" * max(step - 200, 1)) + b"\n"
        parent = f"l{n}"
        appended += len(piece)
        with open(path, "ab") as handle:
            handle.write(piece)
        started = time.thread_time()
        tracker.refresh()
        base_cpu += time.thread_time() - started
    return {
        "line_bytes": len(line),
        "read_over_appended": round(giant_read / len(line), 2),
        "baseline_read_over_appended": round((tracker.cursor.bytes_read - read) / appended, 2),
        "cpu_s": round(cpu, 3),
        "baseline_cpu_s": round(base_cpu, 3),
        "cpu_ratio": round(cpu / max(base_cpu, 1e-6), 2),
    }


# --- (c) cold read --------------------------------------------------------------------------------------------
_CHILD = """
import json, sys, time
from compactd.sources.files.tracker import SessionTracker
started = time.monotonic()
update = SessionTracker(sys.argv[1]).refresh()
seconds = time.monotonic() - started
with open("/proc/self/status") as status:
    peak = next(int(row.split()[1]) for row in status if row.startswith("VmHWM:"))
print(json.dumps({"peak_kib": peak, "seconds": seconds, "change": update.change.value, "reason": update.reason}))
"""


def _child(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, check=True, text=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def cold_read(directory: Path, *, tiny_lines: int) -> dict[str, Any]:
    small = directory / "small.jsonl"
    small.write_bytes(orjson.dumps({**_HEADER, "id": "small"}) + b"\n" + _message("t0", None, "hi") + b"\n")
    many = directory / "many.jsonl"
    with open(many, "wb") as handle:
        handle.write(orjson.dumps({**_HEADER, "id": "many"}) + b"\n")
        parent = None
        for n in range(tiny_lines):
            handle.write(_message(f"t{n}", parent, "hi") + b"\n")
            parent = f"t{n}"
    base, big = _child(small), _child(many)
    return {
        "file_bytes": many.stat().st_size,
        "small": base,
        "many": big,
        "peak_ratio": round(big["peak_kib"] / base["peak_kib"], 2),
        "seconds_ratio": round(big["seconds"] / max(base["seconds"], 1e-6), 1),
    }


def report(result: dict[str, Any]) -> str:
    a, b, c = result["openclaw"], result["giant_line"], result["cold_read"]
    return "\n".join(
        [
            f"(a) openclaw: {a['many']['sessions']} sessions {a['many']['ms_per_row']:.2f} ms/row "
            f"({a['many']['statements_per_row']} statements/row) vs {a['few']['sessions']} sessions "
            f"{a['few']['ms_per_row']:.2f} ms/row: ratio {a['cpu_ratio']}",
            f"(b) giant line of {b['line_bytes']} B: read {b['read_over_appended']}x appended "
            f"(complete lines: {b['baseline_read_over_appended']}x); CPU {b['cpu_s']} s vs {b['baseline_cpu_s']} s "
            f"= {b['cpu_ratio']}x",
            f"(c) cold read of {c['file_bytes']} B: peak {c['many']['peak_kib'] // 1024} MiB vs "
            f"{c['small']['peak_kib'] // 1024} MiB (x{c['peak_ratio']}), {c['many']['seconds']:.2f} s, "
            f"{c['many']['change']}: {c['many']['reason']}",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=5_000)
    parser.add_argument("--few", type=int, default=50)
    parser.add_argument("--rows", type=int, default=97)
    parser.add_argument("--line-mb", type=float, default=64.0)
    parser.add_argument("--step-kb", type=int, default=256)
    parser.add_argument("--tiny-lines", type=int, default=1_000_000)
    parser.add_argument("--parts", default="openclaw,giant_line,cold_read")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sessions, args.few, args.rows, args.line_mb, args.step_kb, args.tiny_lines = (
            60,
            6,
            5,
            2.0,
            256,
            2_000,
        )
    parts = set(args.parts.split(","))
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-costs-") as tmp:
        directory = Path(tmp)
        if "openclaw" in parts:
            result["openclaw"] = openclaw(
                directory, sessions=args.sessions, few=args.few, rows=args.rows, seed=args.seed
            )
        if "giant_line" in parts:
            result["giant_line"] = giant_line(directory, line_mb=args.line_mb, step_kb=args.step_kb)
        if "cold_read" in parts:
            result["cold_read"] = cold_read(directory, tiny_lines=args.tiny_lines)
    if args.json or set(result) != {"openclaw", "giant_line", "cold_read"}:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(report(result) + "\n")
    return result


if __name__ == "__main__":
    main()
