"""``cmbuyer-server`` command line (exit codes in docs/operations.md).

Exit codes (:class:`Exit`): 0 ok · 1 refused by a business rule (conflict, not found, invalid input) · 2 usage
error · 3 bad settings · 4 storage or schema problem (database unreachable, migrations not current).
Every command takes ``--data-dir`` (default ``$CMBUYER_DATA_DIR`` or ``./var``) and reads
``<data-dir>/cmbuyer.env`` when present; real environment variables override it.
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import os
import secrets
import shlex
import sqlite3
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeVar

from cmbuyer.schemas.clihelp import chinese_help
from cmbuyer.schemas.sku import split_option
from cmbuyer.server import migrate
from cmbuyer.server.cli_text import (
    DATA_DIR_HELP,
    DEVICE_ID_HELP,
    DOCTOR_CHECKS,
    EXPECTED_VERSION_HELP,
    IMPORT_STATUS,
    JSON_HELP,
    PASSWORD_PROMPT,
    TASK_ID_HELP,
    cannot_listen,
    coded,
    no_database,
    refusing_to_start,
    storage_error,
    task_line,
    unchanged,
)
from cmbuyer.server.clock import SystemClock, to_wire
from cmbuyer.server.config import ENV_FILE_NAME, Settings, env_file_defaults, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.display.labels import DEVICE_REGISTRATION_LABELS, reason_message, refusal_message
from cmbuyer.server.domain.errors import CmbuyerError, DomainError, SettingsError, StartupRefused, Unavailable
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.domain.task_fields import person_money
from cmbuyer.server.services import admins as admin_service
from cmbuyer.server.services import devices as device_service
from cmbuyer.server.services import evidence_gc
from cmbuyer.server.services import tasks as task_service
from cmbuyer.server.store import admins as admin_store
from cmbuyer.server.store import devices as device_store
from cmbuyer.server.store.queries import ops as ops_queries
from cmbuyer.server.tx.common import Actor, new_id


class Exit(IntEnum):
    """Exit status of every command (docs/operations.md "Exit codes")."""

    OK = 0  # done
    RULE = 1  # refused by a business rule (conflict, not found, invalid input), or a check failed
    USAGE = 2  # usage error (argparse exits 2 too)
    SETTINGS = 3  # bad setting, data dir not writable, address cannot be listened on
    STORAGE = 4  # storage or schema problem (database unreachable, migrations not current)


T = TypeVar("T")
CLI_ACTOR = Actor("cli", os.environ.get("USER", "operator"))


class CliError(CmbuyerError):
    """A failure with its exit code; ``str`` is the one-line message printed to stderr."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.code = code


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, sort_keys=True))


def _report(args: argparse.Namespace, obj: Any, lines: Iterable[str]) -> None:
    """A command's result: ``obj`` as one JSON object with ``--json``, else ``lines`` for a person (taken
    only then, so a generator may build them)."""
    if args.json:
        _print_json(obj)
    else:
        for line in lines:
            print(line)


def _settings(args: argparse.Namespace) -> Settings:
    try:
        return load_settings(args.data_dir)
    except SettingsError as exc:
        raise CliError(str(exc), Exit.SETTINGS) from None


def _open(settings: Settings, *, check: bool = True) -> sqlite3.Connection:
    if not settings.db_path.exists():
        raise CliError(no_database(settings.db_path), Exit.STORAGE)
    try:
        conn = connect_sync(settings.db_path)
        if check:
            migrate.check_current(conn)
    except migrate.MigrationError as exc:
        raise CliError(str(exc), Exit.STORAGE) from None
    except sqlite3.Error:
        raise CliError("无法打开数据库", Exit.STORAGE) from None
    return conn


@contextmanager
def _migrations(settings: Settings) -> Iterator[sqlite3.Connection]:
    """A connection for migration work (no schema check: it may not be current yet), closed on the way
    out; a :class:`~cmbuyer.server.migrate.MigrationError` inside becomes exit 4 with its message."""
    conn = connect_sync(settings.db_path)
    try:
        yield conn
    except migrate.MigrationError as exc:
        raise CliError(str(exc), Exit.STORAGE) from None
    finally:
        conn.close()


def _tx(conn: sqlite3.Connection, job: Callable[[sqlite3.Connection], T]) -> T:
    try:
        return run_in_transaction(conn, job)
    except Unavailable as exc:
        raise CliError(storage_error(exc), Exit.STORAGE) from None
    except DomainError as exc:
        raise CliError(f"{exc.code}: {refusal_message(exc)}", Exit.RULE) from None


# -- init / migrate / serve / doctor -------------------------------------------------------------


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """Write ``values`` as an env file created with mode 0600 (never readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("# cmbuyer 设置，由 `cmbuyer-server init` 写入；此文件只能本人可读（0600）。\n")
        for key, value in values.items():
            handle.write(f"{key}={value}\n")


def update_env_file(path: Path, values: dict[str, str]) -> None:
    """Set ``values`` in an existing env file: a line of the same key is replaced in place, a new key is
    appended; the file is rewritten whole (a temporary file renamed over it) and stays 0600."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CliError(f"{path}：无法读取设置文件（{exc.strerror}）", Exit.SETTINGS) from None
    left = dict(values)
    out: list[str] = []
    for line in lines:
        key = line.partition("=")[0].strip()
        out.append(f"{key}={left.pop(key)}" if key in left else line)
    out.extend(f"{key}={value}" for key, value in left.items())
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(out) + "\n")
    os.replace(tmp, path)


