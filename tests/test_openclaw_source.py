"""compactd beside a real OpenClaw 2026.9.6 gateway (the database source): it follows the database, compacts an idle session through
the gateway's RPC, leaves a session with a run in progress alone, and writes nothing under the agent directory.

One gateway for the module (tests/support/openclaw.py); compactd runs as a subprocess (``run`` and ``once``).
A session is staged over its threshold and idle as docs/openclaw-2026.9.md §3 says: the scripted model refuses
summary requests during the last turn's maintenance, so the gateway's own compaction fails and is not retried.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from compactd.core.ledger import SessionLedger
from compactd.sources.openclaw._follower import Follower, as_jsonl
from compactd.sources.openclaw._store import Store

from tests.support.cli import INHERITED_NOT, REPO, compactd
from tests.support.llm_server import RecordedRequest, Reply, StubLLMServer
from tests.support.openclaw import (
    Gateway,
    is_summary_request,
    plain_summary,
)

pytestmark = [pytest.mark.openclaw, pytest.mark.slow]

OVER = 26_000  # the usage a turn reports to take a 32k-window session over its 24,000-token threshold


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)  # polling a condition, with a deadline
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def node_entry(gateway: Gateway, key: str) -> dict[str, Any]:
    store = Store(str(gateway.db_path()))
    with store.connect() as conn:
        node = store.node(conn, key)
    assert node is not None, key
    return node.entry


def compaction_count(gateway: Gateway, key: str) -> int:
    value = node_entry(gateway, key).get("compactionCount")
    return value if isinstance(value, int) else 0


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class Refusing:
    """Summary requests refused while set (the gateway's own compaction then fails); turns report ``tokens``."""

    def __init__(self, llm: StubLLMServer) -> None:
        self.refuse = True
        self.tokens = OVER
        self.hold: threading.Event | None = None  # held summary requests wait for this gate
        self.summaries = 0
        llm.responder = self

    def __call__(self, request: RecordedRequest) -> Reply | str:
        if is_summary_request(request):
            self.summaries += 1
            # 400: refused at once, not retried (a 5xx is retried with back-off and holds the session's lane)
            if self.hold is not None:
                return dataclasses.replace(Reply.error(400, "the summarizer refuses"), hold=self.hold)
            # no ask in it: the retained turn holds the latest ask (OpenClaw's guard rejects it marked pending)
            return Reply.error(400, "the summarizer refuses") if self.refuse else plain_summary()
        text = f"Noted. {len(request.raw)} bytes."
        return Reply.completion(text, prompt_tokens=self.tokens, completion_tokens=20)


@pytest.fixture(scope="module")
def model(openclaw_llm: StubLLMServer) -> Refusing:
    return Refusing(openclaw_llm)


def compactd_env(gateway: Gateway, base: Path, idle: float = 1) -> tuple[Path, dict[str, str]]:
    base.mkdir(parents=True, exist_ok=True)
    config = base / "compactd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(base / "no-files" / "*")], "idle_seconds": idle},
                "summarizer": {"base_url": gateway.llm.base_url, "model": "stub-model"},
                "service": {"rescan_seconds": 5, "status_refresh_seconds": 0.2},
            }
        )
    )
    env = {
        "STATE_DIRECTORY": str(base / "state"),
        "XDG_CONFIG_HOME": str(base / "no-config"),
        "OPENCLAW_STATE_DIR": str(gateway.state_dir),
        "OPENCLAW_CONFIG_PATH": str(gateway.config_path),
    }
    return config, env


