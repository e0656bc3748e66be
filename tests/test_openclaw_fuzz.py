"""Differential fuzz of OpenClaw 2026.9 databases: mutated types, sizes, frames and schema objects.

The rule: a row OpenClaw itself would write is read as OpenClaw reads it (its JSON text, or the JSON in its zstd
frame); anything else fails only its session (a bad row) or only its agent (a database that is not OpenClaw's
schema). Each mutant is a real SQLite file (tests/support/openclaw_db.py; untyped columns, so a value stays
what the writer gave) holding three sessions; one of them, or the database itself, is mutated. compactd's
OpenClaw source reads it in-process (``once``) and must never raise; the untouched sessions must read exactly
as before, and a second agent beside it must not notice. Seeded and bounded (``MUTANTS``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import zstandard
from compactd.config import Config
from compactd.core.ledger import SessionLedger
from compactd.sources import one_pass
from compactd.sources.openclaw import OpenClawSource
from compactd.sources.openclaw._store import MAX_EVENT_BYTES

from bench.corpus import session_bytes
from tests.support.openclaw_db import AgentDb

SEED = 20_261_203
MUTANTS = 48
SESSIONS = (("agent:main:a", "s-a"), ("agent:main:b", "s-b"), ("agent:main:c", "s-c"))
TARGET_KEY, TARGET_ID = SESSIONS[1]

# A mutation writes the target session; for a row OpenClaw would write, it returns the lines OpenClaw reads.
Mutation = Callable[[AgentDb, random.Random, list[bytes]], list[bytes] | None]


def lines_of(seed: int) -> list[bytes]:
    """A generated coding session's lines (a header first), small enough for many mutants."""
    data, _ = session_bytes(60_000, seed=seed)
    return [line for line in data.split(b"\n") if line.strip()][:40]


def tokens_of(lines: list[bytes]) -> int:
    return SessionLedger.from_bytes(b"\n".join(lines) + b"\n").planning_tokens


def _frame(data: bytes, *, size: bool = True) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=size).compress(data)


def rle_bomb(size: int, *, declared: bool) -> bytes:
    """A valid zstd frame of ``size`` spaces made of RLE blocks (4 bytes per 128 KiB), its content size in the
    header or not: what a 65 KB frame claiming 2 GiB is, scaled down."""
    block = 128 * 1024
    header = b"\x28\xb5\x2f\xfd" + (bytes([0xE0]) + size.to_bytes(8, "little") if declared else b"\x00\x70")
    blocks = []
    left = size
    while left:
        n = min(block, left)
        left -= n
        blocks.append(((n << 3) | (1 << 1) | (0 if left else 1)).to_bytes(3, "little") + b" ")
    return header + b"".join(blocks)


# --- rows OpenClaw itself would write (read as OpenClaw reads them) ------------------------------------------