def cmd_init(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir or os.environ.get("CMBUYER_DATA_DIR") or "var")
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private(data_dir, 0o700)
        probe = data_dir / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise CliError(f"数据目录 {data_dir} 不可写（{exc.strerror}）", Exit.SETTINGS) from None
    env_path = data_dir / ENV_FILE_NAME
    if not env_path.exists():
        write_env_file(
            env_path,
            {
                "CMBUYER_CLAIM_TOKEN_SECRET": secrets.token_bytes(32).hex(),
                "CMBUYER_SESSION_SECRET": secrets.token_bytes(32).hex(),
                **env_file_defaults(),
            },
        )
        created_env = True
    else:
        created_env = False
    settings = _settings(args)
    settings.require_secrets()
    (settings.evidence_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    with _migrations(settings) as conn:
        applied = migrate.migrate(conn, to_wire(SystemClock().now()))
    for path in (settings.db_path, *(Path(f"{settings.db_path}{ext}") for ext in ("-wal", "-shm"))):
        if path.exists():
            _private(path, 0o600)
    program = f"{_program()} --data-dir {shlex.quote(str(data_dir))}"
    _report(
        args,
        {"data_dir": str(data_dir), "env_file_created": created_env, "migrations_applied": applied},
        [
            f"数据目录：{data_dir}（权限 0700）",
            f"设置文件：{env_path}（{'已创建，含新生成的密钥' if created_env else '已存在，保留不变'}）",
            f"数据库：  {settings.db_path}（应用了 {len(applied)} 个迁移；权限 0600）",
            "下一步（每行都可以照原样运行）：",
            f"  {program} admin add --username admin      # 会两次询问密码",
            f"  {program} device add --name phone-1       # 只显示一次设备 id 和令牌",
            f"  {program} serve",
        ],
    )
    return Exit.OK


def _private(path: Path, mode: int) -> None:
    """Make ``path`` readable by its owner only (``mode``: 0700 for the data dir, 0600 for the database): a
    data dir made earlier (by hand, by ``make demo``) is tightened, not just accepted. Raises CliError with
    the exact ``chmod`` to run when it cannot (a directory owned by someone else)."""
    if stat.S_IMODE(path.stat().st_mode) == mode:
        return
    try:
        path.chmod(mode)
    except OSError:
        raise CliError(
            f"{path} 其他用户可读，而当前用户无法修改它的权限；请运行：chmod {mode:o} {shlex.quote(str(path))}",
            Exit.SETTINGS,
        ) from None


def _program() -> str:
    """How to run ``cmbuyer-server`` again from where ``init`` ran: on the PATH, else the script beside this
    Python (``.venv/bin/cmbuyer-server``), quoted for a shell."""
    import shutil

    found = shutil.which("cmbuyer-server")
    if found:
        return "cmbuyer-server"
    beside = Path(sys.executable).parent / "cmbuyer-server"
    return shlex.quote(str(beside)) if beside.exists() else "cmbuyer-server"


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if not settings.db_path.parent.is_dir():
        raise CliError(no_database(settings.db_path.parent, directory=True), Exit.STORAGE)
    with _migrations(settings) as conn:
        if args.list:
            from cmbuyer.server.store import migrations as mig_store

            mig_store.ensure_table(conn)
            applied = mig_store.applied(conn)
            rows = [
                {
                    "name": m.name,
                    "applied": m.name in applied,
                    "checksum_ok": applied.get(m.name, m.checksum) == m.checksum,
                }
                for m in migrate.available()
            ]
            _report(
                args,
                {"migrations": rows},
                (
                    f"{row['name']}  {'已应用' if row['applied'] else '待应用'}"
                    f"{'' if row['checksum_ok'] else '  校验和不符（CHECKSUM MISMATCH）'}"
                    for row in rows
                ),
            )
            return Exit.OK
        done = migrate.migrate(conn, to_wire(SystemClock().now()))
    _report(
        args,
        {"migrations_applied": done},
        [f"应用了 {len(done)} 个迁移" + ("：" + ", ".join(done) if done else "")],
    )
    return Exit.OK


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from cmbuyer.server.app import create_app
    from cmbuyer.server.domain.bind import bind_refusal
    from cmbuyer.server.lifecycle import check_schema
    from cmbuyer.server.logs import setup_logging
    from cmbuyer.server.tls import TlsError, server_context

    for flag, variable in (
        (args.host, "CMBUYER_HOST"),
        (args.port, "CMBUYER_PORT"),
        (args.tls_cert, "CMBUYER_TLS_CERT"),
        (args.tls_key, "CMBUYER_TLS_KEY"),
    ):
        if flag is not None and flag != "":
            os.environ[variable] = str(flag)
    settings = _settings(args)
    try:
        settings.require_secrets()
    except SettingsError as exc:
        raise CliError(str(exc), Exit.SETTINGS) from None
    refusal = bind_refusal(
        settings.host, tls=settings.tls, behind_proxy=args.behind_proxy, trusted_proxies=settings.trusted_proxies
    )
    if refusal is not None:
        raise CliError(refusing_to_start(refusal), Exit.SETTINGS)
    ssl_context = None
    if settings.tls_cert is not None and settings.tls_key is not None:
        try:
            ssl_context = server_context(settings.tls_cert, settings.tls_key)
        except TlsError as exc:
            raise CliError(refusing_to_start(exc), Exit.SETTINGS) from None
    setup_logging(settings.log_format, settings.log_level)
    try:
        check_schema(settings)
        app = create_app(settings)
        scheme = "https" if ssl_context is not None else "http"

        def serving(_aiohttp_banner: str) -> None:
            # run_app calls this only once the socket is bound: a busy port is reported first, never
            # after a "serving" line
            print(
                f"cmbuyer-server：正在服务 {scheme}://{settings.host}:{settings.port}/（管理页面：/login，数据目录 "
                f"{settings.data_dir}）",
                file=sys.stderr,
                flush=True,
            )

        # Everything built so far (modules, app, routes) lives as long as the process: take it out of the
        # cyclic GC so that a full collection does not walk it — one took ≈ 40–50 ms under load, stalling
        # every request in flight (docs/performance.md). Garbage is collected first, so nothing leaks.
        gc.collect()
        gc.freeze()
        web.run_app(
            app,
            host=settings.host,
            port=settings.port,
            print=serving,
            access_log=None,
            handle_signals=True,
            shutdown_timeout=5,
            ssl_context=ssl_context,
        )
    except StartupRefused as exc:
        raise CliError(refusing_to_start(exc), Exit.STORAGE) from None
    except OSError as exc:
        raise CliError(cannot_listen(settings.host, settings.port, exc), Exit.SETTINGS) from None
    return Exit.OK


def cmd_doctor(args: argparse.Namespace) -> int:
    settings = _settings(args)
    checks: list[tuple[str, bool, str]] = []
    checks.append(("sqlite_version", sqlite3.sqlite_version_info >= (3, 37, 0), sqlite3.sqlite_version))
    try:
        settings.require_secrets()
        checks.append(("secrets", True, "已设置"))
    except SettingsError as exc:
        checks.append(("secrets", False, str(exc)))
    try:
        mode = stat.S_IMODE(settings.data_dir.stat().st_mode)
        checks.append(("data_dir_private", mode & 0o077 == 0, oct(mode)))
        env_path = settings.data_dir / ENV_FILE_NAME
        if env_path.exists():
            env_mode = stat.S_IMODE(env_path.stat().st_mode)
            checks.append(("env_file_private", env_mode & 0o077 == 0, oct(env_mode)))
    except OSError as exc:
        checks.append(("data_dir", False, exc.strerror or "无法读取"))
    try:
        conn = _open(settings)
        pragmas = ops_queries.pragmas(conn, ("journal_mode", "synchronous", "foreign_keys", "busy_timeout"))
        checks.append(
            (
                "pragmas",
                pragmas["journal_mode"] == "wal" and pragmas["synchronous"] == 2 and pragmas["foreign_keys"] == 1,
                json.dumps(pragmas),
            )
        )
        checks.append(("integrity", ops_queries.quick_check_ok(conn), "quick_check"))
        checks.append(("migrations", True, "已是最新"))
        conn.close()
    except CliError as exc:
        checks.append(("database", False, str(exc)))
    if settings.replica_url is not None:
        from cmbuyer.server.replication import ReplicationError, lag

        try:
            report = lag(settings)
            checks.append(("replication", report.ok, report.describe()))
        except ReplicationError as exc:
            checks.append(("replication", False, str(exc)))
    if settings.tls_cert is not None:
        checks.append(_tls_check(settings.tls_cert))
    ok = all(passed for _, passed, _ in checks)
    _report(
        args,
        {"ok": ok, "checks": [{"name": n, "ok": p, "detail": d} for n, p, d in checks]},
        (
            f"{'通过' if passed else '失败'} {DOCTOR_CHECKS.get(name, name)} ({name})：{detail}"
            for name, passed, detail in checks
        ),
    )
    return Exit.OK if ok else Exit.RULE


def cmd_tls(args: argparse.Namespace) -> int:
    """``tls init``: a private CA and a server certificate for ``--host`` names, recorded in ``cmbuyer.env``."""
    from cmbuyer.server.tls import TlsError, init_certificates

    data_dir = Path(args.data_dir or os.environ.get("CMBUYER_DATA_DIR") or "var")
    env_path = data_dir / ENV_FILE_NAME
    if not env_path.exists():
        raise CliError(f"{env_path} 不存在；请先运行 `cmbuyer-server init`，再运行 `tls init`", Exit.SETTINGS)
    try:
        files = init_certificates(data_dir, args.host, SystemClock().now())
    except TlsError as exc:
        raise CliError(str(exc), Exit.USAGE) from None
    except OSError as exc:
        raise CliError(f"无法在 {data_dir} 下写入 TLS 文件（{exc.strerror}）", Exit.SETTINGS) from None
    update_env_file(
        env_path,
        {"CMBUYER_TLS_CERT": str(files.server_cert.resolve()), "CMBUYER_TLS_KEY": str(files.server_key.resolve())},
    )
    _report(
        args,
        {
            "ca_cert": str(files.ca_cert),
            "server_cert": str(files.server_cert),
            "server_key": str(files.server_key),
            "ca_key": str(files.ca_key),
            "ca_created": files.ca_created,
            "hosts": list(args.host),
            "not_after": to_wire(files.not_after),
        },
        [
            f"服务器证书（{', '.join(args.host)}，有效期至 {files.not_after:%Y-%m-%d}）：{files.server_cert}",
            f"CA {'已创建' if files.ca_created else '沿用原有的'}；它的私钥是 {files.ca_key} —— serve 从不需要它；"
            "请离线妥善保管，下次 `tls init` 要用",
            f"路径已记入 {env_path}；`serve` 从现在起只用 HTTPS",
            "把下面这个文件复制到每台手机主机，并用 --server-ca FILE 运行代理：",
            str(files.ca_cert),
        ],
    )
    return Exit.OK


def _tls_check(cert: Path) -> tuple[str, bool, str]:
    """doctor's line about the certificate ``serve`` presents: subject, expiry (fails under 14 days)."""
    from cryptography import x509

    try:
        leaf = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError):
        return ("tls_certificate", False, f"无法读取 TLS 证书 {cert}")
    days = (leaf.not_valid_after_utc - SystemClock().now()).days
    subject = leaf.subject.rfc4514_string()
    return ("tls_certificate", days >= 14, f"{subject}；{leaf.not_valid_after_utc:%Y-%m-%d} 到期（还剩 {days} 天）")


