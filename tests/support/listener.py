"""A stand-in for whatever listens on the gateway's port, run as a script (stdlib only, so any uid can run it).

``python listener.py MODE`` listens on a free loopback port, prints ``{"port": n}``, then one JSON line per thing
it receives: ``{"bytes": n}`` for each chunk read from a connection and ``{"message": text}`` for each WebSocket
text frame a client sent (unmasked). Modes: ``gateway`` answers like OpenClaw's gateway (the WebSocket
handshake, a ``connect.challenge``, an ``ok`` answer to every request); ``silent`` accepts connections and
never answers; ``silent-ws`` completes the WebSocket handshake and then never sends anything (not even the answer to a close).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import sys
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def say(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def recv(conn: socket.socket) -> bytes:
    data = conn.recv(65536)
    if data:
        say({"bytes": len(data)})
    return data


def frame(text: str) -> bytes:
    payload = text.encode()
    if len(payload) < 126:
        return bytes([0x81, len(payload)]) + payload
    return bytes([0x81, 126]) + struct.pack("!H", len(payload)) + payload


def messages(buffer: bytearray) -> list[tuple[int, bytes]]:
    """Complete client frames taken off the front of ``buffer``: (opcode, unmasked payload)."""
    out = []
    while len(buffer) >= 2:
        opcode, length, at = buffer[0] & 0x0F, buffer[1] & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                break
            length, at = struct.unpack("!H", buffer[2:4])[0], 4
        elif length == 127:
            if len(buffer) < 10:
                break
            length, at = struct.unpack("!Q", buffer[2:10])[0], 10
        if len(buffer) < at + 4 + length:
            break
        mask = buffer[at : at + 4]
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buffer[at + 4 : at + 4 + length]))
        del buffer[: at + 4 + length]
        out.append((opcode, payload))
    return out


def serve(conn: socket.socket, mode: str) -> None:
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            data = recv(conn)
            if not data:
                return
            request += data
            if mode == "silent":
                request = b""  # never answers, only counts
        key = next(
            line.split(b":", 1)[1].strip()
            for line in request.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        if mode == "gateway":
            challenge = {"type": "event", "event": "connect.challenge", "payload": {"nonce": "n"}}
            conn.sendall(frame(json.dumps(challenge)))
        buffer = bytearray()
        while data := recv(conn):
            buffer += data
            for opcode, payload in messages(buffer):
                if opcode == 0x8:  # a close: the gateway answers it, a silent listener does not
                    if mode == "gateway":
                        conn.sendall(bytes([0x88, 0]))
                        return
                    continue
                text = payload.decode("utf-8", "replace")
                say({"message": text})
                if mode == "gateway" and opcode == 0x1:
                    request_id = json.loads(text).get("id")
                    answer = {"type": "res", "id": request_id, "ok": True, "payload": {"type": "hello-ok"}}
                    conn.sendall(frame(json.dumps(answer)))


def main() -> None:
    mode = sys.argv[1]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    say({"port": server.getsockname()[1]})
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, mode), daemon=True).start()


if __name__ == "__main__":
    main()
