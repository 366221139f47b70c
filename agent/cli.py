"""``cmbuyer-agent`` command line: run, doctor, capture, inspect, journal, pack verify.

Credentials never come from the command line (``run`` and ``doctor`` find them the same way,
:func:`resolve_credentials`): ``--credentials-file FILE``, else env ``CMBUYER_DEVICE_ID`` +
``CMBUYER_DEVICE_TOKEN``, else ``$CMBUYER_AGENT_STATE_DIR/<serial>.cred`` when it exists (mode 0600;
``device_id=…``/``token=…`` lines or JSON ``{"device_id": …, "token": …}``). Server: ``--server`` or
``CMBUYER_SERVER_URL`` (default http://127.0.0.1:8080; https:// verified against the system CAs or only
``--server-ca FILE`` / env ``CMBUYER_SERVER_CA``; http:// only for a loopback server: :mod:`cmbuyer.agent.tls`).
Progress lines go to stderr; ``--json-logs`` for JSON lines.
Hold policy limits (``run``): ``--crash-loop-limit`` / env ``CMBUYER_AGENT_CRASH_LOOP_LIMIT`` (default 2)
and ``--failure-limit`` / env ``CMBUYER_AGENT_FAILURE_LIMIT`` (default 3); see :mod:`cmbuyer.agent.holds`.
Operator selector packs (``run``, ``doctor``, ``inspect``): ``--pack-dir DIR`` / env
``CMBUYER_AGENT_PACK_DIR``; which pack wins and why: :mod:`cmbuyer.agent.packdir`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cmbuyer.agent import __version__, logfields
from cmbuyer.agent.approval import ApprovalSettings
from cmbuyer.agent.client import Credentials, HttpDeviceApi
from cmbuyer.agent.errors import AgentError, ExitCode, PackError
from cmbuyer.agent.holds import HoldPolicy
from cmbuyer.agent.journal import Journal, JournalError, journal_path
from cmbuyer.agent.packdir import add_pack_dir_argument, all_packs, pack_dir_from, resolve, resolve_pack, scan
from cmbuyer.agent.packtest import add_pack_test_commands
from cmbuyer.agent.screens.dump import MAX_DUMP_BYTES, parse_dump
from cmbuyer.agent.screens.evidence import check_evidence
from cmbuyer.agent.screens.pack import MAX_PACK_BYTES, Pack, compile_pack, load_pack, parse_pack_json
from cmbuyer.agent.tls import ServerTlsError, verify_server
from cmbuyer.schemas import is_hex64, is_uuid4
from cmbuyer.schemas.files import read_regular
from cmbuyer.schemas.text import visible

DEFAULT_SERVER = "http://127.0.0.1:8080"
# files an operator names or a capture holds are read bounded (shared/schemas/files.py): never a hang on a FIFO
MAX_CREDENTIALS_BYTES = 64 * 1024
MAX_META_BYTES = 256 * 1024


class CredentialsError(Exception):
    pass


def load_credentials(path: str | None) -> Credentials:
    """From ``path`` (0600 file) or env. Raises CredentialsError with a message that never
    contains the token."""
    if path:
        p = Path(path)
        try:
            mode = p.stat().st_mode
            text = read_regular(p, MAX_CREDENTIALS_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
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


def default_credentials_path(serial: str) -> Path:
    """Where ``run`` and ``doctor`` look for a device's credentials when neither ``--credentials-file`` nor
    the environment names them: ``$CMBUYER_AGENT_STATE_DIR/<serial>.cred`` (default ``./var/agent``), next
    to the device's journal, with the serial made file-safe the same way."""
    return journal_path(serial).with_suffix(".cred")


