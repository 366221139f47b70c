"""The adb host protocol at the byte level: answers, FAILs, robustness, clean stop."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from cmbuyer.phonesim import PhoneSim


def _req(sock: socket.socket, service: str | bytes) -> None:
    data = service.encode() if isinstance(service, str) else service
    sock.sendall(f"{len(data):04x}".encode() + data)


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


@pytest.fixture
def sim():
    with PhoneSim(serials=("sim-1", "sim-2")) as s:
        yield s


def _conn(sim: PhoneSim) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
    return s


def test_version_and_devices(sim):
    with _conn(sim) as s:
        _req(s, "host:version")
        assert s.recv(12) == b"OKAY00040029"
        _req(s, "host:devices")
        assert s.recv(4) == b"OKAY"
        size = int(s.recv(4), 16)
        assert s.recv(size) == b"sim-1\tdevice\nsim-2\tdevice\n"
    with _conn(sim) as s:
        _req(s, "host:devices-l")
        data = _read_until(s, b"transport_id:2\n")
        assert b"transport_id:1" in data and b"model:M2012K11AC" in data


def _read_until(s: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = s.recv(4096)
        assert chunk
        data += chunk
    return data


def test_tport_then_shell_on_same_socket(sim):
    with _conn(sim) as s:
        _req(s, "host:tport:serial:sim-2")
        assert s.recv(4) == b"OKAY"
        assert struct.unpack("<Q", s.recv(8))[0] == sim.phone("sim-2").transport_id
        _req(s, "shell:getprop ro.serialno")
        assert _read_all(s) == b"OKAYsim-2\n"


def test_shell_v2_framing(sim):
    with _conn(sim) as s:
        _req(s, "host:transport:sim-1")
        assert s.recv(4) == b"OKAY"
        _req(s, "shell,v2,raw:nosuchcmd")
        data = _read_all(s)
    assert data.startswith(b"OKAY\x01")
    assert data.endswith(b"\x03\x01\x00\x00\x00\x7f")  # exit code 127


@pytest.mark.parametrize(
    ("request_bytes", "message"),
    [
        (b"host:kill", b"unsupported"),
        (b"host:track-devices", b"unsupported"),
        (b"host:tport:serial:ghost", b"device 'ghost' not found"),
        (b"host-serial:ghost:get-state", b"not found"),
        (b"sync:", b"unsupported service"),
        (b"host:tport:any", b"more than one device"),
    ],
)
def test_unsupported_or_bad_requests_fail_with_a_message(sim, request_bytes, message):
    with _conn(sim) as s:
        _req(s, request_bytes)
        data = _read_all(s)
    assert data.startswith(b"FAIL") and message in data


def test_garbage_length_and_non_utf8(sim):
    with _conn(sim) as s:
        s.sendall(b"zzzzhost:version")
        assert _read_all(s).startswith(b"FAIL")
    with _conn(sim) as s:
        _req(s, b"\xff\xfe")
        assert _read_all(s).startswith(b"FAIL")
    with _conn(sim) as s:
        _req(s, "host:transport:sim-1")
        s.recv(4)
        _req(s, "tcp:5555")
        assert _read_all(s).startswith(b"FAIL")


def test_http_on_tcp_9008(sim):
    with _conn(sim) as s:
        _req(s, "host:transport:sim-1")
        s.recv(4)
        _req(s, "tcp:9008")
        assert s.recv(4) == b"OKAY"
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = _read_all(s)
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"pong")
    with _conn(sim) as s:
        _req(s, "host:transport:sim-1")
        s.recv(4)
        _req(s, "tcp:9008")
        s.recv(4)
        body = b'{"jsonrpc":"2.0","id":1,"method":"noSuchMethod","params":[]}'
        s.sendall(b"POST /jsonrpc/0 HTTP/1.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        data = _read_all(s)
    assert b'"code": -32601' in data


def test_stop_closes_idle_client_connections_and_threads():
    sim = PhoneSim()
    sim.start()
    before = threading.active_count()
    s = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
    _req(s, "host:version")
    assert s.recv(12) == b"OKAY00040029"
    sim.stop()
    assert s.recv(10) == b""  # the server closed its side
    s.close()
    assert threading.active_count() <= before - 1  # adb thread gone, no handler left behind
    sim.stop()  # idempotent
