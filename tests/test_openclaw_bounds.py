"""Whatever an OpenClaw agent's database holds, reading it takes bounded memory and time (issue 17, item 4).

Each database is a real SQLite file; what a read costs is measured in a fresh subprocess (its peak RSS),
and what ``compactd`` does with it by running the real command.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
import zstandard
from compactd.sources.openclaw._store import MAX_ROW_BYTES, Store, StoreError

from tests.support.cli import INHERITED_NOT, REPO, compactd
from tests.support.openclaw_db import SCHEMA, AgentDb

SESSION = "0196a3b2-0000-7000-8000-0000000000c1"
KEY = "agent:main:work"
HEADER = orjson.dumps({"type": "session", "version": 3, "id": SESSION, "timestamp": "2026-09-01T00:00:00Z"})
# A CTE with no end: every read of this view runs until it is stopped (or memory runs out).
ENDLESS_VIEW = """
CREATE VIEW transcript_events AS
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n)
SELECT '{session}' AS session_id, i AS seq, '{{}}' AS event_json, 0 AS created_at, NULL AS event_zstd,
       NULL AS event_utf8_bytes, NULL AS navigation_json FROM n;
"""
ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"


def agent_db(state: Path, agent: str = "main") -> AgentDb:
    db = AgentDb(state / "agents" / agent / "agent" / "openclaw-agent.sqlite")
    db.set_node(KEY, SESSION, {"compactionCount": 0})
    db.append(SESSION, [HEADER])
    return db


def insert_raw(db: AgentDb, seq: int, text: str | None, frame: bytes | None, size: int | None) -> None:
    db.conn.execute(
        "INSERT INTO transcript_events VALUES (?, ?, ?, 0, ?, ?, ?)",
        (SESSION, seq, text, frame, size, None if frame is None else '{"version":1}'),
    )


def read_in_subprocess(path: Path) -> tuple[str, int]:
    """Read every event of the session in a fresh interpreter: (the outcome, its peak RSS in bytes).

    The peak is the new program's ``VmHWM``: ``ru_maxrss`` would keep the forking test process's peak."""
    script = f"""
import re
from compactd.sources.openclaw._store import Store, StoreError
store = Store({str(path)!r})
try:
    with store.connect() as conn:
        outcome = "read %d events" % len(store.events(conn, {SESSION!r}))
except StoreError as exc:
    outcome = "refused: %s" % exc
print(outcome)
with open("/proc/self/status") as fh:
    print(int(re.search(r"VmHWM:\\s*(\\d+) kB", fh.read()).group(1)) * 1024)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    outcome, rss = done.stdout.strip().splitlines()
    return outcome, int(rss)


def test_a_frame_declaring_2_gib_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    claimed = 2 << 30
    writer = zstandard.ZstdCompressor(level=1).compressobj(size=claimed)
    chunk = bytes(16 << 20)
    frame = b"".join([*(writer.compress(chunk) for _ in range(claimed // len(chunk))), writer.flush()])
    assert len(frame) < 100_000 and zstandard.get_frame_parameters(frame).content_size == claimed
    db = agent_db(tmp_path)
    insert_raw(db, 1, None, frame, 4096)  # the row claims a small entry; the frame's header 2 GiB
    db.close()
    outcome, rss = read_in_subprocess(db.path)
    assert outcome.startswith("refused:") and "declares 2147483648 bytes" in outcome
    assert rss < 128 << 20  # python-zstandard inflated it in full before (2.1 GB)


def test_a_frame_giving_more_than_its_row_says_stops_at_the_row_size(tmp_path: Path) -> None:
    data = b'{"type":"message","pad":"' + b"x" * (3 << 20) + b'"}'
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    db = agent_db(tmp_path)
    insert_raw(db, 1, None, frame, 5000)
    db.close()
    outcome, _ = read_in_subprocess(db.path)
    assert outcome.startswith(f"refused: cannot read {db.path}: event ")
    assert outcome.endswith(": zstd frame gave more than 5000 bytes, the row says 5000")


def test_a_row_larger_than_openclaw_reads_is_refused_without_fetching_it(tmp_path: Path) -> None:
    db = agent_db(tmp_path)
    pad = MAX_ROW_BYTES + 1 - len(b'{"type":"custom","data":""}')
    insert_raw(db, 1, '{"type":"custom","data":"' + "x" * pad + '"}', None, None)
    db.close()
    outcome, rss = read_in_subprocess(db.path)
    assert outcome.startswith("refused:") and f"larger than {MAX_ROW_BYTES} bytes" in outcome
    assert rss < MAX_ROW_BYTES  # neither SQLite nor Python held the row


@pytest.mark.parametrize(
    "ddl",
    [
        pytest.param(ENDLESS_VIEW, id="recursive-view"),
        pytest.param(
            "CREATE TABLE transcript_events (session_id TEXT, seq INTEGER, event_json TEXT GENERATED ALWAYS AS "
            "(printf('%.*c', 1000000000, 'x')) VIRTUAL, created_at INTEGER, event_zstd BLOB, "
            "event_utf8_bytes INTEGER, navigation_json TEXT)",
            id="generated-column",
        ),
    ],
)
def test_a_transcript_table_that_runs_code_is_refused(tmp_path: Path, ddl: str) -> None:
    path = tmp_path / "agent" / "openclaw-agent.sqlite"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.replace("CREATE TABLE IF NOT EXISTS transcript_events", "CREATE TABLE unused"))
    conn.executescript(ddl.format(session=SESSION))
    conn.close()
    store = Store(str(path))
    refused = r"transcript_events (is view|lacks the plain columns event_json)"
    with pytest.raises(StoreError, match=refused), store.connect() as conn:
        store.events(conn, SESSION)


def test_every_query_has_a_deadline(tmp_path: Path) -> None:
    db = agent_db(tmp_path)
    db.close()
    store = Store(str(db.path), query_seconds=0.5)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"a query took longer than 0\.5s"), store.connect() as conn:
        conn.execute(ENDLESS).fetchall()
    assert time.monotonic() - started < 10


def test_stop_ends_a_query_under_way_in_another_thread(tmp_path: Path) -> None:
    db = agent_db(tmp_path)
    db.close()
    store = Store(str(db.path))
    outcome: list[BaseException] = []
    running = threading.Event()

    def read() -> None:
        try:
            with store.connect() as conn:
                running.set()
                conn.execute(ENDLESS).fetchall()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert running.wait(10)
    store.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert [str(e) for e in outcome] == [f"cannot read {db.path}: stopping"]


def env_for(tmp_path: Path, state: Path) -> tuple[Path, dict[str, str]]:
    config = tmp_path / "compactd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(tmp_path / "no-files" / "*")], "idle_seconds": 1},
                "service": {"rescan_seconds": 1, "status_refresh_seconds": 0.2},
            }
        )
    )
    return config, {
        "STATE_DIRECTORY": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"),
        "OPENCLAW_STATE_DIR": str(state),
        "OPENCLAW_CONFIG_PATH": str(state / "openclaw.json"),
    }


