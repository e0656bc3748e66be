"""Nothing under a SQLite-backed OpenClaw agent (2026.9+) is written; a JSONL agent (≤ 2026.7) is served as before.

Real files and the real command: an agent directory with ``agent/openclaw-agent.sqlite`` beside a leftover
``sessions/*.jsonl`` that is far over its threshold, next to a JSONL-only agent holding the same transcript.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import yaml

from tests.support.cli import compactd

REPO = Path(__file__).resolve().parents[1]
LONG = "2026-09-21T09-00-00-000Z_0196a3b2-0000-7000-8000-00000000a001.jsonl"


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and mtime (a write of any kind changes one of them)."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def two_agents(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    state = tmp_path / "openclaw"
    old = time.time() - 3600
    agents = {}
    for name in ("legacy", "current"):
        sessions = state / "agents" / name / "sessions"
        sessions.mkdir(parents=True)
        shutil.copy(REPO / "examples" / "sessions" / LONG, sessions / LONG)
        os.utime(sessions / LONG, (old, old))
        agents[name] = state / "agents" / name
    database = agents["current"] / "agent" / "openclaw-agent.sqlite"
    database.parent.mkdir()
    sqlite3.connect(database).close()  # a database, as OpenClaw 2026.9 creates one per agent
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"sessions": {"roots": [str(state / "agents" / "*" / "sessions")]}}))
    env = {
        "STATE_DIRECTORY": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"),
        "OPENCLAW_STATE_DIR": str(state),
    }
    return config, agents["legacy"], agents["current"], env


def test_once_writes_nothing_under_a_sqlite_backed_agent(tmp_path: Path) -> None:
    config, legacy, current, env = two_agents(tmp_path)
    before = snapshot(current)
    result = compactd("once", "--config", str(config), "--json", env=env)
    assert result.returncode == 0, result.stderr
    rows = {r["path"]: r for r in json.loads(result.stdout)}
    assert rows[str(legacy / "sessions" / LONG)]["committed"] is True  # ≤ 2026.7: served by its file
    assert str(current / "sessions" / LONG) not in rows  # not a session to act on
    assert snapshot(current) == before
    assert not list((current / "sessions").glob("*.bak.*"))


def test_compact_refuses_a_file_under_a_sqlite_backed_agent(tmp_path: Path) -> None:
    config, _legacy, current, env = two_agents(tmp_path)
    before = snapshot(current)
    result = compactd("compact", str(current / "sessions" / LONG), "--config", str(config), "--json", env=env)
    assert "SQLite-backed" in result.stdout + result.stderr
    assert snapshot(current) == before


def test_one_pass_asks_each_directory_once_and_answers_as_a_fresh_look(tmp_path: Path) -> None:
    from compactd.sources.openclaw._guard import refusal

    _config, legacy, current, _env = two_agents(tmp_path)
    files = [str(agent / "sessions" / LONG) for agent in (legacy, current)]
    files += [str(current / "sessions" / "other.jsonl"), str(tmp_path / "pi" / "sessions" / "x.jsonl")]
    known: dict[str, str | None] = {}
    assert [refusal(f, known) for f in files] == [refusal(f) for f in files]
    assert [refusal(f) is not None for f in files] == [False, True, True, False]
    assert len(known) == 3  # two files of one directory: one answer
    # Within the pass the answer stands; the next pass (a fresh ``known``, or none) sees the new database.
    database = legacy / "agent" / "openclaw-agent.sqlite"
    database.parent.mkdir()
    sqlite3.connect(database).close()
    assert refusal(files[0], known) is None and refusal(files[0], {}) is not None
