"""``compactd run`` as a real subprocess: real watchers, a real OpenAI-compatible server, pi's own sessions.

Every wait here polls an observable condition (a file's content, a datagram, a process's exit) with a bounded
deadline; nothing sleeps in place of synchronisation.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.reading import read_transcript

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.llm_server import RecordedRequest, StubLLMServer
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]
# Linux's socket option (and control message type) for a datagram's arrival time as a timespec; the socket
# module does not name it.
SO_TIMESTAMPNS = 35
MODEL = "claude-e2e"
SUMMARY = "\n".join(
    [
        "## Decisions",
        "- Use PostgreSQL 16 for the ledger service.",
        "## Open TODOs",
        "- Finish the migration script.",
        "## Constraints/Rules",
        "- Never touch production.",
        "## Pending user asks",
        "- Summarize the storage design for the ledger service.",
        "## Exact identifiers",
        "- none",
    ]
)
MEMORY = "- The user prefers PostgreSQL 16 for the ledger service."
DETAILS_MARKER = "DETAILS-MARKER-7f3a"
RUNTIME_MARKER = "RUNTIME-MARKER-91c2"
AGENTS_MD = (
    "# Agent\n\n## Session Startup\nRead memory/YYYY-MM-DD.md first.\n\n## Red Lines\nNever push to main.\n"
)


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"compactd exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)  # polling an observable condition, bounded by the deadline
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def responder(request: RecordedRequest) -> Any:
    from tests.support.llm_server import Reply

    system = request.content("system")
    return Reply.completion(MEMORY if "durable memories" in system else SUMMARY)


def turn_ops(n: int, chars: int) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [
        {"op": "appendModelChange", "provider": "anthropic", "modelId": MODEL},
        {
            "op": "appendCustomMessageEntry",
            "customType": "openclaw.runtime-context",
            "content": RUNTIME_MARKER,
            "display": False,
        },
    ]
    for i in range(n):
        ops.append(
            {
                "op": "appendMessage",
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": f"question {i}: " + "q" * chars}],
                    "timestamp": 1_790_000_000_000 + i,
                },
            }
        )
        ops.append(
            {
                "op": "appendMessage",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"answer {i} about /srv/app/config_{i}.yaml " + "a" * chars}
                    ],
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": MODEL,
                    "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0},
                    "stopReason": "stop",
                    "timestamp": 1_790_000_000_500 + i,
                },
            }
        )
        if i == 0:
            call = {
                "type": "toolCall",
                "id": "call_e2e_0",
                "name": "read",
                "arguments": {"path": "/srv/app/main.py"},
            }
            ops.append(
                {
                    "op": "appendMessage",
                    "message": {
                        "role": "assistant",
                        "content": [call],
                        "api": "anthropic-messages",
                        "provider": "anthropic",
                        "model": MODEL,
                        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0},
                        "stopReason": "toolUse",
                        "timestamp": 1_790_000_000_600,
                    },
                }
            )
            ops.append(
                {
                    "op": "appendMessage",
                    "message": {
                        "role": "toolResult",
                        "toolCallId": "call_e2e_0",
                        "toolName": "read",
                        "content": [{"type": "text", "text": "print('hello')"}],
                        "details": {"diff": DETAILS_MARKER},
                        "isError": False,
                        "timestamp": 1_790_000_000_700,
                    },
                }
            )
    return ops


class Daemon:
    def __init__(self, tmp: Path, llm: StubLLMServer | None, **overrides: Any) -> None:
        self.tmp = tmp
        self.root = tmp / "agents" / "main" / "sessions"
        self.workspace = tmp / "workspace"
        self.state = tmp / "state"
        self.config_path = tmp / "config.yaml"
        self.notify_path = tmp / "notify.sock"
        self.log_path = tmp / "compactd.log"
        self.workspace.mkdir(parents=True, exist_ok=True)
        (self.workspace / "AGENTS.md").write_text(AGENTS_MD)
        self.config: dict[str, Any] = {
            "sessions": {"roots": [str(tmp / "agents" / "*" / "sessions")], "idle_seconds": 0.5},
            "models": {"providers": {"anthropic": {"models": {MODEL: {"context_tokens": 20_000}}}}},
            "compaction": {"keep_recent_turns": 1, "keep_recent_tokens": 2_000},
            "service": {"status_refresh_seconds": 0.2, "rescan_seconds": 1.0},
            "state_dir": str(self.state),
        }
        if llm is not None:
            self.config["summarizer"] = {
                "base_url": llm.base_url,
                "model": "stub-model",
                "context_tokens": 32_768,
                "timeout_seconds": 30,
            }
        for key, value in overrides.items():
            self.config.setdefault(key, {}).update(value)
        self.write_config(self.config)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.notify_path))
        self.sock.settimeout(0.05)
        # The kernel stamps each datagram as it arrives, so a gap between two is the daemon's, not the poll's.
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.notices: list[str] = []
        self.arrived: list[float] = []  # the wall-clock time each notice arrived, by the kernel
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self, data: dict[str, Any]) -> None:
        import yaml

        self.config_path.write_text(yaml.safe_dump(data))

    def start(
        self, extra_env: dict[str, str] | None = None, preexec_fn: Callable[[], None] | None = None
    ) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "STATE_DIRECTORY")}
        env.update({"NOTIFY_SOCKET": str(self.notify_path), "PYTHONUNBUFFERED": "1", **(extra_env or {})})
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "compactd",
                "run",
                "--config",
                str(self.config_path),
                "--log-level",
                "debug",
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=log,
            preexec_fn=preexec_fn,
        )
        log.close()
        return self.proc

    def drain(self) -> list[str]:
        while True:
            try:
                data, ancillary, _flags, _addr = self.sock.recvmsg(65536, socket.CMSG_SPACE(16))
            except (TimeoutError, BlockingIOError):
                return self.notices
            stamp = time.time()
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", value[:16])
                    stamp = seconds + nanoseconds / 1e9
            self.notices.append(data.decode())
            self.arrived.append(stamp)

    def wait_notice(self, text: str, timeout: float = 30.0, start: int = 0) -> int:
        def found() -> int | None:
            self.drain()
            for index in range(start, len(self.notices)):
                if text in self.notices[index]:
                    return index + 1
            return None

        return int(wait_for(found, timeout, f"sd_notify {text!r}", self.proc))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        finally:
            self.sock.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(llm: StubLLMServer | None = None, **overrides: Any) -> Daemon:
        d = Daemon(tmp_path, llm, **overrides)
        made.append(d)
        return d

    yield make
    for d in made:
        d.kill()


def has_compaction(path: Path) -> bool:
    return any(e.get("type") == "compaction" for e in read_transcript(path).entries)


def memory_blocks(workspace: Path) -> int:
    files = list((workspace / "memory").glob("*.md")) if (workspace / "memory").exists() else []
    return sum(f.read_text().count("<!-- compactd memory flush") for f in files)


def test_session_over_threshold_is_flushed_compacted_committed_and_loads_in_pi(
    pi: Pi, llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    llm_server.responder = responder
    d = daemon_factory(llm_server)
    d.root.mkdir(parents=True)
    written = pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))
    path = Path(written["path"])
    before = read_transcript(path)
    d.start()
    d.wait_notice("READY=1")
    wait_for(lambda: has_compaction(path), 60, "the compaction to be committed", d.proc)
    assert d.stop() == 0
    assert memory_blocks(d.workspace) == 1  # flushed exactly once, before compacting
    assert MEMORY in next((d.workspace / "memory").glob("*.md")).read_text()
    loaded = pi.load(path)
    messages = loaded["messages"]
    assert messages[0]["role"] == "compactionSummary"
    assert "## Exact identifiers" in messages[0]["summary"]
    assert messages[1]["role"] == "custom" and messages[1]["customType"] == "compactd.post_compaction_context"
    assert "Never push to main." in messages[1]["content"]
    # The kept turn is the last one, verbatim, and the original survives as an archive.
    last_user = before.entries[-2]["message"]
    assert messages[-2] == last_user
    archives = list(d.root.glob("*.jsonl.bak.*"))
    assert len(archives) == 1 and archives[0].read_bytes().startswith(path.read_bytes()[:100])
    status = json.loads((d.state / "status.json").read_text())
    assert status["compactions"] == 1 and status["failures"] == 0 and status["backing_off"] == 0
    assert "compactd_compactions_total" in (d.state / "metrics.prom").read_text()
    # Neither the flush nor the summary call ever carried a tool result's details or the runtime context.
    bodies = [r.raw.decode() for r in llm_server.completions]
    assert len(bodies) >= 2 and any("durable memories" in b for b in bodies)
    assert not any(DETAILS_MARKER in b or RUNTIME_MARKER in b for b in bodies)


def test_a_session_being_written_is_not_touched_until_it_goes_quiet(
    pi: Pi, llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    llm_server.responder = responder
    d = daemon_factory(llm_server, sessions={"idle_seconds": 2.0})
    d.root.mkdir(parents=True)
    path = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
    inode = path.stat().st_ino
    d.start()
    d.wait_notice("READY=1")
    # An agent keeps appending (every 0.3 s, well inside idle_seconds): compactd must leave the file alone.
    appended = 0
    busy_until = time.monotonic() + 4.0
    while time.monotonic() < busy_until:
        with open(path, "ab") as handle:
            line = {
                "type": "custom",
                "id": f"b{appended:07x}",
                "parentId": read_transcript(path).leaf_id,
                "timestamp": "2026-11-30T00:00:00.000Z",
                "customType": "agent.tick",
                "data": {"n": appended},
            }
            handle.write(json.dumps(line).encode() + b"\n")
        appended += 1
        assert path.stat().st_ino == inode and not has_compaction(path), (
            "compacted while the agent was writing"
        )
        time.sleep(0.3)  # the agent's own pace: this is the scenario, not a synchronisation
    wait_for(lambda: has_compaction(path), 60, "the compaction once the session is quiet", d.proc)
    ticks = [e for e in read_transcript(path).entries if e.get("customType") == "agent.tick"]
    assert len(ticks) == appended  # every line the agent wrote is still there
    assert d.stop() == 0


def test_sigterm_during_a_model_call_exits_cleanly_and_leaves_files_intact(
    pi: Pi, llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    from tests.support.llm_server import Reply

    llm_server.responder = lambda request: Reply.hung()
    d = daemon_factory(llm_server, memory_flush={"enabled": False})
    d.root.mkdir(parents=True)
    path = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
    original = path.read_bytes()
    d.start()
    llm_server.wait_for_requests(1, timeout=60)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == 0
    llm_server.release()
    assert path.read_bytes() == original
    assert sorted(p.name for p in d.root.iterdir()) == [path.name]  # no temp file, no archive, no lock
    d.wait_notice("STOPPING=1")


def test_sighup_with_a_broken_config_keeps_running_on_the_old_one(
    daemon_factory: Callable[..., Daemon],
) -> None:
    d = daemon_factory()
    d.root.mkdir(parents=True)
    d.start()
    ready = d.wait_notice("READY=1")
    d.config_path.write_text("sessions:\n  idle_secondz: 3\n")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    after = d.wait_notice("RELOADING=1", start=ready)
    d.wait_notice("READY=1", start=after)
    assert d.proc.poll() is None
    wait_for(lambda: "idle_secondz" in d.log(), 10, "the rejected key in the log", d.proc)
    assert str(d.config_path) in d.log()
    # Still serving on the old config: a session written now is picked up and reported.
    session = (
        b'{"type":"session","version":3,"id":"late-1","timestamp":"2026-11-30T00:00:00.000Z","cwd":"/"}\n'
    )
    (d.root / "late.jsonl").write_bytes(session)

    def watched() -> bool:
        return json.loads((d.state / "status.json").read_text())["sessions_watched"] == 1

    wait_for(watched, 10, "the new session in status.json", d.proc)
    assert d.stop() == 0


def test_sighup_decides_every_session_again_under_the_new_config(
    pi: Pi, llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    """A reload that shrinks the model's window: a quiet session that fitted is over its new threshold, and is
    compacted without waiting for its agent's next append (none comes); status shows the new threshold."""
    llm_server.responder = responder
    d = daemon_factory(llm_server, memory_flush={"enabled": False})
    models = d.config["models"]["providers"]["anthropic"]["models"]
    models[MODEL]["context_tokens"] = 200_000
    d.write_config(d.config)
    d.root.mkdir(parents=True)
    path = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
    d.start()
    ready = d.wait_notice("READY=1")

    def threshold() -> int | None:
        return next(
            (
                r.get("compact_threshold")
                for r in status_doc(d).get("sessions", ())
                if r.get("path") == str(path)
            ),
            None,
        )

    wide = wait_for(threshold, 30, "the session decided under the first config", d.proc)
    tokens = tokens_of(status_doc(d), path)
    assert tokens is not None and tokens < wide and not has_compaction(path)
    models[MODEL]["context_tokens"] = 20_000
    d.write_config(d.config)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    d.wait_notice("READY=1", start=d.wait_notice("RELOADING=1", start=ready))
    narrow = wait_for(lambda: (t := threshold()) != wide and t, 30, "the new threshold", d.proc)
    assert narrow < tokens
    wait_for(lambda: has_compaction(path), 60, "the compaction the new window calls for", d.proc)
    assert d.stop() == 0


