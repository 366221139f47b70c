"""An adb server speaking the host protocol subset that adbutils 2.x / uiautomator2 3.x use.

Wire format: each request is 4 hex digits (length) + the service string; answers are
``OKAY`` or ``FAIL`` + 4 hex length + message, and ``host:`` answers carry a length-prefixed
payload. Supported: ``host:version``, ``host:devices(-l)``, ``host:tport:serial:S`` (+ 8-byte
little-endian transport id), ``host:transport:S`` / ``-id:N`` / ``-any``,
``host-serial:S:features|get-state|get-serialno|get-devpath|list-forward|wait-for-*``, and on
a transport ``shell:``, ``shell,v2:``, ``exec:`` and ``tcp:9008``. Everything else gets a clear
``FAIL``. Simulator extensions for tests that run the simulator in another process:
``host:phonesim-journal:S`` and ``host:phonesim-state:S`` (OKAY + JSON until close) and
``host:phonesim-inject:S:<fault JSON>`` (OKAY + length-prefixed JSON).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import socketserver
import struct
import threading
import time
from typing import Protocol

from . import device_http
from .phone import DropConnection, Phone
from .shell import run_shell
from .system_ui import DEVICE_MODEL

log = logging.getLogger(__name__)
ADB_VERSION = 41  # >= 41 makes adbutils use host:tport:serial:
IDLE_TIMEOUT = 30.0  # a client silent this long between requests is dropped: never hang a thread
MAX_REQUEST = 64 * 1024
FEATURES = (
    "shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir,apex,abb,fixed_push_symlink_timestamp,abb_exec,"
    "remount_shell,track_app,sendrecv_v2,sendrecv_v2_brotli,sendrecv_v2_lz4,sendrecv_v2_zstd,"
    "sendrecv_v2_dry_run_send,openscreen_mdns"
)
HOST_SERIAL_CMDS = (
    "features",
    "get-state",
    "get-serialno",
    "get-devpath",
    "list-forward",
    "wait-for-",
    "forward",
    "killforward",
    "phonesim-",
)


class AdbHost(Protocol):
    """What the adb server needs of the simulator that owns it (:class:`.server.PhoneSim`): its phones by
    serial, the host-version counter and its lock, the stop flag, and the connection register that lets
    a stop close every open socket."""

    phones: dict[str, Phone]
    host_lock: threading.Lock
    host_version_requests: int
    stopping: threading.Event

    def track_connection(self, sock: socket.socket) -> None:
        """Register a connection (closed at once when the simulator is stopping)."""

    def untrack_connection(self, sock: socket.socket) -> None:
        """Forget a connection that ended."""


class _Close(Exception):
    pass


def _block(payload: str | bytes) -> bytes:
    data = payload.encode("utf-8") if isinstance(payload, str) else payload
    return f"{len(data):04x}".encode("ascii") + data


def _okay(payload: str | bytes | None = None) -> bytes:
    return b"OKAY" + (_block(payload) if payload is not None else b"")


def _fail(message: str) -> bytes:
    return b"FAIL" + _block(message[:4000])


class _Handler(socketserver.BaseRequestHandler):
    server: _TCPServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sim = self.server.sim
        sim.track_connection(sock)
        try:
            sock.settimeout(IDLE_TIMEOUT)
            self._loop(sock, sim)
        except (_Close, OSError, EOFError, DropConnection):
            pass
        except Exception:  # never let a handler thread die with a traceback: log and close
            log.exception("phonesim adb handler failed")
        finally:
            sim.untrack_connection(sock)

    def _loop(self, sock: socket.socket, sim: AdbHost) -> None:
        phone: Phone | None = None
        while True:
            req = _read_request(sock)
            if req is None:
                return
            if phone is None:
                phone = _host_service(sock, sim, req)
                continue
            _device_service(sock, sim, phone, req)
            return  # a device service consumes the connection, as in real adb


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _read_request(sock: socket.socket) -> str | None:
    head = _read_exact(sock, 4)
    if head is None:
        return None
    try:
        size = int(head.decode("ascii"), 16)
    except (UnicodeDecodeError, ValueError):
        sock.sendall(_fail(f"phonesim: bad request length {head!r}"))
        raise _Close from None
    if size > MAX_REQUEST:
        sock.sendall(_fail("phonesim: request too long"))
        raise _Close
    body = _read_exact(sock, size)
    if body is None:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        sock.sendall(_fail("phonesim: request is not UTF-8"))
        raise _Close from None


def _resolve(sim: AdbHost, serial: str | None = None, transport_id: int | None = None) -> Phone | str:
    """The phone for a selector, or the FAIL message adb would give."""
    phones = list(sim.phones.values())
    if serial is not None:
        match = [p for p in phones if p.serial == serial]
        if not match:
            return f"device '{serial}' not found"
    elif transport_id is not None:
        match = [p for p in phones if p.transport_id == transport_id]
        if not match:
            return f"no device with transport id '{transport_id}'"
    else:
        match = phones
        if len(match) != 1:
            return "no devices/emulators found" if not match else "more than one device/emulator"
    phone = match[0]
    if not phone.online:
        return "device offline"
    return phone


def _host_service(sock: socket.socket, sim: AdbHost, req: str) -> Phone | None:
    """Answer a host request; returns the phone when the request attached a transport."""
    if req == "host:version":
        with sim.host_lock:
            sim.host_version_requests += 1
        sock.sendall(_okay(f"{ADB_VERSION:04x}"))
        return None
    if req in ("host:devices", "host:devices-l"):
        lines = []
        for p in sim.phones.values():
            state = "device" if p.online else "offline"
            if req.endswith("-l"):
                model = str(p.cfg.device.get("model", DEVICE_MODEL))
                lines.append(
                    f"{p.serial:<22} {state} usb:1-{p.transport_id} product:{model} model:{model} "
                    f"device:OP5961L1 transport_id:{p.transport_id}\n"
                )
            else:
                lines.append(f"{p.serial}\t{state}\n")
        sock.sendall(_okay("".join(lines)))
        return None
    if req.startswith(("host:tport:", "host:transport")):
        return _attach(sock, sim, req)
    if req.startswith("host:phonesim-"):
        _extension(sock, sim, req[len("host:") :])
        return None
    for prefix in ("host-serial:", "host-transport-id:", "host-usb:", "host-local:", "host:"):
        if prefix == "host:" and not req[len(prefix) :].startswith(HOST_SERIAL_CMDS):
            break  # host:kill, host:track-devices, host:connect … are not simulated
        if req.startswith(prefix):
            _host_device_query(sock, sim, prefix, req[len(prefix) :])
            return None
    sock.sendall(_fail(f"phonesim: unsupported service {req[:100]!r}"))
    raise _Close


def _attach(sock: socket.socket, sim: AdbHost, req: str) -> Phone:
    tport = req.startswith("host:tport:")
    sel = req[len("host:tport:") :] if tport else req[len("host:") :]
    if sel.startswith("serial:"):
        found = _resolve(sim, serial=sel[len("serial:") :])
    elif sel.startswith("transport:"):
        found = _resolve(sim, serial=sel[len("transport:") :])
    elif sel.startswith("transport-id:"):
        try:
            found = _resolve(sim, transport_id=int(sel[len("transport-id:") :]))
        except ValueError:
            found = "bad transport id"
    elif sel in ("any", "usb", "local", "transport-any", "transport-usb", "transport-local"):
        found = _resolve(sim)
    else:
        found = f"phonesim: unsupported transport request {req[:100]!r}"
    if isinstance(found, str):
        sock.sendall(_fail(found))
        raise _Close
    sock.sendall(b"OKAY" + (struct.pack("<Q", found.transport_id) if tport else b""))
    return found


def _split_host_query(prefix: str, rest: str) -> tuple[str | None, int | None, str]:
    """(serial, transport id, command) of ``host-serial:<serial>:<cmd>`` and friends."""
    if prefix in ("host-serial:", "host-transport-id:"):
        # serials may contain ':' (e.g. 10.0.0.2:5555): find where a known command starts
        for i in range(len(rest)):
            if rest[i] == ":" and rest[i + 1 :].startswith(HOST_SERIAL_CMDS):
                key, cmd = rest[:i], rest[i + 1 :]
                if prefix == "host-serial:":
                    return key, None, cmd
                return None, int(key) if key.isdigit() else -1, cmd
        return "", None, ""
    return None, None, rest


def _host_device_query(sock: socket.socket, sim: AdbHost, prefix: str, rest: str) -> None:
    serial, tid, cmd = _split_host_query(prefix, rest)
    if cmd.startswith("wait-for-"):
        deadline = time.monotonic() + 5.0
        while True:
            found = _resolve(sim, serial=serial, transport_id=tid)
            if not isinstance(found, str):
                sock.sendall(b"OKAYOKAY")
                return
            if time.monotonic() > deadline or sim.stopping.wait(0.1):
                sock.sendall(_fail(found))
                raise _Close
    if cmd == "get-state" and serial is not None:
        phone = sim.phones.get(serial)
        if phone is None:
            sock.sendall(_fail(f"device '{serial}' not found"))
            raise _Close
        else:
            sock.sendall(_okay("device" if phone.online else "offline"))
        return
    found = _resolve(sim, serial=serial, transport_id=tid)
    if isinstance(found, str):
        sock.sendall(_fail(found))
        raise _Close
    answers = {
        "features": FEATURES,
        "get-state": "device",
        "get-serialno": found.serial,
        "get-devpath": f"usb:1-{found.transport_id}",
        "list-forward": "",
    }
    if cmd in answers:
        sock.sendall(_okay(answers[cmd]))
        return
    sock.sendall(
        _fail(f"phonesim: unsupported host command {cmd[:100]!r} (no port forwarding; use the tcp:9008 device service)")
    )
    raise _Close


def _extension(sock: socket.socket, sim: AdbHost, req: str) -> None:
    name, _, rest = req.partition(":")
    serial, _, arg = rest.partition(":")
    phone = sim.phones.get(serial)
    if phone is None:
        sock.sendall(_fail(f"device '{serial}' not found"))
        raise _Close
    if name == "phonesim-journal":
        lines = "".join(json.dumps(e, ensure_ascii=False, default=str) + "\n" for e in phone.journal.entries())
        sock.sendall(b"OKAY" + lines.encode("utf-8"))
        raise _Close
    if name == "phonesim-state":
        sock.sendall(b"OKAY" + json.dumps(phone.state(), ensure_ascii=False).encode("utf-8"))
        raise _Close
    if name == "phonesim-inject":
        try:
            desc = phone.inject(json.loads(arg))
        except ValueError as exc:
            sock.sendall(_fail(f"phonesim: bad fault: {exc}"))
            raise _Close from None
        sock.sendall(_okay(json.dumps(desc, ensure_ascii=False)))
        return
    if name == "phonesim-clear-faults":
        phone.clear_faults(arg or None)
        sock.sendall(_okay(""))
        return
    sock.sendall(_fail(f"phonesim: unknown extension {name!r}"))
    raise _Close


def _device_service(sock: socket.socket, sim: AdbHost, phone: Phone, req: str) -> None:
    if not phone.online:
        sock.sendall(_fail("device offline"))
        return
    drop = phone.begin_call(req)
    if drop is not None and not drop.params.get("applied"):
        return  # link lost before the phone saw the request: close, no answer
    silent = drop is not None  # applied: do the work, then lose the link before answering
    if req.startswith(("shell:", "shell,", "exec:")):
        _shell(sock, sim, phone, req, silent)
    elif req.startswith("tcp:"):
        _tcp(sock, phone, req, silent)
    else:
        sock.sendall(_fail(f"phonesim: unsupported device service {req.split(':', 1)[0]!r}"))


def _shell(sock: socket.socket, sim: AdbHost, phone: Phone, req: str, silent: bool) -> None:
    service, _, cmd = req.partition(":")
    v2 = service.startswith("shell,v2")
    phone.count("shell_calls")
    phone.sleep("shell")
    result = run_shell(phone, cmd)  # DropConnection (tap fault) propagates: connection closes unanswered
    if silent:
        return
    if result.stream:
        _serve_uia_stream(sock, sim, phone, result.out)
        return
    if not v2:
        sock.sendall(b"OKAY" + result.out)
        return
    frames = b"OKAY"
    if result.out:
        frames += b"\x01" + struct.pack("<I", len(result.out)) + result.out
    frames += b"\x03" + struct.pack("<I", 1) + bytes([result.rc & 0xFF])
    sock.sendall(frames)


def _serve_uia_stream(sock: socket.socket, sim: AdbHost, phone: Phone, banner: bytes) -> None:
    """``app_process … com.wetest.uia2.Main``: the server lives while this stream is open."""
    token = object()
    with phone.lock:
        phone.uia_alive = True
        phone._uia_owner = token
    phone.journal.record("uia_start")
    sock.sendall(b"OKAY" + banner)
    sock.settimeout(0.5)
    try:
        while not sim.stopping.is_set():
            try:
                if not sock.recv(4096):
                    break
            except TimeoutError:
                continue
    finally:
        with phone.lock:
            if phone._uia_owner is token:
                phone.uia_alive = False  # uiautomator2 killed the process by closing the stream


def _tcp(sock: socket.socket, phone: Phone, req: str, silent: bool) -> None:
    port = req[len("tcp:") :].split(":")[-1]
    if port != "9008" or not phone.uia_alive:
        # nothing listens there (or the uiautomator2 server died): the stream cannot open
        sock.sendall(_fail("closed"))
        return
    sock.sendall(b"OKAY")
    if silent:
        device_http.serve(_MuteSocket(sock), phone, once=True)  # type: ignore[arg-type]
        return
    device_http.serve(sock, phone)


class _MuteSocket:
    """Reads from the peer but swallows our answer (the link died right after the phone acted)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def recv(self, n: int) -> bytes:
        return self._sock.recv(n)

    def sendall(self, data: bytes) -> None:
        return None


class _TCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True  # belt and braces: stop() closes every connection and joins anyway
    block_on_close = False

    def __init__(self, addr: tuple[str, int], sim: AdbHost):
        self.sim = sim
        super().__init__(addr, _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("phonesim adb connection error from %s", client_address, exc_info=True)


class AdbServer:
    """Owns the listening socket and its serving thread."""

    def __init__(self, sim: AdbHost, host: str, port: int):
        self._server = _TCPServer((host, port), sim)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="phonesim-adb", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
        self._server.server_close()


def close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
