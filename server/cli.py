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

from cmbuyer.schemas.sku import split_option
from cmbuyer.server import migrate
from cmbuyer.server.clock import SystemClock, to_wire
from cmbuyer.server.config import ENV_FILE_NAME, Settings, env_file_defaults, load_settings
from cmbuyer.server.db import connect_sync, run_in_transaction
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


def update_env_file(path: Path, values: dict[str, str]) -> None:
    """Set ``values`` in an existing env file: a line of the same key is replaced in place, a new key is
    appended; the file is rewritten whole (a temporary file renamed over it) and stays 0600."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CliError(f"{path}: cannot read env file ({exc.strerror})", Exit.SETTINGS) from None
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
        raise CliError(f"refusing to start: {refusal}", Exit.SETTINGS)
    ssl_context = None
    if settings.tls_cert is not None and settings.tls_key is not None:
        try:
            ssl_context = server_context(settings.tls_cert, settings.tls_key)
        except TlsError as exc:
            raise CliError(f"refusing to start: {exc}", Exit.SETTINGS) from None
    setup_logging(settings.log_format, settings.log_level)
    try:
        check_schema(settings)
        app = create_app(settings)
        scheme = "https" if ssl_context is not None else "http"

        def serving(_aiohttp_banner: str) -> None:
            # run_app calls this only once the socket is bound: a busy port is reported first, never
            # after a "serving" line (issue 32 §9)
            print(
                f"cmbuyer-server: serving {scheme}://{settings.host}:{settings.port}/ (admin: /login, data dir "
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
            ssl_context=ssl_context,
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
        (f"{'ok  ' if passed else 'FAIL'} {name}: {detail}" for name, passed, detail in checks),
    )
    return Exit.OK if ok else Exit.RULE


def cmd_tls(args: argparse.Namespace) -> int:
    """``tls init``: a private CA and a server certificate for ``--host`` names, recorded in ``cmbuyer.env``."""
    from cmbuyer.server.tls import TlsError, init_certificates

    data_dir = Path(args.data_dir or os.environ.get("CMBUYER_DATA_DIR") or "var")
    env_path = data_dir / ENV_FILE_NAME
    if not env_path.exists():
        raise CliError(f"{env_path} does not exist; run `cmbuyer-server init` before `tls init`", Exit.SETTINGS)
    try:
        files = init_certificates(data_dir, args.host, SystemClock().now())
    except TlsError as exc:
        raise CliError(str(exc), Exit.USAGE) from None
    except OSError as exc:
        raise CliError(f"TLS files cannot be written under {data_dir} ({exc.strerror})", Exit.SETTINGS) from None
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
            f"server certificate for {', '.join(args.host)} (valid until {files.not_after:%Y-%m-%d}): "
            f"{files.server_cert}",
            f"CA {'created' if files.ca_created else 'kept'}; its private key is {files.ca_key} — serve never "
            "needs it; keep it safe (offline) for the next `tls init`",
            f"paths recorded in {env_path}; `serve` now speaks HTTPS only",
            "copy this file to every phone host and run the agent with --server-ca FILE:",
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
        return ("tls_certificate", False, f"TLS certificate {cert} cannot be read")
    days = (leaf.not_valid_after_utc - SystemClock().now()).days
    subject = leaf.subject.rfc4514_string()
    return ("tls_certificate", days >= 14, f"{subject}; expires {leaf.not_valid_after_utc:%Y-%m-%d} ({days} days left)")


def cmd_replicate(args: argparse.Namespace) -> int:
    """``replicate``: run Litestream for the configured database and ``CMBUYER_REPLICA_URL`` in the
    foreground (this process becomes Litestream, so systemd's signals reach it directly)."""
    from cmbuyer.server.replication import ReplicationError, replicate_argv

    settings = _settings(args)
    if not settings.db_path.exists():
        raise CliError(f"database {settings.db_path} does not exist; run `cmbuyer-server init`", Exit.STORAGE)
    try:
        argv = replicate_argv(settings)
    except ReplicationError as exc:
        raise CliError(str(exc), Exit.SETTINGS) from None
    print(f"cmbuyer-server: replicating {settings.db_path} to {settings.replica_url}", file=sys.stderr, flush=True)
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
            f"{exc} — put the cmbuyer.env kept off the host into {target_dir} first (its secrets must be the "
            "ones the replicated database was written with)",
            Exit.SETTINGS,
        ) from None
    db_path = settings.db_path
    if any(db_path.with_name(db_path.name + suffix).exists() for suffix in ("", "-wal", "-shm")):
        raise CliError(f"{db_path} exists; restore only into a fresh data dir", Exit.USAGE)
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
                raise CliError("the restored database fails integrity_check; nothing was kept", Exit.STORAGE)
            applied = migrate.migrate(conn, to_wire(SystemClock().now()))
            migrate.check_current(conn)
            try:
                verify_secret(conn, secret.reveal())
            except SecretMismatch as exc:
                raise CliError(f"refusing the restore: {exc}", Exit.STORAGE) from None
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
            f"restored {db_path} from {args.from_url} (txid {position.txid:x}, uploaded {uploaded}); integrity ok,"
            " claim secret ok",
            f"{len(held)} unsettled task(s) HELD: no phone can take them until a person checks each against the"
            " phones' journals and releases it on the admin page 恢复后待核对 (/held)",
            "evidence screenshots are not in the replica: copy <data dir>/evidence from a backup if you have one",
        ],
    )
    return Exit.OK


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
        elif args.admin_cmd == "unlock":
            cleared = _tx(conn, lambda c: admin_service.unlock_login(c, args.username, CLI_ACTOR, now))
            _report(
                args,
                {"username": args.username, "records_cleared": cleared},
                [f"login throttle of {args.username} cleared ({cleared} record(s))"],
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


def _option(text: str) -> tuple[str, str]:
    try:
        return split_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        elif args.task_cmd == "import":
            return _task_import(args, settings, conn, now)
        elif args.task_cmd == "export":
            return _task_export(args, conn)
        elif args.task_cmd in ("cancel", "reset", "mark-paid"):
            return _task_action(args, conn, now)
        else:
            from cmbuyer.server.task_summary import summary_lines
            from cmbuyer.server.web.admin import task_view

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
        raise CliError(f"cannot read {args.file} ({exc.strerror})", Exit.USAGE) from None
    try:
        parsed = task_import.parse(data, settings)
    except DomainError as exc:
        _report(args, {"refused": exc.message, "rows": []}, [f"refused: {exc.message}"])
        return Exit.RULE
    result = _tx(conn, lambda c: task_import.import_rows(c, parsed, CLI_ACTOR, now, dry_run=args.dry_run))
    rows = [{"line": r.line, "status": r.status, "message": r.message, "task_id": r.task_id} for r in result.rows]
    counts = {k: result.count(k) for k in ("ok", "exists", "error")}
    verb = "would import" if args.dry_run else "imported"
    _report(
        args,
        {"dry_run": args.dry_run, "unknown_columns": list(parsed.unknown_columns), "counts": counts, "rows": rows},
        itertools.chain(
            (f"line {r['line']}: {r['status']}" + (f" {r['message']}" if r["message"] else "") for r in rows),
            [f"{verb} {counts['ok']}, already existed {counts['exists']}, refused {counts['error']}"],
            [f"ignored columns: {', '.join(parsed.unknown_columns)}"] if parsed.unknown_columns else [],
        ),
    )
    return Exit.OK if counts["error"] == 0 else Exit.RULE


def _task_export(args: argparse.Namespace, conn: sqlite3.Connection) -> int:
    """``task export [--state S]… --format csv|xlsx [--out FILE]``: the admin export (same columns)."""
    from cmbuyer.server.sheets.write import write_csv, write_xlsx
    from cmbuyer.server.store.queries import admin as admin_queries
    from cmbuyer.server.web.admin.task_io import EXPORT_HEADER, EXPORT_MAX_ROWS, export_rows

    f = admin_queries.TaskFilter(states=tuple(dict.fromkeys(args.state or ())))
    rows = admin_queries.task_page(conn, f, EXPORT_MAX_ROWS + 1)
    if len(rows) > EXPORT_MAX_ROWS:
        raise CliError(f"more than {EXPORT_MAX_ROWS} tasks; narrow the states", Exit.RULE)
    lines = export_rows(conn, rows)
    data = (write_xlsx if args.format == "xlsx" else write_csv)(EXPORT_HEADER, lines)
    if args.out:
        try:
            Path(args.out).write_bytes(data)
        except OSError as exc:
            raise CliError(f"cannot write {args.out} ({exc.strerror})", Exit.USAGE) from None
        print(f"{len(lines)} task(s) written to {args.out}", file=sys.stderr)
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
        [f"task {result.task_id}: {result.state} (version {result.version})"],
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
            raise CliError(f"{exc.code}: {exc.message}", Exit.RULE) from None
        result = _tx(
            conn, lambda c: admin_actions.reconcile(c, args.submission_id, outcome, note, version, CLI_ACTOR, now)
        )
    _report(
        args,
        {"task_id": result.task_id, "state": result.state, "task_version": result.version},
        [f"task {result.task_id}: {result.state} (version {result.version})"],
    )
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
    p.add_argument("--host", default=None, help="bind address; not loopback: TLS or --behind-proxy is required")
    p.add_argument("--port", type=int, default=None, help="bind port (default $CMBUYER_PORT or 8080)")
    p.add_argument("--tls-cert", default=None, help="PEM certificate chain (CMBUYER_TLS_CERT)")
    p.add_argument("--tls-key", default=None, help="PEM private key (CMBUYER_TLS_KEY)")
    p.add_argument(
        "--behind-proxy",
        action="store_true",
        help="plain HTTP on a loopback/private address for a TLS proxy listed in CMBUYER_TRUSTED_PROXIES",
    )
    p = sub.add_parser("tls", parents=[common], help="certificates for HTTPS (a private CA for a small team)")
    tlsub = p.add_subparsers(dest="tls_cmd", required=True)
    q = tlsub.add_parser("init", parents=[common], help="create a private CA and a server certificate")
    q.add_argument(
        "--host", action="append", required=True, help="DNS name or IP address phone hosts connect to (repeat)"
    )
    sub.add_parser("doctor", parents=[common], help="check SQLite, pragmas, permissions and settings")
    sub.add_parser(
        "replicate", parents=[common], help="run Litestream: stream the DB to CMBUYER_REPLICA_URL (foreground)"
    )
    p = sub.add_parser(
        "restore", parents=[common], help="restore the DB from a replica into a fresh data dir; unsettled tasks held"
    )
    p.add_argument("--from", dest="from_url", required=True, help="replica URL (file:///path or s3://bucket/path)")
    p.add_argument("--to", required=True, help="the new data dir (holding the cmbuyer.env kept off the host)")
    p = sub.add_parser("backup", parents=[common], help="write a consistent copy of the DB (VACUUM INTO)")
    p.add_argument("--to", required=True, help="target file (must not exist)")

    p = sub.add_parser("admin", parents=[common], help="manage administrators")
    asub = p.add_subparsers(dest="admin_cmd", required=True)
    for name, what in (("add", "add an administrator"), ("passwd", "change an administrator's password")):
        q = asub.add_parser(name, parents=[common], help=what + " (asks for the password, at least 10 characters)")
        q.add_argument("--username", required=True, help="login name, 1–64 characters")
        q.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    asub.add_parser("list", parents=[common], help="list administrators")
    q = asub.add_parser(
        "unlock", parents=[common], help="forget a username's failed-login back-offs at every address (audited)"
    )
    q.add_argument("username", help="the administrator's login name")

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
    q.add_argument(
        "--option",
        action="append",
        default=None,
        type=_option,
        metavar="维度=值",
        help="one SKU option as the goods page shows it, e.g. --option 规格=3层100抽 --option 数量=6包 "
        "(1–3, in the page's order; compared after NFKC). Instead of --color/--size",
    )
    q.add_argument("--color", default=None, help="colour/size goods: the exact colour option text (颜色=…)")
    q.add_argument(
        "--size",
        default=None,
        help="the exact size option text (尺码=…) with --color; leave out for goods with one dimension",
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
    q = tsub.add_parser("import", parents=[common], help="import DRAFT tasks from an .xlsx/.csv (docs/admin.md)")
    q.add_argument("file", help="the .xlsx or .csv file (docs/admin.md: columns)")
    q.add_argument("--dry-run", action="store_true", help="show the preview, import nothing")
    q = tsub.add_parser("export", parents=[common], help="export tasks as .csv or .xlsx (stdout without --out)")
    q.add_argument("--state", action="append", choices=[s.value for s in TaskState], help="repeatable")
    q.add_argument("--format", choices=("csv", "xlsx"), default="csv", help="file format (default csv)")
    q.add_argument("--out", default=None, help="file to write (default: stdout)")
    for name, what in (
        ("cancel", "cancel a task before its fence"),
        ("reset", "reset a task to DRAFT before its fence"),
        ("mark-paid", "WAITING_PAYMENT → PAID after a person paid on the phone"),
    ):
        q = tsub.add_parser(name, parents=[common], help=what)
        q.add_argument("task_id", help="the task id")
        q.add_argument("--expected-version", type=int, default=None, help="refuse unless the task is at this version")

    p = sub.add_parser("submission", parents=[common], help="settle order submissions")
    ssub = p.add_subparsers(dest="submission_cmd", required=True)
    q = ssub.add_parser("reconcile", parents=[common], help="record whether the pending-payment order exists")
    q.add_argument("submission_id", help="the order submission id (task show)")
    q.add_argument(
        "--outcome", required=True, choices=("created", "not_created"), help="whether the order exists on the phone"
    )
    q.add_argument("--note", required=True, help="what the person checked (1–500 characters)")
    q.add_argument("--expected-version", type=int, default=None, help="refuse unless the task is at this version")
    for group in (asub, dsub, esub, tsub, ssub, tlsub):
        # a missing subcommand is reported with its choices, not the internal dest name
        group.metavar = "{" + ",".join(group.choices) + "}"
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
