"""The opt-in HTTP endpoint (``service.http_listen``): ``/metrics`` and ``/healthz``, as node_exporter and
litestream serve them.

``/metrics`` renders the same :class:`compactd.state.Metrics` the textfile is written from, so the two never
disagree. ``/healthz`` answers 200 while the service's loop and watchers make progress and 503 otherwise (the
watchdog's own test: a wedged daemon is unhealthy before systemd kills it), with the figures as JSON. A stdlib
``ThreadingHTTPServer`` in a daemon thread: the event loop never waits on a client, and a slow client holds one
thread, not the service. Only GET and HEAD of those two paths are answered; nothing else of the state is served.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

__all__ = ["HttpEndpoint", "parse_listen"]

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A client that sends nothing for this long is dropped (one thread each).
CLIENT_TIMEOUT_SECONDS = 10.0


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` / ``[v6]:port`` (as the config normalises it) → (host, port)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], render: Callable[[], str], health: Callable[[], Any]
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.render, self.health = render, health
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = CLIENT_TIMEOUT_SECONDS

    def version_string(self) -> str:
        return "compactd"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        route = self.path.split("?", 1)[0]
        try:
            if route == "/metrics":
                code, kind, data = 200, METRICS_CONTENT_TYPE, self.server.render().encode()
            elif route == "/healthz":
                healthy, detail = self.server.health()
                code, kind = (200 if healthy else 503), "application/json"
                data = orjson.dumps({"status": "ok" if healthy else "unhealthy", **detail}) + b"\n"
            else:
                code, kind, data = 404, "text/plain; charset=utf-8", b"not found: /metrics or /healthz\n"
        except Exception as exc:  # a bug in rendering must not take the endpoint (or the service) down
            log.warning("action=http_error path=%s error=%r", route, exc)
            code, kind, data = 500, "text/plain; charset=utf-8", b"internal error\n"
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not events worth a line each (a scrape every 15 s); errors are logged above."""


class HttpEndpoint:
    """The server, started and stopped by the service; ``address`` is what it is bound to (port 0 → real)."""

    def __init__(self, listen: str, render: Callable[[], str], health: Callable[[], Any]) -> None:
        self._server = _Server(parse_listen(listen), render, health)
        self.address = self._server.server_address
        self._thread = threading.Thread(target=self._server.serve_forever, name="compactd-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = str(self.address[0]), self.address[1]
        return f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