def cmd_replicate(args: argparse.Namespace) -> int:
    """``replicate``: run Litestream for the configured database and ``CMBUYER_REPLICA_URL`` in the
    foreground (this process becomes Litestream, so systemd's signals reach it directly)."""
    from cmbuyer.server.replication import ReplicationError, replicate_argv

    settings = _settings(args)
    if not settings.db_path.exists():
        raise CliError(no_database(settings.db_path), Exit.STORAGE)
    try:
        argv = replicate_argv(settings)
    except ReplicationError as exc:
        raise CliError(str(exc), Exit.SETTINGS) from None
    print(f"cmbuyer-server：正在把 {settings.db_path} 复制到 {settings.replica_url}", file=sys.stderr, flush=True)
    os.execv(argv[0], argv)  # noqa: S606 - a fixed binary and arguments, no shell
    return Exit.OK  # not reached: execv replaces this process


def cmd_restore(args: argparse.Namespace) -> int:
    """``restore --from URL --to DIR``: the newest replicated state into a fresh data dir, then the start-up
    checks (integrity, schema, claim secret), then every unsettled task HELD (services/restore_hold.py)."""
    from cmbuyer.server.replication import ReplicationError, restore_into
    from cmbuyer.server.services import restore_hold
    from cmbuyer.server.services.claim_secret import SecretMismatch, verify_secret

    target_dir = Path(args.to)
    target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        settings = load_settings(target_dir)
        secret, _ = settings.require_secrets()
    except SettingsError as exc:
        raise CliError(
            f"{exc} —— 请先把另存在主机之外的 cmbuyer.env 放进 {target_dir}（其中的密钥必须是写入被复制数据库时"
            "所用的那些）",
            Exit.SETTINGS,
        ) from None
    db_path = settings.db_path
    if any(db_path.with_name(db_path.name + suffix).exists() for suffix in ("", "-wal", "-shm")):
        raise CliError(f"{db_path} 已存在；只能恢复到新的数据目录", Exit.USAGE)
    partial = db_path.with_name(db_path.name + ".restoring")
    for leftover in (partial, partial.with_name(partial.name + "-wal"), partial.with_name(partial.name + "-shm")):
        leftover.unlink(missing_ok=True)
    try:
        position = restore_into(args.from_url, partial)
    except ReplicationError as exc:
        raise CliError(str(exc), Exit.STORAGE) from None
    try:
        os.chmod(partial, 0o600)
        with closing(connect_sync(partial)) as conn:
            if not ops_queries.integrity_check_ok(conn):
                raise CliError("恢复出的数据库未通过 integrity_check；什么都没有保留", Exit.STORAGE)
            applied = migrate.migrate(conn, to_wire(SystemClock().now()))
            migrate.check_current(conn)
            try:
                verify_secret(conn, secret.reveal())
            except SecretMismatch as exc:
                raise CliError(f"拒绝这次恢复：{exc}", Exit.STORAGE) from None
            held = _tx(conn, lambda c: restore_hold.hold_unsettled(c, CLI_ACTOR, SystemClock().now()))
            ops_queries.checkpoint_truncate(conn)  # one self-contained file before it is moved into place
    except migrate.MigrationError as exc:
        partial.unlink(missing_ok=True)
        raise CliError(str(exc), Exit.STORAGE) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(db_path)
    settings.evidence_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    uploaded = to_wire(position.uploaded_at) if position.uploaded_at else None
    _report(
        args,
        {
            "database": str(db_path),
            "replica": args.from_url,
            "txid": f"{position.txid:016x}",
            "replicated_at": uploaded,
            "integrity_ok": True,
            "migrations_applied": applied,
            "held_tasks": held,
        },
        [
            f"已从 {args.from_url} 恢复 {db_path}（txid {position.txid:x}，上传于 {uploaded}）；完整性正常，"
            "领取密钥一致",
            f"{len(held)} 个未结束的任务已暂停（HELD）：在有人对照手机日志逐个核对、并在管理页面“恢复后待核对”（/held）"
            "放行之前，任何手机都不会领取它们",
            "复制的数据里没有证据截图：如果有备份，请从备份复制 <数据目录>/evidence",
        ],
    )
    return Exit.OK


