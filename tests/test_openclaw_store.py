"""Following an OpenClaw 2026.9 database: only new rows are read, and the ledger equals a full read.

A real SQLite database in WAL mode (written as the gateway writes one: zstd frames for large rows), filled with
a real pi session (/work/shared/fixtures/real), read by compactd's read-only follower.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from compactd.config import Config
from compactd.core.budget import thresholds
from compactd.core.decision import Figures, Recorded, decide
from compactd.core.ledger import SessionLedger
from compactd.logs import clear_secrets, scrub
from compactd.sources.openclaw import discover
from compactd.sources.openclaw._follower import Follower
from compactd.sources.openclaw._store import Store

from tests.support.openclaw_db import AgentDb, GatewayProcess

FIXTURES = Path("/work/shared/fixtures/real")
SESSION = "0196a3b2-0000-7000-8000-0000000000c1"
KEY = "agent:main:work"


def lines_of(name: str) -> list[bytes]:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"{path} is not here")
    return [line for line in path.read_bytes().split(b"\n") if line.strip()]


def follow(db_path: Path) -> tuple[Store, Follower]:
    store = Store(str(db_path))
    follower = Follower(KEY)
    return store, follower


def refresh(store: Store, follower: Follower) -> int:
    """One refresh; the rows it read."""
    before = store.rows_read
    with store.connect() as conn:
        node = store.node(conn, KEY)
        assert node is not None
        follower.refresh(store, conn, node)
    return store.rows_read - before


def full_read(lines: list[bytes]) -> dict[str, object]:
    return SessionLedger.from_bytes(b"\n".join(lines) + b"\n").figures()


def test_following_reads_only_new_rows_and_equals_a_full_read(tmp_path: Path) -> None:
    lines = lines_of("pi-large-session.v3.jsonl")
    db = AgentDb(tmp_path / "agent" / "openclaw-agent.sqlite")
    db.set_node(KEY, SESSION, {"compactionCount": 0})
    db.append(SESSION, lines[:600])
    frames = db.conn.execute(
        "SELECT count(*) FROM transcript_events WHERE event_zstd IS NOT NULL"
    ).fetchone()[0]
    assert frames > 0  # some rows are zstd frames, as the gateway stores large entries
    store, follower = follow(db.path)
    assert refresh(store, follower) == 600
    assert follower.ledger is not None and follower.ledger.figures() == full_read(lines[:600])
    done = 600
    costs = []
    while done < len(lines):
        batch = lines[done : done + 25]
        db.append(SESSION, batch)
        costs.append((len(batch), refresh(store, follower)))
        done += len(batch)
        assert follower.ledger.figures() == full_read(lines[:done])
    assert all(read == new for new, read in costs)  # the cost is the new rows, not the session
    assert follower.reloads == 1
    assert refresh(store, follower) == 0  # nothing new: nothing read
    db.close()


def test_a_compaction_or_a_rewrite_means_a_full_read(tmp_path: Path) -> None:
    lines = lines_of("pi-before-compaction.v3.jsonl")
    compaction = next(i for i, line in enumerate(lines) if b'"type":"compaction"' in line)
    db = AgentDb(tmp_path / "agent" / "openclaw-agent.sqlite")
    db.set_node(KEY, SESSION, {})
    db.append(SESSION, lines[:compaction])
    store, follower = follow(db.path)
    refresh(store, follower)
    db.append(SESSION, lines[compaction:])  # a compaction entry cannot be folded in from counters
    refresh(store, follower)
    assert follower.ledger is not None and follower.ledger.figures() == full_read(lines)
    assert follower.reloads == 2
    # --max-lines renumbers seq from 0 and bumps the generation: keyed on seq alone, rows below the last
    # seq seen would be missed.
    kept = [lines[0], *lines[-40:]]
    first = json.loads(kept[1])
    first["parentId"] = None
    kept[1] = json.dumps(first).encode()
    db.rewrite(SESSION, kept)
    refresh(store, follower)
    assert follower.ledger.figures() == full_read(kept)
    assert follower.last_seq == len(kept) - 1
    db.close()


def test_openclaw_2026_9_thresholds_through_the_one_decision_point() -> None:
    t = thresholds(32_000)
    assert (t.reserve, t.compact_at, t.flush_at) == (8_000, 24_000, 20_000)
    t = thresholds(200_000)
    assert (t.reserve, t.compact_at, t.flush_at) == (20_000, 180_000, 176_000)
    t = thresholds(10_000)
    assert (t.reserve, t.compact_at, t.flush_at) == (2_500, 7_500, 3_750)
    config = Config.defaults()
    fits = decide(
        config,
        Figures(None, None, 19_999, thresholds="openclaw-2026.9", window=32_000),
        Recorded(flushed_this_cycle=False),
        now=0.0,
    )
    flush = decide(
        config,
        Figures(None, None, 20_000, thresholds="openclaw-2026.9", window=32_000),
        Recorded(flushed_this_cycle=False),
        now=0.0,
    )
    below = decide(
        config,
        Figures(None, None, 23_999, thresholds="openclaw-2026.9", window=32_000),
        Recorded(flushed_this_cycle=True),
        now=0.0,
    )
    compact = decide(
        config,
        Figures(None, None, 24_000, thresholds="openclaw-2026.9", window=32_000),
        Recorded(flushed_this_cycle=True),
        now=0.0,
    )
    assert (fits.action, flush.action, below.action, compact.action) == (
        "fits",
        "flush",
        "fits",
        "compact_only",
    )
    assert flush.flush and not compact.flush


def test_discovery_reads_openclaws_json5_config_and_hides_the_token(tmp_path: Path) -> None:
    state = tmp_path / ".openclaw"
    AgentDb(state / "agents" / "main" / "agent" / "openclaw-agent.sqlite").close()
    (state / "agents" / "old" / "sessions").mkdir(parents=True)  # ≤ 2026.7: JSONL only
    token = "gw-token-5f1e2d3c4b5a"
    (state / "openclaw.json").write_text(
        "// OpenClaw's own config: JSON5\n"
        "{\n"
        f"  gateway: {{ port: 19123, auth: {{ mode: 'token', token: '{token}', }}, }},\n"
        "  models: { providers: { fake: { models: [ { id: 'm1', contextWindow: 64000, }, ], }, }, },\n"
        "  agents: { defaults: { model: { primary: 'fake/m1' }, }, },  /* trailing commas */\n"
        "}\n"
    )
    clear_secrets()
    install = discover({"OPENCLAW_STATE_DIR": str(state), "HOME": str(tmp_path)})
    assert install.config_error is None
    assert install.port == 19123 and install.token == token
    assert [a.agent_id for a in install.agents] == ["main"]
    assert install.agents[0].context_window == 64_000
    assert install.agents[0].workspace == str(state / "workspace")
    assert install.jsonl_agents == (str(state / "agents" / "old"),)
    assert token not in repr(install)
    assert scrub(f"connecting with {token}") == "connecting with ***"
    # Without a token in the config, $OPENCLAW_GATEWAY_TOKEN is used (and hidden as well).
    (state / "openclaw.json").write_text("{gateway: {port: 19124}}")
    clear_secrets()
    install = discover({"OPENCLAW_STATE_DIR": str(state), "OPENCLAW_GATEWAY_TOKEN": "env-token-0a9b8c"})
    assert install.token == "env-token-0a9b8c" and scrub("env-token-0a9b8c") == "***"
    clear_secrets()


def _many_sessions(db: AgentDb, count: int) -> list[str]:
    """``count`` small sessions (a header and a user message each), written in one transaction."""
    ids = [f"0196a3b2-0000-7000-8000-{i:012d}" for i in range(count)]
    db.conn.execute("BEGIN")
    for i, sid in enumerate(ids):
        db.conn.execute(
            "INSERT INTO session_nodes VALUES (?, ?, ?, 0)",
            (f"agent:main:s{i}", sid, json.dumps({"sessionId": sid, "status": "done"})),
        )
        rows = [
            {
                "type": "session",
                "version": 3,
                "id": sid,
                "timestamp": "2026-09-01T00:00:00.000Z",
                "cwd": "/w",
            },
            _message(f"m{i}-0", None, "hello"),
        ]
        for seq, row in enumerate(rows):
            db.conn.execute(
                "INSERT INTO transcript_events (session_id, seq, event_json, created_at) VALUES (?, ?, ?, 0)",
                (sid, seq, json.dumps(row)),
            )
    db.conn.execute("COMMIT")
    return ids


def _message(entry_id: str, parent: str | None, text: str) -> dict[str, object]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-09-01T00:00:01.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1},
    }


def test_a_refresh_costs_the_rows_appended_not_the_sessions_held(tmp_path: Path) -> None:
    """5,000 sessions in one database: after N appended rows a refresh runs O(N) statements and re-reads only
    the sessions with new rows (a new session among them); a rewrite is still seen, and the rescan's full look
    sees what no row says (a node's own change, a deleted session)."""
    from compactd.sources.openclaw._discovery import Agent, Install
    from compactd.sources.openclaw._source import OpenClawSource, session_path

    db = AgentDb(tmp_path / "agent" / "openclaw-agent.sqlite")
    ids = _many_sessions(db, 5_000)
    agent = Agent("main", str(db.path.parent), str(db.path), str(tmp_path / "ws"), 32_000, None, os.getuid())
    source = OpenClawSource(Config.defaults(), {})
    source.refresh(agent)
    assert len(source.sessions) == 5_000
    store = source.stores[agent.database]
    followers = {s.key: s.follower for s in source.sessions.values()}
    before = {key: (f.last_seq, f.reloads) for key, f in followers.items()}
    queries = store.queries

    appended = [7, 1234, 4999]
    for i in appended:
        db.append(ids[i], [json.dumps(_message(f"m{i}-1", f"m{i}-0", "more " * 50)).encode()])
    fresh = "0196a3b2-0000-7000-8000-999999999999"
    db.set_node("agent:main:new", fresh, {"status": "done"})
    db.append(fresh, [json.dumps(_header(fresh)).encode(), json.dumps(_message("n0", None, "hi")).encode()])
    db.set_node("agent:main:s42", ids[42], {"status": "running", "activeWriterRunId": "run-1"})
    source.refresh(agent)

    touched = len(appended) + 1
    assert store.queries - queries <= 5 + 2 * touched  # not one per session held
    moved = {key for key, f in followers.items() if (f.last_seq, f.reloads) != before[key]}
    assert moved == {f"agent:main:s{i}" for i in appended}
    for i in appended:
        follower = followers[f"agent:main:s{i}"]
        assert follower.last_seq == 2 and follower.reloads == 1  # folded in, not re-read
        assert follower.ledger is not None and follower.ledger.leaf_id == f"m{i}-1"
    new = source.sessions[session_path(agent, "agent:main:new")].follower
    assert new.ledger is not None and new.ledger.leaf_id == "n0"

    queries = store.queries
    source.refresh(agent)  # nothing new: a handful of statements
    assert store.queries - queries <= 4

    # A rewrite renumbers seq and bumps the generation: seen at once. A deleted session, a node's own change:
    # seen by the full look.
    db.rewrite(
        ids[3], [json.dumps(_header(ids[3])).encode(), json.dumps(_message("r3-0", None, "re")).encode()]
    )
    db.conn.execute("DELETE FROM session_nodes WHERE session_key = 'agent:main:s4999'")
    db.conn.execute("DELETE FROM transcript_events WHERE session_id = ?", (ids[4999],))
    db.append(ids[5], [json.dumps(_message("m5-1", "m5-0", "after the delete")).encode()])
    source.refresh(agent)
    assert (
        followers["agent:main:s3"].ledger is not None and followers["agent:main:s3"].ledger.leaf_id == "r3-0"
    )
    assert followers["agent:main:s5"].last_seq == 2
    source.install = Install(str(tmp_path), "", 0, None, (agent,), ())
    source.refresh_all()
    assert session_path(agent, "agent:main:s4999") not in source.sessions
    busy = source.sessions[session_path(agent, "agent:main:s42")]
    assert busy.node is not None and busy.node.active_run == "run-1"
    db.close()


def _header(session_id: str) -> dict[str, object]:
    return {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-09-01T00:00:00.000Z",
        "cwd": "/w",
    }


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and mtime."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def differences(before: dict[str, tuple[bytes, int]], after: dict[str, tuple[bytes, int]]) -> list[str]:
    return [name for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]


GATEWAY_STATES = (
    "running",
    "stopped, WAL left empty",
    "stopped, WAL removed",
    "crashed",
    "crashed, -shm gone",
)


def test_reading_changes_nothing_under_the_agent_directory_whatever_the_gateways_state(
    tmp_path: Path,
) -> None:
    lines = lines_of("pi-before-compaction.v3.jsonl")
    half = len(lines) // 2
    changed: dict[str, list[str]] = {}
    for number, state in enumerate(GATEWAY_STATES):
        state_dir = tmp_path / str(number) / ".openclaw"
        agent_dir = state_dir / "agents" / "main"
        gateway = GatewayProcess(agent_dir / "agent" / "openclaw-agent.sqlite")
        try:
            gateway.set_node(KEY, SESSION, {"compactionCount": 0})
            gateway.append(SESSION, lines[:half])
            if state.startswith("stopped"):
                gateway.stop(keep_wal=state == "stopped, WAL left empty")
            elif state.startswith("crashed"):
                gateway.crash()
                wal = gateway.path.with_name(gateway.path.name + "-wal")
                assert wal.stat().st_size > 0  # the transcript is in the WAL, not checkpointed
                if state == "crashed, -shm gone":
                    gateway.path.with_name(gateway.path.name + "-shm").unlink()
            (agent,) = discover({"OPENCLAW_STATE_DIR": str(state_dir)}).agents
            store = Store(agent.database, agent.owner, agent.identity)
            follower = Follower(KEY)
            before = tree(agent_dir)
            refresh(store, follower)
            assert follower.ledger is not None and follower.ledger.figures() == full_read(lines[:half]), state
            changed[state] = differences(before, tree(agent_dir))
            if (
                state == "running"
            ):  # the gateway goes on writing; the reader sees it, and still writes nothing
                gateway.append(SESSION, lines[half:])
                before = tree(agent_dir)
                refresh(store, follower)
                assert follower.ledger.figures() == full_read(lines)
                changed[state] += differences(before, tree(agent_dir))
            assert refresh(store, follower) == 0  # a rescan: nothing new to read, and nothing copied again
            assert store.copies == (1 if state == "crashed, -shm gone" else 0)
            store.drop_copy()
        finally:
            gateway.kill()
    assert changed == {state: [] for state in GATEWAY_STATES}