def resolve_credentials(path: str | None, serial: str) -> Credentials:
    """The device credentials for ``run`` and ``doctor``: ``--credentials-file`` (``path``), else both
    ``CMBUYER_DEVICE_ID`` and ``CMBUYER_DEVICE_TOKEN``, else :func:`default_credentials_path` when that file
    exists. Raises CredentialsError naming what is missing (never the token)."""
    if path:
        return load_credentials(path)
    env_id, env_token = os.environ.get("CMBUYER_DEVICE_ID"), os.environ.get("CMBUYER_DEVICE_TOKEN")
    if env_id or env_token:
        missing = "CMBUYER_DEVICE_TOKEN" if env_id else "CMBUYER_DEVICE_ID"
        if not (env_id and env_token):
            raise CredentialsError(f"{missing} is not set (the other one is); set both, or use --credentials-file")
        return load_credentials(None)
    default = default_credentials_path(serial)
    if default.exists():
        return load_credentials(str(default))
    raise CredentialsError(
        f"no device credentials: pass --credentials-file FILE, set CMBUYER_DEVICE_ID and CMBUYER_DEVICE_TOKEN, "
        f"or write {default} (lines device_id=… and token=…, mode 0600)"
    )


def server_url(arg: str | None) -> str:
    """The server URL for ``run`` and ``doctor``: ``--server``, else ``CMBUYER_SERVER_URL``, else
    :data:`DEFAULT_SERVER`. Raises CredentialsError for a URL that is not ``http(s)://host[:port]`` (a typo
    should end the command with one line, not turn into a retry loop)."""
    from urllib.parse import urlsplit

    url = arg or os.environ.get("CMBUYER_SERVER_URL") or DEFAULT_SERVER
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise CredentialsError(f"server URL {url!r} is not http(s)://host[:port] (--server or CMBUYER_SERVER_URL)")
    return url


