"""Quiet is not idle: a turn in flight is never compacted, by ``run``, ``once`` or ``compact`` (issue 10 item 2).

The writer is pi's own ``SessionManager`` (kept open, as a running pi is) appending one message at a time as
pi's agent loop persists them, with a model slower than ``sessions.idle_seconds``. Each step waits for
compactd's status to show what it made of the previous one; the pauses between steps are the slow model's and
the tool's own pace (the scenario), never a stand-in for synchronisation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from compactd.core.context import js_timestamp
from compactd.reading import read_transcript

from tests.support import messages as msgs
from tests.support.cli import compactd
from tests.test_service_e2e import (
    MODEL,
    REPO,
    Daemon,
    has_compaction,
    responder,
    turn_ops,
    wait_for,
)

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer
    from tests.support.pi import Pi

WINDOW = {"providers": {"anthropic": {"models": {MODEL: {"context_tokens": 40_000}}}}}  # compact at 20,000
ASK = "Read /srv/app/big.txt and tell me what the retry limit is. " + "context " * 6_000  # 12,000 tokens
TOOL_OUTPUT = "retry_limit = 7\n" + "x" * 12_000  # the 12 KB read of the issue
MODEL_SECONDS = 1.0  # the slow model: five times idle_seconds
USAGE = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}


def user(text: str) -> dict[str, Any]:
    return msgs.user(text)


def assistant(blocks: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return msgs.assistant(
        *blocks, api="anthropic-messages", provider="anthropic", model=MODEL, usage=USAGE, stop=stop
    )


CALL = {"type": "toolCall", "id": "call_big_1", "name": "read", "arguments": {"path": "/srv/app/big.txt"}}
TOOL_CALL = assistant([{"type": "text", "text": "Reading it."}, CALL], "toolUse")
TOOL_RESULT = {
    "role": "toolResult",
    "toolCallId": "call_big_1",
    "toolName": "read",
    "content": [{"type": "text", "text": TOOL_OUTPUT}],
    "isError": False,
}
FINAL = assistant([{"type": "text", "text": "The retry limit is 7."}], "stop")


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """``compactd run`` subprocesses (test_service_e2e's Daemon), killed at the end."""
    made: list[Daemon] = []

    def make(llm: StubLLMServer | None = None, **overrides: Any) -> Daemon:
        made.append(Daemon(tmp_path, llm, **overrides))
        return made[-1]

    yield make
    for d in made:
        d.kill()


def row(d: Daemon, path: Path) -> dict[str, Any] | None:
    try:
        status = json.loads((d.state / "status.json").read_text())
    except (OSError, ValueError):
        return None  # not written yet, or being replaced
    return next((r for r in status["sessions"] if r.get("file") == path.name), None)


def wait_busy(d: Daemon, path: Path, waiting: str, above_tokens: int = 0) -> dict[str, Any]:
    """Until status.json shows the session busy with a turn in flight waiting for ``waiting``."""

    def busy() -> dict[str, Any] | None:
        r = row(d, path)
        nxt = str((r or {}).get("next_action") or "")
        if r and nxt.startswith("busy: turn in flight since ") and f"(waiting for {waiting})" in nxt:
            return r if r["tokens"] > above_tokens else None
        return None

    found: dict[str, Any] = wait_for(busy, 30, f"status to show the turn in flight ({waiting})", d.proc)
    return found


def untouched(path: Path, inode: int) -> bool:
    return path.stat().st_ino == inode and not has_compaction(path) and not list(path.parent.glob("*.bak.*"))


def start(pi: Pi, llm: StubLLMServer, factory: Callable[..., Daemon], **sessions: Any) -> tuple[Daemon, Path]:
    llm.responder = responder
    d = factory(
        llm,
        sessions={"idle_seconds": 0.2, **sessions},
        models=WINDOW,
        memory_flush={"enabled": False},
    )
    d.root.mkdir(parents=True)
    path = Path(pi.write(d.root, turn_ops(4, 4_000), cwd=str(d.workspace))["path"])  # well under budget
    d.start()
    d.wait_notice("READY=1")
    wait_for(lambda: row(d, path), 30, "the session in status.json", d.proc)
    return d, path


def test_a_slow_models_turn_is_not_compacted_until_its_final_reply(
    pi: Pi, llm_server: StubLLMServer, daemons: Callable[..., Daemon]
) -> None:
    d, path = start(pi, llm_server, daemons)
    inode = path.stat().st_ino
    with pi.LiveSession(path) as agent:
        agent.append_message(user(ASK))  # over the threshold now: due, but the model is thinking
        first = wait_busy(d, path, "the model's reply")
        assert first["planning_tokens"] > first["compact_threshold"]  # due: only the turn holds it back
        shown = subprocess.run(
            [sys.executable, "-m", "compactd", "status", "--config", str(d.config_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "busy: turn in flight since " in shown.stdout
        time.sleep(MODEL_SECONDS)  # the model's response time: the file stays quiet
        assert untouched(path, inode), "compacted while the model was answering the user"

        agent.append_message(TOOL_CALL)
        wait_busy(d, path, "1 tool result")
        time.sleep(MODEL_SECONDS / 2)  # the tool runs
        assert untouched(path, inode), "compacted while a tool call had no result"

        agent.append_message(TOOL_RESULT)
        wait_busy(d, path, "the model's reply", above_tokens=first["tokens"])
        time.sleep(MODEL_SECONDS)  # the model reads the 12 KB result
        assert untouched(path, inode), "compacted between the tool result and the model's next reply"

        final_id = agent.append_message(FINAL)
        final_at = read_transcript(path).by_id()[final_id]["message"]["timestamp"] / 1000
        wait_for(lambda: has_compaction(path), 60, "the compaction once the turn has ended", d.proc)
    assert d.stop() == 0
    entries = read_transcript(path).entries
    compaction = next(e for e in entries if e.get("type") == "compaction")
    compacted_at = js_timestamp(compaction["timestamp"]) / 1000
    assert compacted_at >= final_at  # after the turn, never inside it
    # The whole turn is in the live file, on the branch pi loads, ending with the final reply.
    loaded = pi.load(path)
    texts = [json.dumps(m) for m in loaded["messages"]]
    assert "The retry limit is 7." in texts[-1]
    assert any("retry_limit = 7" in t for t in texts) or any(
        "retry_limit = 7" in p.read_text() for p in d.root.glob("*.bak.*")
    )
    assert "turn in flight" not in str((row(d, path) or {}).get("next_action"))


def test_an_abandoned_turn_is_compacted_after_the_limit(
    pi: Pi, llm_server: StubLLMServer, daemons: Callable[..., Daemon]
) -> None:
    d, path = start(pi, llm_server, daemons, abandoned_turn_seconds=4.0)
    inode = path.stat().st_ino
    with pi.LiveSession(path) as agent:
        agent.append_message(user(ASK))
    written_at = path.stat().st_mtime  # the agent died mid-turn: nothing more is written
    wait_busy(d, path, "the model's reply")
    assert path.stat().st_ino == inode and not has_compaction(path)
    wait_for(lambda: has_compaction(path), 60, "the abandoned turn's session to be compacted", d.proc)
    assert d.stop() == 0
    compaction = next(e for e in read_transcript(path).entries if e.get("type") == "compaction")
    assert js_timestamp(compaction["timestamp"]) / 1000 >= written_at + 4.0 - 0.01


# --- once and compact ---------------------------------------------------------------------------------------


def mid_turn_session(pi: Pi, tmp_path: Path, llm: StubLLMServer, **sessions: Any) -> tuple[Path, Path]:
    """A session over its threshold whose last message is the user's (pi writes it once an assistant exists),
    idle for an hour, and the config of a compactd that would compact it at once but for the turn."""
    llm.responder = responder
    root = tmp_path / "sessions"
    ops = [
        *turn_ops(12, 3_000),
        {"op": "appendMessage", "message": {**user(ASK), "timestamp": 1_790_000_100_000}},
    ]
    path = Path(pi.write(root, ops, cwd=str(tmp_path))["path"])
    old = time.time() - 3600
    os.utime(path, (old, old))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(root)], "idle_seconds": 0, **sessions},
                "models": WINDOW,
                "memory_flush": {"enabled": False},
                "summarizer": {"base_url": llm.base_url, "model": "stub-model", "timeout_seconds": 30},
                "state_dir": str(tmp_path / "state"),
            }
        )
    )
    return path, config


