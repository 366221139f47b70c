"""Content-addressed evidence file store: ``<evidence_dir>/ab/cd/<sha256>.png`` (docs/architecture.md "Server layers").

A file is written to a temporary name in its final directory, flushed and ``fsync``ed, renamed into
place (atomic on POSIX) and the directory is ``fsync``ed, so after a crash a path either holds the
complete original bytes or does not exist. Writing the same content twice keeps the file (renewing its
modification time). The bytes are stored exactly as uploaded (never re-encoded). Files are never served
from a static route.

A file whose row never committed (a crash between the two, an upload refused after its file was
stored) is removed later by ``cmbuyer-server evidence gc`` (:mod:`cmbuyer.server.services.evidence_gc`);
:func:`scan` and :func:`remove` are its file half.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SHA = re.compile(r"[0-9a-f]{64}", re.ASCII)
_HEX2 = re.compile(r"[0-9a-f]{2}", re.ASCII)
_TEMP = re.compile(r"\.tmp-[^/]*\.png", re.ASCII)


@dataclass(frozen=True)
class StoredFile:
    """A file found under the evidence dir: ``sha256`` is None for a temporary file a crashed write left
    behind; ``mtime`` is seconds since the epoch (UTC), ``size`` bytes."""

    path: Path
    sha256: str | None
    mtime: float
    size: int


def path_for(evidence_dir: Path, sha256: str) -> Path:
    """Where the file with this lowercase hex SHA-256 lives. Raises ValueError for anything else."""
    if _SHA.fullmatch(sha256) is None:
        raise ValueError("not a lowercase sha256")
    return evidence_dir / sha256[:2] / sha256[2:4] / f"{sha256}.png"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dirs(evidence_dir: Path, target_dir: Path) -> None:
    missing: list[Path] = []
    probe = target_dir
    while not probe.exists():
        missing.append(probe)
        if probe == evidence_dir or probe.parent == probe:
            break
        probe = probe.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            continue
        _fsync_dir(d.parent)


def _same_content(path: Path, sha256: str, size: int) -> bool:
    try:
        if path.stat().st_size != size:
            return False
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest() == sha256
    except OSError:
        return False


def store(evidence_dir: Path, sha256: str, data: bytes) -> Path:
    """Durably store ``data`` (whose SHA-256 hex is ``sha256``) and return its path.

    Raises ValueError when ``data`` does not hash to ``sha256``; OSError on I/O failure (the caller
    maps it to 503). An existing file with the right content is kept; its modification time is renewed
    so that ``evidence gc`` counts it as just written (its row is about to be inserted).
    """
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError("content does not match its hash")
    target = path_for(evidence_dir, sha256)
    if _same_content(target, sha256, len(data)):
        os.utime(target)
        return target
    _ensure_dirs(evidence_dir, target.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    _fsync_dir(target.parent)
    return target


def exists(evidence_dir: Path, sha256: str) -> bool:
    """True when the file for ``sha256`` is in place (checked by the upload's write job, so a file
    removed by ``evidence gc`` never gets a row). Raises ValueError for a malformed hash."""
    return path_for(evidence_dir, sha256).is_file()


def scan(evidence_dir: Path) -> Iterator[StoredFile]:
    """Every stored file (``ab/cd/<sha256>.png`` whose name matches its folders) and every leftover
    temporary file; anything else in the tree is never reported, so it is never removed."""
    if not evidence_dir.is_dir():
        return
    for top in sorted(evidence_dir.iterdir()):
        if not (_HEX2.fullmatch(top.name) and _real_dir(top)):
            continue
        for sub in sorted(top.iterdir()):
            if not (_HEX2.fullmatch(sub.name) and _real_dir(sub)):
                continue
            for entry in sorted(sub.iterdir()):
                try:
                    info = entry.lstat()
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(info.st_mode):  # lstat: links, FIFOs and folders are never reported
                    continue
                name = entry.name
                if (
                    name.endswith(".png")
                    and _SHA.fullmatch(name[:-4])
                    and name[:2] == top.name
                    and name[2:4] == sub.name
                ):
                    yield StoredFile(entry, name[:-4], info.st_mtime, info.st_size)
                elif _TEMP.fullmatch(name):
                    yield StoredFile(entry, None, info.st_mtime, info.st_size)


def _real_dir(path: Path) -> bool:
    """A directory that is not a symlink: the scan must never walk out of the evidence tree (a link to a
    backup copy would otherwise have its files removed)."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def remove(paths: list[Path]) -> list[Path]:
    """Unlink ``paths`` (already gone is fine) and fsync each directory once; returns the paths this call
    removed. Raises OSError on any other failure."""
    removed: list[Path] = []
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    for d in sorted({p.parent for p in removed}):
        _fsync_dir(d)
    return removed


def read(evidence_dir: Path, sha256: str) -> bytes:
    """The stored bytes for ``sha256`` (admin evidence route, tests). Raises OSError/ValueError."""
    return path_for(evidence_dir, sha256).read_bytes()
