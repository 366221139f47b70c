"""``cmbuyer-agent`` command line: run, doctor, capture, inspect, journal.

Credentials never come from the command line: env ``CMBUYER_DEVICE_ID`` + ``CMBUYER_DEVICE_TOKEN``
or ``--credentials-file FILE`` (mode 0600; ``device_id=…``/``token=…`` lines or JSON
``{"device_id": …, "token": …}``). Server: ``--server`` or ``CMBUYER_SERVER_URL``
(default http://127.0.0.1:8080). Progress lines go to stderr; ``--json-logs`` for JSON lines.
Hold policy limits (``run``): ``--crash-loop-limit`` / env ``CMBUYER_AGENT_CRASH_LOOP_LIMIT`` (default 2)
and ``--failure-limit`` / env ``CMBUYER_AGENT_FAILURE_LIMIT`` (default 3); see :mod:`cmbuyer.agent.holds`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import stat
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cmbuyer.agent import __version__
from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.client import Credentials, HttpDeviceApi
from cmbuyer.agent.errors import AgentError, PackError
from cmbuyer.agent.holds import HoldPolicy
from cmbuyer.agent.journal import Journal, JournalError, journal_path
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.agent.screens.inspect import inspect_dump
from cmbuyer.agent.screens.pack import Pack, load_pack, pack_for_version, shipped_packs
from cmbuyer.schemas import is_hex64, is_uuid4

DEFAULT_SERVER = "http://127.0.0.1:8080"


class CredentialsError(Exception):
    pass


def load_credentials(path: str | None) -> Credentials:
    """From ``path`` (0600 file) or env. Raises CredentialsError with a message that never
    contains the token."""
    if path:
        p = Path(path)
        try:
            mode = p.stat().st_mode
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise CredentialsError(f"cannot read credentials file {path}") from exc
        if stat.S_IMODE(mode) & 0o077:
            raise CredentialsError(f"credentials file {path} must be mode 0600")
        data: dict[str, Any]
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise CredentialsError("credentials file is not valid JSON") from exc
        else:
            data = {}
            for line in text.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    k, _, v = line.partition("=")
                    data[k.strip()] = v.strip()
        device_id, token = data.get("device_id"), data.get("token")
    else:
        device_id, token = os.environ.get("CMBUYER_DEVICE_ID"), os.environ.get("CMBUYER_DEVICE_TOKEN")
    if not is_uuid4(device_id):
        raise CredentialsError("device id missing or not a lowercase UUIDv4")
    if not is_hex64(token):
        raise CredentialsError("device token missing or not 64 lowercase hex characters")
    return Credentials(str(device_id), str(token))


def _progress_fn(json_logs: bool) -> Any:
    def emit(line: str) -> None:
        if json_logs:
            sys.stderr.write(json.dumps({"ts": datetime.now(UTC).isoformat(), "msg": line},
                                        ensure_ascii=False) + "\n")
        else:
            sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {line}\n")
        sys.stderr.flush()
    return emit


_VERSION_ARG_RE = re.compile(r"(?P<name>[0-9A-Za-z._-]{1,32}):(?P<code>[0-9]{1,10})", re.ASCII)


def _capture_version(dump_path: Path) -> tuple[str, int] | None:
    """The app version a capture bundle recorded (``meta.json`` beside ``dump.xml``, written by
    ``capture``), or None when there is no readable bundle metadata."""
    try:
        meta = json.loads((dump_path.parent / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    name, code = meta.get("app_version_name"), meta.get("app_version_code")
    if isinstance(name, str) and type(code) is int:
        return name, code
    return None


def _inspect_packs(args: argparse.Namespace) -> list[Pack]:
    """Which packs read the dump: ``--pack FILE``; else the shipped pack of ``--version NAME:CODE`` or
    of the version a capture bundle's meta.json recorded (packs are version-bound: an 8.17.0 pack can
    recognize an 8.22.0 order sheet and misread it); else every shipped pack (first that recognizes
    wins, the others that also do are listed as ``pack_candidates``). Raises PackError."""
    if args.pack:
        return [load_pack(args.pack)]
    version: tuple[str, int] | None = None
    if args.version:
        m = _VERSION_ARG_RE.fullmatch(args.version)
        if m is None:
            raise PackError("--version takes NAME:CODE, e.g. 8.22.0:82200")
        version = (m.group("name"), int(m.group("code")))
    else:
        version = _capture_version(Path(args.dump))
    if version is not None:
        return [pack_for_version(*version)]
    return shipped_packs()


def cmd_inspect(args: argparse.Namespace) -> int:
    try:
        raw = Path(args.dump).read_bytes()
        packs = _inspect_packs(args)
        dump = parse_dump(raw)
    except AgentError as exc:
        print(json.dumps({"error": exc.reason_code, "detail": exc.summary}))
        return 2
    except OSError:
        print(json.dumps({"error": "UNREADABLE_FILE", "detail": f"cannot read {args.dump}"}, ensure_ascii=False))
        return 2
    print(json.dumps(inspect_dump(dump, packs), ensure_ascii=False))
    return 0


def cmd_journal(args: argparse.Namespace) -> int:
    path = journal_path(args.device)
    if not path.exists():
        # A hold cleared in the wrong state dir would look done while the agent stays held: say where
        # we looked and how the state dir is chosen.
        print(json.dumps({"path": str(path), "exists": False,
                          "error": "no journal for this device here; the agent's state dir is "
                                   "$CMBUYER_AGENT_STATE_DIR (default ./var/agent) — run with the same "
                                   "value as the agent (e.g. the systemd unit's Environment=)"}))
        return 1
    try:
        j = Journal(path)
        if args.clear_hold:
            j.clear_hold()
        print(json.dumps(j.summary(), ensure_ascii=False, indent=2))
    except JournalError as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    return 0


def _connect(serial: str) -> Any:
    from cmbuyer.agent.phone.adapter import PhoneAdapter
    return PhoneAdapter.connect(serial)


def cmd_doctor(args: argparse.Namespace) -> int:
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str = "") -> bool:
        checks.append({"check": name, "ok": ok, "detail": detail})
        return ok

    from cmbuyer.agent.phone.adapter import adb_endpoint, probe_adb_server
    host, port = adb_endpoint()
    try:
        probe_adb_server(host, port)
        check("adb server reachable", True, f"{host}:{port}")
        phone = _connect(args.device)
        check("device online + uiautomator2 ready", True, args.device)
        info = phone.device_info()
        check("screen on", bool(info.get("screenOn")), "")
        version = phone.app_version()
        if check("Pinduoduo installed", version is not None, str(version) if version else "not installed"):
            try:
                pack = pack_for_version(version.name, version.code)
                check("selector pack", True, pack.id)
            except AgentError as exc:
                check("selector pack", False, exc.summary)
    except AgentError as exc:
        check("phone", False, exc.summary)
        version = None
    server = args.server or os.environ.get("CMBUYER_SERVER_URL") or DEFAULT_SERVER
    try:
        creds = load_credentials(args.credentials_file)
        api = HttpDeviceApi(server, creds, _NoKeys(), retries=0)
        hb = api.heartbeat(adb_serial=args.device, android_release="unknown",
                           pdd_version=version.name if version else None,
                           pdd_version_code=version.code if version else None, state="PAUSED")
        check("server reachable", True, server)
        check("server allows this app version", bool(hb["app_version_allowed"]))
    except (CredentialsError, AgentError) as exc:
        check("server", False, str(exc))
    print(json.dumps({"device": args.device, "checks": checks}, ensure_ascii=False, indent=2))
    return 0 if all(c["ok"] for c in checks) else 1


class _NoKeys:
    """Heartbeat carries no idempotency key; doctor needs no journal."""

    def key(self, purpose: str, scope: str = "") -> str:
        raise RuntimeError("doctor sends no keyed request")

    def drop_key(self, purpose: str, scope: str = "") -> None:
        return None


def cmd_capture(args: argparse.Namespace) -> int:
    """Evidence bundle for pack authoring: dump.xml, screenshot.png, meta.json (hashes, version,
    activity, time). Written under ``--out`` (default ./captures/<serial>/<label>-<time>/), 0700."""
    try:
        phone = _connect(args.device)
        xml = phone.dump_raw()
        png = phone.screenshot_png()
        version = phone.app_version()
        activity = phone.shell(["dumpsys", "window", "windows"], "dumpsys window")
    except AgentError as exc:
        print(json.dumps({"error": exc.reason_code, "detail": exc.summary}))
        return 2
    focus = next((ln.strip() for ln in activity.splitlines() if "mCurrentFocus" in ln), "")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in args.label)
    out = Path(args.out or f"./captures/{args.device.replace(':', '_')}/{safe}-{stamp}")
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    (out / "dump.xml").write_text(xml, encoding="utf-8")
    (out / "screenshot.png").write_bytes(png)
    meta = {"label": args.label, "device": args.device,
            "captured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "app_version_name": version.name if version else None,
            "app_version_code": version.code if version else None, "activity": focus,
            "dump_sha256": hashlib.sha256(xml.encode("utf-8")).hexdigest(),
            "screenshot_sha256": hashlib.sha256(png).hexdigest()}
    (out / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2), encoding="utf-8")
    print(json.dumps({"bundle": str(out), **meta}, ensure_ascii=False))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from cmbuyer.agent.runner import Runner, RunnerConfig, StopNow

    progress = _progress_fn(args.json_logs)
    try:
        holds = HoldPolicy.from_env(crash_loop_limit=args.crash_loop_limit, failure_limit=args.failure_limit)
        ApprovalSettings.from_env()  # a bad value stops the start, not a supervised order at gate 3
    except ValueError as exc:
        progress(f"settings: {exc}")
        return 2
    try:
        creds = load_credentials(args.credentials_file)
    except CredentialsError as exc:
        progress(f"credentials: {exc}")
        return 2
    server = args.server or os.environ.get("CMBUYER_SERVER_URL") or DEFAULT_SERVER
    try:
        journal = Journal.for_serial(args.device)
        phone = _connect(args.device)
    except (AgentError, JournalError) as exc:
        progress(f"cannot start: {exc}")
        return 2
    from cmbuyer.agent.journal import PAUSE_ENV
    if os.environ.get(PAUSE_ENV):
        progress(f"WARNING: {PAUSE_ENV} is set (crash-test hook): the agent will pause at that phase")
    api = HttpDeviceApi(server, creds, journal)
    runner = Runner(RunnerConfig(args.device, once=args.once, poll_seconds=args.poll_seconds, holds=holds),
                    phone, api, journal, progress)
    runner.install_signals()
    try:
        return runner.run()
    except StopNow:
        progress("stopped now (second signal)")
        return 130
    except AgentError as exc:
        progress(f"stopped: {exc.reason_code} {exc.summary}")
        return 1
    except JournalError as exc:
        progress(f"stopped: the journal failed ({exc}); fix the state dir before restarting")
        return 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cmbuyer-agent", description="cmbuyer purchasing agent")
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="claim tasks and drive the phone")
    r.add_argument("--device", required=True)
    r.add_argument("--server")
    r.add_argument("--credentials-file")
    r.add_argument("--json-logs", action="store_true")
    r.add_argument("--once", action="store_true", help="exit after one task")
    r.add_argument("--poll-seconds", type=float, default=1.0,
                   help="idle sleep between empty claim-next polls (default 1)")
    r.add_argument("--crash-loop-limit", type=int, metavar="N",
                   help="hold after N consecutive attempts ended by INTERNAL_ERROR or a crash "
                        "(default: env CMBUYER_AGENT_CRASH_LOOP_LIMIT, else 2)")
    r.add_argument("--failure-limit", type=int, metavar="N",
                   help="hold after N consecutive attempts failed before the fence "
                        "(default: env CMBUYER_AGENT_FAILURE_LIMIT, else 3)")
    r.set_defaults(fn=cmd_run)
    d = sub.add_parser("doctor", help="check adb, phone, app version, pack and server")
    d.add_argument("--device", required=True)
    d.add_argument("--server")
    d.add_argument("--credentials-file")
    d.set_defaults(fn=cmd_doctor)
    c = sub.add_parser("capture", help="save an evidence bundle (dump, PNG, version, activity)")
    c.add_argument("--device", required=True)
    c.add_argument("--label", required=True)
    c.add_argument("--out")
    c.set_defaults(fn=cmd_capture)
    i = sub.add_parser("inspect", help="recognize a dump and print readings as JSON")
    i.add_argument("--dump", required=True)
    i.add_argument("--pack", help="read with this pack file")
    i.add_argument("--version", help="read with the shipped pack of this app version, NAME:CODE (e.g. 8.22.0:82200); "
                   "default: the version in a capture bundle's meta.json beside the dump, else every shipped pack")
    i.set_defaults(fn=cmd_inspect)
    j = sub.add_parser("journal", help="show the local journal of a device (in $CMBUYER_AGENT_STATE_DIR, "
                       "default ./var/agent: use the agent's own value)")
    j.add_argument("--device", required=True)
    j.add_argument("--clear-hold", action="store_true",
                   help="after a person handled the phone or a stuck task: drop the hold, reset the streaks")
    j.set_defaults(fn=cmd_journal)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
