"""Who is at the other end of a loopback TCP connection: the uid owning the gateway's socket, from the kernel.

The gateway's token is an admin credential, and its port is just a number: whoever listens there while the
gateway is down would be sent the token. The kernel knows who listens: ``/proc/self/net/tcp`` and ``tcp6`` list
every socket of this network namespace with the uid owning it, and a connection the listener has not yet
accepted (or has) is listed under the listener's uid (the kernel copies it from the listening socket). So the
row whose local address is the connection's peer and whose remote address is our end names the listener's
user, before a byte is sent.
"""

from __future__ import annotations

import ipaddress
import socket
import sys

# Through ``self``: the same tables (``/proc/net`` is a link to ``self/net``), and still there under systemd's
# ``ProcSubset=pid``, which hides ``/proc/net`` (the system unit sets it).
TABLES = ("/proc/self/net/tcp", "/proc/self/net/tcp6")
# The states a connection we just made has on the listener's side: ESTABLISHED, or SYN_RECV while the kernel
# finishes the handshake (a closed or TIME_WAIT row shows uid 0 whoever owned it, so it names nobody).
_STATES = frozenset({"01", "03"})

Endpoint = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


class ListenerUnknown(Exception):
    """The kernel does not list the connection's other end (it closed it, or /proc is not readable)."""


def _address(field: str) -> Endpoint:
    """``0100007F:4A3B`` (each 32-bit word of the address in host byte order, the port in hex) as an endpoint;
    an IPv4-mapped IPv6 address (a dual-stack listener's view of an IPv4 peer) as the IPv4 one."""
    hex_ip, hex_port = field.split(":")
    raw = b"".join(int(hex_ip[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hex_ip), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip, int(hex_port, 16)


def _endpoint(name: tuple[str, int] | tuple[str, int, int, int]) -> Endpoint:
    ip = ipaddress.ip_address(name[0].split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip, int(name[1])


def peer_uid(sock: socket.socket, tables: tuple[str, ...] = TABLES) -> int:
    """The uid owning the other end of the connected TCP socket ``sock`` (the listener's owner).

    Raises :class:`ListenerUnknown` when no table lists it.
    """
    ours, theirs = _endpoint(sock.getsockname()), _endpoint(sock.getpeername())
    for table in tables:
        try:
            with open(table, encoding="ascii") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] not in _STATES:
                continue
            try:
                if _address(fields[1]) == theirs and _address(fields[2]) == ours:
                    return int(fields[7])
            except ValueError:
                continue
    raise ListenerUnknown(f"no socket listed in {' or '.join(tables)} is the other end of {ours} -> {theirs}")