@pytest.fixture
def daemon(
    openclaw_gateway: Gateway, tmp_path: Path
) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], Path]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> tuple[subprocess.Popen[bytes], Path]:
        config, env = compactd_env(openclaw_gateway, tmp_path)
        base = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
        log = open(tmp_path / "compactd.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--config", str(config)],
            cwd=REPO,
            env={**base, **env, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()  # the child has its own copy
        procs.append(proc)
        return proc, tmp_path

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def status_rows(state: Path) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads((state / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return {r["session_key"]: r for r in doc.get("sessions", []) if r.get("source") == "openclaw"}


KEY = "agent:main:work"


@pytest.fixture(scope="module")
def work(openclaw_gateway: Gateway, model: Refusing) -> dict[str, Any]:
    """The module's session, followed turn by turn and left idle over its threshold: its first turn is small,
    its second reports 26,000 tokens while summaries are refused, so the gateway's own compaction fails."""
    store, follower = Store(str(openclaw_gateway.db_path())), Follower(KEY)
    reads, equal = [], []
    for tokens, message in ((3_000, "Remember ticket OC-4100."), (OVER, "Deploy ticket OC-7731 to staging.")):
        model.refuse, model.tokens = True, tokens
        openclaw_gateway.agent(KEY, message)
        with store.connect() as conn:
            node = store.node(conn, KEY)
            assert node is not None
            total = conn.execute(
                "SELECT count(*) FROM transcript_events WHERE session_id = ?", (node.session_id,)
            ).fetchone()[0]
            before, seen = store.rows_read, follower.last_seq + 1
            follower.refresh(store, conn, node)
            reads.append((total - seen, store.rows_read - before))
            full = SessionLedger.from_bytes(as_jsonl(store.events(conn, node.session_id)))
        assert follower.ledger is not None
        equal.append(follower.ledger.figures() == full.figures())
    # The turn's background maintenance (OpenClaw's memory flush, then its compaction check) has run; it
    # leaves the session over its threshold: 26,000 tokens by the model's usage, far fewer by its 4-chars-a-
    # token estimate, and any summary it asks for is refused.
    wait_for(lambda: "memoryFlush" in node_entry(openclaw_gateway, KEY), 90, "the turn's maintenance")
    return {
        "reads": reads,
        "equal": equal,
        "reloads": follower.reloads,
        "tokens": follower.ledger.planning_tokens,
    }


def test_the_ledger_follows_the_database_row_by_row(work: dict[str, Any]) -> None:
    assert work["equal"] == [True, True]  # after each turn, as a full read of the same session
    new_rows, read = work["reads"][1]
    assert 0 < new_rows == read  # the second turn cost its own rows, not the session's
    assert work["reloads"] == 1
    assert work["tokens"] >= 24_000
    print(f"\nrows read per update: {work['reads']}")


def test_a_session_with_a_run_in_progress_is_left_alone(
    openclaw_gateway: Gateway,
    openclaw_llm: StubLLMServer,
    model: Refusing,
    work: dict[str, Any],
    daemon: Callable[[], tuple[subprocess.Popen[bytes], Path]],
) -> None:
    assert compaction_count(openclaw_gateway, KEY) == 0
    # A new turn of the session over its threshold starts with OpenClaw's preflight compaction, whose summary
    # request is held (then refused, so the turn fails and the session stays over its threshold): meanwhile a
    # run is in progress, and compactd must leave the session alone (not ask, or hear "active run" and wait).
    gate = openclaw_llm.gate()
    model.hold = gate
    summaries = model.summaries
    turn = threading.Thread(
        target=lambda: openclaw_gateway.run_cli(
            "agent", "--agent", "main", "--session-key", KEY, "--message", "continue", "--json", check=False
        ),
        daemon=True,
    )
    turn.start()
    try:
        wait_for(lambda: model.summaries > summaries, 120, "the turn's preflight summary request")
        _proc, base = daemon()

        def busy() -> dict[str, Any] | None:
            row = status_rows(base / "state").get(KEY)
            waiting = row is not None and str(row["next_action"]).startswith(("busy", "retry: "))
            return row if waiting else None

        try:
            row = wait_for(busy, 60, "compactd to hold back")
        except AssertionError:
            entry = node_entry(openclaw_gateway, KEY)
            run = {k: entry.get(k) for k in ("status", "activeWriterRunId", "compactionCount", "updatedAt")}
            logged = [x for x in (base / "compactd.log").read_text().splitlines() if "watchfiles" not in x]
            row = status_rows(base / "state").get(KEY)
            raise AssertionError(f"status row: {row}\nsession: {run}\n" + "\n".join(logged[-20:])) from None
        assert row["compactions"] == 0 and row["tokens"] >= 24_000 and row["failures"] == 0
        assert "action=compacted" not in (base / "compactd.log").read_text()
        assert compaction_count(openclaw_gateway, KEY) == 0
    finally:
        model.hold = None
        gate.set()
        turn.join(120)


def test_an_idle_session_over_its_threshold_is_compacted_through_the_gateway(
    openclaw_gateway: Gateway,
    model: Refusing,
    work: dict[str, Any],
    daemon: Callable[[], tuple[subprocess.Popen[bytes], Path]],
) -> None:
    wait_for(
        lambda: node_entry(openclaw_gateway, KEY).get("status") != "running", 60, "the session to be idle"
    )
    assert compaction_count(openclaw_gateway, KEY) == 0  # over its threshold, idle, not compacted by OpenClaw
    model.refuse = False
    idle_since = time.time()
    proc, base = daemon()
    try:
        wait_for(
            lambda: compaction_count(openclaw_gateway, KEY) == 1 or proc.poll() is not None,
            120,
            "compactd to compact",
        )
    except AssertionError:
        logged = [
            line for line in (base / "compactd.log").read_text().splitlines() if "watchfiles" not in line
        ]
        raise AssertionError("\n".join(logged[-15:]) + "\n" + openclaw_gateway.log_text()[-3000:]) from None
    elapsed = time.time() - idle_since
    assert proc.poll() is None, (base / "compactd.log").read_text()
    row = wait_for(
        lambda: (
            status_rows(base / "state").get(KEY, {}).get("compactions") == 1
            and status_rows(base / "state")[KEY]
        ),
        30,
        "status",
    )
    assert row["agent"] == "main" and row["compaction_count"] == 1 and row["active_run"] is False
    assert row["window"] == 32_000 and row["compact_threshold"] == 24_000 and row["tokens"] < 24_000
    log = (base / "compactd.log").read_text()
    assert "action=compacted via=gateway" in log and openclaw_gateway.token not in log

    def metrics() -> dict[str, str] | None:
        """metrics.prom's compactions and the session's token series, once they show the compaction."""
        try:
            lines = (base / "state" / "metrics.prom").read_text().splitlines()
        except FileNotFoundError:
            return None
        found = {
            name: line
            for line in lines
            for name in ("compactd_compactions_total{", "compactd_session_tokens{")
            if line.startswith(name)
            and (KEY in line if name == "compactd_session_tokens{" else 'level="gateway"' in line)
        }
        return found if 'level="gateway"' in found.get("compactd_compactions_total{", "") else None

    prom = wait_for(metrics, 30, "metrics.prom to count the gateway's compaction")
    assert 'route="compact_only"' in prom["compactd_compactions_total{"]
    assert prom["compactd_compactions_total{"].endswith(" 1.0")
    assert float(prom["compactd_session_tokens{"].rsplit(" ", 1)[1]) == row["tokens"]
    assert any(e["event"].get("type") == "compaction" for e in openclaw_gateway.transcript_events())
    print(f"\nidle to compaction: {elapsed:.1f} s (compactd's start-up included)")


def test_compactd_writes_nothing_under_the_agent_directory(
    openclaw_gateway: Gateway, model: Refusing, work: dict[str, Any], tmp_path: Path
) -> None:
    agent_dir = openclaw_gateway.state_dir / "agents" / "main"
    config, env = compactd_env(openclaw_gateway, tmp_path, idle=3600)  # nothing is acted on: reading only
    wait_for(lambda: node_entry(openclaw_gateway, KEY).get("status") != "running", 30, "idle")
    before = snapshot(agent_dir)
    result = compactd("once", "--config", str(config), "--json", env=env)
    assert result.returncode in (0, 1), result.stderr
    rows = [r for r in json.loads(result.stdout) if r.get("source") == "openclaw"]
    assert [r["session_key"] for r in rows] == [KEY]
    assert snapshot(agent_dir) == before
    openclaw_gateway.stop()  # checkpointed: no -wal left; a read-only reader must not create one
    stopped = snapshot(agent_dir)
    config, env = compactd_env(openclaw_gateway, tmp_path / "down", idle=0)
    down = compactd("once", "--config", str(config), "--json", env=env)
    assert down.returncode in (0, 1), down.stderr
    assert snapshot(agent_dir) == stopped
    failed = [r for r in json.loads(down.stdout) if r.get("action") == "failed"]
    assert all(r["stage"] == "gateway down" for r in failed), failed  # backed off, nothing else tried
    # Crashed: a turn's rows in the -wal, not checkpointed, beside the -shm; then without the -shm.
    openclaw_gateway.start()
    model.refuse, model.tokens = True, 3_000
    openclaw_gateway.agent("agent:main:crash", "Remember ticket OC-9902.")
    openclaw_gateway.crash()
    wal = openclaw_gateway.db_path().with_name(openclaw_gateway.db_path().name + "-wal")
    assert wal.stat().st_size > 0
    for state in ("crashed", "crashed, -shm gone"):
        if state == "crashed, -shm gone":
            openclaw_gateway.db_path().with_name(openclaw_gateway.db_path().name + "-shm").unlink()
        crashed = snapshot(agent_dir)
        config, env = compactd_env(openclaw_gateway, tmp_path / state.replace(" ", "_"), idle=3600)
        result = compactd("once", "--config", str(config), "--json", env=env)
        assert result.returncode in (0, 1), result.stderr
        keys = {r["session_key"] for r in json.loads(result.stdout) if r.get("source") == "openclaw"}
        # the crashed gateway's last turn is read
        assert keys == {KEY, "agent:main:crash"}, (state, result.stdout[-1500:], result.stderr[-1500:])
        assert snapshot(agent_dir) == crashed, state