def log_time() -> str:
    """Now as ISO-8601 UTC with milliseconds (``2026-08-04T09:00:00.123Z``): the time of every agent log line,
    in both modes, so lines of phone hosts in other time zones and the server's line up."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _progress_fn(json_logs: bool) -> Any:
    """The progress printer of ``run`` (and ``dry-run``): ``<time> <line>`` on stderr, or with ``json_logs``
    one JSON object per line — ``ts``, ``msg`` and, during an attempt, the :mod:`cmbuyer.agent.logfields`
    (``task_id``, ``attempt_id``, ``step``, ``reason_code``)."""

    def emit(line: str) -> None:
        # a reading from the phone may hold bidi or invisible characters: show them, never obey them
        line = visible(line)
        if json_logs:
            record = {"ts": log_time(), "msg": line, **logfields.current()}
            sys.stderr.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            sys.stderr.write(f"{log_time()} {line}\n")
        sys.stderr.flush()

    return emit


_VERSION_ARG_RE = re.compile(r"(?P<name>[0-9A-Za-z._-]{1,32}):(?P<code>[0-9]{1,10})", re.ASCII)


def _capture_version(dump_path: Path) -> tuple[str, int] | None:
    """The app version a capture bundle recorded (``meta.json`` beside ``dump.xml``, written by
    ``capture``), or None when there is no readable bundle metadata."""
    try:
        meta = json.loads(read_regular(dump_path.parent / "meta.json", MAX_META_BYTES))
    except (OSError, ValueError, RecursionError):  # a 100,000-deep meta.json is no metadata either
        return None
    if not isinstance(meta, dict):
        return None
    name, code = meta.get("app_version_name"), meta.get("app_version_code")
    if isinstance(name, str) and type(code) is int:
        return name, code
    return None


def _inspect_packs(args: argparse.Namespace) -> list[Pack]:
    """Which packs read the dump: ``--pack FILE``; else the pack of ``--version NAME:CODE`` or of the
    version a capture bundle's meta.json recorded, as ``run`` would pick it (operator pack dir first,
    then shipped; packs are version-bound: an 8.17.0 pack can recognize an 8.22.0 order sheet and
    misread it); else one pack per known version (first that recognizes wins, the others that also do
    are listed as ``pack_candidates``). No permission check (reading a file changes nothing). Raises
    PackError."""
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
    pack_dir = pack_dir_from(args.pack_dir)
    if version is not None:
        return [resolve_pack(*version, pack_dir, check_permissions=False)]
    return all_packs(pack_dir)


def cmd_inspect(args: argparse.Namespace) -> int:
    try:
        raw = read_regular(args.dump, MAX_DUMP_BYTES)
        packs = _inspect_packs(args)
        dump = parse_dump(raw)
    except PackError as exc:  # the full one line (file and JSON path), not the 200-char summary
        print(json.dumps({"error": exc.reason_code, "detail": str(exc)}, ensure_ascii=False))
        return ExitCode.USAGE
    except AgentError as exc:
        print(json.dumps({"error": exc.reason_code, "detail": exc.summary}))
        return ExitCode.USAGE
    except OSError as exc:
        print(
            json.dumps(
                {"error": "UNREADABLE_FILE", "detail": f"cannot read {args.dump} ({exc.strerror})"}, ensure_ascii=False
            )
        )
        return ExitCode.USAGE
    from cmbuyer.agent.screens.inspect import inspect_dump  # authoring only: `run` never loads it

    result = inspect_dump(dump, packs)
    if not args.explain:
        print(json.dumps(result, ensure_ascii=False))
        return ExitCode.OK
    from cmbuyer.agent.screens.explain import explain_dump, render_text

    # explain the pack inspect read with; when none recognized the dump, every candidate says why
    used = [p for p in packs if p.id == result["pack"]] or packs
    explanations = [explain_dump(dump, p) for p in used]
    if args.json:
        print(
            json.dumps(
                {"dump": args.dump, "inspect": result, "explanations": explanations}, ensure_ascii=False, indent=2
            )
        )
    else:
        if len(result.get("pack_candidates", [])) > 1:
            print(
                f"note: packs {', '.join(result['pack_candidates'])} all recognize this dump; the first is "
                "explained (pass --pack or --version to choose)\n"
            )
        print("\n\n".join(render_text(e) for e in explanations))
    return ExitCode.OK


def cmd_journal(args: argparse.Namespace) -> int:
    path = journal_path(args.device)
    if not path.exists():
        # A hold cleared in the wrong state dir would look done while the agent stays held: say where
        # we looked and how the state dir is chosen.
        print(
            json.dumps(
                {
                    "path": str(path),
                    "exists": False,
                    "error": "no journal for this device here; the agent's state dir is "
                    "$CMBUYER_AGENT_STATE_DIR (default ./var/agent) — run with the same "
                    "value as the agent (e.g. the systemd unit's Environment=)",
                }
            )
        )
        return ExitCode.FAILED
    try:
        j = Journal(path)
        if args.clear_hold:
            j.clear_hold()
        print(json.dumps(j.summary(), ensure_ascii=False, indent=2))
    except JournalError as exc:
        print(json.dumps({"error": str(exc)}))
        return ExitCode.USAGE
    return ExitCode.OK


def _connect(serial: str) -> Any:
    from cmbuyer.agent.phone.adapter import PhoneAdapter

    return PhoneAdapter.connect(serial)


def cmd_doctor(args: argparse.Namespace) -> int:
    checks: list[dict[str, Any]] = []
    pack_dir = pack_dir_from(args.pack_dir)
    pack_id: str | None = None  # heartbeat pack_id: as the runner reports it (Status.pack_id)

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
                found = resolve(version.name, version.code, pack_dir, check_permissions=True)
                check("selector pack", True, found.describe())
                pack_id = found.pack.id
            except PackError as exc:
                check("selector pack", False, str(exc))
                pack_id = "NO_PACK"
    except AgentError as exc:
        check("phone", False, exc.summary)
        version = None
    scanned = scan(pack_dir, check_permissions=True)
    problems = [f"{pack_dir}: {scanned.dir_error}"] if scanned.dir_error else []
    problems += [str(f.error) for f in scanned.broken()]
    usable = ", ".join(f.describe() for f in (*scanned.operator, *scanned.shipped) if f.pack is not None)
    check(
        "selector packs load",
        not problems,
        "; ".join(problems) or f"operator pack dir {pack_dir or 'not set'}; usable: {usable}",
    )
    try:
        server = server_url(args.server)
    except CredentialsError as exc:
        check("server URL", False, str(exc))
        server = ""
    server_ca = server_ca_from(args.server_ca)
    if server:
        _tls_check(server, server_ca, check)
    try:
        creds = resolve_credentials(args.credentials_file, args.device)
    except CredentialsError as exc:
        check("device credentials", False, str(exc))
        creds = None
    if creds is not None:
        check("device credentials", True, f"device id {creds.device_id}")
    if creds is not None and server:
        try:
            api = HttpDeviceApi(server, creds, _NoKeys(), retries=0, server_ca=server_ca)
            hb = api.heartbeat(
                adb_serial=args.device,
                android_release="unknown",
                pdd_version=version.name if version else None,
                pdd_version_code=version.code if version else None,
                state="PAUSED",
                pack_id=pack_id,
                hold=_journal_hold(args.device),
            )
            check("server accepts the device", True, server)
            check("server allows this app version", bool(hb["app_version_allowed"]))
            if hb.get("paused"):
                check("device not paused", False, "an administrator paused this device (devices page: 恢复领取)")
        except AgentError as exc:  # 401 (Unauthorized) says what to check; unreachable names the URL
            check("server accepts the device", False, exc.summary)
    print(json.dumps({"device": args.device, "checks": checks}, ensure_ascii=False, indent=2))
    return ExitCode.OK if all(c["ok"] for c in checks) else ExitCode.FAILED


def _journal_hold(serial: str) -> dict[str, Any] | None:
    """The phone's hold as its agent reports it, when its journal exists here: doctor's heartbeat must not tell
    the server a hold is over that the agent still keeps (issue 32 §7). None when there is no journal."""
    from cmbuyer.agent.runner import hold_report

    path = journal_path(serial)
    if not path.exists():
        return None
    try:
        return hold_report(Journal(path))
    except JournalError:
        return None


def server_ca_from(flag: str | None) -> Path | None:
    """``--server-ca FILE``, else ``CMBUYER_SERVER_CA``, else None (the system's CAs)."""
    value = flag or os.environ.get("CMBUYER_SERVER_CA")
    return Path(value) if value else None


def _tls_check(server: str, server_ca: Path | None, check: Any) -> None:
    """doctor's certificate line: subject, expiry (a warning under 14 days) and whether it verified."""
    from cmbuyer.agent.tls import ServerTlsError, certificate_report

    if not server.startswith("https://"):
        return
    try:
        report = certificate_report(server, server_ca)
    except (ServerTlsError, OSError) as exc:
        check("server certificate", False, str(exc))
        return
    expiry = f"{report.not_after:%Y-%m-%d} ({report.days_left} days left)" if report.not_after else "?"
    detail = f"subject {report.subject}; expires {expiry}; " + (
        "verified" if report.verified else f"NOT verified: {report.error}"
    )
    check("server certificate", report.verified and not report.expiring, detail)


class _NoKeys:
    """Heartbeat carries no idempotency key; doctor needs no journal."""

    def key(self, purpose: str, scope: str = "") -> str:
        raise RuntimeError("doctor sends no keyed request")

    def drop_key(self, purpose: str, scope: str = "") -> None:
        return None


def _error(code: str, detail: str) -> int:
    print(json.dumps({"error": code, "detail": detail}, ensure_ascii=False))
    return ExitCode.USAGE


def _capture_pack(version: Any, pack_dir: Path | None) -> tuple[Pack | None, str | None]:
    """The pack whose privacy rows a capture scrubs; (None, why) for a version without a pack yet."""
    from cmbuyer.agent.dryrun import dryrun_pack

    if version is None:
        return None, "Pinduoduo not installed"
    try:
        return dryrun_pack(version, pack_dir), None
    except PackError as exc:
        return None, exc.summary


def cmd_capture(args: argparse.Namespace) -> int:
    """A scrubbed capture for pack authoring (agent/capture.py; docs/agent.md "Captures"): dump.xml,
    screenshot.png, meta.json and expected.json (``--expect``/``--expected-file``) or
    expected.proposed.json. Written under ``--out`` (default ./captures/<serial>/<label>-<time>/),
    0700; an existing non-empty folder only with ``--force``."""
    from cmbuyer.agent.capture import (
        CaptureError,
        check_foreground,
        check_out,
        focus_line,
        load_expected,
        parse_expect,
        proposed,
        scrub,
        write_capture,
    )

    try:
        expected = (
            parse_expect(args.expect, args.by)
            if args.expect
            else load_expected(Path(args.expected_file))
            if args.expected_file
            else None
        )
    except CaptureError as exc:
        return _error("BAD_EXPECT", str(exc))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in args.label)
    out = Path(args.out or f"./captures/{args.device.replace(':', '_')}/{safe}-{stamp}")
    try:
        check_out(out, args.force)
    except CaptureError as exc:
        return _error("CAPTURE_EXISTS", str(exc))
    try:
        phone = _connect(args.device)
        xml = phone.dump_raw()
        png = phone.screenshot_png()
        version = phone.app_version()
    except AgentError as exc:
        return _error(exc.reason_code, exc.summary)
    pack, no_pack = _capture_pack(version, pack_dir_from(args.pack_dir))
    focus = focus_line(phone)
    try:
        check_foreground(focus)
        scrubbed = scrub(xml, png, pack)
        meta = {
            "label": args.label,
            "device": args.device,
            "captured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "app_version_name": version.name if version else None,
            "app_version_code": version.code if version else None,
            "activity": focus,
            "pack_id": pack.id if pack else None,
        }
        meta = write_capture(
            out,
            scrubbed,
            meta,
            force=args.force,
            expected=expected,
            proposal=None if expected else proposed(scrubbed.dump, pack),
        )
    except CaptureError as exc:
        return _error("CAPTURE_REFUSED", str(exc))
    print(json.dumps({"bundle": str(out), **meta, **({"no_pack": no_pack} if no_pack else {})}, ensure_ascii=False))
    return ExitCode.OK


