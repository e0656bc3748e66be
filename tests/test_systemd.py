"""sd_notify over real datagram sockets, the Notifier's payloads, the watchdog interval, the unit files."""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from compactd.systemd import Notifier, sd_notify, watchdog_interval

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "systemd"
VERIFY = REPO / ".ci" / "verify-units"


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, dict[str, str]]]:
    """A bound datagram socket at a plain path, and the environment pointing at it."""
    path = tmp_path / "n.sock"
    if len(os.fsencode(path)) >= 108:  # sun_path limit; only a very deep tmp dir hits it
        pytest.skip("tmp_path too long for an AF_UNIX socket path")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    try:
        yield sock, {"NOTIFY_SOCKET": str(path)}
    finally:
        sock.close()


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, dict[str, str]]]:
    name = f"compactd-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(10)
    try:
        yield sock, {"NOTIFY_SOCKET": "@" + name}
    finally:
        sock.close()


def test_sd_notify_sends_one_datagram_to_a_path_socket(
    notify_socket: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = notify_socket
    assert sd_notify("READY=1", "STATUS=hello", env=env) is True
    assert sock.recv(4096) == b"READY=1\nSTATUS=hello"


def test_sd_notify_abstract_namespace(abstract_socket: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = abstract_socket
    assert sd_notify("WATCHDOG=1", env=env) is True
    assert sock.recv(4096) == b"WATCHDOG=1"


def test_sd_notify_reads_os_environ_by_default(
    notify_socket: tuple[socket.socket, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, env = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", env["NOTIFY_SOCKET"])
    assert sd_notify("STATUS=x") is True
    assert sock.recv(4096) == b"STATUS=x"


def test_sd_notify_without_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
    assert sd_notify("READY=1", env={}) is False
    assert sd_notify("READY=1", env={"NOTIFY_SOCKET": ""}) is False
    assert Notifier(env={}).ready("x") is False
    assert Notifier(env={}).enabled is False


def test_sd_notify_send_error_returns_false_and_logs_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="compactd.systemd")
    missing = {"NOTIFY_SOCKET": str(tmp_path / "gone.sock")}
    assert sd_notify("READY=1", env=missing) is False
    assert any("sd_notify" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)
    # A relative name is not a socket systemd would give us.
    assert sd_notify("READY=1", env={"NOTIFY_SOCKET": "relative.sock"}) is False


def test_sd_notify_survives_a_socket_that_is_not_listening(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.close()  # the path exists, nobody receives: ECONNREFUSED
    assert sd_notify("READY=1", env={"NOTIFY_SOCKET": str(path)}) is False


def test_sd_notify_gives_up_on_a_full_queue_instead_of_blocking(
    notify_socket: tuple[socket.socket, dict[str, str]],
) -> None:
    """Nobody reads the socket: once its queue is full a send times out and returns False, never hangs."""
    sock, env = notify_socket
    sent = 0
    while sent < 100_000 and sd_notify("WATCHDOG=1", env=env):
        sent += 1
    assert 0 < sent < 100_000
    assert sock.recv(4096) == b"WATCHDOG=1"


def test_notifier_payloads(notify_socket: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = notify_socket
    n = Notifier(env=env)
    assert n.enabled
    assert n.ready("watching 3 sessions")
    assert sock.recv(4096) == b"READY=1\nSTATUS=watching 3 sessions"
    assert n.ready()
    assert sock.recv(4096) == b"READY=1"
    assert n.status("2 near threshold\n1 compaction done")
    assert sock.recv(4096) == b"STATUS=2 near threshold 1 compaction done"
    assert n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert n.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    match = re.fullmatch(rb"RELOADING=1\nMONOTONIC_USEC=(\d+)", sock.recv(4096))
    assert match is not None
    assert before <= int(match.group(1)) <= after


def test_notifier_captures_environment_at_construction(
    notify_socket: tuple[socket.socket, dict[str, str]],
) -> None:
    sock, env = notify_socket
    mutable = dict(env)
    n = Notifier(env=mutable)
    mutable.clear()
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "400000"}, 0.2),
        ({"WATCHDOG_USEC": "1"}, 0.0000005),
        ({}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "thirty"}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "garbage"}, None),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": ""}, 15.0),
    ],
)
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(env) == expected
    assert Notifier(env=env).watchdog_interval == expected