def test_once_waits_for_a_turn_in_flight_and_takes_an_abandoned_one(
    pi: Pi, tmp_path: Path, llm_server: StubLLMServer
) -> None:
    path, config = mid_turn_session(pi, tmp_path, llm_server, abandoned_turn_seconds=7200)
    before = path.read_bytes()
    done = compactd("once", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    [outcome] = json.loads(done.stdout)
    assert outcome["action"] == "wait" and outcome["reason"].startswith("turn in flight since 2026-09-21T")
    assert outcome["reason"].endswith("(waiting for the model's reply)")
    assert path.read_bytes() == before and not llm_server.completions
    # Quiet for an hour: abandoned once the limit is under that.
    config.write_text(
        config.read_text().replace("abandoned_turn_seconds: 7200", "abandoned_turn_seconds: 1800")
    )
    done = compactd("once", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    [outcome] = json.loads(done.stdout)
    assert outcome["committed"] is True and has_compaction(path)


def test_compact_without_force_refuses_a_turn_in_flight_before_any_model_call(
    pi: Pi, tmp_path: Path, llm_server: StubLLMServer
) -> None:
    path, config = mid_turn_session(pi, tmp_path, llm_server)
    os.utime(path)  # the user's message was just written: the model is answering
    before = path.read_bytes()
    done = compactd("compact", str(path), "--json", "--config", str(config))
    assert done.returncode == 3  # busy: retry later
    result = json.loads(done.stdout)
    assert result["outcome"] == "busy"
    assert result["committed"] is False and result["reason"].startswith("turn in flight since ")
    assert path.read_bytes() == before and not llm_server.completions
    forced = compactd("compact", str(path), "--json", "--force", "--config", str(config))
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["committed"] is True


@pytest.mark.parametrize("mode", ["rotate", "append"])
def test_a_turn_started_during_the_model_call_is_not_cut(
    pi: Pi, tmp_path: Path, llm_server: StubLLMServer, mode: str
) -> None:
    from tests.support.llm_server import Reply

    path, config = mid_turn_session(pi, tmp_path, llm_server)
    with pi.LiveSession(path) as agent:
        agent.append_message(FINAL)  # the turn ends: the session may be compacted
        os.utime(path, (time.time() - 3600,) * 2)
        llm_server.script(Reply.hung())  # hold the first summary call open
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "compactd",
                "compact",
                str(path),
                "--json",
                "--mode",
                mode,
                "--config",
                str(config),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "COMPACTD_CONFIG")},
        )
        try:
            llm_server.wait_for_requests(1, timeout=120)
            before = path.read_bytes()
            agent.append_message(user("And now check the timeout too."))  # a new turn, during the model call
            during = path.read_bytes()
            llm_server.release()
            out, err = job.communicate(timeout=240)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    assert job.returncode == 3, err  # busy: retry later
    result = json.loads(out)
    assert result["committed"] is False and result["outcome"] == "busy"
    assert (
        result["reason"].startswith("turn in flight since ")
        and "(waiting for the model's reply)" in result["reason"]
    )
    assert during.startswith(before) and path.read_bytes() == during  # only the agent wrote
    assert not list(path.parent.glob("*.bak.*"))
