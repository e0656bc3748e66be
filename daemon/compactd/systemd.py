"""systemd's notify protocol without a dependency (design.md §7.3).

One datagram per call to the ``AF_UNIX``/``SOCK_DGRAM`` socket named in ``$NOTIFY_SOCKET``. Outside systemd
the variable is unset and every call is a cheap no-op returning False, so callers never need to check first.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)

__all__ = ["Notifier", "sd_notify", "watchdog_interval"]

# A datagram send blocks while the manager's receive queue is full; bound that stall for the event loop
# (libsystemd blocks indefinitely). A dropped WATCHDOG=1 is repeated at the next interval anyway.
SEND_TIMEOUT_SECONDS = 1.0


def sd_notify(*lines: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``KEY=VALUE`` lines as one datagram; True when it was sent.

    Never raises: a daemon must not die because its supervisor's socket went away. A leading ``@`` names a
    socket in the abstract namespace.
    """
    address = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not address or not lines:
        return False
    if address[0] == "@":
        address = "\0" + address[1:]
    elif address[0] != "/":
        log.debug("NOTIFY_SOCKET %r is neither a path nor an abstract name; not notifying", address)
        return False
    import socket  # here: outside systemd (every command but ``run``) nothing is sent, and it costs 3 ms to load

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(SEND_TIMEOUT_SECONDS)
            sock.connect(address)
            sock.sendall("\n".join(lines).encode())
    except OSError as exc:
        log.debug("sd_notify to %r failed: %s", address, exc)
        return False
    return True


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WATCHDOG_USEC``), or None when no watchdog is ours.

    ``WATCHDOG_PID`` names the process the watchdog is meant for; a child that inherited the variables must
    not ping on its parent's behalf.
    """
    env = os.environ if env is None else env
    raw_pid = env.get("WATCHDOG_PID")
    if raw_pid:
        try:
            if int(raw_pid) != os.getpid():
                return None
        except ValueError:
            return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


def _one_line(text: str) -> str:
    # A newline would start a new KEY=VALUE assignment inside the datagram.
    return " ".join(text.splitlines())


class Notifier:
    """The messages compactd sends to its service manager.

    The environment is captured once: systemd does not change it during the process's life, and a test can
    hand in its own mapping.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        source = os.environ if env is None else env
        self._env: dict[str, str] = {
            k: source[k] for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID") if k in source
        }

    @property
    def enabled(self) -> bool:
        return bool(self._env.get("NOTIFY_SOCKET"))

    @property
    def watchdog_interval(self) -> float | None:
        return watchdog_interval(self._env)

    def ready(self, status: str | None = None) -> bool:
        """Send only once the config is loaded, state restored and the watcher running (design.md §7.3)."""
        lines = ["READY=1"]
        if status is not None:
            lines.append("STATUS=" + _one_line(status))
        return sd_notify(*lines, env=self._env)

    def status(self, text: str) -> bool:
        return sd_notify("STATUS=" + _one_line(text), env=self._env)

    def reloading(self) -> bool:
        """systemd 252 has no notify-reload: announce it with the monotonic time; send READY=1 when done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return sd_notify("RELOADING=1", f"MONOTONIC_USEC={usec}", env=self._env)

    def stopping(self) -> bool:
        return sd_notify("STOPPING=1", env=self._env)

    def watchdog(self) -> bool:
        """Call only when the pipeline made progress, or a wedged daemon is never restarted (design.md §7.3)."""
        return sd_notify("WATCHDOG=1", env=self._env)
