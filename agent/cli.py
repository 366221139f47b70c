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
``CMBUYER_AGENT_PACK_DIR``; which pack wins and why: :mod:`cmbuyer.agent.pack.resolve`.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cmbuyer.agent import __version__, logfields
from cmbuyer.agent.authoring.packtest import add_pack_test_commands
from cmbuyer.agent.client import Credentials, HttpDeviceApi
from cmbuyer.agent.errors import AgentError, ExitCode, PackError
from cmbuyer.agent.journal import Journal, JournalError, journal_path
from cmbuyer.agent.pack.compile import MAX_PACK_BYTES, compile_pack, parse_pack_json
from cmbuyer.agent.pack.evidence import check_evidence
from cmbuyer.agent.pack.files import load_pack
from cmbuyer.agent.pack.resolve import all_packs, resolve, resolve_pack, scan
from cmbuyer.agent.screens.dump import MAX_DUMP_BYTES, parse_dump
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.agent.settings import DEFAULT_SERVER, AgentSettings, AgentSettingsError, load_agent_settings
from cmbuyer.agent.tls import ServerTlsError, verify_server
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.schemas import is_hex64, is_uuid4
from cmbuyer.schemas.clihelp import chinese_help
from cmbuyer.schemas.files import read_regular
from cmbuyer.schemas.text import visible

# files an operator names or a capture holds are read bounded (shared/schemas/files.py): never a hang on a FIFO
MAX_CREDENTIALS_BYTES = 64 * 1024
MAX_META_BYTES = 256 * 1024


class CredentialsError(Exception):
    pass