def endless_agent(state: Path) -> Path:
    """An agent whose ``transcript_events`` is the endless view (every other table OpenClaw's)."""
    path = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.replace("CREATE TABLE IF NOT EXISTS transcript_events", "CREATE TABLE unused"))
    conn.executescript(ENDLESS_VIEW.format(session=SESSION))
    conn.execute(
        "INSERT INTO session_nodes VALUES (?, ?, ?, 0)",
        (KEY, SESSION, orjson.dumps({"sessionId": SESSION}).decode()),
    )
    conn.commit()
    conn.close()
    return path


def test_once_finishes_on_a_recursive_view(tmp_path: Path) -> None:
    state = tmp_path / "openclaw"
    endless_agent(state)
    config, env = env_for(tmp_path, state)
    done = compactd("once", "--config", str(config), env=env, timeout=30)
    assert done.returncode == 1, done.stderr  # the agent's failure, reported; the command ends
    assert "transcript_events is view, not a table" in done.stderr


def test_a_fifo_openclaw_json_is_refused_without_blocking(tmp_path: Path) -> None:
    state = tmp_path / "openclaw"
    state.mkdir()
    os.mkfifo(state / "openclaw.json")  # nobody ever writes it: a blocking open would wait for ever
    config, env = env_for(tmp_path, state)
    done = compactd("once", "--config", str(config), env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "is not a regular file" in done.stderr and "(a FIFO)" in done.stderr


def test_run_ends_on_sigterm_while_its_worker_reads_an_endless_view(tmp_path: Path) -> None:
    state = tmp_path / "openclaw"
    endless_agent(state)
    config, env = env_for(tmp_path, state)
    base = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    log = tmp_path / "compactd.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--config", str(config)],
            cwd=REPO,
            env={**base, **env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while b"action=ready" not in log.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        # the openclaw source has looked at the agent (or is looking: with the starting code, for ever)
        while b"action=watching" not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "state" / "sessions.json").exists() or b"action=stopped" in log.read_bytes()
    assert b"action=stopped" in log.read_bytes()


def test_a_gateway_call_waiting_for_a_compaction_ends_when_cancelled() -> None:
    """A compaction may take minutes; ``stop()`` cancels the call, so SIGTERM does not wait for it."""
    from compactd.sources.openclaw._gateway import GatewayError, call
    from websockets.sync.server import serve

    asked = threading.Event()

    def gateway(ws: Any) -> None:  # answers the connect, then never the compaction
        ws.send(
            orjson.dumps({"type": "event", "event": "connect.challenge", "payload": {"nonce": "n"}}).decode()
        )
        for text in ws:
            frame = orjson.loads(text)
            if frame["method"] == "connect":
                ws.send(orjson.dumps({"type": "res", "id": frame["id"], "ok": True, "payload": {}}).decode())
            else:
                asked.set()

    with serve(gateway, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        cancel = threading.Event()
        outcome: list[BaseException] = []

        def compact() -> None:
            try:
                call(
                    f"ws://127.0.0.1:{port}",
                    "t",
                    "sessions.compact",
                    {},
                    timeout=300,
                    owner_uid=os.getuid(),
                    cancel=cancel,
                )
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=compact, daemon=True)
        thread.start()
        assert asked.wait(10), outcome  # the call waits for the compaction
        cancel.set()
        thread.join(10)
        assert not thread.is_alive()
        server.shutdown()
    assert len(outcome) == 1 and isinstance(outcome[0], GatewayError)
    assert str(outcome[0]).endswith("cancelled while waiting for sessions.compact")


def test_a_value_of_the_wrong_type_is_refused_not_allocated(tmp_path: Path) -> None:
    """A table that is not STRICT may hold an integer where OpenClaw writes text: ``bytes(10**12)`` is a TB."""
    path = tmp_path / "agent" / "openclaw-agent.sqlite"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.replace(") STRICT;", ");").replace("event_json TEXT,", "event_json ANY,"))
    conn.execute("INSERT INTO transcript_events VALUES (?, 0, ?, 0, NULL, NULL, NULL)", (SESSION, 10**12))
    conn.commit()
    conn.close()
    outcome, rss = read_in_subprocess(path)
    assert outcome.endswith(f"event {SESSION}:0: event_json is an integer, not text")
    assert rss < 128 << 20