def cmd_backup(args: argparse.Namespace) -> int:
    settings = _settings(args)
    target = Path(args.to)
    if target.exists():
        raise CliError(f"{target} 已存在；备份从不覆盖已有文件", Exit.USAGE)
    conn = _open(settings, check=False)
    try:
        # VACUUM INTO writes a consistent, compacted copy while the server keeps running (WAL readers
        # are not blocked); the copy is a normal database file that `serve` can open after a restore.
        ops_queries.vacuum_into(conn, target)
    except sqlite3.Error as exc:
        raise CliError(f"备份失败（{exc.__class__.__name__}）", Exit.STORAGE) from None
    finally:
        conn.close()
    os.chmod(target, 0o600)
    check = sqlite3.connect(target)
    try:
        ok = ops_queries.integrity_check_ok(check)
    finally:
        check.close()
    size = target.stat().st_size
    _report(
        args,
        {"backup": str(target), "integrity_ok": ok, "bytes": size},
        [f"备份已写入 {target}（{size} 字节，完整性{'正常' if ok else '检查失败'}）"],
    )
    return Exit.OK if ok else Exit.STORAGE


# -- admin / device / task -----------------------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        if sys.stdin.isatty():
            import getpass

            return getpass.getpass(PASSWORD_PROMPT)
        return sys.stdin.readline().rstrip("\n")
    import getpass

    first = getpass.getpass(PASSWORD_PROMPT)
    if getpass.getpass("再输入一次：") != first:
        raise CliError("两次输入的密码不一致", Exit.USAGE)
    return first


def cmd_admin(args: argparse.Namespace) -> int:
    settings = _settings(args)
    with closing(_open(settings)) as conn:
        now = SystemClock().now()
        if args.admin_cmd == "add":
            password = _read_password(args)
            admin_id = _tx(conn, lambda c: admin_service.add_admin(c, args.username, password, CLI_ACTOR, now))
            _report(args, {"admin_id": admin_id, "username": args.username}, [f"已添加管理员 {args.username}"])
        elif args.admin_cmd == "passwd":
            password = _read_password(args)
            _tx(conn, lambda c: admin_service.change_password(c, args.username, password, CLI_ACTOR, now))
            _report(args, {"username": args.username}, ["密码已修改"])
        elif args.admin_cmd == "unlock":
            cleared = _tx(conn, lambda c: admin_service.unlock_login(c, args.username, CLI_ACTOR, now))
            _report(
                args,
                {"username": args.username, "records_cleared": cleared},
                [f"已清除 {args.username} 的登录限流（{cleared} 条记录）"],
            )
        else:
            admins = admin_store.list_all(conn)
            _report(
                args,
                {
                    "admins": [
                        {"username": a.username, "disabled": a.disabled, "created_at": a.created_at} for a in admins
                    ]
                },
                (f"{a.username}\t{'已停用' if a.disabled else '启用'}\t{a.created_at}" for a in admins),
            )
    return Exit.OK


