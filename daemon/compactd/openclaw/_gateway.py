"""A minimal client of the OpenClaw gateway's WebSocket RPC: connect with the token, call one method.

The ``websockets`` package does the RFC 6455 part (handshake, masking, fragments, ping/pong, close codes);
a hand-written client would be as long as this whole module and less correct. The protocol on top is small:
the gateway sends a ``connect.challenge`` event, the client answers with a ``connect`` request (``client.id``
must be one of OpenClaw's fixed names: ``"cli"``), then sends ``{"type":"req","id","method","params"}`` and
reads ``{"type":"res","id","ok","payload"|"error"}`` (a ``"status":"accepted"`` payload is not yet the answer).
The token is never logged: it is registered with the scrubber where it is read (``_discovery``).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from compactd import __version__

CLIENT_ID = "cli"
PROTOCOL = 4
CONNECT_TIMEOUT_SECONDS = 10.0
# How often a call waiting for its answer looks whether it was cancelled.
CANCEL_POLL_SECONDS = 0.5
MAX_FRAME_BYTES = 16 << 20


class GatewayError(Exception):
    """The gateway could not be asked: ``kind`` is ``down`` (unreachable, closed, timed out) or ``refused``
    (it answered the connect with an error, e.g. a wrong token)."""

    def __init__(self, kind: str, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code


@dataclass(frozen=True, slots=True)
class RpcError(Exception):
    """The gateway answered the request with an error (``INVALID_REQUEST``, ...)."""

    code: str
    message: str
    retryable: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


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
    cancel: threading.Event | None = None,
) -> Any:
    """Connect, authenticate, call ``method`` once and return its payload (blocking: run it in a thread);
    with ``method`` None, only connect (``doctor``'s probe) and return the gateway's hello.

    ``cancel`` set ends the wait for an answer within :data:`CANCEL_POLL_SECONDS` (a compaction may take
    minutes: the service's SIGTERM must not wait for it; the gateway finishes it on its own).
    Raises :class:`GatewayError` when the gateway cannot be asked (or the call was cancelled) and
    :class:`RpcError` when it answers no.
    """
    from websockets.exceptions import InvalidHandshake
    from websockets.sync.client import connect

    deadline = time.monotonic() + timeout
    try:
        opened = connect(
            url, open_timeout=CONNECT_TIMEOUT_SECONDS, max_size=MAX_FRAME_BYTES, compression=None
        )
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        raise GatewayError("down", f"cannot connect to {url}: {exc}") from None
    # entered as a context manager: websockets 17 warns about (and will drop) a connection used without one
    with opened as ws:
        return _exchange(ws, url, token, method, params, deadline, timeout, cancel)


def _exchange(
    ws: Any,
    url: str,
    token: str | None,
    method: str | None,
    params: dict[str, Any],
    deadline: float,
    timeout: float,
    cancel: threading.Event | None,
) -> Any:
    from websockets.exceptions import WebSocketException

    ids = (f"compactd-{n}" for n in itertools.count(1))
    try:

        def request(name: str, body: dict[str, Any]) -> Any:
            request_id = next(ids)
            ws.send(json.dumps({"type": "req", "id": request_id, "method": name, "params": body}))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise GatewayError("down", f"no answer to {name} within {timeout:.0f}s")
                if cancel is not None and cancel.is_set():
                    raise GatewayError("down", f"cancelled while waiting for {name}")
                try:
                    text = ws.recv(
                        timeout=remaining if cancel is None else min(remaining, CANCEL_POLL_SECONDS)
                    )
                except TimeoutError:
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

        _await_challenge(ws, deadline)
        try:
            hello = request("connect", connect_params(token))
        except RpcError as exc:
            raise GatewayError("refused", f"the gateway refused the connection: {exc}", exc.code) from None
        return hello if method is None else request(method, params)
    except TimeoutError:
        raise GatewayError("down", f"no answer from {url} within {timeout:.0f}s") from None
    except WebSocketException as exc:
        raise GatewayError("down", f"the connection to {url} failed: {exc}") from None


def _await_challenge(ws: Any, deadline: float) -> None:
    """The gateway speaks first (``connect.challenge`` with a nonce); a token client signs nothing with it."""
    while True:
        frame = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
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