def test_watchdog_interval_for_our_own_pid() -> None:
    env = {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(env) == 15.0


def test_sd_notify_from_a_child_process_without_systemd_libraries(
    notify_socket: tuple[socket.socket, dict[str, str]],
) -> None:
    """The module imports and works in a fresh interpreter with only the standard library."""
    sock, env = notify_socket
    code = (
        "import sys; import compactd.systemd as s; "
        "assert 'systemd' not in {m.split('.')[0] for m in sys.modules if m != 'compactd.systemd'}; "
        "raise SystemExit(0 if s.Notifier().ready('child') else 1)"
    )
    child_env = {**os.environ, **env, "PYTHONPATH": str(REPO / "daemon")}
    proc = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert sock.recv(4096) == b"READY=1\nSTATUS=child"


# --- unit files -------------------------------------------------------------------------------------------


def _directives(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` → values, in order (systemd allows repeated keys)."""
    section = ""
    out: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return out


COMMON = {
    "Service.Type": ["notify"],
    "Service.ExecReload": ["/bin/kill -HUP $MAINPID"],
    "Service.WatchdogSec": ["30s"],
    "Service.Restart": ["on-failure"],
    "Service.RestartSec": ["2s"],
    "Service.TimeoutStopSec": ["20s"],
    "Service.KillMode": ["mixed"],
    "Service.StateDirectory": ["compactd"],
    "Service.NoNewPrivileges": ["yes"],
}


@pytest.mark.parametrize("name", ["compactd.service", "compactd-user.service"])
def test_unit_common_shape(name: str) -> None:
    d = _directives(UNITS / name)
    for key, value in COMMON.items():
        assert d.get(key) == value, key
    assert "Service.DynamicUser" not in d
    assert "PYTHONUNBUFFERED=1" in d["Service.Environment"]
    (exec_start,) = d["Service.ExecStart"]
    binary = exec_start.split()[0]
    assert binary.startswith("/") and os.access(binary, os.X_OK)
    assert exec_start.split()[1:3] == ["compactd", "run"]


def test_system_unit_hardening() -> None:
    d = _directives(UNITS / "compactd.service")
    assert d["Service.User"] and d["Service.User"] != ["root"]
    assert d["Service.ProtectSystem"] == ["strict"]
    assert d["Service.ProtectHome"] == ["read-only"]
    assert d["Service.PrivateTmp"] == ["yes"]
    assert d["Service.PrivateDevices"] == ["yes"]
    paths = [p for value in d["Service.ReadWritePaths"] for p in value.split()]
    assert paths and all(p.startswith("-/") for p in paths), "optional session paths need a '-' prefix"
    for key in (
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectControlGroups",
        "RestrictNamespaces",
    ):
        assert d[f"Service.{key}"] == ["yes"], key
    assert d["Service.CapabilityBoundingSet"] == [""]
    # Lowering a thread's own priority (the preparing thread's niceness) is allowed back after @resources.
    assert d["Service.SystemCallFilter"] == ["@system-service", "~@privileged @resources", "setpriority"]
    # What `systemd-analyze security` listed and compactd works with (issue 23; tests/test_unit_hardening.py).
    assert d["Service.ProtectProc"] == ["invisible"] and d["Service.ProcSubset"] == ["pid"]
    for key in ("MemoryDenyWriteExecute", "PrivateMounts", "RemoveIPC"):
        assert d[f"Service.{key}"] == ["yes"], key
    assert d["Service.IPAddressDeny"] == ["any"] and d["Service.IPAddressAllow"] == ["localhost"]
    assert d["Install.WantedBy"] == ["multi-user.target"]


# Options that need a mount (or UTS) namespace, which systemd 252's user manager cannot create (design.md §7.3).
NAMESPACE_OPTIONS = {
    "ProtectSystem",
    "ProtectHome",
    "PrivateTmp",
    "PrivateDevices",
    "ReadWritePaths",
    "ReadOnlyPaths",
    "InaccessiblePaths",
    "BindPaths",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectControlGroups",
    "ProtectHostname",
    "ProtectClock",
    "ProtectProc",
    "ProcSubset",
    "PrivateMounts",
}


def test_user_unit_avoids_the_systemd_252_trap() -> None:
    d = _directives(UNITS / "compactd-user.service")
    used = {key.split(".", 1)[1] for key in d} & NAMESPACE_OPTIONS
    assert not used or d.get("Service.PrivateUsers") == ["yes"], used
    assert "Service.User" not in d
    # The seccomp-based ones a user manager can install (issue 23).
    # Lowering a thread's own priority (the preparing thread's niceness) is allowed back after @resources.
    assert d["Service.SystemCallFilter"] == ["@system-service", "~@privileged @resources", "setpriority"]
    assert d["Service.MemoryDenyWriteExecute"] == ["yes"]
    assert d["Install.WantedBy"] == ["default.target"]
    assert any("%h" in value for value in d["Service.Environment"])


def _run_verify(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(VERIFY), *args], capture_output=True, text=True, timeout=240, env=env, check=False
    )


needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None and not os.environ.get("CI"),
    reason="systemd-analyze is not installed (CI installs it)",
)


@needs_analyze
def test_verify_units_passes_on_the_repository_units() -> None:
    proc = _run_verify()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok ") == 2, proc.stdout


@needs_analyze
def test_verify_units_fails_on_a_warning_that_exits_zero(tmp_path: Path) -> None:
    for unit in UNITS.glob("*.service"):
        shutil.copy(unit, tmp_path / unit.name)
    user = tmp_path / "compactd-user.service"
    user.write_text(user.read_text().replace("WatchdogSec=", "WatchdogSek="))
    proc = _run_verify(str(tmp_path))
    assert proc.returncode != 0
    assert "WatchdogSek" in proc.stdout
    assert "ok   system unit" in proc.stdout


@needs_analyze
def test_verify_units_fails_on_a_missing_binary(tmp_path: Path) -> None:
    for unit in UNITS.glob("*.service"):
        shutil.copy(unit, tmp_path / unit.name)
    system = tmp_path / "compactd.service"
    system.write_text(system.read_text().replace("ExecStart=/usr/bin/env", "ExecStart=/nonexistent/env"))
    proc = _run_verify(str(tmp_path))
    assert proc.returncode != 0
    assert "FAIL system unit" in proc.stdout


def test_verify_units_without_systemd_analyze_fails_with_a_message(tmp_path: Path) -> None:
    """Outside CI a missing systemd-analyze is an error, never an install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "id", "mktemp", "chmod", "rm", "env", "sed"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(bin_dir / "bash"), str(VERIFY)], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert proc.returncode == 1
    assert "systemd-analyze not found" in proc.stderr