def cmd_device(args: argparse.Namespace) -> int:
    settings = _settings(args)
    with closing(_open(settings)) as conn:
        now = SystemClock().now()
        if args.device_cmd == "add":
            issued = _tx(conn, lambda c: device_service.add_device(c, args.name, CLI_ACTOR, now))
            _report(
                args,
                {"device_id": issued.device_id, "token": issued.token},
                [
                    f"设备 id：{issued.device_id}",
                    f"令牌：   {issued.token}",
                    "令牌只显示这一次；请保存在手机主机上（权限 0600）。",
                ],
            )
        elif args.device_cmd == "revoke":
            changed = _tx(conn, lambda c: device_service.revoke_device(c, args.device_id, CLI_ACTOR, now))
            _report(
                args,
                {"device_id": args.device_id, "revoked": True, "changed": changed},
                ["已撤销" if changed else "此前已撤销"],
            )
        elif args.device_cmd == "supervision":
            off = args.mode == "off"
            changed = _tx(
                conn, lambda c: device_service.set_supervision(c, args.device_id, off=off, actor=CLI_ACTOR, now=now)
            )
            _report(
                args,
                {"device_id": args.device_id, "supervision": args.mode, "changed": changed},
                [("人工监督：按全局规则" if args.mode == "on" else "人工监督：此设备免除") + unchanged(changed)],
            )
        elif args.device_cmd in ("pause", "resume"):
            paused = args.device_cmd == "pause"
            changed = _tx(
                conn, lambda c: device_service.set_paused(c, args.device_id, paused=paused, actor=CLI_ACTOR, now=now)
            )
            _report(
                args,
                {"device_id": args.device_id, "paused": paused, "changed": changed},
                [("已暂停领取" if paused else "已恢复领取") + unchanged(changed)],
            )
        elif args.device_cmd == "pace":
            interval, per_day = args.min_interval, args.max_per_day
            changed = _tx(
                conn,
                lambda c: device_service.set_pacing(
                    c,
                    args.device_id,
                    min_claim_interval_seconds=interval,
                    max_claims_per_day=per_day,
                    actor=CLI_ACTOR,
                    now=now,
                ),
            )
            _report(
                args,
                {
                    "device_id": args.device_id,
                    "min_claim_interval_seconds": interval,
                    "max_claims_per_day": per_day,
                    "changed": changed,
                },
                [
                    "领取节奏："
                    + (f"两次领取至少间隔 {interval} 秒" if interval else "两次领取的间隔不限")
                    + "，"
                    + (f"每天最多 {per_day} 次" if per_day else "每天次数不限")
                    + unchanged(changed)
                ],
            )
        else:
            rows = [
                {
                    "device_id": d.id,
                    "name": d.name,
                    "state": d.state,
                    "paused": d.paused_at is not None,
                    "created_at": d.created_at,
                    "last_heartbeat_at": d.last_heartbeat_at,
                    "pdd_version": d.pdd_version,
                    "app_version_allowed": d.app_version_allowed,
                    "min_claim_interval_seconds": d.min_claim_interval_seconds,
                    "max_claims_per_day": d.max_claims_per_day,
                }
                for d in device_store.list_all(conn)
            ]
            _report(
                args,
                {"devices": rows},
                [
                    "设备 id\t名称\t状态\t最后心跳（UTC）",
                    *(
                        f"{r['device_id']}\t{r['name']}\t{coded(DEVICE_REGISTRATION_LABELS, str(r['state']))}"
                        f"{' 已暂停领取 (PAUSED)' if r['paused'] else ''}\t{r['last_heartbeat_at'] or '-'}"
                        for r in rows
                    ),
                ],
            )
    return Exit.OK


def cmd_evidence(args: argparse.Namespace) -> int:
    """``evidence gc``: remove evidence files no asset row refers to (services/evidence_gc.py)."""
    settings = _settings(args)
    conn = _open(settings)
    try:
        report = evidence_gc.collect(
            conn,
            settings.evidence_dir,
            now=time.time(),
            older_than=args.older_than,
            dry_run=args.dry_run,
            actor=CLI_ACTOR,
            at=to_wire(SystemClock().now()),
        )
    except Unavailable as exc:
        raise CliError(storage_error(exc), Exit.STORAGE) from None
    except OSError as exc:
        raise CliError(f"证据文件读写出错（{exc.strerror}）", Exit.STORAGE) from None
    finally:
        conn.close()
    verb = "将删除" if args.dry_run else "已删除"
    _report(
        args,
        report.as_dict(),
        [
            f"检查了 {report.scanned} 个文件：{report.referenced} 个仍被引用，{report.too_young} 个写入不到 "
            f"{args.older_than} 秒；{verb} {report.removed} 个无引用文件和 {report.removed_temporary} 个临时文件"
            f"（{report.bytes_freed} 字节）"
        ],
    )
    return Exit.OK


def _option(text: str) -> tuple[str, str]:
    try:
        return split_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 <= int(text) <= 10 * 365 * 86400:
        raise argparse.ArgumentTypeError("秒数须为 0 到 315360000 的整数")
    return int(text)


def cmd_task(args: argparse.Namespace) -> int:
    settings = _settings(args)
    with closing(_open(settings)) as conn:
        now = SystemClock().now()
        if args.task_cmd == "add":
            raw = {
                "create_key": args.create_key or new_id(),
                "title": args.title,
                "product_url": args.url,
                "sku_options": None if args.option is None else [list(o) for o in args.option],
                "sku_color": args.color,
                "sku_size": args.size,
                "quantity": args.quantity,
                "max_total_price": args.max_total_price,
            }
            try:
                raw["max_total_price"] = person_money("max_total_price", args.max_total_price)
                new = task_service.validate_new_task(raw, settings)
            except DomainError as exc:
                raise CliError(f"{exc.code}: {refusal_message(exc)}", Exit.RULE) from None
            task, _created = _tx(conn, lambda c: task_service.create_task(c, new, CLI_ACTOR, now))
            _report(
                args,
                {"task_id": task.id, "version": task.version},
                [f"已创建任务 {task.id}（草稿 DRAFT，版本 v{task.version}）"],
            )
        elif args.task_cmd == "start":
            items: list[tuple[str, int]] = []
            for task_id in args.task_ids:
                task = _tx(conn, functools.partial(task_service.get_task, task_id=task_id))
                items.append((task.id, task.version))
            start_key = args.start_key or new_id()
            body = _tx(conn, lambda c: task_service.start_purchases(c, start_key, items, CLI_ACTOR, now, settings))
            _report(args, body, [f"已开始采购 {body['authorized_count']} 个任务；付款永远不会自动进行"])
        elif args.task_cmd == "list":
            from cmbuyer.server.display.labels import TASK_STATE_LABELS
            from cmbuyer.server.domain.states import TaskState
            from cmbuyer.server.store.queries import tasks as task_store

            states = [args.state] if args.state else None
            rows = task_store.page(conn, states=states, limit=args.limit)
            tasks = [
                {
                    "task_id": t.id,
                    "state": t.state,
                    "version": t.version,
                    "title": t.title,
                    "goods_id": t.goods_id,
                    "created_at": t.created_at,
                }
                for t in rows
            ]
            _report(
                args,
                {"tasks": tasks},
                itertools.chain(  # the labels are looked up for the text only
                    ["任务 id\t状态\t版本\t商品 id\t标题"],
                    (
                        f"{t.id}\t{t.state} ({TASK_STATE_LABELS[TaskState(t.state)]})"
                        f"\tv{t.version}\t{t.goods_id}\t{t.title}"
                        for t in rows
                    ),
                ),
            )
        elif args.task_cmd == "import":
            return _task_import(args, settings, conn, now)
        elif args.task_cmd == "export":
            return _task_export(args, conn)
        elif args.task_cmd in ("cancel", "reset", "mark-paid"):
            return _task_action(args, conn, now)
        else:
            from cmbuyer.server.display import task_view
            from cmbuyer.server.task_summary import summary_lines

            view = _tx(conn, lambda c: task_view.task_detail(c, args.task_id))
            names = {d.id: d.name for d in device_store.list_all(conn)}
            _report(args, view, summary_lines(view, names))
    return Exit.OK


