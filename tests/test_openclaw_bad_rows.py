"""One bad row, database or config never stops compactd and never hides the other sessions.

Real SQLite files (tests/support/openclaw_db.py; the bad ones made with untyped columns, so a value is kept as
the writer gave it), generated pi sessions (bench/corpus.py), compactd's OpenClaw source in-process and
the real ``compactd once`` and ``compactd run`` as subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from compactd.config import Config
from compactd.core.ledger import SessionLedger
from compactd.sources import one_pass
from compactd.sources.openclaw import OpenClawSource

from bench.corpus import session_bytes
from tests.support.cli import INHERITED_NOT, REPO, compactd
from tests.support.openclaw_db import AgentDb

GOOD = (("agent:main:a", "s-a"), ("agent:main:c", "s-c"))
BAD_KEY, BAD_ID = "agent:main:b", "s-b"


def session_lines() -> list[bytes]:
    """A generated coding session's first 60 lines (the real fixtures are not on every machine)."""
    data, _ = session_bytes(200_000, seed=9)
    return [line for line in data.split(b"\n") if line.strip()][:60]


def full_read_tokens(lines: list[bytes]) -> int:
    return SessionLedger.from_bytes(b"\n".join(lines) + b"\n").planning_tokens


# Each spoils one column of one row of the bad session (after rows that are fine), as a damaged or foreign
# database may: the reason names the column.
BAD_ROWS: dict[str, tuple[Callable[[AgentDb, int], None], str]] = {
    "seq as text": (lambda db, n: db.put_event(BAD_ID, "seven", '{"type":"custom"}'), "seq is text"),
    "size as text": (
        lambda db, n: db.put_event(
            BAD_ID, n, None, event_zstd=b"\x28\xb5\x2f\xfd", size="9", navigation="{}"
        ),
        "event_utf8_bytes is text",
    ),
    "event_json as a float": (lambda db, n: db.put_event(BAD_ID, n, 1.5), "event_json is a float"),
    "an undecodable frame": (
        lambda db, n: db.put_event(BAD_ID, n, None, event_zstd=b"not zstd", size=10, navigation="{}"),
        "undecodable zstd frame",
    ),
    "created_at as text": (
        lambda db, n: db.put_event(BAD_ID, n, '{"type":"custom"}', created_at="noon"),
        "created_at is text",
    ),
    "entry_json as a float": (
        lambda db, n: db.conn.execute(
            "UPDATE session_nodes SET entry_json = 2.5 WHERE session_key = ?", (BAD_KEY,)
        ),
        "entry_json is a float",
    ),
    "entry_json not an object": (
        lambda db, n: db.conn.execute(
            "UPDATE session_nodes SET entry_json = '[1]' WHERE session_key = ?", (BAD_KEY,)
        ),
        "not an object",
    ),
    "generation as an integer": (
        lambda db, n: db.conn.execute(
            "INSERT INTO transcript_rewrite_watermarks VALUES (?, 7, 0)", (BAD_ID,)
        ),
        "generation",
    ),
}


def build_state(root: Path, bad: str) -> dict[str, int]:
    """An OpenClaw state directory: agent ``main`` with two good sessions and one bad one, agent ``other``
    with a good session, agent ``broken`` whose database is not a database. Returns each good key's tokens."""
    lines = session_lines()
    db = AgentDb(root / "agents" / "main" / "agent" / "openclaw-agent.sqlite", strict=False)
    for key, session_id in (*GOOD, (BAD_KEY, BAD_ID)):
        db.set_node(key, session_id, {"status": "done"})
        db.append(session_id, lines)
    spoil, _reason = BAD_ROWS[bad]
    spoil(db, db.next_seq(BAD_ID))
    db.close()
    other = AgentDb(root / "agents" / "other" / "agent" / "openclaw-agent.sqlite")
    other.set_node("agent:other:x", "s-x", {})
    other.append("s-x", lines[:30])
    other.close()
    broken = root / "agents" / "broken" / "agent" / "openclaw-agent.sqlite"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"this is not a SQLite database, only its name\n" * 100)
    tokens = full_read_tokens(lines)
    return {"agent:main:a": tokens, "agent:main:c": tokens, "agent:other:x": full_read_tokens(lines[:30])}


def check_rows(rows: list[dict[str, Any]], expected: dict[str, int], bad: str) -> None:
    by_key = {r["session_key"]: r for r in rows if r.get("session_key")}
    assert set(by_key) == {*expected, BAD_KEY}, rows
    for key, tokens in expected.items():
        assert by_key[key]["action"] == "fits" and by_key[key]["tokens"] == tokens > 0, by_key[key]
    failed = by_key[BAD_KEY]
    assert failed["action"] == "failed" and failed["stage"] == "read", failed
    assert BAD_ROWS[bad][1] in failed["reason"], failed
    agent_rows = [r for r in rows if not r.get("session_key")]
    assert len(agent_rows) == 1 and agent_rows[0]["path"].endswith("broken/agent/openclaw-agent.sqlite")
    assert agent_rows[0]["action"] == "failed" and agent_rows[0]["stage"] == "read"


@pytest.mark.parametrize("bad", sorted(BAD_ROWS))
def test_a_bad_row_fails_its_session_only(tmp_path: Path, bad: str) -> None:
    expected = build_state(tmp_path / "openclaw", bad)
    config = Config.from_mapping(
        {"openclaw": {"state_dir": str(tmp_path / "openclaw")}, "state_dir": str(tmp_path / "state")}
    )
    source = OpenClawSource(config, {})
    rows = [o.as_json() for o in anyio.run(one_pass, source)]
    check_rows(rows, expected, bad)
    state = source.states()[next(p for p in source.sessions if p.endswith(BAD_KEY))]
    assert state.failures == 1 and state.error_stage == "read" and state.in_backoff(time.time())
    assert "broken" in source.problems
    source.refresh_all()  # backed off: not read again, not counted again
    assert state.failures == 1


