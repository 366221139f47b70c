"""``cmbuyer-server`` command line (issue 2 CLI contract; exit codes in docs/operations.md).

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

from cmbuyer.server import migrate
from cmbuyer.server.clock import SystemClock, to_wire
from cmbuyer.server.config import ENV_FILE_NAME, Settings, env_file_defaults, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
from cmbuyer.server.domain.errors import CmbuyerError, DomainError, SettingsError, StartupRefused, Unavailable
from cmbuyer.server.domain.states import TaskState
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
        raise CliError(f"database {settings.db_path} does not exist; run `cmbuyer-server init`", Exit.STORAGE)
    try:
        conn = connect_sync(settings.db_path)
        if check:
            migrate.check_current(conn)
    except migrate.MigrationError as exc:
        raise CliError(str(exc), Exit.STORAGE) from None
    except sqlite3.Error:
        raise CliError("cannot open the database", Exit.STORAGE) from None
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
        raise CliError(f"storage error: {exc}", Exit.STORAGE) from None
    except DomainError as exc:
        raise CliError(f"{exc.code}: {exc.message}", Exit.RULE) from None


# -- init / migrate / serve / doctor -------------------------------------------------------------


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """Write ``values`` as an env file created with mode 0600 (never readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("# cmbuyer settings written by `cmbuyer-server init`; keep this file private (0600).\n")
        for key, value in values.items():
            handle.write(f"{key}={value}\n")


def cmd_init(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir or os.environ.get("CMBUYER_DATA_DIR") or "var")
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private(data_dir, 0o700)
        probe = data_dir / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise CliError(f"data dir {data_dir} is not writable ({exc.strerror})", Exit.SETTINGS) from None
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
            f"data dir:   {data_dir} (mode 0700)",
            f"env file:   {env_path} ({'created with fresh secrets' if created_env else 'kept'})",
            f"database:   {settings.db_path} ({len(applied)} migration(s) applied; mode 0600)",
            "next steps (each runs as printed):",
            f"  {program} admin add --username admin      # asks for a password twice",
            f"  {program} device add --name phone-1       # prints the device id and token once",
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
            f"{path} is readable by others and cannot be changed by this user;"
            f" run: chmod {mode:o} {shlex.quote(str(path))}",
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
        raise CliError(f"directory {settings.db_path.parent} does not exist; run `cmbuyer-server init`", Exit.STORAGE)
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
                    f"{row['name']}  {'applied' if row['applied'] else 'pending'}"
                    f"{'' if row['checksum_ok'] else '  CHECKSUM MISMATCH'}"
                    for row in rows
                ),
            )
            return Exit.OK
        done = migrate.migrate(conn, to_wire(SystemClock().now()))
    _report(
        args,
        {"migrations_applied": done},
        [f"{len(done)} migration(s) applied" + (": " + ", ".join(done) if done else "")],
    )
    return Exit.OK


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from cmbuyer.server.app import create_app
    from cmbuyer.server.lifecycle import check_schema
    from cmbuyer.server.logs import setup_logging

    if args.host:
        os.environ["CMBUYER_HOST"] = args.host
    if args.port is not None:
        os.environ["CMBUYER_PORT"] = str(args.port)
    settings = _settings(args)
    try:
        settings.require_secrets()
    except SettingsError as exc:
        raise CliError(str(exc), Exit.SETTINGS) from None
    setup_logging(settings.log_format, settings.log_level)
    try:
        check_schema(settings)
        app = create_app(settings)

        def serving(_aiohttp_banner: str) -> None:
            # run_app calls this only once the socket is bound: a busy port is reported first, never
            # after a "serving" line (issue 32 §9)
            print(
                f"cmbuyer-server: serving http://{settings.host}:{settings.port}/ (admin: /login, data dir "
                f"{settings.data_dir})",
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
        )
    except StartupRefused as exc:
        raise CliError(f"refusing to start: {exc}", Exit.STORAGE) from None
    except OSError as exc:
        raise CliError(f"cannot listen on {settings.host}:{settings.port} ({exc.strerror})", Exit.SETTINGS) from None
    return Exit.OK


def cmd_doctor(args: argparse.Namespace) -> int:
    settings = _settings(args)
    checks: list[tuple[str, bool, str]] = []
    checks.append(("sqlite_version", sqlite3.sqlite_version_info >= (3, 37, 0), sqlite3.sqlite_version))
    try:
        settings.require_secrets()
        checks.append(("secrets", True, "set"))
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
        checks.append(("data_dir", False, exc.strerror or "unreadable"))
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
        checks.append(("migrations", True, "current"))
        conn.close()
    except CliError as exc:
        checks.append(("database", False, str(exc)))
    ok = all(passed for _, passed, _ in checks)
    _report(
        args,
        {"ok": ok, "checks": [{"name": n, "ok": p, "detail": d} for n, p, d in checks]},
        (f"{'ok  ' if passed else 'FAIL'} {name}: {detail}" for name, passed, detail in checks),
    )
    return Exit.OK if ok else Exit.RULE


