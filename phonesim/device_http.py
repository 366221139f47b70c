"""A minimal HTTP/1.1 server on one adb ``tcp:9008`` stream (the on-device uiautomator2 port).

uiautomator2 sends one request per stream (``GET /ping`` or ``POST /jsonrpc/0``); keep-alive
is honoured anyway. Hand-rolled rather than ``http.server`` so a dropped connection (fault)
can close the socket mid-request, exactly like a phone that lost its USB link.
"""

from __future__ import annotations

import socket

from . import rpc
from .phone import Phone

MAX_HEADER = 64 * 1024
MAX_BODY = 16 * 1024 * 1024


class _Reader:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def until(self, marker: bytes, limit: int) -> bytes | None:
        while marker not in self.buf:
            if len(self.buf) > limit:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        head, _, self.buf = self.buf.partition(marker)
        return head

    def exactly(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            chunk = self.sock.recv(min(65536, n - len(self.buf)))
            if not chunk:
                return None
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data


def _response(status: int, reason: str, body: bytes, ctype: str, keep: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
    )
    return head.encode("ascii") + body


def serve(sock: socket.socket, phone: Phone, once: bool = False) -> None:
    """Answer HTTP requests on ``sock`` until the peer closes (or after one when ``once``).

    Raises DropConnection when a fault drops the link during the request.
    """
    reader = _Reader(sock)
    while True:
        head = reader.until(b"\r\n\r\n", MAX_HEADER)
        if head is None:
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            sock.sendall(_response(400, "Bad Request", b"bad request line", "text/plain", False))
            return
        method, path, _version = parts
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers.get("content-length", "0") or "0")
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            sock.sendall(_response(400, "Bad Request", b"bad content-length", "text/plain", False))
            return
        body = reader.exactly(length) if length else b""
        if body is None:
            return
        keep = headers.get("connection", "").lower() != "close"
        if method == "GET" and path == "/ping":
            out = _response(200, "OK", b"pong", "text/plain", keep)
        elif method == "POST" and path.startswith("/jsonrpc/0"):
            payload = rpc.handle(phone, body)  # DropConnection propagates: the caller closes the socket
            out = _response(200, "OK", payload, "application/json; charset=utf-8", keep)
        else:
            out = _response(404, "Not Found", b"not found", "text/plain", keep)
        sock.sendall(out)
        if not keep or once:
            return