def test_sd_notify_ready_status_watchdog_and_stopping(daemon_factory: Callable[..., Daemon]) -> None:
    d = daemon_factory()
    d.root.mkdir(parents=True)
    d.start({"WATCHDOG_USEC": "400000"})
    d.wait_notice("READY=1")
    d.wait_notice("STATUS=watching")
    d.wait_notice("WATCHDOG=1")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=10) == 0
    assert any("STOPPING=1" in n for n in d.drain())
    ready = next(n for n in d.notices if "READY=1" in n)
    assert "STATUS=watching 0 sessions" in ready


def test_a_second_instance_refuses_to_start(daemon_factory: Callable[..., Daemon], tmp_path: Path) -> None:
    d = daemon_factory()
    d.root.mkdir(parents=True)
    d.start()
    d.wait_notice("READY=1")
    second = subprocess.run(
        [sys.executable, "-m", "compactd", "run", "--config", str(d.config_path)],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"},
    )
    assert second.returncode == 3
    assert b"already running" in second.stderr.lower() or b"already" in second.stderr.lower()
    assert d.proc is not None and d.proc.poll() is None
    assert d.stop() == 0


def test_a_root_created_after_start_is_watched(
    pi: Pi, llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    llm_server.responder = responder
    d = daemon_factory(llm_server)
    d.start()
    d.wait_notice("READY=1")
    d.root.mkdir(parents=True)  # the agent's sessions dir appears only now
    path = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
    wait_for(lambda: has_compaction(path), 60, "the new root's session to be compacted", d.proc)
    assert d.stop() == 0


def test_a_session_locked_by_a_live_agent_waits_for_the_lock(
    pi: Pi, llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    from datetime import UTC, datetime

    llm_server.responder = responder
    d = daemon_factory(llm_server)
    d.root.mkdir(parents=True)
    path = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
    lock = path.with_name(path.name + ".lock")
    created = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    lock.write_text(json.dumps({"pid": os.getpid(), "createdAt": created}))  # OpenClaw's lock, a live pid
    original = path.read_bytes()
    d.start()
    d.wait_notice("READY=1")

    def retrying() -> bool:
        rows = json.loads((d.state / "status.json").read_text())["sessions"]
        return any(str(r.get("next_action", "")).startswith("retry") for r in rows)

    wait_for(retrying, 30, "the locked session to be deferred", d.proc)
    assert path.read_bytes() == original and not list(d.root.glob("*.bak.*"))
    lock.unlink()  # the agent's run ends
    wait_for(lambda: has_compaction(path), 60, "the compaction once the lock is gone", d.proc)
    assert d.stop() == 0


def test_metrics_go_to_the_configured_textfile(daemon_factory: Callable[..., Daemon], tmp_path: Path) -> None:
    """``service.metrics_textfile`` puts the metrics straight into node_exporter's textfile directory."""
    collector = tmp_path / "textfile_collector"
    collector.mkdir()
    target = collector / "compactd.prom"
    d = daemon_factory(service={"metrics_textfile": str(target)})
    d.root.mkdir(parents=True)
    d.start()
    d.wait_notice("READY=1")
    wait_for(
        lambda: target.exists() and "compactd_sessions_watched 0" in target.read_text(),
        30,
        "textfile",
        d.proc,
    )
    assert target.stat().st_mode & 0o777 == 0o644
    assert not (d.state / "metrics.prom").exists()
    assert sorted(p.name for p in collector.iterdir()) == ["compactd.prom"]  # no temp file left beside it
    assert d.stop() == 0


# A session whose compaction with the model-free digest is seconds of CPU on this machine (the starting code
# ran all of it on the event loop); bench/bench_loop.py measures 50 MB.
BIG_SESSION_BYTES = 16_000_000


def big_and_small_sessions(root: Path) -> tuple[Path, Path]:
    from bench.corpus import generate_session

    root.mkdir(parents=True)
    big, small = root / "big.jsonl", root / "small.jsonl"
    generate_session(big, BIG_SESSION_BYTES, seed=3)
    generate_session(small, 4_000, seed=4)
    return big, small


def status_doc(d: Daemon) -> dict[str, Any]:
    try:
        return dict(json.loads((d.state / "status.json").read_text()))
    except (OSError, ValueError):
        return {}


def tokens_of(doc: dict[str, Any], path: Path) -> int | None:
    return next((r.get("tokens") for r in doc.get("sessions", ()) if r.get("path") == str(path)), None)


def job_at_its_compaction(d: Daemon) -> bool:
    """The big session's job read it, decided and recorded its memory flush: the engine runs next."""
    claims = d.state / "claims"
    return claims.is_dir() and any("flushed_at" in p.read_text() for p in claims.glob("*.lock"))


def committing(d: Daemon, path: Path) -> bool:
    """The commit journal names ``path``: the job is past its engine, in (or after) its commit."""
    journal = d.state / "journal.jsonl"
    return journal.exists() and str(path) in journal.read_text()


def append_user_message(path: Path, text: str) -> None:
    entry = {
        "type": "message",
        "id": "5e55a9e1",
        "parentId": read_transcript(path).leaf_id,
        "timestamp": "2026-12-01T00:00:00.000Z",
        "message": {
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "timestamp": 1_796_000_000_000,
        },
    }
    with open(path, "ab") as handle:
        handle.write(json.dumps(entry).encode() + b"\n")


def test_a_big_compaction_never_freezes_the_loop(daemon_factory: Callable[..., Daemon]) -> None:
    """Under systemd's watchdog protocol, a big session's compaction runs off the event loop: WATCHDOG=1 keeps
    its pace, and another session's append reaches its ledger (and status.json) before the commit starts."""
    d = daemon_factory()
    big, small = big_and_small_sessions(d.root)
    d.start({"WATCHDOG_USEC": "1000000"})  # systemd kills after 1 s of silence; compactd pings every 0.5 s
    ready = d.wait_notice("READY=1")

    def listening(condition: Callable[[], Any]) -> Callable[[], Any]:
        """``condition``, the notify socket read first: as systemd does, the test never lets its queue fill."""
        return lambda: (d.drain(), condition())[1]

    wait_for(
        listening(lambda: tokens_of(status_doc(d), small)), 60, "the small session in status.json", d.proc
    )
    wait_for(listening(lambda: job_at_its_compaction(d)), 60, "the big session's job at its engine", d.proc)
    before = tokens_of(status_doc(d), small)
    assert before is not None and status_doc(d)["compactions"] == 0
    append_user_message(small, "please also check the retry loop " * 200)

    def appended_seen() -> bool:
        now = tokens_of(status_doc(d), small)
        return now is not None and now > before

    wait_for(listening(appended_seen), 120, "the append to the small session in status.json", d.proc)
    assert not committing(d, big), "the append was handled only once the big session's engine had finished"
    compacted = listening(lambda: status_doc(d).get("compactions") == 1)
    wait_for(compacted, 120, "the big session's compaction", d.proc)
    done = len(d.drain())
    d.wait_notice("WATCHDOG=1", start=done)  # one more: the gap that held the end of the job is closed
    pings = [
        at for notice, at in zip(d.notices[ready:], d.arrived[ready:], strict=True) if "WATCHDOG=1" in notice
    ]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(pings)]
    print(f"gaps between WATCHDOG=1 from READY to the end of the job: {gaps}")
    # The pings come every 0.5 s; a stall of the loop longer than half that (a quarter of the watchdog's 1 s)
    # fails, whereas systemd would only kill at 1 s.
    assert len(gaps) >= 3 and max(gaps) < 0.75, f"gaps between WATCHDOG=1 during the compaction: {gaps}"
    assert d.stop() == 0
    assert has_compaction(big)


def test_sigterm_during_a_big_compaction_stops_at_once_and_leaves_the_session_as_it_was(
    daemon_factory: Callable[..., Daemon],
) -> None:
    """SIGTERM while the engine works on a big session: the job is abandoned (it has written nothing yet),
    the daemon stops within seconds, and the session is the file it was."""
    d = daemon_factory()
    big, small = big_and_small_sessions(d.root)
    original, inode = big.read_bytes(), big.stat().st_ino
    d.start()
    d.wait_notice("READY=1")
    wait_for(lambda: job_at_its_compaction(d), 60, "the big session's job to reach its engine", d.proc)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == 0
    assert not committing(d, big)
    assert big.stat().st_ino == inode and big.read_bytes() == original
    assert read_transcript(big).usable and read_transcript(small).usable
    assert sorted(p.name for p in d.root.iterdir()) == ["big.jsonl", "small.jsonl"]  # no temp, archive, lock
    d.wait_notice("STOPPING=1")


def test_a_big_session_flushed_and_summarized_by_a_model_keeps_the_watchdog_and_stops_at_once(
    llm_server: StubLLMServer, daemon_factory: Callable[..., Daemon]
) -> None:
    """The model route: the memory flush (the whole span serialized and redacted) and the engine's work before
    its first model call run off the loop; SIGTERM while that call hangs stops the daemon, the session intact."""
    from bench.corpus import session_bytes
    from tests.support.llm_server import Reply

    def reply(request: RecordedRequest) -> Reply:
        return Reply.completion(MEMORY) if "durable memories" in request.content("system") else Reply.hung()

    llm_server.responder = reply
    d = daemon_factory(llm_server)
    d.root.mkdir(parents=True)
    data = session_bytes(8_000_000, seed=3)[0]
    header, _, rest = data.partition(b"\n")
    big = d.root / "big.jsonl"  # in the trusted workspace: its memory is flushed
    big.write_bytes(json.dumps({**json.loads(header), "cwd": str(d.workspace)}).encode() + b"\n" + rest)
    original = big.read_bytes()
    d.start({"WATCHDOG_USEC": "1000000"})
    ready = d.wait_notice("READY=1")

    def summarizing() -> bool:
        d.drain()
        return any("durable memories" not in r.content("system") for r in llm_server.completions)

    wait_for(summarizing, 120, "the summary's first model call", d.proc)
    assert memory_blocks(d.workspace) == 1
    d.wait_notice("WATCHDOG=1", start=len(d.notices))
    pings = [
        at for notice, at in zip(d.notices[ready:], d.arrived[ready:], strict=True) if "WATCHDOG=1" in notice
    ]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(pings)]
    print(f"gaps between WATCHDOG=1 from READY to the summary's first call: {gaps}")
    assert len(gaps) >= 3 and max(gaps) < 0.75, f"gaps between WATCHDOG=1: {gaps}"
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == 0
    llm_server.release()
    assert big.read_bytes() == original
    assert sorted(p.name for p in d.root.iterdir()) == ["big.jsonl"]