def cmd_backup(args: argparse.Namespace) -> int:
    settings = _settings(args)
    target = Path(args.to)
    if target.exists():
        raise CliError(f"{target} exists; backups never overwrite", Exit.USAGE)
    conn = _open(settings, check=False)
    try:
        # VACUUM INTO writes a consistent, compacted copy while the server keeps running (WAL readers
        # are not blocked); the copy is a normal database file that `serve` can open after a restore.
        ops_queries.vacuum_into(conn, target)
    except sqlite3.Error as exc:
        raise CliError(f"backup failed ({exc.__class__.__name__})", Exit.STORAGE) from None
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
        [f"backup written to {target} ({size} bytes, integrity {'ok' if ok else 'FAILED'})"],
    )
    return Exit.OK if ok else Exit.STORAGE


# -- admin / device / task -----------------------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        if sys.stdin.isatty():
            import getpass

            return getpass.getpass("password (at least 10 characters): ")
        return sys.stdin.readline().rstrip("\n")
    import getpass

    first = getpass.getpass("password (at least 10 characters): ")
    if getpass.getpass("again: ") != first:
        raise CliError("passwords differ", Exit.USAGE)
    return first


def cmd_admin(args: argparse.Namespace) -> int:
    settings = _settings(args)
    with closing(_open(settings)) as conn:
        now = SystemClock().now()
        if args.admin_cmd == "add":
            password = _read_password(args)
            admin_id = _tx(conn, lambda c: admin_service.add_admin(c, args.username, password, CLI_ACTOR, now))
            _report(args, {"admin_id": admin_id, "username": args.username}, [f"admin {args.username} added"])
        elif args.admin_cmd == "passwd":
            password = _read_password(args)
            _tx(conn, lambda c: admin_service.change_password(c, args.username, password, CLI_ACTOR, now))
            _report(args, {"username": args.username}, ["password changed"])
        else:
            admins = admin_store.list_all(conn)
            _report(
                args,
                {
                    "admins": [
                        {"username": a.username, "disabled": a.disabled, "created_at": a.created_at} for a in admins
                    ]
                },
                (f"{a.username}\t{'disabled' if a.disabled else 'active'}\t{a.created_at}" for a in admins),
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
                    f"device id: {issued.device_id}",
                    f"token:     {issued.token}",
                    "The token is shown only this once; store it on the phone host (mode 0600).",
                ],
            )
        elif args.device_cmd == "revoke":
            changed = _tx(conn, lambda c: device_service.revoke_device(c, args.device_id, CLI_ACTOR, now))
            _report(
                args,
                {"device_id": args.device_id, "revoked": True, "changed": changed},
                ["revoked" if changed else "already revoked"],
            )
        elif args.device_cmd == "supervision":
            off = args.mode == "off"
            changed = _tx(
                conn, lambda c: device_service.set_supervision(c, args.device_id, off=off, actor=CLI_ACTOR, now=now)
            )
            _report(
                args,
                {"device_id": args.device_id, "supervision": args.mode, "changed": changed},
                [f"supervision {args.mode}" + ("" if changed else " (unchanged)")],
            )
        elif args.device_cmd in ("pause", "resume"):
            paused = args.device_cmd == "pause"
            changed = _tx(
                conn, lambda c: device_service.set_paused(c, args.device_id, paused=paused, actor=CLI_ACTOR, now=now)
            )
            _report(
                args,
                {"device_id": args.device_id, "paused": paused, "changed": changed},
                [("paused" if paused else "resumed") + ("" if changed else " (unchanged)")],
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
                    f"pacing: at least {interval or 'off'} s between claims, at most {per_day or 'off'} claims per day"
                    + ("" if changed else " (unchanged)")
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
                    "device id\tname\tstate\tlast heartbeat (UTC)",
                    *(
                        f"{r['device_id']}\t{r['name']}\t{r['state']}{' PAUSED' if r['paused'] else ''}"
                        f"\t{r['last_heartbeat_at'] or '-'}"
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
        raise CliError(f"storage error: {exc}", Exit.STORAGE) from None
    except OSError as exc:
        raise CliError(f"evidence store I/O error ({exc.strerror})", Exit.STORAGE) from None
    finally:
        conn.close()
    verb = "would remove" if args.dry_run else "removed"
    _report(
        args,
        report.as_dict(),
        [
            f"scanned {report.scanned} files: {report.referenced} referenced, {report.too_young} younger than "
            f"{args.older_than} s; {verb} {report.removed} unreferenced and {report.removed_temporary} "
            f"temporary ({report.bytes_freed} bytes)"
        ],
    )
    return Exit.OK


def _seconds(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 <= int(text) <= 10 * 365 * 86400:
        raise argparse.ArgumentTypeError("a whole number of seconds from 0 to 315360000")
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
                "sku_color": args.color,
                "sku_size": args.size,
                "quantity": args.quantity,
                "max_total_price": args.max_total_price,
            }
            try:
                new = task_service.validate_new_task(raw, settings)
            except DomainError as exc:
                raise CliError(f"{exc.code}: {exc.message}", Exit.RULE) from None
            task, _created = _tx(conn, lambda c: task_service.create_task(c, new, CLI_ACTOR, now))
            _report(
                args,
                {"task_id": task.id, "version": task.version},
                [f"task {task.id} created (DRAFT, version {task.version})"],
            )
        elif args.task_cmd == "start":
            items: list[tuple[str, int]] = []
            for task_id in args.task_ids:
                task = _tx(conn, functools.partial(task_service.get_task, task_id=task_id))
                items.append((task.id, task.version))
            start_key = args.start_key or new_id()
            body = _tx(conn, lambda c: task_service.start_purchases(c, start_key, items, CLI_ACTOR, now, settings))
            _report(args, body, [f"{body['authorized_count']} task(s) started; payment is never automated"])
        elif args.task_cmd == "list":
            from cmbuyer.server.domain.states import TaskState
            from cmbuyer.server.store.queries import tasks as task_store
            from cmbuyer.server.web.admin.labels import TASK_STATE_LABELS

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
                    ["task id\tstate\tversion\tgoods id\ttitle"],
                    (
                        f"{t.id}\t{t.state} ({TASK_STATE_LABELS[TaskState(t.state)]})"
                        f"\tv{t.version}\t{t.goods_id}\t{t.title}"
                        for t in rows
                    ),
                ),
            )
        else:
            from cmbuyer.server.web.admin import task_view

            view = _tx(conn, lambda c: task_view.task_detail(c, args.task_id))
            _report(args, view, [json.dumps(view, ensure_ascii=False, indent=2)])
    return Exit.OK


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every command (documented in docs/operations.md)."""
    parser = argparse.ArgumentParser(prog="cmbuyer-server", description="cmbuyer purchasing server")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir", default=argparse.SUPPRESS, help="data directory (default $CMBUYER_DATA_DIR or ./var)"
    )
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
    parser.add_argument("--data-dir", default=None, help="data directory (default $CMBUYER_DATA_DIR or ./var)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    sub = parser.add_subparsers(dest="cmd", required=True)

    sub.add_parser("init", parents=[common], help="create the data dir, env file with fresh secrets, DB")
    p = sub.add_parser("migrate", parents=[common], help="apply pending migrations")
    p.add_argument("--list", action="store_true", help="list migrations and their state")
    p = sub.add_parser("serve", parents=[common], help="run the HTTP server")
    p.add_argument("--host", default=None, help="bind address (default $CMBUYER_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="bind port (default $CMBUYER_PORT or 8080)")
    sub.add_parser("doctor", parents=[common], help="check SQLite, pragmas, permissions and settings")
    p = sub.add_parser("backup", parents=[common], help="write a consistent copy of the DB (VACUUM INTO)")
    p.add_argument("--to", required=True, help="target file (must not exist)")

    p = sub.add_parser("admin", parents=[common], help="manage administrators")
    asub = p.add_subparsers(dest="admin_cmd", required=True)
    for name, what in (("add", "add an administrator"), ("passwd", "change an administrator's password")):
        q = asub.add_parser(name, parents=[common], help=what + " (asks for the password, at least 10 characters)")
        q.add_argument("--username", required=True, help="login name, 1–64 characters")
        q.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    asub.add_parser("list", parents=[common], help="list administrators")

    p = sub.add_parser("device", parents=[common], help="manage phone devices")
    dsub = p.add_subparsers(dest="device_cmd", required=True)
    q = dsub.add_parser("add", parents=[common], help="register a phone: prints its device id and token once")
    q.add_argument("--name", required=True, help="the phone's name on the pages, 1–64 characters")
    dsub.add_parser("list", parents=[common], help="list devices")
    q = dsub.add_parser("revoke", parents=[common], help="revoke a device for good: its token stops working at once")
    q.add_argument("device_id", help="the device id (cmbuyer-server device list)")
    q = dsub.add_parser(
        "supervision",
        parents=[common],
        help="on: the device's first orders per pack wait for a person's approval "
        "(CMBUYER_SUPERVISED_ORDERS); off: exempt this device (audited)",
    )
    q.add_argument("device_id", help="the device id (cmbuyer-server device list)")
    q.add_argument("mode", choices=("on", "off"), help="on: supervised by the global rule; off: exempt this device")
    for name, what in (
        ("pause", "take the device out of rotation: no new task (its open claim runs to its end); audited"),
        ("resume", "put a paused device back into rotation; audited"),
    ):
        q = dsub.add_parser(name, parents=[common], help=what)
        q.add_argument("device_id", help="the device id (cmbuyer-server device list)")
    q = dsub.add_parser(
        "pace",
        parents=[common],
        help="space the device's claims out and cap them per Beijing day (shopping-account risk control); "
        "a limit left out is off; audited",
    )
    q.add_argument("device_id", help="the device id (cmbuyer-server device list)")
    q.add_argument(
        "--min-interval", type=int, default=None, metavar="SECONDS", help="least seconds between two claims (1–86400)"
    )
    q.add_argument(
        "--max-per-day", type=int, default=None, metavar="N", help="most claims per Beijing calendar day (1–10000)"
    )

    p = sub.add_parser("evidence", parents=[common], help="evidence file housekeeping")
    esub = p.add_subparsers(dest="evidence_cmd", required=True)
    q = esub.add_parser("gc", parents=[common], help="remove evidence files no asset row refers to")
    q.add_argument(
        "--older-than",
        type=_seconds,
        default=86400,
        metavar="SECONDS",
        help="only files not written for this long (default 86400 = one day)",
    )
    q.add_argument("--dry-run", action="store_true", help="report what would be removed, remove nothing")

    p = sub.add_parser("task", parents=[common], help="create, start and show tasks (scripting, tests)")
    tsub = p.add_subparsers(dest="task_cmd", required=True)
    q = tsub.add_parser("add", parents=[common], help="create a DRAFT task")
    q.add_argument("--title", required=True, help="what the purchaser calls it (1–200 characters)")
    q.add_argument("--url", required=True, help="Pinduoduo goods URL with exactly one numeric goods_id")
    q.add_argument("--color", required=True, help="the exact colour option text (compared after NFKC)")
    q.add_argument(
        "--size",
        default=None,
        help="the exact size option text (compared after NFKC); leave out for goods with one dimension",
    )
    q.add_argument("--quantity", type=int, required=True, help="positive integer ≤ CMBUYER_MAX_QUANTITY")
    q.add_argument("--max-total-price", required=True, help="largest allowed order total, e.g. 30.00 (CNY)")
    q.add_argument("--create-key", default=None, help="idempotency key (UUIDv4); default: a new one")
    q = tsub.add_parser("start", parents=[common], help="start purchases for DRAFT tasks (one authorization each)")
    q.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="the tasks to start")
    q.add_argument("--start-key", default=None, help="idempotency key (UUIDv4); default: a new one")
    q = tsub.add_parser("list", parents=[common], help="newest tasks first")
    q.add_argument("--state", default=None, choices=[s.value for s in TaskState], help="only tasks in this state")
    q.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    q = tsub.add_parser("show", parents=[common], help="one task with authorization, attempts, submission and audit")
    q.add_argument("task_id", help="the task id")
    for group in (asub, dsub, esub, tsub):
        # a missing subcommand is reported with its choices, not the internal dest name
        group.metavar = "{" + ",".join(group.choices) + "}"
    return parser


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "init": cmd_init,
    "migrate": cmd_migrate,
    "serve": cmd_serve,
    "doctor": cmd_doctor,
    "backup": cmd_backup,
    "admin": cmd_admin,
    "device": cmd_device,
    "evidence": cmd_evidence,
    "task": cmd_task,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cmbuyer-server``; returns the exit code (see module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except CliError as exc:
        print(f"cmbuyer-server: {exc}", file=sys.stderr)
        return exc.code
    except SettingsError as exc:
        print(f"cmbuyer-server: {exc}", file=sys.stderr)
        return Exit.SETTINGS
    except (Unavailable, sqlite3.Error) as exc:
        print(f"cmbuyer-server: storage error ({exc.__class__.__name__})", file=sys.stderr)
        return Exit.STORAGE


if __name__ == "__main__":
    raise SystemExit(main())