def _dry_run_order(args: argparse.Namespace) -> Any:
    """The order from the command line (ValueError with a usage message)."""
    from decimal import Decimal, InvalidOperation

    from cmbuyer.agent.prefence import PrefenceOrder

    if not re.fullmatch(r"[0-9]{1,20}", args.goods_id, re.ASCII):
        raise ValueError("--goods-id takes the digits of the goods id")
    from cmbuyer.schemas.sku import MAX_OPTIONS, legacy_options, split_option

    if args.option:
        if args.color is not None or args.size is not None:
            raise ValueError("give the options as --option 维度=值 or as --color/--size, not both")
        options = tuple(split_option(o) for o in args.option)  # ValueError says how to write one
        if len(options) > MAX_OPTIONS or len({d for d, _ in options}) != len(options):
            raise ValueError(f"--option: 1–{MAX_OPTIONS} options, each dimension once")
    elif args.color is None or not args.color.strip() or (args.size is not None and not args.size.strip()):
        raise ValueError("name the options: --option 维度=值 (repeatable), or --color (and --size), not blank")
    else:
        options = legacy_options(args.color, args.size)
    if args.quantity < 1:
        raise ValueError("--quantity must be at least 1")
    try:
        cap = Decimal(args.max_total)
    except InvalidOperation:
        cap = Decimal("NaN")
    if not cap.is_finite() or cap <= 0:
        raise ValueError("--max-total takes an amount in yuan, e.g. 120.00")
    return PrefenceOrder(args.goods_id, options, args.quantity, cap)


