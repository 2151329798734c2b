"""The server side of RFC 6455 WebSocket framing, as much as the Kubernetes exec protocol uses.

Clients mask their frames; servers do not. Messages are binary (the channel protocols) with
ping/pong and close control frames; fragmented messages are reassembled.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_key(client_key: str) -> str:
    """The ``Sec-WebSocket-Accept`` answer to a client's ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1((client_key.strip() + GUID).encode()).digest()
    return base64.b64encode(digest).decode()


class ConnectionClosed(Exception):
    """The peer closed the connection (a close frame, or the socket ended)."""


class WebSocket:
    """One upgraded connection. ``send`` is thread-safe; ``recv`` is for one reader thread."""

    def __init__(self, sock: socket.socket, reader) -> None:  # noqa: ANN001 - a buffered file of sock
        self.sock = sock
        self.reader = reader
        self._send_lock = threading.Lock()
        self.closed = False

    def _read_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.reader.read(n - len(data))
            if not chunk:
                raise ConnectionClosed("the socket ended")
            data += chunk
        return data

    def _read_frame(self) -> tuple[bool, int, bytes]:
        b1, b2 = self._read_exact(2)
        fin, opcode, masked, length = bool(b1 & 0x80), b1 & 0x0F, bool(b2 & 0x80), b2 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exact(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exact(8))
        mask = self._read_exact(4) if masked else b""
        payload = self._read_exact(length)
        if masked:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return fin, opcode, payload

    def recv(self) -> bytes:
        """The next data message; answers pings on the way. Raises ``ConnectionClosed``."""
        parts: list[bytes] = []
        while True:
            fin, opcode, payload = self._read_frame()
            if opcode == OP_PING:
                self._send_frame(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                if not self.closed:
                    self.close(payload[:2] if len(payload) >= 2 else struct.pack("!H", 1000))
                raise ConnectionClosed("close frame")
            parts.append(payload)
            if fin:
                return b"".join(parts)

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([n])
        elif n < 1 << 16:
            head += bytes([126]) + struct.pack("!H", n)
        else:
            head += bytes([127]) + struct.pack("!Q", n)
        with self._send_lock:
            try:
                self.sock.sendall(head + payload)
            except OSError as exc:
                raise ConnectionClosed(str(exc)) from None

    def send(self, data: bytes) -> None:
        self._send_frame(OP_BINARY, data)

    def close(self, code: bytes = struct.pack("!H", 1000)) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._send_frame(OP_CLOSE, code)
        except ConnectionClosed:
            pass
