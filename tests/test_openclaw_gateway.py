"""The gateway's token goes only to the gateway, and one deadline bounds each RPC from connect to answer.

Real sockets: the listener is tests/support/listener.py run as a subprocess, as root (the gateway's user here)
or as ``nobody`` (a squatter on the port while the gateway is down); it reports every byte it receives.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from compactd.sources import one_pass
from compactd.sources.openclaw._gateway import GatewayError, call
from compactd.sources.openclaw._listener import ListenerUnknown, peer_uid

LISTENER = Path(__file__).resolve().parent / "support" / "listener.py"
NOBODY = 65534
TOKEN = "gw-token-6c1d0e9f8a7b"
# The listener needs only the standard library: a system interpreter another uid can run (ours may live under
# a home directory that uid cannot enter).
SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)), None)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or SYSTEM_PYTHON is None,
    reason="a listener run as another uid needs root and a system python3",
)


class Listener:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        first = proc.stdout.readline() if proc.stdout else ""
        self.port = int(json.loads(first)["port"])
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def stop(self) -> list[dict[str, Any]]:
        """Everything it received (the process is ended first, so nothing is still on its way)."""
        self.proc.terminate()
        self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.events

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


@pytest.fixture
def listen() -> Iterator[Callable[..., Listener]]:
    started: list[Listener] = []

    def start(mode: str, uid: int | None = None) -> Listener:
        as_user: dict[str, Any] = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
        proc = subprocess.Popen(
            [sys.executable if uid is None else str(SYSTEM_PYTHON), str(LISTENER), mode],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
            **as_user,
        )
        listener = Listener(proc)
        started.append(listener)
        return listener

    yield start
    for listener in started:
        if listener.proc.poll() is None:
            listener.stop()


def received(events: list[dict[str, Any]]) -> tuple[int, list[str]]:
    return sum(e.get("bytes", 0) for e in events), [e["message"] for e in events if "message" in e]


@needs_root
def test_peer_uid_names_the_listeners_owner(listen: Callable[..., Listener]) -> None:
    ours, squatter = listen("silent"), listen("silent", NOBODY)
    for listener, uid in ((ours, os.geteuid()), (squatter, NOBODY)):
        with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as sock:
            assert peer_uid(sock) == uid
    with (
        socket.create_connection(("127.0.0.1", ours.port), timeout=5) as sock,
        pytest.raises(ListenerUnknown),
    ):
        peer_uid(sock, tables=("/nonexistent/tcp",))


@needs_root
def test_the_token_goes_to_a_listener_of_the_gateways_user(listen: Callable[..., Listener]) -> None:
    listener = listen("gateway")
    hello = call(listener.url, TOKEN, None, {}, timeout=10, owner_uid=os.geteuid())
    assert hello == {"type": "hello-ok"}
    _count, messages = received(listener.stop())
    assert any(TOKEN in m for m in messages)  # the listener would see a token sent to it


@needs_root
def test_the_token_is_never_sent_to_a_listener_of_another_user(listen: Callable[..., Listener]) -> None:
    squatter = listen("gateway", NOBODY)
    with pytest.raises(GatewayError) as caught:
        call(squatter.url, TOKEN, "sessions.compact", {"key": "k"}, timeout=10, owner_uid=os.geteuid())
    assert caught.value.kind == "untrusted"
    assert f"uid {NOBODY}" in str(caught.value) and TOKEN not in str(caught.value)
    count, messages = received(squatter.stop())
    assert (count, messages) == (0, [])  # not one byte: no handshake, no token


@needs_root
def test_without_the_gateways_user_nothing_is_sent(listen: Callable[..., Listener]) -> None:
    listener = listen("gateway")
    with pytest.raises(GatewayError) as caught:
        call(listener.url, TOKEN, None, {}, timeout=10, owner_uid=None)
    assert caught.value.kind == "untrusted"
    assert received(listener.stop()) == (0, [])


@pytest.mark.parametrize("mode", ["silent", "silent-ws"])
def test_a_silent_listener_fails_the_call_at_its_deadline(listen: Callable[..., Listener], mode: str) -> None:
    """One deadline from connect to answer: neither the handshake's nor the close's own timeouts (10 s each
    in the WebSocket library) outlast a short one."""
    listener = listen(mode)
    outcome: list[BaseException | object] = []

    def ask() -> None:
        try:
            outcome.append(
                call(listener.url, TOKEN, "sessions.compact", {}, timeout=0.5, owner_uid=os.geteuid())
            )
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(5.0)  # ten times the deadline; the library's own timeouts alone are 10 s
    assert not thread.is_alive(), f"the call outlived its 0.5 s deadline ({time.monotonic() - started:.1f} s)"
    assert len(outcome) == 1 and isinstance(outcome[0], GatewayError), outcome
    assert outcome[0].kind == "down"
    count, _messages = received(listener.stop())
    assert count > 0  # it was reached: the deadline, not a refused connection, ended the call


def over_threshold_install(root: Path, port: int) -> None:
    """An OpenClaw state directory whose one session is over its threshold, idle, flushed this cycle: due for
    a compaction through the gateway at ``port``."""
    from tests.support.openclaw_db import AgentDb

    fixture = Path("/work/shared/fixtures/real/pi-large-session.v3.jsonl")
    if not fixture.exists():
        pytest.skip(f"{fixture} is not here")
    lines = [line for line in fixture.read_bytes().split(b"\n") if line.strip()][:60]
    db = AgentDb(root / "agents" / "main" / "agent" / "openclaw-agent.sqlite")
    flushed = {"kind": "succeeded", "compactionCount": 0}
    db.set_node("agent:main:work", "s-work", {"status": "done", "memoryFlush": flushed})
    db.append("s-work", lines)
    db.close()
    (root / "openclaw.json").write_text(
        json.dumps(
            {
                "gateway": {"port": port, "auth": {"mode": "token", "token": TOKEN}},
                "models": {"providers": {"p": {"models": [{"id": "m", "contextWindow": 16000}]}}},
                "agents": {"defaults": {"model": {"primary": "p/m"}}},
            }
        )
    )


def compact_once(tmp_path: Path, port: int, deadline: float) -> dict[str, Any]:
    from compactd.config import Config
    from compactd.sources.openclaw import OpenClawSource

    over_threshold_install(tmp_path / "openclaw", port)
    config = Config.from_mapping(
        {
            "openclaw": {"state_dir": str(tmp_path / "openclaw"), "rpc_timeout_seconds": deadline},
            "sessions": {"idle_seconds": 0},
            "state_dir": str(tmp_path / "state"),
        }
    )
    rows = [o.as_json() for o in anyio.run(one_pass, OpenClawSource(config, {}))]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.parametrize("mode", ["silent", "silent-ws"])
def test_the_configured_deadline_bounds_a_compaction_request(
    listen: Callable[..., Listener], tmp_path: Path, mode: str
) -> None:
    listener = listen(mode)
    outcome: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: outcome.append(compact_once(tmp_path, listener.port, 0.5)))
    thread.start()
    thread.join(10.0)  # twenty times the configured deadline; the 240 s default would hold it for minutes
    assert not thread.is_alive(), "the compaction request outlived openclaw.rpc_timeout_seconds"
    assert outcome and outcome[0]["action"] == "failed" and outcome[0]["stage"] == "gateway down", outcome
    assert received(listener.stop())[0] > 0


@needs_root
def test_a_squatter_on_the_gateways_port_gets_nothing_and_the_session_backs_off(
    listen: Callable[..., Listener], tmp_path: Path
) -> None:
    squatter = listen("gateway", NOBODY)
    row = compact_once(tmp_path, squatter.port, 10)
    assert row["action"] == "failed" and row["stage"] == "gateway untrusted", row
    assert f"uid {NOBODY}" in row["reason"] and row["retry_in"] > 0
    assert received(squatter.stop()) == (0, [])