def cmd_dry_run(args: argparse.Namespace) -> int:
    """The pre-fence flow on a phone without the server (agent/dryrun.py). Gate verdicts one per line,
    then the summary JSON on stdout; progress on stderr. Exit 0 / 1 / 2 as documented there."""
    from cmbuyer.agent.capture import CaptureError, check_out
    from cmbuyer.agent.dryrun import default_out, dryrun_pack, run_dry
    from cmbuyer.agent.prefence import BUY_PATH_ENV

    try:
        order = _dry_run_order(args)
    except ValueError as exc:
        return _error("USAGE", str(exc))
    buy_path = args.buy_path or os.environ.get(BUY_PATH_ENV, "single")
    out = Path(args.out) if args.out else default_out(args.device)
    try:
        check_out(out, args.force, directory_of_captures=True)
    except CaptureError as exc:
        return _error("CAPTURE_EXISTS", str(exc))
    progress = _progress_fn(False)
    try:
        phone = _connect(args.device)
        version = phone.app_version()
        if version is None:
            return _error("APP_VERSION_UNSUPPORTED", "Pinduoduo is not installed on the phone")
        pack = dryrun_pack(version, pack_dir_from(args.pack_dir))
    except AgentError as exc:
        return _error(exc.reason_code, exc.summary)
    if out.exists() and args.force:
        import shutil

        shutil.rmtree(out)
    progress(f"dry run on {args.device}: app {version}, pack {pack.id}, buy path {buy_path}; no server")
    try:
        result = run_dry(phone, pack, version, order, out=out, buy_path=buy_path, progress=progress)
    except KeyboardInterrupt:  # run_dry backed out and wrote what it had on the way out
        progress("interrupted")
        return ExitCode.INTERRUPTED
    except (AgentError, OSError) as exc:
        return _error(getattr(exc, "reason_code", "WRITE_FAILED"), str(exc)[:200])
    for line in result.lines:
        print(visible(line))
    print(json.dumps(result.summary, ensure_ascii=False))
    return result.exit_code