def load_credentials(path: str | None, settings: AgentSettings) -> Credentials:
    """From ``path`` (0600 file), else the settings' ``CMBUYER_DEVICE_ID``/``CMBUYER_DEVICE_TOKEN``. Raises
    CredentialsError with a message that never contains the token."""
    if path:
        p = Path(path)
        try:
            mode = p.stat().st_mode
            text = read_regular(p, MAX_CREDENTIALS_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialsError(f"无法读取凭据文件 {path}") from exc
        if stat.S_IMODE(mode) & 0o077:
            raise CredentialsError(f"凭据文件 {path} 的权限必须是 0600")
        data: dict[str, Any]
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise CredentialsError("凭据文件不是有效的 JSON") from exc
        else:
            data = {}
            for line in text.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    k, _, v = line.partition("=")
                    data[k.strip()] = v.strip()
        device_id, token = data.get("device_id"), data.get("token")
    else:
        device_id, token = settings.device_id, settings.device_token
    if not is_uuid4(device_id):
        raise CredentialsError("设备 id 缺失，或不是小写的 UUIDv4")
    if not is_hex64(token):
        raise CredentialsError("设备令牌缺失，或不是 64 个小写十六进制字符")
    return Credentials(str(device_id), str(token))


def default_credentials_path(serial: str, state_dir: Path) -> Path:
    """Where ``run`` and ``doctor`` look for a device's credentials when neither ``--credentials-file`` nor
    the environment names them: ``<state_dir>/<serial>.cred`` (``$CMBUYER_AGENT_STATE_DIR``, default
    ``./var/agent``), next to the device's journal, with the serial made file-safe the same way."""
    return journal_path(serial, state_dir).with_suffix(".cred")


def resolve_credentials(path: str | None, serial: str, settings: AgentSettings) -> Credentials:
    """The device credentials for ``run`` and ``doctor``: ``--credentials-file`` (``path``), else both
    ``CMBUYER_DEVICE_ID`` and ``CMBUYER_DEVICE_TOKEN``, else :func:`default_credentials_path` when that file
    exists. Raises CredentialsError naming what is missing (never the token)."""
    if path:
        return load_credentials(path, settings)
    env_id, env_token = settings.device_id, settings.device_token
    if env_id or env_token:
        missing = "CMBUYER_DEVICE_TOKEN" if env_id else "CMBUYER_DEVICE_ID"
        if not (env_id and env_token):
            raise CredentialsError(f"{missing} 未设置（另一个设置了）；请两个都设置，或用 --credentials-file")
        return load_credentials(None, settings)
    default = default_credentials_path(serial, settings.state_dir)
    if default.exists():
        return load_credentials(str(default), settings)
    raise CredentialsError(
        f"没有设备凭据：请给 --credentials-file FILE，或设置 CMBUYER_DEVICE_ID 和 CMBUYER_DEVICE_TOKEN，"
        f"或写入 {default}（两行 device_id=… 和 token=…，权限 0600）"
    )


def server_url(url: str) -> str:
    """The settings' server URL (``--server``, else ``CMBUYER_SERVER_URL``, else :data:`DEFAULT_SERVER`) for
    ``run`` and ``doctor``, checked. Raises CredentialsError for a URL that is not ``http(s)://host[:port]``
    (a typo should end the command with one line, not turn into a retry loop)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise CredentialsError(
            f"服务器地址 {url!r} 不是 http(s)://主机[:端口] 的形式（--server 或 CMBUYER_SERVER_URL）"
        )
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


def _inspect_packs(args: argparse.Namespace, pack_dir: Path | None) -> list[Pack]:
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
            raise PackError("--version 的格式是 NAME:CODE，如 8.22.0:82200")
        version = (m.group("name"), int(m.group("code")))
    else:
        version = _capture_version(Path(args.dump))
    if version is not None:
        return [resolve_pack(*version, pack_dir, check_permissions=False)]
    return all_packs(pack_dir)


def cmd_inspect(args: argparse.Namespace, settings: AgentSettings) -> int:
    try:
        raw = read_regular(args.dump, MAX_DUMP_BYTES)
        packs = _inspect_packs(args, settings.pack_dir)
        dump = parse_dump(raw)
    except PackError as exc:  # the full one line (file and JSON path), not the 200-char summary
        print(json.dumps({"error": exc.reason_code, "detail": str(exc)}, ensure_ascii=False))
        return ExitCode.USAGE
    except AgentError as exc:
        print(json.dumps({"error": exc.reason_code, "detail": exc.summary}, ensure_ascii=False))
        return ExitCode.USAGE
    except OSError as exc:
        print(
            json.dumps(
                {"error": "UNREADABLE_FILE", "detail": f"无法读取 {args.dump}（{exc.strerror}）"}, ensure_ascii=False
            )
        )
        return ExitCode.USAGE
    from cmbuyer.agent.authoring.inspect import inspect_dump  # authoring only: `run` never loads it

    result = inspect_dump(dump, packs)
    if not args.explain:
        print(json.dumps(result, ensure_ascii=False))
        return ExitCode.OK
    from cmbuyer.agent.authoring.explain import explain_dump, render_text

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
                f"注意：识别包 {', '.join(result['pack_candidates'])} 都能识别这份界面；下面解释第一个"
                "（用 --pack 或 --version 指定）\n"
            )
        print("\n\n".join(render_text(e) for e in explanations))
    return ExitCode.OK


def cmd_journal(args: argparse.Namespace, settings: AgentSettings) -> int:
    path = journal_path(args.device, settings.state_dir)
    if not path.exists():
        # A hold cleared in the wrong state dir would look done while the agent stays held: say where
        # we looked and how the state dir is chosen.
        print(
            json.dumps(
                {
                    "path": str(path),
                    "exists": False,
                    "error": "这里没有这台设备的日志；代理的状态目录是 $CMBUYER_AGENT_STATE_DIR"
                    "（默认 ./var/agent）—— 请用与代理相同的值运行（例如 systemd 单元的 Environment=）",
                },
                ensure_ascii=False,
            )
        )
        return ExitCode.FAILED
    try:
        j = Journal(path)
        if args.clear_hold:
            j.clear_hold()
        print(json.dumps(j.summary(), ensure_ascii=False, indent=2))
    except JournalError as exc:
        print(json.dumps({"error": str(exc)}, ensure_ascii=False))
        return ExitCode.USAGE
    return ExitCode.OK


def _connect(serial: str, settings: AgentSettings) -> Any:
    from cmbuyer.agent.phone.adapter import PhoneAdapter

    return PhoneAdapter.connect(serial, adb_server=settings.adb_server)


def cmd_doctor(args: argparse.Namespace, settings: AgentSettings) -> int:
    checks: list[dict[str, Any]] = []
    pack_dir = settings.pack_dir
    pack_id: str | None = None  # heartbeat pack_id: as the runner reports it (Status.pack_id)

    def check(name: str, ok: bool, detail: str = "") -> bool:
        checks.append({"check": name, "ok": ok, "detail": detail})
        return ok

    from cmbuyer.agent.phone.adapter import probe_adb_server

    host, port = settings.adb_server
    try:
        probe_adb_server(host, port)
        check("adb server reachable", True, f"{host}:{port}")
        phone = _connect(args.device, settings)
        check("device online + uiautomator2 ready", True, args.device)
        info = phone.device_info()
        check("screen on", bool(info.get("screenOn")), "")
        version = phone.app_version()
        if check("Pinduoduo installed", version is not None, str(version) if version else "未安装"):
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
        "; ".join(problems) or f"运维识别包目录 {pack_dir or '未设置'}；可用：{usable}",
    )
    try:
        server = server_url(settings.server_url)
    except CredentialsError as exc:
        check("server URL", False, str(exc))
        server = ""
    server_ca = settings.server_ca
    if server:
        _tls_check(server, server_ca, check)
    try:
        creds = resolve_credentials(args.credentials_file, args.device, settings)
    except CredentialsError as exc:
        check("device credentials", False, str(exc))
        creds = None
    if creds is not None:
        check("device credentials", True, f"设备 id {creds.device_id}")
    from cmbuyer.agent.instance import agent_running

    if creds is not None and server and agent_running(args.device, settings.lock_dir):
        # no heartbeat (its PAUSED and hold would overwrite the working agent's on the pages): the credentials
        # are checked by a read-only call instead; version and pause are what the agent's own heartbeat gets
        try:
            HttpDeviceApi(server, creds, _NoKeys(), retries=0, server_ca=server_ca).check_credentials()
            check("server accepts the device", True, f"{server}；{DOCTOR_AGENT_RUNNING}")
        except AgentError as exc:
            check("server accepts the device", False, exc.summary)
    elif creds is not None and server:
        try:
            api = HttpDeviceApi(server, creds, _NoKeys(), retries=0, server_ca=server_ca)
            hb = api.heartbeat(
                adb_serial=args.device,
                android_release="unknown",
                pdd_version=version.name if version else None,
                pdd_version_code=version.code if version else None,
                state="PAUSED",
                pack_id=pack_id,
                hold=_journal_hold(journal_path(args.device, settings.state_dir)),
            )
            check("server accepts the device", True, server)
            check("server allows this app version", bool(hb["app_version_allowed"]))
            if hb.get("paused"):
                check("device not paused", False, "管理员暂停了这台设备的领取（设备页面：恢复领取）")
        except AgentError as exc:  # 401 (Unauthorized) says what to check; unreachable names the URL
            check("server accepts the device", False, exc.summary)
    if args.json:
        print(json.dumps({"device": args.device, "checks": checks}, ensure_ascii=False, indent=2))
    else:
        print(f"cmbuyer-agent doctor：手机 {args.device}")
        for c in checks:
            name = c["check"]
            print(
                f"{'通过' if c['ok'] else '失败'} {DOCTOR_CHECKS.get(name, name)} ({name})"
                + (f"：{c['detail']}" if c["detail"] else "")
            )
    return ExitCode.OK if all(c["ok"] for c in checks) else ExitCode.FAILED


# doctor's checks: the name (``--json``'s ``check``, kept for scripts) → what a person reads
DOCTOR_CHECKS = {
    "adb server reachable": "adb 服务可连接",
    "device online + uiautomator2 ready": "手机在线，uiautomator2 就绪",
    "screen on": "屏幕已点亮",
    "Pinduoduo installed": "已安装拼多多",
    "selector pack": "识别包",
    "phone": "手机",
    "selector packs load": "识别包都能加载",
    "server URL": "服务器地址",
    "server certificate": "服务器证书",
    "device credentials": "设备凭据",
    "server accepts the device": "服务器接受这台设备",
    "server allows this app version": "服务器允许这个拼多多版本",
    "device not paused": "设备未被暂停领取",
}


DOCTOR_AGENT_RUNNING = (
    "凭据已用只读请求检验；未发送心跳：本机正在为这台手机运行 cmbuyer-agent run，doctor 的心跳会覆盖它上报的状态；"
    "拼多多版本是否允许、是否暂停由它的心跳检验（管理页面“设备”看最后心跳）"
)


def _journal_hold(path: Path) -> dict[str, Any] | None:
    """The phone's hold as its agent reports it, when its journal (``path``) exists here: doctor's heartbeat
    must not tell the server a hold is over that the agent still keeps. None when there is no journal."""
    from cmbuyer.agent.runner import hold_report

    if not path.exists():
        return None
    try:
        return hold_report(Journal(path))
    except JournalError:
        return None


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
    expiry = f"{report.not_after:%Y-%m-%d}（还剩 {report.days_left} 天）" if report.not_after else "?"
    detail = f"主体 {report.subject}；到期 {expiry}；" + (
        "已验证" if report.verified else f"未通过验证：{report.error}"
    )
    check("server certificate", report.verified and not report.expiring, detail)


class _NoKeys:
    """Heartbeat carries no idempotency key; doctor needs no journal."""

    def key(self, purpose: str, scope: str = "") -> str:
        raise RuntimeError("doctor 不发送带幂等键的请求")

    def drop_key(self, purpose: str, scope: str = "") -> None:
        return None


def _error(code: str, detail: str) -> int:
    print(json.dumps({"error": code, "detail": detail}, ensure_ascii=False))
    return ExitCode.USAGE


def _capture_pack(version: Any, pack_dir: Path | None) -> tuple[Pack | None, str | None]:
    """The pack whose privacy rows a capture scrubs; (None, why) for a version without a pack yet."""
    from cmbuyer.agent.authoring.dryrun import dryrun_pack

    if version is None:
        return None, "未安装拼多多"
    try:
        return dryrun_pack(version, pack_dir), None
    except PackError as exc:
        return None, exc.summary


def cmd_capture(args: argparse.Namespace, settings: AgentSettings) -> int:
    """A scrubbed capture for pack authoring (agent/authoring/capture.py; docs/agent.md "Captures"): dump.xml,
    screenshot.png, meta.json and expected.json (``--expect``/``--expected-file``) or
    expected.proposed.json. Written under ``--out`` (default ./captures/<serial>/<label>-<time>/),
    0700; an existing non-empty folder only with ``--force``."""
    from cmbuyer.agent.authoring.capture import (
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
        phone = _connect(args.device, settings)
        xml = phone.dump_raw()
        png = phone.screenshot_png()
        version = phone.app_version()
    except AgentError as exc:
        return _error(exc.reason_code, exc.summary)
    pack, no_pack = _capture_pack(version, settings.pack_dir)
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
        raise ValueError("--goods-id 须为商品 id 的数字")
    from cmbuyer.schemas.sku import MAX_OPTIONS, legacy_options, split_option

    if args.option:
        if args.color is not None or args.size is not None:
            raise ValueError("规格请用 --option 维度=值 或 --color/--size 二选一，不能都给")
        options = tuple(split_option(o) for o in args.option)  # ValueError says how to write one
        if len(options) > MAX_OPTIONS or len({d for d, _ in options}) != len(options):
            raise ValueError(f"--option：1–{MAX_OPTIONS} 个选项，每个维度只能出现一次")
    elif args.color is None or not args.color.strip() or (args.size is not None and not args.size.strip()):
        raise ValueError("请给出规格：--option 维度=值（可重复），或 --color（和 --size），不能为空")
    else:
        options = legacy_options(args.color, args.size)
    if args.quantity < 1:
        raise ValueError("--quantity 至少为 1")
    try:
        cap = Decimal(args.max_total)
    except InvalidOperation:
        cap = Decimal("NaN")
    if not cap.is_finite() or cap <= 0:
        raise ValueError("--max-total 须为以元计的金额，如 120.00")
    return PrefenceOrder(args.goods_id, options, args.quantity, cap)


def cmd_dry_run(args: argparse.Namespace, settings: AgentSettings) -> int:
    """The pre-fence flow on a phone without the server (agent/authoring/dryrun.py). Gate verdicts one per line,
    then the summary JSON on stdout; progress on stderr. Exit 0 / 1 / 2 as documented there."""
    from cmbuyer.agent.authoring.capture import CaptureError, check_out
    from cmbuyer.agent.authoring.dryrun import default_out, dryrun_pack, run_dry

    try:
        order = _dry_run_order(args)
    except ValueError as exc:
        return _error("USAGE", str(exc))
    buy_path = settings.buy_path
    out = Path(args.out) if args.out else default_out(args.device)
    try:
        check_out(out, args.force, directory_of_captures=True)
    except CaptureError as exc:
        return _error("CAPTURE_EXISTS", str(exc))
    progress = _progress_fn(False)
    try:
        phone = _connect(args.device, settings)
        version = phone.app_version()
        if version is None:
            return _error("APP_VERSION_UNSUPPORTED", "手机上没有安装拼多多")
        pack = dryrun_pack(version, settings.pack_dir)
    except AgentError as exc:
        return _error(exc.reason_code, exc.summary)
    if out.exists() and args.force:
        import shutil

        shutil.rmtree(out)
    progress(f"在 {args.device} 上试运行：拼多多 {version}，识别包 {pack.id}，购买路径 {buy_path}；不连服务器")
    try:
        result = run_dry(phone, pack, version, order, out=out, buy_path=buy_path, progress=progress, waits=FlowWaits())
    except KeyboardInterrupt:  # run_dry backed out and wrote what it had on the way out
        progress("已中断")
        return ExitCode.INTERRUPTED
    except (AgentError, OSError) as exc:
        return _error(getattr(exc, "reason_code", "WRITE_FAILED"), str(exc)[:200])
    for line in result.lines:
        print(visible(line))
    print(json.dumps(result.summary, ensure_ascii=False))
    return result.exit_code


def cmd_run(args: argparse.Namespace, settings: AgentSettings) -> int:
    """``run``: settings (checked by :func:`main`) and credentials first (nothing touched on a mistake), then
    the claim loop (:func:`_run`) while holding the phone's run lock (agent/instance.py), so a second ``run``
    for the same phone refuses to start and ``doctor`` can tell that one is running."""
    from cmbuyer.agent.instance import AlreadyRunning, UnsafeRuntimeDir, run_lock, runtime_dir

    progress = _progress_fn(args.json_logs)
    try:
        creds = resolve_credentials(args.credentials_file, args.device, settings)
        server = server_url(settings.server_url)
    except CredentialsError as exc:
        progress(f"无法启动：{exc}")
        return ExitCode.USAGE
    try:
        with run_lock(args.device, settings.lock_dir):
            return _run(args, settings, progress, creds, server)
    except (AlreadyRunning, UnsafeRuntimeDir) as exc:
        progress(f"无法启动：{exc}")
        return ExitCode.USAGE
    except OSError as exc:
        progress(f"无法启动：运行锁目录 {runtime_dir(settings.lock_dir)} 或状态目录不可写（{exc.strerror}）")
        return ExitCode.USAGE


def _run(args: argparse.Namespace, settings: AgentSettings, progress: Any, creds: Credentials, server: str) -> int:
    from cmbuyer.agent.runner import Runner, RunnerConfig, StopNow

    try:
        journal = Journal.for_serial(args.device, settings.state_dir)
        phone = _connect(args.device, settings)
    except (AgentError, JournalError) as exc:
        progress(f"无法启动：{exc}")
        return ExitCode.USAGE
    server_ca = settings.server_ca
    try:
        verify_server(server, server_ca)
        api = HttpDeviceApi(
            server, creds, journal, server_ca=server_ca, approval_timeout=settings.approval_timeout_seconds
        )
    except ServerTlsError as exc:
        progress(f"无法启动：{exc.summary}")
        return ExitCode.USAGE
    pack_dir = settings.pack_dir
    progress(f"运维识别包目录：{pack_dir}" if pack_dir else "运维识别包目录：未设置（只用随附的识别包）")
    runner = Runner(
        RunnerConfig(
            args.device,
            once=args.once,
            poll_seconds=args.poll_seconds,
            holds=settings.holds,
            pack_dir=pack_dir,
            waits=FlowWaits(),  # production's deadlines (docs/agent.md)
            buy_path=settings.buy_path,
            approval=settings.approval,
        ),
        phone,
        api,
        journal,
        progress,
    )
    runner.install_signals()
    try:
        return runner.run()
    except StopNow:
        progress("已立即停止（第二次信号）")
        return ExitCode.INTERRUPTED
    except AgentError as exc:
        progress(f"已停止：{exc.reason_code} {exc.summary}")
        return ExitCode.FAILED
    except JournalError as exc:
        progress(f"已停止：本地日志出错（{exc}）；请先修复状态目录再重启")
        return ExitCode.USAGE


def cmd_pack_verify(args: argparse.Namespace) -> int:
    """Re-hash every evidence file of one pack: one line per file, then a summary. Exit 0 all ok,
    1 a file missing/changed/outside the pack's directory, 2 the pack itself is unreadable/invalid."""
    path = Path(args.pack)
    try:
        data = parse_pack_json(read_regular(path, MAX_PACK_BYTES))
        compile_pack(data)
    except (OSError, PackError) as exc:
        why = exc if isinstance(exc, PackError) else f"$: 无法读取文件（{exc.strerror or exc.__class__.__name__}）"
        print(f"{path.name}: {why}", file=sys.stderr)
        return ExitCode.USAGE
    results = check_evidence(data, path.parent)
    for result in results:
        print(result.line())
    bad = sum(not r.ok for r in results)
    print(
        f"{path.name}：{len(results)} 个证据文件，{len(results) - bad} 个正常，{bad} 个失败"
        f" -> {'失败 (FAILED)' if bad else '通过 (OK)'}"
    )
    return ExitCode.FAILED if bad else ExitCode.OK


def add_pack_commands(sub: Any) -> Any:
    """The ``pack`` command group (``pack verify`` here; ``pack test``/``pack accept`` are added to the
    returned subparsers by their own module). Returns the group's subparsers."""
    pk = sub.add_parser(
        "pack", help="识别包工具：verify（核对证据哈希）、test（用采集样本测试）、accept（确认预期读数）"
    )
    pack_sub = pk.add_subparsers(dest="pack_command", required=True)
    v = pack_sub.add_parser(
        "verify",
        help="重新计算识别包证据文件（界面、截图、meta）的哈希；有文件缺失或被改动时以非零退出",
    )
    v.add_argument("pack", metavar="PACK", help="识别包 JSON 文件（证据路径相对于它所在的目录）")
    v.set_defaults(fn=cmd_pack_verify)
    add_pack_test_commands(pack_sub)
    return pack_sub


DEVICE_HELP = "手机的 adb 序列号（见 adb devices）"


def add_pack_dir_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--pack-dir DIR`` to a subcommand (the settings' ``pack_dir``)."""
    parser.add_argument(
        "--pack-dir",
        metavar="DIR",
        help="运维自备的识别包目录（默认环境变量 CMBUYER_AGENT_PACK_DIR）；"
        "同一拼多多版本下，运维识别包优先于随附的识别包",
    )


def _server_arguments(p: argparse.ArgumentParser) -> None:
    """``--device``, ``--server``, ``--server-ca`` and ``--credentials-file``: the same for ``run`` and ``doctor``."""
    p.add_argument("--device", required=True, help=DEVICE_HELP)
    p.add_argument("--server", help=f"服务器地址（默认 $CMBUYER_SERVER_URL，否则 {DEFAULT_SERVER}）")
    p.add_argument("--server-ca", help="签发服务器证书的 CA 的 PEM 文件（CMBUYER_SERVER_CA）")
    p.add_argument(
        "--credentials-file",
        help="权限 0600、含 device_id=… 和 token=… 两行的凭据文件（默认 $CMBUYER_DEVICE_ID + $CMBUYER_DEVICE_TOKEN，"
        "否则 $CMBUYER_AGENT_STATE_DIR/<序列号>.cred）",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmbuyer-agent", description="cmbuyer 采购代理：领取任务并操作手机上的拼多多（永不自动付款）"
    )
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="领取任务并操作手机")
    _server_arguments(r)
    r.add_argument(
        "--json-logs", action="store_true", help="每行日志一个 JSON 对象（ts、msg、task_id、attempt_id、step …）"
    )
    r.add_argument("--once", action="store_true", help="做完一个任务后退出")
    r.add_argument("--poll-seconds", type=float, default=1.0, help="没有任务时两次领取之间等待的秒数（默认 1）")
    r.add_argument(
        "--crash-loop-limit",
        type=int,
        metavar="N",
        help="连续 N 次尝试以 INTERNAL_ERROR 或崩溃结束后暂停接单等人处理"
        "（默认环境变量 CMBUYER_AGENT_CRASH_LOOP_LIMIT，否则 2）",
    )
    r.add_argument(
        "--failure-limit",
        type=int,
        metavar="N",
        help="连续 N 次尝试在提交围栏之前失败后暂停接单等人处理（默认环境变量 CMBUYER_AGENT_FAILURE_LIMIT，否则 3）",
    )
    add_pack_dir_argument(r)
    r.set_defaults(fn=cmd_run)
    d = sub.add_parser("doctor", help="检查 adb、手机、拼多多版本、识别包、凭据和服务器")
    _server_arguments(d)
    d.add_argument("--json", action="store_true", help="输出 JSON 报告（check、ok、detail，供脚本读取）")
    add_pack_dir_argument(d)
    d.set_defaults(fn=cmd_doctor)
    c = sub.add_parser("capture", help="保存一份去除隐私的采集样本（界面、截图、meta、预期读数）")
    c.add_argument("--device", required=True, help=DEVICE_HELP)
    c.add_argument("--label", required=True, help="这是什么画面，如 confirm-page（作为文件夹名的一部分）")
    c.add_argument("--out", help="采集文件夹（默认 ./captures/<序列号>/<label>-<时间>）")
    c.add_argument("--force", action="store_true", help="替换已存在且非空的 --out 文件夹")
    add_pack_dir_argument(c)
    c.add_argument(
        "--expect",
        nargs="+",
        metavar="KEY=VALUE",
        help="人工确认的读数，如 screen=confirm_order unit_price=59.00 quantity=2"
        "（键：screen 和 inspect 的 readings 键）→ expected.json",
    )
    c.add_argument("--by", help="谁确认了 --expect（expected.json 的 confirmed_by）")
    c.add_argument("--expected-file", help="人工写好的 expected.json，检查后保存")
    c.set_defaults(fn=cmd_capture)
    dr = sub.add_parser("dry-run", help="不连服务器，在手机上走到闸门三为止；保存采集样本和过程")
    dr.add_argument("--device", required=True, help=DEVICE_HELP)
    dr.add_argument("--goods-id", required=True, help="拼多多商品 id（数字）")
    dr.add_argument(
        "--option",
        action="append",
        metavar="维度=值",
        help="一个规格选项，照商品页的写法，如 --option 规格=3层100抽（可重复，按页面顺序）",
    )
    dr.add_argument("--color", help="颜色/尺码类商品：颜色（颜色=…）；代替 --option")
    dr.add_argument("--size", help="与 --color 一起用：尺码（尺码=…）")
    dr.add_argument("--quantity", type=int, required=True, help="数量（至少 1）")
    dr.add_argument("--max-total", required=True, help="总价上限（元），如 120.00")
    add_pack_dir_argument(dr)
    dr.add_argument("--out", help="采集目录（默认 ./captures/<序列号>/dryrun-<时间>）")
    dr.add_argument("--force", action="store_true", help="替换已存在且非空的 --out 目录")
    dr.add_argument(
        "--buy-path",
        choices=("single", "group"),
        help="购买路径：single 单独购买，group 拼单（默认环境变量 CMBUYER_AGENT_BUY_PATH，否则 single）",
    )
    dr.set_defaults(fn=cmd_dry_run)
    i = sub.add_parser("inspect", help="识别一份界面导出并以 JSON 输出读数")
    i.add_argument("--dump", required=True, help="一份 dump.xml（uiautomator 界面层级），例如采集样本里的")
    i.add_argument("--pack", help="用这个识别包文件读取")
    i.add_argument(
        "--version",
        help="用这个拼多多版本的识别包读取，NAME:CODE（如 8.22.0:82200）；"
        "默认用界面文件旁 meta.json 记录的版本，否则依次试所有已知版本的识别包",
    )
    add_pack_dir_argument(i)
    i.add_argument(
        "--explain",
        action="store_true",
        help="逐条画面规则和读数说明哪个选择器匹配了哪个节点，或为什么都没匹配（文本；加 --json 为 JSON）",
    )
    i.add_argument("--json", action="store_true", help="与 --explain 一起用：输出 JSON 而不是文本")
    i.set_defaults(fn=cmd_inspect)
    j = sub.add_parser(
        "journal",
        help="显示一台设备的本地日志（在 $CMBUYER_AGENT_STATE_DIR，默认 ./var/agent：请用代理自己的值）",
    )
    j.add_argument("--device", required=True, help=DEVICE_HELP)
    j.add_argument(
        "--clear-hold",
        action="store_true",
        help="有人处理完手机或卡住的任务后：解除暂停接单，清零连续失败计数",
    )
    j.set_defaults(fn=cmd_journal)
    add_pack_commands(sub)
    chinese_help(p)
    return p


# the commands that take the settings (the ``pack`` tools read only the files they are given)
_WITH_SETTINGS = frozenset({cmd_run, cmd_doctor, cmd_capture, cmd_dry_run, cmd_inspect, cmd_journal})


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, read the settings once (:func:`~cmbuyer.agent.settings.load_agent_settings`: the
    command's flags, then the environment) and run the command. A bad setting: one line on stderr, exit 2,
    nothing touched."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.fn not in _WITH_SETTINGS:
        return int(args.fn(args))
    try:
        settings = load_agent_settings(args)
    except AgentSettingsError as exc:
        _progress_fn(getattr(args, "json_logs", False))(f"设置有误：{exc}")
        return ExitCode.USAGE
    return int(args.fn(args, settings))


if __name__ == "__main__":
    sys.exit(main())
