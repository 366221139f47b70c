"""PhoneSim: several simulated phones behind one adb server, run in a background thread.

    sim = PhoneSim(scenario="my.yaml", serials=["sim-1", "sim-2"])
    port = sim.start()                 # 0 = pick a free loopback port
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)
    ...uiautomator2.connect("sim-1")...
    sim.phone("sim-1").inject("empty_dump", times=3)
    sim.phone("sim-1").journal.assert_single_submit_tap()
    sim.stop()

Stopping closes every client connection and joins every thread it started.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .adb import AdbServer, close_quietly
from .journal import Journal, JournalSink
from .phone import Phone
from .recorder import SessionRecorder
from .scenario import Scenario, load_scenario
from .session import Session, SessionPhone, load_session


class PhoneSim:
    """The simulator. ``scenario``: dict, file path, :class:`Scenario` or None (built-in default).

    ``journal_path`` additionally appends every journal entry of every phone to a JSON-lines file.
    ``session``: a captures directory (or loaded :class:`Session`): every phone plays it back instead
    of simulating the app (``report_path`` / ``announce`` as for :meth:`add_session_phone`).
    ``record_session``: a directory the (single) phone records its session into.
    Raises SessionError / RecorderError / ScenarioError / ValueError on bad input.
    """

    def __init__(
        self,
        scenario: Scenario | dict[str, Any] | str | Path | None = None,
        serials: list[str] | tuple[str, ...] = ("sim-1",),
        host: str = "127.0.0.1",
        port: int = 0,
        journal_path: str | Path | None = None,
        *,
        session: Session | str | Path | None = None,
        record_session: str | Path | None = None,
        report_path: str | Path | None = None,
        announce: Callable[[str], None] | None = None,
    ):
        self.scenario = load_scenario(scenario)
        self.host = host
        self._want_port = port
        self._sink = JournalSink(journal_path) if journal_path else None
        self.stopping = threading.Event()
        self._tids = itertools.count(1)
        self.phones: dict[str, Phone] = {}
        # host:version requests answered (a client asks it before opening a device service unless it
        # remembers the answer: tests count the connections a phone call costs)
        self.host_version_requests = 0
        self.host_lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._conn_lock = threading.Lock()
        self._server: AdbServer | None = None
        if (session is not None or record_session is not None) and len(serials) != 1:
            raise ValueError("a session is played or recorded by exactly one phone (give one serial)")
        if session is not None and record_session is not None:
            raise ValueError("play a session or record one, not both")
        for serial in serials:
            if session is not None:
                self.add_session_phone(serial, session, report_path=report_path, announce=announce)
            else:
                self.add_phone(serial, record_session=record_session)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> int:
        """Bind and serve in a background thread; returns the port."""
        if self._server is None:
            self._server = AdbServer(self, self.host, self._want_port)
            self._server.start()
        return self._server.port

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("PhoneSim not started")
        return self._server.port

    def env(self) -> dict[str, str]:
        """Environment variables that point adbutils/uiautomator2 at this simulator."""
        return {"ANDROID_ADB_SERVER_HOST": self.host, "ANDROID_ADB_SERVER_PORT": str(self.port)}

    def stop(self) -> None:
        """Stop serving, drop every connection, wake sleeping phones, join all threads. Idempotent."""
        self.stopping.set()
        if self._server is not None:
            self._server.stop()
        with self._conn_lock:
            conns, threads = list(self._conns), list(self._threads)
        for sock in conns:
            close_quietly(sock)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        self._server = None
        for phone in list(self.phones.values()):
            phone.close()
        if self._sink is not None:
            self._sink.close()

    def __enter__(self) -> PhoneSim:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ phones
    def add_phone(
        self,
        serial: str,
        scenario: Scenario | dict[str, Any] | str | Path | None = None,
        *,
        record_session: str | Path | None = None,
    ) -> Phone:
        """Add a phone (optionally with its own scenario); it shows up in ``host:devices`` at once.
        ``record_session``: record everything it is made to do into that (empty) directory
        (:mod:`cmbuyer.phonesim.recorder`; RecorderError when the directory is not usable)."""
        _check_serial(serial)
        scen = load_scenario(scenario) if scenario is not None else self.scenario
        phone = Phone(scen.for_phone(serial), next(self._tids), self.stopping, self._sink)
        if record_session is not None:
            phone.recorder = SessionRecorder(record_session, phone)
        self.phones[serial] = phone
        return phone

    def add_session_phone(
        self,
        serial: str,
        session: Session | str | Path,
        *,
        report_path: str | Path | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> SessionPhone:
        """Add a phone that plays a recorded session (:mod:`cmbuyer.phonesim.session`). The rehearsal
        report goes to ``report_path`` (default ``<session dir>/rehearsal-report.json``); ``announce``
        gets one line when the rehearsal ends. SessionError when the session cannot be loaded."""
        _check_serial(serial)
        loaded = session if isinstance(session, Session) else load_session(session)
        phone = SessionPhone(
            loaded, serial, next(self._tids), self.stopping, self._sink, report_path=report_path, announce=announce
        )
        self.phones[serial] = phone
        return phone

    def remove_phone(self, serial: str) -> None:
        """Unplug a phone: it disappears from ``host:devices``; its requests then FAIL."""
        self.phones.pop(serial, None)

    def phone(self, serial: str = "sim-1") -> Phone:
        return self.phones[serial]

    def journal(self, serial: str = "sim-1") -> Journal:
        return self.phones[serial].journal

    # ------------------------------------------------------------------ used by the adb handlers
    def track_connection(self, sock: socket.socket) -> None:
        """Register an adb connection and its thread; a stopping simulator closes it at once."""
        with self._conn_lock:
            self._conns.add(sock)
            self._threads.add(threading.current_thread())
        if self.stopping.is_set():
            close_quietly(sock)

    def untrack_connection(self, sock: socket.socket) -> None:
        """Forget an adb connection that ended."""
        with self._conn_lock:
            self._conns.discard(sock)
            self._threads.discard(threading.current_thread())


def _check_serial(serial: str) -> None:
    if not serial or any(c.isspace() for c in serial):
        raise ValueError(f"bad serial {serial!r}")