def _task_import(args: argparse.Namespace, settings: Settings, conn: sqlite3.Connection, now: Any) -> int:
    """``task import FILE [--dry-run]``: the admin page's preview and import (services/task_import.py). Exit 0
    when every row was imported or already existed, 1 when a row (or the whole file) was refused."""
    from cmbuyer.server.services import task_import

    try:
        with open(args.file, "rb") as handle:
            data = handle.read(settings.import_max_bytes + 1)
    except OSError as exc:
        raise CliError(f"无法读取 {args.file}（{exc.strerror}）", Exit.USAGE) from None
    try:
        parsed = task_import.parse(data, settings)
    except DomainError as exc:
        refused = reason_message(exc)
        _report(args, {"refused": refused, "rows": []}, [f"拒绝导入：{refused}"])
        return Exit.RULE
    result = _tx(conn, lambda c: task_import.import_rows(c, parsed, CLI_ACTOR, now, dry_run=args.dry_run))
    rows = [{"line": r.line, "status": r.status, "message": r.message, "task_id": r.task_id} for r in result.rows]
    counts = {k: result.count(k) for k in ("ok", "exists", "error")}
    verb = "将导入" if args.dry_run else "已导入"
    _report(
        args,
        {"dry_run": args.dry_run, "unknown_columns": list(parsed.unknown_columns), "counts": counts, "rows": rows},
        itertools.chain(
            (
                f"第 {r['line']} 行：{IMPORT_STATUS[str(r['status'])]} ({r['status']})"
                + (f" {r['message']}" if r["message"] else "")
                for r in rows
            ),
            [f"{verb} {counts['ok']} 行，已存在 {counts['exists']} 行，拒绝 {counts['error']} 行"],
            [f"忽略的列：{', '.join(parsed.unknown_columns)}"] if parsed.unknown_columns else [],
        ),
    )
    return Exit.OK if counts["error"] == 0 else Exit.RULE


