"""The system unit's hardening, applied by hand where this machine allows it (issue 23, item 6): the daemon
serves and compacts with /proc as ``ProtectProc=invisible`` and ``ProcSubset=pid`` mount it, and with the
write-xor-execute rule of ``MemoryDenyWriteExecute=yes`` (the kernel's ``PR_SET_MDWE``); the OpenClaw listener
check still finds a socket's owner there. The seccomp filters (``~@privileged @resources``) and the IP
allow-list need systemd itself; ``.ci/verify-units`` checks their syntax.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from compactd.reading import read_transcript

from tests.support import messages as msgs

pytestmark = pytest.mark.slow  # the daemon as a process

REPO = Path(__file__).resolve().parents[1]
PR_SET_MDWE, PR_GET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 66, 1
# /proc as systemd mounts it for ProtectProc=invisible and ProcSubset=pid.
PROC_OPTIONS = "hidepid=invisible,subset=pid"


def _deny_write_execute() -> None:
    """In the child before exec: what MemoryDenyWriteExecute=yes enforces, from the kernel (inherited)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_MDWE")


def hardened(command: list[str]) -> list[str]:
    """``command`` in a new mount and pid namespace whose /proc is mounted as the unit's options mount it."""
    script = f'mount -t proc -o {PROC_OPTIONS} proc /proc && exec "$@"'
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", script, "sh", *command]


@pytest.fixture(scope="module")
def can_harden() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(
        hardened([sys.executable, "-c", "print(open('/proc/self/net/tcp').readline() != '')"]),
        capture_output=True,
        text=True,
        preexec_fn=_deny_write_execute,
    )
    if probe.returncode != 0:
        pytest.skip(f"this machine cannot create the namespaces or set MDWE: {probe.stderr.strip()[:200]}")


def test_the_listener_check_reads_the_socket_tables_under_proc_subset_pid(can_harden: None) -> None:
    code = (
        "import ctypes, os, socket\n"
        "from compactd.sources.openclaw._listener import peer_uid\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "client = socket.create_connection(server.getsockname())\n"
        f"print(peer_uid(client), os.getuid(), os.path.exists('/proc/net'), ctypes.CDLL(None).prctl({PR_GET_MDWE}, 0, 0, 0, 0))\n"
    )
    done = subprocess.run(
        hardened([sys.executable, "-c", code]),
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=_deny_write_execute,
    )
    assert done.returncode == 0, done.stderr
    owner, uid, proc_net, mdwe = done.stdout.split()
    assert owner == uid
    assert proc_net == "False"  # /proc/net is hidden there: the tables are read through /proc/self/net
    assert int(mdwe) & PR_MDWE_REFUSE_EXEC_GAIN


def test_the_daemon_compacts_and_serves_under_the_units_restrictions(
    tmp_path: Path, can_harden: None
) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    session = root / "s.jsonl"
    lines = [
        {"type": "session", "version": 3, "id": "h-1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    ]
    parent = None
    for n in range(12):
        for i, message in enumerate(
            (
                msgs.user(f"q{n} " + "q" * 2_400, ts=n),
                msgs.assistant(f"a{n} " + "a" * 2_400, ts=n, provider="ollama", model="tiny"),
            )
        ):
            entry_id = f"h{n:03d}{i}"
            lines.append(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": "2026-01-01T00:00:00.000Z",
                    "message": message,
                }
            )
            parent = entry_id
    session.write_text("".join(json.dumps(x) + "\n" for x in lines))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(root)], "idle_seconds": 0.3},
                "models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": 16_000}}}}},
                "service": {"status_refresh_seconds": 0.2, "http_listen": "127.0.0.1:0"},
                "state_dir": str(tmp_path / "state"),
            }
        )
    )
    log_path = tmp_path / "compactd.log"
    env = {
        k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "STATE_DIRECTORY", "NOTIFY_SOCKET")
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            hardened(
                [sys.executable, "-m", "compactd", "run", "--config", str(config), "--log-format", "json"]
            ),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=log,
            preexec_fn=_deny_write_execute,
        )
    try:
        deadline = time.monotonic() + 90
        url = None
        compacted = False
        while time.monotonic() < deadline and not (url and compacted):
            assert proc.poll() is None, log_path.read_text()
            for line in log_path.read_text().splitlines():
                event = json.loads(line)
                url = url or (event.get("url") if event.get("action") == "http_listening" else None)
            compacted = any(e.get("type") == "compaction" for e in read_transcript(session).entries)
            time.sleep(0.05)  # polling observable conditions, bounded by the deadline
        assert url and compacted, log_path.read_text()
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
            assert response.status == 200

        def metrics() -> bytes:
            with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
                return bytes(response.read())

        while b"compactd_compactions_total{" not in metrics():  # recorded just after the commit
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not [
            e
            for e in map(json.loads, log_path.read_text().splitlines())
            if e["level"] in ("error", "critical")
        ]
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the daemon itself (unshare does not pass signals on), then wait for both."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        os.kill(int(child), signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()  # --kill-child: the daemon goes with it
        proc.wait()
        raise
