"""A minimal client of the OpenClaw gateway's WebSocket RPC: connect with the token, call one method.

The ``websockets`` package does the RFC 6455 part (handshake, masking, fragments, ping/pong, close codes);
a hand-written client would be as long as this whole module and less correct. The protocol on top is small:
the gateway sends a ``connect.challenge`` event, the client answers with a ``connect`` request (``client.id``
must be one of OpenClaw's fixed names: ``"cli"``), then sends ``{"type":"req","id","method","params"}`` and
reads ``{"type":"res","id","ok","payload"|"error"}`` (a ``"status":"accepted"`` payload is not yet the answer).
The token is never logged: it is registered with the scrubber where it is read (``_discovery``).

The token is an admin credential and the port only a number: before the handshake, the kernel is asked who
owns the socket answering (:func:`compactd.sources.openclaw._listener.peer_uid`), and anything but the gateway's user
gets not one byte. One deadline covers the whole call, from the TCP connect to the answer (and the close).
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from compactd import __version__
from compactd.datarecord import datarecord
from compactd.sources.openclaw._listener import ListenerUnknown, peer_uid

CLIENT_ID = "cli"
PROTOCOL = 4
# At most this much of the call's deadline is spent closing (the gateway answers a close at once).
CLOSE_TIMEOUT_SECONDS = 2.0
# How often a call waiting for its answer looks whether it was cancelled.
CANCEL_POLL_SECONDS = 0.5
MAX_FRAME_BYTES = 16 << 20


class GatewayError(Exception):
    """The gateway could not be asked: ``kind`` is ``down`` (unreachable, closed, timed out), ``untrusted``
    (what listens on its port is not owned by the gateway's user: nothing was sent) or ``refused`` (it answered
    the connect with an error, e.g. a wrong token)."""

    def __init__(self, kind: str, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code


@datarecord(frozen=True, slots=True)
class RpcError(Exception):
    """The gateway answered the request with an error (``INVALID_REQUEST``, ...)."""

    code: str
    message: str
    retryable: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def busy(self) -> bool:
        """The session has a run in progress or queued work: "retry after it finishes". OpenClaw gives no code
        of its own for it (``INVALID_REQUEST``, ``retryable: false``), so its words are the only sign; they are
        read here, at the edge, and nowhere else."""
        return "retry after it finishes" in self.message.lower()


def _error_of(frame: dict[str, Any]) -> RpcError:
    error = frame.get("error")
    if not isinstance(error, dict):
        return RpcError("UNKNOWN", str(error))
    return RpcError(
        str(error.get("code", "UNKNOWN")), str(error.get("message", "")), error.get("retryable") is True
    )


def call(
    url: str,
    token: str | None,
    method: str | None,
    params: dict[str, Any],
    *,
    timeout: float,
    owner_uid: int | None,
    cancel: threading.Event | None = None,
) -> Any:
    """Connect, authenticate, call ``method`` once and return its payload (blocking: run it in a thread);
    with ``method`` None, only connect (``doctor``'s probe) and return the gateway's hello.

    ``owner_uid`` is the gateway's user: the connection is dropped before its first byte unless the socket
    answering it belongs to that uid. ``timeout`` is the whole call's deadline, connect to answer.
    ``cancel`` set ends the wait for an answer within :data:`CANCEL_POLL_SECONDS` (a compaction may take
    minutes: the service's SIGTERM must not wait for it; the gateway finishes it on its own).
    Raises :class:`GatewayError` when the gateway cannot be asked (or the call was cancelled) and
    :class:`RpcError` when it answers no.
    """
    from websockets.exceptions import InvalidHandshake, WebSocketException
    from websockets.sync.client import connect

    deadline = time.monotonic() + timeout

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    sock: socket.socket | None = None
    try:
        sock = _trusted_socket(url, owner_uid, remaining())
        ws = connect(
            url,
            sock=sock,
            open_timeout=remaining(),
            close_timeout=CLOSE_TIMEOUT_SECONDS,
            max_size=MAX_FRAME_BYTES,
            compression=None,
        )
    except (OSError, InvalidHandshake) as exc:
        if sock is not None:
            sock.close()
        if isinstance(exc, TimeoutError):
            raise GatewayError("down", f"no answer from {url} within {timeout:g}s") from None
        raise GatewayError("down", f"cannot connect to {url}: {exc}") from None
    try:
        with ws:  # closes it (websockets ≥ 17.1 warns about a connection used any other way)
            try:
                return _converse(ws, token, method, params, remaining, cancel)
            finally:
                # the close is bounded by what is left of the deadline: a silent peer cannot hold it either
                ws.close_timeout = min(CLOSE_TIMEOUT_SECONDS, max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        raise GatewayError("down", f"no answer from {url} within {timeout:g}s") from None
    except WebSocketException as exc:
        raise GatewayError("down", f"the connection to {url} failed: {exc}") from None


def _converse(
    ws: Any,
    token: str | None,
    method: str | None,
    params: dict[str, Any],
    remaining: Callable[[], float],
    cancel: threading.Event | None,
) -> Any:
    """The challenge, the ``connect`` request and the call, each read within what is left of the deadline
    (and, while ``cancel`` may be set, in slices of :data:`CANCEL_POLL_SECONDS`)."""
    ids = (f"compactd-{n}" for n in itertools.count(1))

    def request(name: str, body: dict[str, Any]) -> Any:
        request_id = next(ids)
        ws.send(json.dumps({"type": "req", "id": request_id, "method": name, "params": body}))
        while True:
            if cancel is not None and cancel.is_set():
                raise GatewayError("down", f"cancelled while waiting for {name}")
            left = remaining()  # TimeoutError past the deadline
            try:
                text = ws.recv(timeout=left if cancel is None else min(left, CANCEL_POLL_SECONDS))
            except TimeoutError:
                if cancel is None:
                    raise
                continue
            frame = json.loads(text)
            if not isinstance(frame, dict) or frame.get("type") != "res" or frame.get("id") != request_id:
                continue  # events (ticks, presence) and other answers
            payload = frame.get("payload")
            if frame.get("ok") and isinstance(payload, dict) and payload.get("status") == "accepted":
                continue
            if not frame.get("ok"):
                raise _error_of(frame)
            return payload

    _await_challenge(ws, remaining)
    try:
        hello = request("connect", connect_params(token))
    except RpcError as exc:
        raise GatewayError("refused", f"the gateway refused the connection: {exc}", exc.code) from None
    return hello if method is None else request(method, params)


def _trusted_socket(url: str, owner_uid: int | None, timeout: float) -> socket.socket:
    """A TCP connection to ``url``'s host and port, kept only when the kernel says the gateway's user owns the
    other end; nothing has been sent on it."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if owner_uid is None:
        raise GatewayError(
            "untrusted", f"the gateway's user is not known: the token is not sent to {host}:{port}"
        )
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        uid = peer_uid(sock)
    except ListenerUnknown as exc:
        sock.close()
        raise GatewayError("untrusted", f"cannot tell who listens on {host}:{port}: {exc}") from None
    if uid != owner_uid:
        sock.close()
        raise GatewayError(
            "untrusted",
            f"what listens on {host}:{port} belongs to uid {uid}, not to the gateway's user (uid {owner_uid}): "
            "the token is not sent to it",
        )
    sock.settimeout(None)
    return sock


def _await_challenge(ws: Any, remaining: Callable[[], float]) -> None:
    """The gateway speaks first (``connect.challenge`` with a nonce); a token client signs nothing with it."""
    while True:
        frame = json.loads(ws.recv(timeout=remaining()))
        if (
            isinstance(frame, dict)
            and frame.get("type") == "event"
            and frame.get("event") == "connect.challenge"
        ):
            return


def connect_params(token: str | None) -> dict[str, Any]:
    import platform

    params: dict[str, Any] = {
        "minProtocol": PROTOCOL,
        "maxProtocol": PROTOCOL,
        "client": {
            "id": CLIENT_ID,
            "version": __version__,
            "platform": platform.system().lower(),
            "mode": "cli",
        },
        "role": "operator",
        "scopes": ["operator.admin"],
    }
    if token:
        params["auth"] = {"token": token}
    return params
