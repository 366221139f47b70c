"""Content-addressed evidence file store: ``<evidence_dir>/ab/cd/<sha256>.png`` (design §5).

A file is written to a temporary name in its final directory, flushed and ``fsync``ed, renamed into
place (atomic on POSIX) and the directory is ``fsync``ed, so after a crash a path either holds the
complete original bytes or does not exist. Writing the same content twice is a no-op. The bytes are
stored exactly as uploaded (never re-encoded). Files are never served from a static route.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

_SHA = re.compile(r"[0-9a-f]{64}", re.ASCII)


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
    maps it to 503). An existing file with the right content is kept as is.
    """
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError("content does not match its hash")
    target = path_for(evidence_dir, sha256)
    if _same_content(target, sha256, len(data)):
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


def read(evidence_dir: Path, sha256: str) -> bytes:
    """The stored bytes for ``sha256`` (admin evidence route, tests). Raises OSError/ValueError."""
    return path_for(evidence_dir, sha256).read_bytes()
