"""``cmbuyer-phonesim``: run the simulator standalone.

    cmbuyer-phonesim --port 15037 --serial sim-1 --serial sim-2 --scenario my.yaml --journal j.jsonl

    cmbuyer-phonesim --session CAPTURES_DIR [--serial S] [--report FILE]    # play a recorded session
    cmbuyer-phonesim --scenario order_sheet --record-session OUT_DIR          # record one

Prints ``listening HOST:PORT``, one ``serial <serial> device`` line per phone, the session lines
(``session …``/``report …``/``recording …`` and a ``connect:`` hint), then ``ready``; stops cleanly on
SIGTERM/SIGINT (exit 0). A rehearsal that ends prints one ``REHEARSAL ENDED …`` line.
``--validate FILE`` only checks a scenario (or, with ``--session``, the session).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from .recorder import RecorderError
from .scenario import ScenarioError, load_scenario
from .server import PhoneSim
from .session import REPORT_FILE, SessionError, SessionPhone, load_session

T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cmbuyer-phonesim", description="Simulated Pinduoduo phones behind adb.")
    p.add_argument("--port", type=int, default=15037, help="adb server port (0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (keep it loopback)")
    p.add_argument("--serial", action="append", dest="serials", help="phone serial; repeat for more phones")
    p.add_argument("--scenario", help="scenario YAML/JSON file (default: the built-in scenario)")
    p.add_argument("--journal", help="append every journal entry as JSON lines to this file")
    p.add_argument("--latency", choices=["none", "realistic"], help="override the scenario's latency")
    p.add_argument(
        "--validate",
        metavar="FILE",
        nargs="?",
        const="",
        help="check a scenario file (or, with --session, the session) and exit (0 valid, 2 invalid)",
    )
    p.add_argument(
        "--session",
        metavar="DIR",
        help="play this captures directory + session.json as the phone (docs/phonesim.md Sessions)",
    )
    p.add_argument("--report", metavar="FILE", help=f"rehearsal report path (default DIR/{REPORT_FILE})")
    p.add_argument(
        "--record-session",
        metavar="DIR",
        help="record every action the phone gets and the screen after it into this empty directory",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _print(line: str) -> None:
    print(line, flush=True)


def _validate(load: Callable[[], T], error: type[Exception], describe: Callable[[T], str]) -> int:
    """``--validate``: load the file; print ``valid: <describe(loaded)>`` and return 0, or, when the
    loader raises ``error``, print ``invalid: <error>`` on stderr and return 2 (other errors propagate)."""
    try:
        loaded = load()
    except error as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 2
    print(f"valid: {describe(loaded)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr)
    if args.session and (args.scenario or args.record_session):
        print("error: --session plays recorded screens: it takes no --scenario or --record-session", file=sys.stderr)
        return 2
    if (args.session or args.record_session) and len(args.serials or []) > 1:
        print("error: a session is played or recorded by one phone: give at most one --serial", file=sys.stderr)
        return 2
    if args.validate is not None and args.session:
        return _validate(
            lambda: load_session(args.session),
            SessionError,
            lambda sess: f"{len(sess.captures)} captures, {len(sess.steps)} steps",
        )
    if args.validate == "":
        print("error: --validate needs a scenario FILE (or --session DIR)", file=sys.stderr)
        return 2
    if args.validate:
        return _validate(
            lambda: load_scenario(args.validate),
            ScenarioError,
            lambda scen: f"{scen.name} ({len(scen.data['catalogue'])} goods)",
        )
    try:
        sim = PhoneSim(
            args.scenario,
            serials=args.serials or ["sim-1"],
            host=args.host,
            port=args.port,
            journal_path=args.journal,
            session=args.session,
            record_session=args.record_session,
            report_path=args.report,
            announce=_print,
        )
    except (ScenarioError, SessionError, RecorderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.latency:
        for phone in sim.phones.values():
            phone.set_latency(args.latency)
    done = threading.Event()

    def _on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        port = sim.start()
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(f"listening {args.host}:{port}", flush=True)
    for serial, phone in sim.phones.items():
        print(f"serial {serial} device", flush=True)
        if isinstance(phone, SessionPhone):
            sess = phone.session
            print(
                f"session {sess.directory}: {len(sess.captures)} captures, {len(sess.steps)} steps, start "
                f"{sess.start}, app {sess.app.version_name} ({sess.app.version_code})",
                flush=True,
            )
            print(f"report {phone.report_path}", flush=True)
        elif phone.recorder is not None:
            print(f"recording {serial} into {phone.recorder.root}", flush=True)
        if isinstance(phone, SessionPhone) or phone.recorder is not None:
            print(
                f"connect: ANDROID_ADB_SERVER_HOST={args.host} ANDROID_ADB_SERVER_PORT={port} "
                f"cmbuyer-agent run --device {serial}",
                flush=True,
            )
    print("ready", flush=True)
    try:
        while not done.wait(0.5):
            pass
    finally:
        sim.stop()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