def _task_export(args: argparse.Namespace, conn: sqlite3.Connection) -> int:
    """``task export [--state S]… --format csv|xlsx [--out FILE]``: the admin export (same columns)."""
    from cmbuyer.server.display.task_export import EXPORT_HEADER, EXPORT_MAX_ROWS, export_rows
    from cmbuyer.server.sheets.write import write_csv, write_xlsx
    from cmbuyer.server.store.queries import admin as admin_queries

    f = admin_queries.TaskFilter(states=tuple(dict.fromkeys(args.state or ())))
    rows = admin_queries.task_page(conn, f, EXPORT_MAX_ROWS + 1)
    if len(rows) > EXPORT_MAX_ROWS:
        raise CliError(f"任务超过 {EXPORT_MAX_ROWS} 个；请缩小状态范围", Exit.RULE)
    lines = export_rows(conn, rows)
    data = (write_xlsx if args.format == "xlsx" else write_csv)(EXPORT_HEADER, lines)
    if args.out:
        try:
            Path(args.out).write_bytes(data)
        except OSError as exc:
            raise CliError(f"无法写入 {args.out}（{exc.strerror}）", Exit.USAGE) from None
        print(f"已把 {len(lines)} 个任务写入 {args.out}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return Exit.OK


def _current_version(conn: sqlite3.Connection, task_id: str, given: int | None) -> int:
    if given is not None:
        return given
    return _tx(conn, functools.partial(task_service.get_task, task_id=task_id)).version


def _task_action(args: argparse.Namespace, conn: sqlite3.Connection, now: Any) -> int:
    """``task cancel|reset|mark-paid TASK_ID [--expected-version N]``: the admin actions (same rules, same
    audit rows, actor ``cli:<os user>``); without ``--expected-version`` the task's current version."""
    from cmbuyer.server.services import admin_actions

    version = _current_version(conn, args.task_id, args.expected_version)
    if args.task_cmd == "mark-paid":
        result = _tx(conn, lambda c: admin_actions.mark_paid(c, args.task_id, version, CLI_ACTOR, now))
    else:
        fn = admin_actions.cancel if args.task_cmd == "cancel" else admin_actions.reset_to_draft
        result = _tx(conn, lambda c: fn(c, args.task_id, version, None, CLI_ACTOR, now))
    _report(
        args,
        {"task_id": result.task_id, "state": result.state, "task_version": result.version},
        [task_line(result.task_id, result.state, result.version)],
    )
    return Exit.OK


def cmd_submission(args: argparse.Namespace) -> int:
    """``submission reconcile SID --outcome created|not_created --note TEXT [--expected-version N]``."""
    from cmbuyer.server.services import admin_actions
    from cmbuyer.server.store.queries import admin as admin_queries

    settings = _settings(args)
    with closing(_open(settings)) as conn:
        now = SystemClock().now()
        version = args.expected_version
        if version is None:
            sub = admin_queries.submission(conn, args.submission_id)
            if sub is None:
                raise CliError("not_found: 提交记录不存在", Exit.RULE)
            version = _current_version(conn, sub["task_id"], None)
        try:
            outcome, note, version = admin_actions.parse_reconcile(
                {"outcome": args.outcome, "note": args.note, "expected_task_version": version}
            )
        except DomainError as exc:
            raise CliError(f"{exc.code}: {refusal_message(exc)}", Exit.RULE) from None
        result = _tx(
            conn, lambda c: admin_actions.reconcile(c, args.submission_id, outcome, note, version, CLI_ACTOR, now)
        )
    _report(
        args,
        {"task_id": result.task_id, "state": result.state, "task_version": result.version},
        [task_line(result.task_id, result.state, result.version)],
    )
    return Exit.OK


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every command (documented in docs/operations.md)."""
    parser = argparse.ArgumentParser(
        prog="cmbuyer-server", description="cmbuyer 采购服务器：任务、设备、管理页面和设备接口"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=argparse.SUPPRESS, help=DATA_DIR_HELP)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    parser.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    sub = parser.add_subparsers(dest="cmd", required=True)

    sub.add_parser("init", parents=[common], help="创建数据目录、含新密钥的设置文件和数据库")
    p = sub.add_parser("migrate", parents=[common], help="应用尚未应用的数据库迁移")
    p.add_argument("--list", action="store_true", help="列出所有迁移及其状态")
    p = sub.add_parser("serve", parents=[common], help="运行 HTTP 服务器（管理页面和设备接口）")
    p.add_argument("--host", default=None, help="监听地址；非本机回环地址时必须用 TLS 或 --behind-proxy")
    p.add_argument("--port", type=int, default=None, help="监听端口（默认 $CMBUYER_PORT，否则 8080）")
    p.add_argument("--tls-cert", default=None, help="PEM 证书链文件（CMBUYER_TLS_CERT）")
    p.add_argument("--tls-key", default=None, help="PEM 私钥文件（CMBUYER_TLS_KEY）")
    p.add_argument(
        "--behind-proxy",
        action="store_true",
        help="在回环/内网地址上用明文 HTTP，供 CMBUYER_TRUSTED_PROXIES 中列出的 TLS 反向代理转发",
    )
    p = sub.add_parser("tls", parents=[common], help="HTTPS 证书（小团队自用的私有 CA）")
    tlsub = p.add_subparsers(dest="tls_cmd", required=True)
    q = tlsub.add_parser("init", parents=[common], help="创建私有 CA 和服务器证书")
    q.add_argument("--host", action="append", required=True, help="手机主机连接服务器所用的域名或 IP 地址（可重复）")
    sub.add_parser("doctor", parents=[common], help="检查 SQLite、数据库设置、文件权限和各项设置")
    sub.add_parser(
        "replicate", parents=[common], help="运行 Litestream：把数据库持续复制到 CMBUYER_REPLICA_URL（前台运行）"
    )
    p = sub.add_parser(
        "restore", parents=[common], help="从复制副本把数据库恢复到新的数据目录；未结束的任务会暂停待核对"
    )
    p.add_argument("--from", dest="from_url", required=True, help="副本地址（file:///路径 或 s3://bucket/路径）")
    p.add_argument("--to", required=True, help="新的数据目录（先放入另存在主机之外的 cmbuyer.env）")
    p = sub.add_parser("backup", parents=[common], help="写出数据库的一致副本（VACUUM INTO）")
    p.add_argument("--to", required=True, help="目标文件（必须尚不存在）")

    p = sub.add_parser("admin", parents=[common], help="管理管理员账号")
    asub = p.add_subparsers(dest="admin_cmd", required=True)
    for name, what in (("add", "添加管理员"), ("passwd", "修改管理员密码")):
        q = asub.add_parser(name, parents=[common], help=what + "（会询问密码，至少 10 个字符）")
        q.add_argument("--username", required=True, help="登录名，1–64 个字符")
        q.add_argument("--password-stdin", action="store_true", help="从标准输入读取密码")
    asub.add_parser("list", parents=[common], help="列出管理员")
    q = asub.add_parser("unlock", parents=[common], help="清除该用户名在所有地址上的登录失败限流（记入审计）")
    q.add_argument("username", help="管理员的登录名")

    p = sub.add_parser("device", parents=[common], help="管理手机设备")
    dsub = p.add_subparsers(dest="device_cmd", required=True)
    q = dsub.add_parser("add", parents=[common], help="登记一台手机：只显示一次它的设备 id 和令牌")
    q.add_argument("--name", required=True, help="手机在页面上显示的名称，1–64 个字符")
    dsub.add_parser("list", parents=[common], help="列出设备")
    q = dsub.add_parser("revoke", parents=[common], help="永久撤销设备：它的令牌立即失效")
    q.add_argument("device_id", help=DEVICE_ID_HELP)
    q = dsub.add_parser(
        "supervision",
        parents=[common],
        help="on：此设备在每个识别包下的前几单须等人工批准（CMBUYER_SUPERVISED_ORDERS）；off：此设备免除（记入审计）",
    )
    q.add_argument("device_id", help=DEVICE_ID_HELP)
    q.add_argument("mode", choices=("on", "off"), help="on：按全局规则监督；off：此设备免除")
    for name, what in (
        ("pause", "暂停领取：不再给此设备新任务（已领取的任务照常做完）；记入审计"),
        ("resume", "恢复领取：已暂停的设备重新领取任务；记入审计"),
    ):
        q = dsub.add_parser(name, parents=[common], help=what)
        q.add_argument("device_id", help=DEVICE_ID_HELP)
    q = dsub.add_parser(
        "pace",
        parents=[common],
        help="控制设备的领取节奏：两次领取的最小间隔和每个北京时间自然日的上限（降低购物账号风控）；"
        "不给的限制即关闭；记入审计",
    )
    q.add_argument("device_id", help=DEVICE_ID_HELP)
    q.add_argument(
        "--min-interval", type=int, default=None, metavar="SECONDS", help="两次领取之间至少间隔的秒数（1–86400）"
    )
    q.add_argument(
        "--max-per-day", type=int, default=None, metavar="N", help="每个北京时间自然日最多领取的次数（1–10000）"
    )

    p = sub.add_parser("evidence", parents=[common], help="证据文件整理")
    esub = p.add_subparsers(dest="evidence_cmd", required=True)
    q = esub.add_parser("gc", parents=[common], help="删除没有任何证据记录引用的文件")
    q.add_argument(
        "--older-than",
        type=_seconds,
        default=86400,
        metavar="SECONDS",
        help="只处理这么久没有写入的文件（默认 86400 秒 = 一天）",
    )
    q.add_argument("--dry-run", action="store_true", help="只报告将删除什么，不删除")

    p = sub.add_parser("task", parents=[common], help="创建、开始、查看和处理采购任务")
    tsub = p.add_subparsers(dest="task_cmd", required=True)
    q = tsub.add_parser("add", parents=[common], help="创建草稿（DRAFT）任务")
    q.add_argument("--title", required=True, help="采购员给它起的名称（1–200 个字符）")
    q.add_argument("--url", required=True, help="拼多多商品链接，含且只含一个数字 goods_id")
    q.add_argument(
        "--option",
        action="append",
        default=None,
        type=_option,
        metavar="维度=值",
        help="一个规格选项，照商品页的写法，如 --option 规格=3层100抽 --option 数量=6包"
        "（1–3 个，按页面顺序；按 NFKC 规范化后比较）。代替 --color/--size",
    )
    q.add_argument("--color", default=None, help="颜色/尺码类商品：颜色选项的原文（颜色=…）")
    q.add_argument(
        "--size",
        default=None,
        help="与 --color 一起用：尺码选项的原文（尺码=…）；只有一个规格维度的商品不给",
    )
    q.add_argument("--quantity", type=int, required=True, help="正整数，不超过 CMBUYER_MAX_QUANTITY")
    q.add_argument("--max-total-price", required=True, help="订单总价上限（元），如 30.00")
    q.add_argument("--create-key", default=None, help="幂等键（UUIDv4）；默认新生成一个")
    q = tsub.add_parser("start", parents=[common], help="为草稿任务开始采购（每个任务一份授权）")
    q.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="要开始采购的任务")
    q.add_argument("--start-key", default=None, help="幂等键（UUIDv4）；默认新生成一个")
    q = tsub.add_parser("list", parents=[common], help="列出任务，最新的在前")
    q.add_argument("--state", default=None, choices=[s.value for s in TaskState], help="只列出这个状态的任务")
    q.add_argument("--limit", type=int, default=50, help="最多列出这么多（默认 50）")
    q = tsub.add_parser(
        "show", parents=[common], help="查看一个任务：状态、规格、尝试、手机、订单号和结果（--json：完整记录）"
    )
    q.add_argument("task_id", help=TASK_ID_HELP)
    q = tsub.add_parser("import", parents=[common], help="从 .xlsx/.csv 表格导入草稿任务（见 docs/admin.md）")
    q.add_argument("file", help=".xlsx 或 .csv 文件（列的说明见 docs/admin.md）")
    q.add_argument("--dry-run", action="store_true", help="只显示预览，不导入")
    q = tsub.add_parser("export", parents=[common], help="把任务导出为 .csv 或 .xlsx（不给 --out 时写到标准输出）")
    q.add_argument(
        "--state", action="append", choices=[s.value for s in TaskState], help="只导出这个状态的任务（可重复）"
    )
    q.add_argument("--format", choices=("csv", "xlsx"), default="csv", help="文件格式（默认 csv）")
    q.add_argument("--out", default=None, help="写入的文件（默认标准输出）")
    for name, what in (
        ("cancel", "取消任务（只能在取得提交围栏之前）"),
        ("reset", "把任务重置为草稿（只能在取得提交围栏之前）"),
        ("mark-paid", "有人在手机上付款后：待付款 WAITING_PAYMENT → 已付款 PAID"),
    ):
        q = tsub.add_parser(name, parents=[common], help=what)
        q.add_argument("task_id", help=TASK_ID_HELP)
        q.add_argument("--expected-version", type=int, default=None, help=EXPECTED_VERSION_HELP)

    p = sub.add_parser("submission", parents=[common], help="处理订单提交记录")
    ssub = p.add_subparsers(dest="submission_cmd", required=True)
    q = ssub.add_parser("reconcile", parents=[common], help="人工核对后记录待付款订单是否已创建")
    q.add_argument("submission_id", help="订单提交记录 id（见 task show）")
    q.add_argument(
        "--outcome",
        required=True,
        choices=("created", "not_created"),
        help="手机上是否有这笔订单：created 已创建，not_created 未创建",
    )
    q.add_argument("--note", required=True, help="核对说明：检查了什么（1–500 个字符）")
    q.add_argument("--expected-version", type=int, default=None, help=EXPECTED_VERSION_HELP)
    for group in (asub, dsub, esub, tsub, ssub, tlsub):
        # a missing subcommand is reported with its choices, not the internal dest name
        group.metavar = "{" + ",".join(group.choices) + "}"
    chinese_help(parser)
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "init": cmd_init,
    "migrate": cmd_migrate,
    "serve": cmd_serve,
    "doctor": cmd_doctor,
    "backup": cmd_backup,
    "tls": cmd_tls,
    "replicate": cmd_replicate,
    "restore": cmd_restore,
    "admin": cmd_admin,
    "device": cmd_device,
    "evidence": cmd_evidence,
    "task": cmd_task,
    "submission": cmd_submission,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cmbuyer-server``; returns the exit code (see module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except CliError as exc:
        print(f"cmbuyer-server：{exc}", file=sys.stderr)
        return exc.code
    except SettingsError as exc:
        print(f"cmbuyer-server：{exc}", file=sys.stderr)
        return Exit.SETTINGS
    except (Unavailable, sqlite3.Error) as exc:
        print(f"cmbuyer-server：{storage_error(exc.__class__.__name__)}", file=sys.stderr)
        return Exit.STORAGE


if __name__ == "__main__":
    raise SystemExit(main())