def cmd_run(args: argparse.Namespace) -> int:
    from cmbuyer.agent.runner import Runner, RunnerConfig, StopNow

    progress = _progress_fn(args.json_logs)
    try:
        holds = HoldPolicy.from_env(crash_loop_limit=args.crash_loop_limit, failure_limit=args.failure_limit)
        approval = ApprovalSettings.from_env()  # a bad value stops the start, not a supervised order at gate 3
    except ValueError as exc:
        progress(f"settings: {exc}")
        return ExitCode.USAGE
    try:
        creds = resolve_credentials(args.credentials_file, args.device)
        server = server_url(args.server)
    except CredentialsError as exc:
        progress(f"cannot start: {exc}")
        return ExitCode.USAGE
    try:
        journal = Journal.for_serial(args.device)
        phone = _connect(args.device)
    except (AgentError, JournalError) as exc:
        progress(f"cannot start: {exc}")
        return ExitCode.USAGE
    server_ca = server_ca_from(args.server_ca)
    try:
        verify_server(server, server_ca)
        api = HttpDeviceApi(server, creds, journal, server_ca=server_ca, approval_timeout=approval.timeout_seconds)
    except ServerTlsError as exc:
        progress(f"cannot start: {exc.summary}")
        return ExitCode.USAGE
    pack_dir = pack_dir_from(args.pack_dir)
    progress(f"operator pack dir: {pack_dir}" if pack_dir else "operator pack dir: not set (shipped packs only)")
    runner = Runner(
        RunnerConfig(args.device, once=args.once, poll_seconds=args.poll_seconds, holds=holds, pack_dir=pack_dir),
        phone,
        api,
        journal,
        progress,
    )
    runner.install_signals()
    try:
        return runner.run()
    except StopNow:
        progress("stopped now (second signal)")
        return ExitCode.INTERRUPTED
    except AgentError as exc:
        progress(f"stopped: {exc.reason_code} {exc.summary}")
        return ExitCode.FAILED
    except JournalError as exc:
        progress(f"stopped: the journal failed ({exc}); fix the state dir before restarting")
        return ExitCode.USAGE


