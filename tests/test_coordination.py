"""Several compactd processes on one state directory (issue 9, item 6): ``once``, ``compact`` and ``run`` take
the same per-session claim, so a session gets one memory flush and one commit per cycle whoever runs it, and
the one that loses says that compactd (with its pid) holds the session, not "an agent".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from compactd.reading import read_transcript

from tests.test_service_e2e import AGENTS_MD, MEMORY, SUMMARY, memory_blocks, turn_ops, wait_for

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.llm_server import RecordedRequest, StubLLMServer
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]
MODEL = "claude-e2e"


def is_flush(request: RecordedRequest) -> bool:
    return "durable memories" in request.content("system")


class Setup:
    def __init__(self, tmp: Path, llm: StubLLMServer, pi: Pi) -> None:
        self.root = tmp / "agents" / "main" / "sessions"
        self.root.mkdir(parents=True)
        self.workspace = tmp / "workspace"
        self.workspace.mkdir()
        (self.workspace / "AGENTS.md").write_text(AGENTS_MD)
        self.state = tmp / "state"
        self.config = tmp / "config.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "sessions": {"roots": [str(self.root)], "idle_seconds": 1},
                    "models": {"providers": {"anthropic": {"models": {MODEL: {"context_tokens": 20_000}}}}},
                    "compaction": {"keep_recent_turns": 1, "keep_recent_tokens": 2_000},
                    "summarizer": {"base_url": llm.base_url, "model": "stub-model", "timeout_seconds": 60},
                    "state_dir": str(self.state),
                }
            )
        )
        self.path = Path(pi.write(self.root, turn_ops(12, 3_000), cwd=str(self.workspace))["path"])
        old = time.time() - 3600
        os.utime(self.path, (old, old))

    def start(self, *args: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY")}
        return subprocess.Popen(
            [sys.executable, "-m", "compactd", *args, "--config", str(self.config)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def gated_responder(gate: threading.Event) -> Callable[[RecordedRequest], Any]:
    """Memory-flush calls wait for ``gate`` (so a second process can try the session meanwhile)."""
    from tests.support.llm_server import Reply

    def respond(request: RecordedRequest) -> Any:
        if is_flush(request):
            gate.wait(60)
            return Reply.completion(MEMORY)
        return Reply.completion(SUMMARY)

    return respond


def test_two_concurrent_once_flush_and_commit_once_and_the_loser_names_compactd(
    tmp_path: Path, llm_server: StubLLMServer, pi: Pi
) -> None:
    gate = threading.Event()
    llm_server.responder = gated_responder(gate)
    s = Setup(tmp_path, llm_server, pi)
    first = s.start("once", "--json")
    try:
        # The first process is inside the memory flush (its model call is held open).
        wait_for(lambda: any(is_flush(r) for r in llm_server.completions), 60, "the first flush call")
        second = s.start("once", "--json")
        try:
            # On a build without coordination the second flushes too: stop waiting when it does.
            wait_for(
                lambda: second.poll() is not None or sum(map(is_flush, llm_server.completions)) > 1,
                60,
                "the second once to finish",
            )
        finally:
            gate.set()
            out2, err2 = second.communicate(timeout=120)
        out1, err1 = first.communicate(timeout=120)
    finally:
        gate.set()
        first.kill()
    rows1 = {r["path"]: r for r in json.loads(out1)}
    rows2 = {r["path"]: r for r in json.loads(out2)}
    key = str(s.path)
    assert rows1[key]["committed"] is True, (rows1, err1)
    assert memory_blocks(s.workspace) == 1
    assert sum(map(is_flush, llm_server.completions)) == 1
    compactions = [e for e in read_transcript(s.path).entries if e.get("type") == "compaction"]
    assert len(compactions) == 1 and len(list(s.root.glob("*.bak.*"))) == 1
    assert rows2[key]["action"] == "busy" and rows2[key]["committed"] is False, (rows2, err2)
    reason = rows2[key]["reason"]
    assert f"compactd (pid {first.pid})" in reason and "agent" not in reason, reason


def test_a_flush_done_by_one_process_is_not_repeated_by_the_next(
    tmp_path: Path, llm_server: StubLLMServer, pi: Pi
) -> None:
    """The flush is recorded in the state directory as soon as it is done, before the compaction: a process
    that finds the session after a flush whose compaction failed does not flush that cycle again."""
    from datetime import UTC, datetime

    gate = threading.Event()
    llm_server.responder = gated_responder(gate)
    s = Setup(tmp_path, llm_server, pi)
    first = s.start("once", "--json")
    try:
        wait_for(lambda: any(is_flush(r) for r in llm_server.completions), 60, "the flush call")
        # While the flush runs, an agent (this test process, alive) takes the OpenClaw lock: the commit that
        # follows the flush finds it and gives up.
        lock = s.path.with_name(s.path.name + ".lock")
        created = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        lock.write_text(json.dumps({"pid": os.getpid(), "createdAt": created}))
        gate.set()
        out1, _ = first.communicate(timeout=120)
    finally:
        gate.set()
        first.kill()
    row = json.loads(out1)[0]
    assert row["committed"] is False and f"an agent (pid {os.getpid()})" in str(row["reason"]), row
    assert memory_blocks(s.workspace) == 1
    lock.unlink()
    # sessions.json is gone too (a daemon owns it, or it was lost): the flush record still says it was done.
    (s.state / "sessions.json").unlink(missing_ok=True)
    again = s.start("once", "--json")
    out2, err2 = again.communicate(timeout=120)
    row = json.loads(out2)[0]
    assert row["committed"] is True, (row, err2)
    assert memory_blocks(s.workspace) == 1
    assert sum(map(is_flush, llm_server.completions)) == 1


def test_compact_refuses_a_session_a_running_once_holds(
    tmp_path: Path, llm_server: StubLLMServer, pi: Pi
) -> None:
    gate = threading.Event()
    llm_server.responder = gated_responder(gate)
    s = Setup(tmp_path, llm_server, pi)
    first = s.start("once", "--json")
    try:
        wait_for(lambda: any(is_flush(r) for r in llm_server.completions), 60, "the flush call")
        manual = s.start("compact", str(s.path), "--force", "--json")
        try:
            wait_for(
                lambda: manual.poll() is not None or len(llm_server.completions) > 1,
                60,
                "compact to finish",
            )
        finally:
            gate.set()
            out, err = manual.communicate(timeout=120)
        first.communicate(timeout=120)
    finally:
        gate.set()
        first.kill()
    assert manual.returncode == 3, (out, err)  # busy: retry later
    data = json.loads(out)
    assert data["committed"] is False and f"compactd (pid {first.pid})" in data["reason"], data
    compactions = [e for e in read_transcript(s.path).entries if e.get("type") == "compaction"]
    assert len(compactions) == 1