def write_config(base: Path, state_dir: Path, files: Path, extra: dict[str, Any] | None = None) -> Path:
    config = base / "compactd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(files / "*")], "idle_seconds": 3600},
                "openclaw": {"state_dir": str(state_dir)},
                "service": {"rescan_seconds": 0.5, "status_refresh_seconds": 0.2},
                "state_dir": str(base / "state"),
                **(extra or {}),
            }
        )
    )
    return config


def test_once_lists_every_good_session_and_fails_for_the_bad_one(tmp_path: Path) -> None:
    expected = build_state(tmp_path / "openclaw", "seq as text")
    config = write_config(tmp_path, tmp_path / "openclaw", tmp_path / "no-files")
    result = compactd("once", "--config", str(config), "--json", env={"XDG_CONFIG_HOME": str(tmp_path / "x")})
    assert result.returncode == 1, result.stderr  # a failed session: as for a file that cannot be read
    check_rows(json.loads(result.stdout), expected, "seq as text")
    assert "failed or are backing off" in result.stderr


@pytest.fixture
def run_compactd(tmp_path: Path) -> Iterator[Callable[[Path], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(config: Path) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
        log = open(tmp_path / "compactd.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--config", str(config)],
            cwd=REPO,
            env={**env, "PYTHONUNBUFFERED": "1", "XDG_CONFIG_HOME": str(tmp_path / "x")},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def status(base: Path) -> dict[str, Any]:
    try:
        doc = json.loads((base / "state" / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def wait_for(condition: Callable[[], Any], proc: subprocess.Popen[bytes], log: Path, what: str) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"compactd run exited ({proc.returncode}) waiting for {what}:\n{log.read_text()[-3000:]}"
            )
        value = condition()
        if value:
            return value
        time.sleep(0.1)  # polling status.json, bounded by the deadline
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def file_session(files: Path) -> tuple[Path, list[bytes]]:
    lines = session_lines()
    path = files / "project" / "session.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join(lines[:30]) + b"\n")
    return path, lines


def serves_the_file(
    base: Path, proc: subprocess.Popen[bytes], path: Path, lines: list[bytes], log: Path
) -> None:
    """The file session is in status.json with its figure, and a change to it is followed: the service lives."""

    def file_row(tokens: int) -> dict[str, Any] | None:
        rows = [r for r in status(base).get("sessions", []) if r.get("path") == str(path)]
        return rows[0] if rows and rows[0].get("tokens") == tokens else None

    wait_for(lambda: file_row(full_read_tokens(lines[:30])), proc, log, "the file session in status.json")
    with path.open("ab") as fh:
        fh.write(b"\n".join(lines[30:]) + b"\n")
    wait_for(lambda: file_row(full_read_tokens(lines)), proc, log, "the file session's new figure")


@pytest.mark.slow
def test_run_goes_on_serving_files_beside_a_bad_row(
    tmp_path: Path, run_compactd: Callable[[Path], subprocess.Popen[bytes]]
) -> None:
    expected = build_state(tmp_path / "openclaw", "seq as text")
    path, lines = file_session(tmp_path / "files")
    proc = run_compactd(write_config(tmp_path, tmp_path / "openclaw", tmp_path / "files"))
    log = tmp_path / "compactd.log"

    def openclaw_rows() -> dict[str, dict[str, Any]] | None:
        doc = status(tmp_path)
        rows = {r["session_key"]: r for r in doc.get("sessions", []) if r.get("source") == "openclaw"}
        return (
            rows if set(rows) == {*expected, BAD_KEY} and "broken" in doc["openclaw"]["unreadable"] else None
        )

    rows = wait_for(openclaw_rows, proc, log, "every OpenClaw session in status.json")
    assert rows[BAD_KEY]["failures"] == 1 and rows[BAD_KEY]["error_stage"] == "read"
    assert "seq is text" in rows[BAD_KEY]["last_error"]
    assert all(rows[k]["tokens"] == t for k, t in expected.items())
    shown = compactd(
        "status", "--config", str(tmp_path / "compactd.yaml"), env={"XDG_CONFIG_HOME": "/nowhere"}
    )
    assert "openclaw agent broken: database unreadable" in shown.stdout, shown.stdout
    serves_the_file(tmp_path, proc, path, lines, log)
    assert proc.poll() is None


@pytest.mark.slow
def test_run_goes_on_beside_a_5000_deep_openclaw_config(
    tmp_path: Path, run_compactd: Callable[[Path], subprocess.Popen[bytes]]
) -> None:
    expected = build_state(tmp_path / "openclaw", "seq as text")
    (tmp_path / "openclaw" / "openclaw.json").write_text("{a:" * 5000 + "1" + "}" * 5000)
    path, lines = file_session(tmp_path / "files")
    proc = run_compactd(write_config(tmp_path, tmp_path / "openclaw", tmp_path / "files"))
    log = tmp_path / "compactd.log"

    def config_error() -> str | None:
        section = status(tmp_path).get("openclaw") or {}
        sessions = {r.get("session_key") for r in status(tmp_path).get("sessions", [])}
        return section.get("config_error") if set(expected) <= sessions else None

    assert "nested deeper than" in wait_for(config_error, proc, log, "the config's error in status.json")
    shown = compactd(
        "status", "--config", str(tmp_path / "compactd.yaml"), env={"XDG_CONFIG_HOME": "/nowhere"}
    )
    assert "openclaw config unusable (defaults apply)" in shown.stdout, shown.stdout
    serves_the_file(tmp_path, proc, path, lines, log)
    assert proc.poll() is None