def as_frames(db: AgentDb, rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """Every row after the header as a zstd frame (OpenClaw frames large rows; any frame decodes the same)."""
    db.append(TARGET_ID, lines[:1])
    for seq, line in enumerate(lines[1:], start=1):
        db.put_event(TARGET_ID, seq, None, event_zstd=_frame(line), size=len(line), navigation="{}")
    return lines


def respaced(db: AgentDb, rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """The same JSON with another layout (OpenClaw parses what it stored)."""
    db.append(TARGET_ID, [orjson.dumps(orjson.loads(line), option=orjson.OPT_INDENT_2) for line in lines])
    return lines


def large_text(db: AgentDb, rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """An entry over the largest OpenClaw compresses: it stays JSON text (within SQLite's 64 MiB read limit)."""
    big = orjson.dumps({"type": "custom", "customType": "x", "data": "a" * (MAX_EVENT_BYTES + 1)})
    db.append(TARGET_ID, [*lines, big])
    return [*lines, big]


VALID: dict[str, Mutation] = {"as frames": as_frames, "respaced": respaced, "large text": large_text}


# --- rows OpenClaw would not write (that session fails, alone) ------------------------------------------------


def _spoil(value: Callable[[random.Random, int, bytes], dict[str, Any]]) -> Mutation:
    """The session written, then one row after the header replaced by what ``value`` gives."""

    def mutate(db: AgentDb, rng: random.Random, lines: list[bytes]) -> None:
        at = rng.randrange(1, len(lines))
        db.append(TARGET_ID, lines[:at])
        row = {"event_json": lines[at].decode(), **value(rng, at, lines[at])}
        db.put_event(TARGET_ID, row.pop("seq", at), row.pop("event_json"), **row)

    return mutate


def _typed(rng: random.Random) -> Any:
    return rng.choice(["text", 1.5, -3, b"\x00blob", 2**62])


INVALID: dict[str, Mutation] = {
    "seq of another type": _spoil(lambda rng, at, line: {"seq": rng.choice(["7", 7.5, b"7"])}),
    "event_json of another type": _spoil(lambda rng, at, line: {"event_json": rng.choice([1.5, 42, b"{}"])}),
    "event_json not JSON": _spoil(lambda rng, at, line: {"event_json": line.decode()[: len(line) // 2]}),
    "event_json not an object": _spoil(lambda rng, at, line: {"event_json": rng.choice(["[1]", "3", '"x"'])}),
    "frame of garbage": _spoil(
        lambda rng, at, line: {
            "event_json": None,
            "event_zstd": rng.randbytes(64),
            "size": 64,
            "navigation": "{}",
        }
    ),
    "frame cut short": _spoil(
        lambda rng, at, line: {
            "event_json": None,
            "event_zstd": _frame(line)[: max(1, len(_frame(line)) // 2)],
            "size": len(line),
            "navigation": "{}",
        }
    ),
    "frame inflating past OpenClaw's limit": _spoil(
        lambda rng, at, line: {
            "event_json": None,
            "event_zstd": rle_bomb(16 * MAX_EVENT_BYTES, declared=rng.random() < 0.5),
            "size": 100,
            "navigation": "{}",
        }
    ),
    "frame size of another type": _spoil(
        lambda rng, at, line: {
            "event_json": None,
            "event_zstd": _frame(line),
            "size": _typed(rng),
            "navigation": "{}",
        }
    ),
    "created_at of another type": _spoil(lambda rng, at, line: {"created_at": rng.choice(["noon", b"\x01"])}),
}


def entry_json_spoiled(db: AgentDb, rng: random.Random, lines: list[bytes]) -> None:
    db.append(TARGET_ID, lines)
    value = rng.choice([2.5, b"{}", "{", "[1]", 7])
    db.conn.execute("UPDATE session_nodes SET entry_json = ? WHERE session_key = ?", (value, TARGET_KEY))


INVALID["entry_json spoiled"] = entry_json_spoiled


# --- databases that are not OpenClaw's schema (that agent fails, alone) --------------------------------------


def events_a_view(db: AgentDb, rng: random.Random, lines: list[bytes]) -> None:
    db.append(TARGET_ID, lines)
    db.conn.executescript(
        "ALTER TABLE transcript_events RENAME TO real_events;"
        "CREATE VIEW transcript_events AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        "SELECT e.* FROM real_events e, n;"
    )


def nodes_missing(db: AgentDb, rng: random.Random, lines: list[bytes]) -> None:
    db.append(TARGET_ID, lines)
    db.conn.execute("DROP TABLE session_nodes")


SCHEMA: dict[str, Mutation] = {
    "transcript_events a recursive view": events_a_view,
    "no session_nodes": nodes_missing,
}


def build(root: Path, mutation: Mutation, rng: random.Random, lines: list[bytes]) -> list[bytes] | None:
    db = AgentDb(root / "agents" / "main" / "agent" / "openclaw-agent.sqlite", strict=False)
    for key, session_id in SESSIONS:
        db.set_node(key, session_id, {"status": "done"})
        if session_id != TARGET_ID:
            db.append(session_id, lines)
    read = mutation(db, rng, lines)
    db.close()
    other = AgentDb(root / "agents" / "other" / "agent" / "openclaw-agent.sqlite")
    other.set_node("agent:other:x", "s-x", {"status": "done"})
    other.append("s-x", lines[:20])
    other.close()
    return read


def rows_of(root: Path, state: Path) -> list[dict[str, Any]]:
    config = Config.from_mapping({"openclaw": {"state_dir": str(root)}, "state_dir": str(state)})
    rows: list[dict[str, Any]] = [o.as_json() for o in anyio.run(one_pass, OpenClawSource(config, {}))]
    return rows


@pytest.mark.slow
def test_openclaw_rows_read_as_openclaw_reads_them_or_fail_alone(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    lines = lines_of(SEED)
    whole, other = tokens_of(lines), tokens_of(lines[:20])
    kinds = [("valid", n, m) for n, m in VALID.items()]
    kinds += [("invalid", n, m) for n, m in INVALID.items()]
    kinds += [("schema", n, m) for n, m in SCHEMA.items()]
    failures: list[str] = []
    seen: set[str] = set()
    for index in range(MUTANTS):
        kind, name, mutation = kinds[index] if index < len(kinds) else rng.choice(kinds)
        seen.add(name)
        root = tmp_path / f"{index:03d}"
        try:
            read = build(root / "openclaw", mutation, rng, lines)
            rows = rows_of(root / "openclaw", root / "state")
            by_key = {r["session_key"]: r for r in rows if r.get("session_key")}
            agents = [r for r in rows if not r.get("session_key")]
            # The other agent never notices.
            assert by_key["agent:other:x"]["tokens"] == other, by_key.get("agent:other:x")
            if kind == "schema":
                assert [r["action"] for r in agents] == ["failed"], rows
                assert not any(k.startswith("agent:main:") for k in by_key), rows
                continue
            assert agents == [], rows
            for key, _ in SESSIONS:
                if key != TARGET_KEY:
                    assert by_key[key]["action"] == "fits" and by_key[key]["tokens"] == whole, by_key[key]
            target = by_key[TARGET_KEY]
            if kind == "valid":
                assert read is not None
                assert target["action"] == "fits" and target["tokens"] == tokens_of(read), target
            else:
                assert target["action"] == "failed" and target["stage"] == "read", target
        except Exception as exc:  # every mutant is checked; the report lists each one that failed
            failures.append(f"{index:03d} {kind} {name}: {exc!r}"[:1200])
    assert not failures, f"{len(failures)} mutants failed:\n" + "\n".join(failures[:12])
    assert seen == {*VALID, *INVALID, *SCHEMA}