def cmd_pack_verify(args: argparse.Namespace) -> int:
    """Re-hash every evidence file of one pack: one line per file, then a summary. Exit 0 all ok,
    1 a file missing/changed/outside the pack's directory, 2 the pack itself is unreadable/invalid."""
    path = Path(args.pack)
    try:
        data = parse_pack_json(read_regular(path, MAX_PACK_BYTES))
        compile_pack(data)
    except OSError as exc:
        print(f"{path.name}: $: cannot read the file ({exc.strerror or exc.__class__.__name__})", file=sys.stderr)
        return ExitCode.USAGE
    except PackError as exc:
        print(f"{path.name}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    results = check_evidence(data, path.parent)
    for result in results:
        print(result.line())
    bad = sum(not r.ok for r in results)
    print(
        f"{path.name}: {len(results)} evidence files, {len(results) - bad} ok, {bad} failed"
        f" -> {'FAILED' if bad else 'OK'}"
    )
    return ExitCode.FAILED if bad else ExitCode.OK


def add_pack_commands(sub: Any) -> Any:
    """The ``pack`` command group (``pack verify`` here; ``pack test``/``pack accept`` are added to the
    returned subparsers by their own module). Returns the group's subparsers."""
    pk = sub.add_parser(
        "pack", help="selector pack tools: verify (evidence hashes), test (captures), accept (expectations)"
    )
    pack_sub = pk.add_subparsers(dest="pack_command", required=True)
    v = pack_sub.add_parser(
        "verify",
        help="re-hash a pack's evidence files (dump, screenshot, meta); non-zero exit on any missing or changed file",
    )
    v.add_argument("pack", metavar="PACK", help="the pack JSON file (evidence paths are relative to its directory)")
    v.set_defaults(fn=cmd_pack_verify)
    add_pack_test_commands(pack_sub)
    return pack_sub


DEVICE_HELP = "the phone's adb serial (adb devices)"


def _server_arguments(p: argparse.ArgumentParser) -> None:
    """``--device``, ``--server``, ``--server-ca`` and ``--credentials-file``: the same for ``run`` and ``doctor``."""
    p.add_argument("--device", required=True, help=DEVICE_HELP)
    p.add_argument("--server", help=f"the server's URL (default $CMBUYER_SERVER_URL, else {DEFAULT_SERVER})")
    p.add_argument("--server-ca", help="PEM CA file that signed the server's certificate (CMBUYER_SERVER_CA)")
    p.add_argument(
        "--credentials-file",
        help="0600 file with device_id=… and token=… lines (default: $CMBUYER_DEVICE_ID + $CMBUYER_DEVICE_TOKEN, "
        "else $CMBUYER_AGENT_STATE_DIR/<serial>.cred)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cmbuyer-agent", description="cmbuyer purchasing agent")
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="claim tasks and drive the phone")
    _server_arguments(r)
    r.add_argument(
        "--json-logs", action="store_true", help="one JSON object per log line (ts, msg, task_id, attempt_id, step …)"
    )
    r.add_argument("--once", action="store_true", help="exit after one task")
    r.add_argument(
        "--poll-seconds", type=float, default=1.0, help="idle sleep between empty claim-next polls (default 1)"
    )
    r.add_argument(
        "--crash-loop-limit",
        type=int,
        metavar="N",
        help="hold after N consecutive attempts ended by INTERNAL_ERROR or a crash "
        "(default: env CMBUYER_AGENT_CRASH_LOOP_LIMIT, else 2)",
    )
    r.add_argument(
        "--failure-limit",
        type=int,
        metavar="N",
        help="hold after N consecutive attempts failed before the fence "
        "(default: env CMBUYER_AGENT_FAILURE_LIMIT, else 3)",
    )
    add_pack_dir_argument(r)
    r.set_defaults(fn=cmd_run)
    d = sub.add_parser("doctor", help="check adb, phone, app version, pack, credentials and server")
    _server_arguments(d)
    add_pack_dir_argument(d)
    d.set_defaults(fn=cmd_doctor)
    c = sub.add_parser("capture", help="save a scrubbed capture (dump, PNG, meta, expected readings)")
    c.add_argument("--device", required=True, help=DEVICE_HELP)
    c.add_argument("--label", required=True, help="what the screen is, e.g. confirm-page (part of the folder name)")
    c.add_argument("--out", help="capture folder (default ./captures/<serial>/<label>-<time>)")
    c.add_argument("--force", action="store_true", help="replace an existing non-empty --out folder")
    add_pack_dir_argument(c)
    c.add_argument(
        "--expect",
        nargs="+",
        metavar="KEY=VALUE",
        help="readings a person confirms, e.g. screen=confirm_order unit_price=59.00 quantity=2 "
        "(keys: screen and inspect's readings keys) → expected.json",
    )
    c.add_argument("--by", help="who confirmed --expect (expected.json confirmed_by)")
    c.add_argument("--expected-file", help="an expected.json written by a person, checked and stored")
    c.set_defaults(fn=cmd_capture)
    dr = sub.add_parser("dry-run", help="the flow up to gate 3 on a phone, without the server; captures + session")
    dr.add_argument("--device", required=True, help=DEVICE_HELP)
    dr.add_argument("--goods-id", required=True, help="the Pinduoduo goods id (digits)")
    dr.add_argument(
        "--option",
        action="append",
        metavar="维度=值",
        help="one SKU option as the goods page shows it, e.g. --option 规格=3层100抽 (repeat, in page order)",
    )
    dr.add_argument("--color", help="colour/size goods: the colour (颜色=…); instead of --option")
    dr.add_argument("--size", help="with --color: the size (尺码=…)")
    dr.add_argument("--quantity", type=int, required=True, help="how many (at least 1)")
    dr.add_argument("--max-total", required=True, help="cap on the total in yuan, e.g. 120.00")
    add_pack_dir_argument(dr)
    dr.add_argument("--out", help="captures directory (default ./captures/<serial>/dryrun-<time>)")
    dr.add_argument("--force", action="store_true", help="replace an existing non-empty --out directory")
    dr.add_argument("--buy-path", choices=("single", "group"), help="default: env CMBUYER_AGENT_BUY_PATH, else single")
    dr.set_defaults(fn=cmd_dry_run)
    i = sub.add_parser("inspect", help="recognize a dump and print readings as JSON")
    i.add_argument("--dump", required=True, help="a dump.xml (uiautomator hierarchy), e.g. from a capture")
    i.add_argument("--pack", help="read with this pack file")
    i.add_argument(
        "--version",
        help="read with the pack of this app version, NAME:CODE (e.g. 8.22.0:82200); "
        "default: the version in a capture bundle's meta.json beside the dump, "
        "else every known version's pack",
    )
    add_pack_dir_argument(i)
    i.add_argument(
        "--explain",
        action="store_true",
        help="print which pack selector matched which node for each screen rule and reading, "
        "or why none did (text; with --json as JSON)",
    )
    i.add_argument("--json", action="store_true", help="with --explain: JSON instead of text")
    i.set_defaults(fn=cmd_inspect)
    j = sub.add_parser(
        "journal",
        help="show the local journal of a device (in $CMBUYER_AGENT_STATE_DIR, "
        "default ./var/agent: use the agent's own value)",
    )
    j.add_argument("--device", required=True, help=DEVICE_HELP)
    j.add_argument(
        "--clear-hold",
        action="store_true",
        help="after a person handled the phone or a stuck task: drop the hold, reset the streaks",
    )
    j.set_defaults(fn=cmd_journal)
    add_pack_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
