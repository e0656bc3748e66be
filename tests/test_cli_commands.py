"""``compactd once``, ``compact``, ``status`` and ``doctor`` as a user runs them: real files, a real process."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from compactd.reading import read_transcript

from tests.support.cli import compactd

# compactd once/compact/status/doctor as processes: the full run's, not the inner loop's.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "sessions"
LONG = "2026-09-21T09-00-00-000Z_0196a3b2-0000-7000-8000-00000000a001.jsonl"
SHORT = "2026-09-22T10-30-00-000Z_0196a3b2-0000-7000-8000-00000000b002.jsonl"


def demo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    sessions = tmp_path / "sessions"
    shutil.copytree(EXAMPLES, sessions)
    old = time.time() - 3600  # idle for an hour, like sessions left from yesterday
    for path in sessions.iterdir():
        os.utime(path, (old, old))
    return sessions, {
        "STATE_DIRECTORY": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"),
    }


def test_once_on_the_bundled_examples_compacts_the_long_session_only(tmp_path: Path, pi: Pi) -> None:
    sessions, env = demo(tmp_path)
    short_before = (sessions / SHORT).read_bytes()
    long_before = (sessions / LONG).read_bytes()
    result = compactd("once", "--sessions", str(sessions), "--json", env=env)
    assert result.returncode == 0, result.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(result.stdout)}
    assert rows[LONG]["committed"] is True and rows[LONG]["level"] == "digest"
    assert rows[LONG]["reason"] is None  # brought under its threshold: no back-off
    assert rows[SHORT]["action"] == "fits"
    assert (sessions / SHORT).read_bytes() == short_before
    archives = list(sessions.glob(f"{LONG}.bak.*"))
    assert len(archives) == 1 and archives[0].read_bytes() == long_before
    loaded = pi.load(sessions / LONG)
    assert loaded["messages"][0]["role"] == "compactionSummary"
    # A second pass finds nothing to do: the session is under its threshold now (no compaction loop).
    again = compactd("once", "--sessions", str(sessions), "--json", env=env)
    assert {r["action"] for r in json.loads(again.stdout)} == {"fits"}
    status = compactd("status", "--json", env=env)
    assert status.returncode == 3  # what is shown is the last once's: no daemon serves these sessions
    doc = json.loads(status.stdout)
    assert doc["daemon_running"] is False
    assert doc["compactions"] == 1 and doc["sessions_watched"] == 2 and doc["failures"] == 0
    assert doc["backing_off"] == 0
    table = compactd("status", env=env)
    assert "not running" in table.stdout and LONG[-20:] in table.stdout


def test_once_dry_run_changes_nothing(tmp_path: Path) -> None:
    sessions, env = demo(tmp_path)
    before = {p.name: p.read_bytes() for p in sessions.iterdir()}
    result = compactd("once", "--sessions", str(sessions), "--dry-run", "--json", env=env)
    assert result.returncode == 0, result.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(result.stdout)}
    assert rows[LONG]["action"] in {"compact_only", "compact_then_truncate"}
    assert {p.name: p.read_bytes() for p in sessions.iterdir()} == before
    assert not (tmp_path / "state" / "sessions.json").exists()


def test_once_waits_for_a_session_that_is_not_idle(tmp_path: Path) -> None:
    sessions, env = demo(tmp_path)
    os.utime(sessions / LONG)  # written just now
    result = compactd("once", "--sessions", str(sessions), "--json", env=env)
    rows = {Path(r["path"]).name: r for r in json.loads(result.stdout)}
    assert rows[LONG]["action"] == "wait"
    assert not list(sessions.glob("*.bak.*"))


def test_compact_dry_run_json_and_commit(tmp_path: Path, pi: Pi) -> None:
    sessions, env = demo(tmp_path)
    path = sessions / LONG
    before = path.read_bytes()
    dry = compactd("compact", str(path), "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    data = json.loads(dry.stdout)
    for key in ("route", "first_kept_entry_id", "tokens_before", "tokens_after", "summary_level", "identifiers_total",
                "identifiers_kept_by_model", "identifiers_in_summary", "quality", "entries", "committed", "mode",
                "archive", "reason"):  # fmt: skip
        assert key in data, key
    assert data["committed"] is False and path.read_bytes() == before
    assert data["entries"][0]["type"] == "compaction" and data["tokens_after"] < data["tokens_before"]
    done = compactd("compact", str(path), "--mode", "append", "--json", env=env)
    out = json.loads(done.stdout)
    assert (
        done.returncode == 0
        and out["committed"] is True
        and out["mode"] == "append"
        and out["archive"] is None
    )
    assert path.read_bytes().startswith(before)  # append mode: every earlier byte kept
    assert pi.load(path)["messages"][0]["role"] == "compactionSummary"


def test_compact_with_a_summarizer(tmp_path: Path, llm_server: StubLLMServer) -> None:
    sessions, env = demo(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"summarizer": {"base_url": llm_server.base_url, "model": "stub-model"}})
    )
    llm_server.script("just some words")
    result = compactd(
        "compact", str(sessions / LONG), "--dry-run", "--json", "--config", str(config), env=env
    )
    data = json.loads(result.stdout)
    assert data["summary_level"] == "llm" and data["summarizer_calls"] >= 1
    assert data["identifiers_in_summary"] == data["identifiers_total"] > data["identifiers_kept_by_model"]


def test_a_bad_config_names_the_file_and_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("compaction:\n  reserve_tokenz: 5\n")
    result = compactd("once", "--config", str(config))
    assert result.returncode == 2
    assert str(config) in result.stderr and "compaction.reserve_tokenz" in result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_reports_what_to_fix(tmp_path: Path, llm_server: StubLLMServer) -> None:
    sessions, env = demo(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(sessions), str(tmp_path / "missing-*")]},
                "summarizer": {"base_url": llm_server.base_url, "model": "stub-model"},
            }
        )
    )
    ok = compactd("doctor", "--config", str(config), env=env)
    assert ok.returncode == 0, ok.stdout
    assert "2 transcripts" in ok.stdout and "serves stub-model" in ok.stdout
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(tmp_path / "nowhere")]},
                "summarizer": {"base_url": "http://127.0.0.1:9/v1", "model": "x"},
            }
        )
    )
    bad = compactd("doctor", "--config", str(config), env=env)
    assert bad.returncode == 1
    assert "no sessions directory matches" in bad.stdout and "summarizer" in bad.stdout


def test_validate_reports_an_unusable_file(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"type":"message"}\n')
    result = compactd("validate", str(path))
    assert result.returncode == 2 and "no_header" in result.stdout
    assert read_transcript(path).usable is False


def tool_heavy_session(path: Path, results: int = 75, size: int = 10_000) -> None:
    import orjson

    lines: list[dict[str, object]] = [{"type": "session", "version": 3, "id": "70010000-0000-4000-8000-000000000001", "timestamp": "2026-11-01T00:00:00.000Z", "cwd": "/nonexistent"}]  # fmt: skip
    parent = None

    def add(message: dict[str, object]) -> None:
        nonlocal parent
        entry_id = f"{len(lines):08x}"
        lines.append({"type": "message", "id": entry_id, "parentId": parent, "timestamp": "2026-11-01T00:00:00.000Z", "message": message})  # fmt: skip
        parent = entry_id

    add(
        {
            "role": "user",
            "content": [{"type": "text", "text": "grep the logs for the outage"}],
            "timestamp": 1,
        }
    )
    for i in range(results):
        add({"role": "assistant", "content": [{"type": "toolCall", "id": f"c{i}", "name": "bash", "arguments": {"command": f"cat log{i}"}}], "provider": "p", "model": "m", "stopReason": "toolUse", "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}, "timestamp": 2 + i})  # fmt: skip
        text = "\n".join(f"{i:03d}-{j:05d} GET /api/v1/items 200 12ms" for j in range(size // 34))
        add({"role": "toolResult", "toolCallId": f"c{i}", "toolName": "bash", "content": [{"type": "text", "text": text}], "isError": False, "timestamp": 3 + i})  # fmt: skip
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def test_a_tool_heavy_session_is_pruned_and_names_the_archive(tmp_path: Path, pi: Pi) -> None:
    path = tmp_path / "sessions" / "heavy.jsonl"
    path.parent.mkdir()
    tool_heavy_session(path)
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "none")}
    inspected = json.loads(compactd("inspect", str(path), "--json", env=env).stdout)
    assert inspected["route"] == "truncate_tool_results_only"
    result = compactd("compact", str(path), "--force", "--json", env=env)
    data = json.loads(result.stdout)
    assert data["committed"] is True and data["route"] == "truncate_tool_results_only", result.stderr
    assert data["pruned_results"] > 0 and data["archive"]
    loaded = pi.load(path)
    texts = [m["content"][0]["text"] for m in loaded["messages"] if m["role"] == "toolResult"]
    pruned = [t for t in texts if "more characters truncated" in t]
    assert len(pruned) == data["pruned_results"]
    assert all(Path(data["archive"]).name in t for t in pruned)
    after = json.loads(compactd("inspect", str(path), "--json", env=env).stdout)
    assert after["route"] == "fits" and after["context_tokens"] < inspected["context_tokens"]


def test_an_idle_torn_last_line_is_sealed_and_the_next_append_survives(tmp_path: Path, pi: Pi) -> None:
    sessions, env = demo(tmp_path)
    path = sessions / SHORT
    torn = b'{"type":"message","id":"deadbeef","parentId":null,"message":{"role":"user","con'
    with open(path, "ab") as handle:
        handle.write(torn)  # a writer died mid-line
    old = time.time() - 3600
    os.utime(path, (old, old))
    before = path.read_bytes()
    dry = compactd("once", "--sessions", str(sessions), "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    assert path.read_bytes() == before  # a dry run writes nothing, not even the sealing newline
    result = compactd("once", "--sessions", str(sessions), "--json", env=env)
    assert result.returncode == 0, result.stderr
    after = path.read_bytes()
    assert after == before + b"\n"  # sealed with one newline: nothing truncated, nothing rewritten
    exchange = pi.append_exchange(path, "still there?", "yes")
    loaded = pi.load(path)
    assert [m["role"] for m in loaded["messages"][-2:]] == ["user", "assistant"]
    assert loaded["leaf_id"] == exchange["assistant_id"]
