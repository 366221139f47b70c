"""Evidence files of a selector pack: where they are and whether their bytes are the ones the pack names.

A pack's ``evidence`` maps an evidence id to one capture bundle (``shared/schemas/selector_pack.json``):
``{"label", "captured_at", "device", "source": "simulator"|"real-phone"|"real-structure", "files": {"dump":
{"path", "sha256"}, "screenshot": {...}, "meta": {...}}}``; a ``real-structure`` bundle (a structure-exact
real dump with its texts replaced) is a dump alone (docs/agent.md "Evidence"). Paths are relative to the
directory holding the pack file. A path is refused when it is absolute, has a ``..`` / ``.`` / empty segment, or
resolves (through symlinks) outside that directory — so a pack cannot make the agent read or vouch for
a file elsewhere on the host.

:func:`check_evidence` reports every file (one :class:`EvidenceCheck` each); :func:`verify_evidence`
raises :class:`~cmbuyer.agent.errors.PackError` at the first bad one (the loader's use).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack.compile import json_path
from cmbuyer.schemas.files import FileTooLarge, NotRegularFile, read_regular

FILE_KINDS = ("dump", "screenshot", "meta")
# one path segment: no leading dot (so no '.', '..' or hidden names), portable characters only
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", re.ASCII)
MAX_EVIDENCE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class EvidenceFile:
    """One file an evidence entry names: ``json_path`` locates it in the pack (error messages)."""

    evidence_id: str
    kind: str
    path: str
    sha256: str

    @property
    def json_path(self) -> str:
        return json_path(["evidence", self.evidence_id, "files", self.kind])


@dataclass(frozen=True)
class EvidenceCheck:
    """The verdict on one file: ``status`` is ``ok``, ``mismatch``, ``missing`` or ``unsafe``
    (a path the rules above refuse); ``detail`` says why in a few words."""

    file: EvidenceFile
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def line(self) -> str:
        """One line for ``pack verify``: status, evidence id, kind, path and detail."""
        tail = f" ({self.detail})" if self.detail else ""
        return f"{self.status.upper():8} {self.file.evidence_id} {self.file.kind} {self.file.path}{tail}"


def evidence_files(data: dict[str, Any]) -> Iterator[EvidenceFile]:
    """Every file named by a schema-valid pack's evidence, in pack order (dump, screenshot, meta)."""
    for eid, entry in data["evidence"].items():
        for kind in FILE_KINDS:
            spec = entry["files"].get(kind)  # a real-structure bundle is a dump alone (schema)
            if spec is None:
                continue
            yield EvidenceFile(eid, kind, spec["path"], spec["sha256"])


def safe_path(base: Path, rel: str) -> Path | None:
    """``base/rel`` when ``rel`` is a plain relative path that stays inside ``base`` after resolving
    symlinks, else None."""
    parts = rel.split("/")
    if rel.startswith("/") or not all(_SEGMENT.fullmatch(p) for p in parts):
        return None
    path = base.joinpath(*parts)
    try:
        if not path.resolve().is_relative_to(base.resolve()):
            return None
    except (OSError, RuntimeError):  # a symlink loop is no evidence
        return None
    return path


def check_file(base: Path, ev: EvidenceFile) -> EvidenceCheck:
    """Re-hash one evidence file under ``base``; never raises."""
    path = safe_path(base, ev.path)
    if path is None:
        return EvidenceCheck(ev, "unsafe", "path must be relative, without '..', and stay inside the pack's directory")
    try:
        digest = hashlib.sha256(read_regular(path, MAX_EVIDENCE_BYTES)).hexdigest()
    except FileNotFoundError:
        return EvidenceCheck(ev, "missing", "no such file")
    except NotRegularFile:
        return EvidenceCheck(ev, "missing", "not a regular file")
    except FileTooLarge:
        return EvidenceCheck(ev, "mismatch", "file too large")
    except OSError as exc:
        return EvidenceCheck(ev, "missing", f"unreadable: {exc.strerror or exc.__class__.__name__}")
    if digest != ev.sha256:
        return EvidenceCheck(ev, "mismatch", f"sha256 {digest[:12]}… but the pack says {ev.sha256[:12]}…")
    return EvidenceCheck(ev, "ok")


def check_evidence(data: dict[str, Any], base: Path) -> list[EvidenceCheck]:
    """One check per evidence file of a schema-valid pack whose file sits in ``base``."""
    return [check_file(base, ev) for ev in evidence_files(data)]


def verify_evidence(data: dict[str, Any], base: Path) -> None:
    """Raise PackError (``$.evidence.<id>.files.<kind>: <status> <path> (<detail>)``) at the first file
    that is missing, changed or outside ``base``."""
    for ev in evidence_files(data):
        result = check_file(base, ev)
        if not result.ok:
            raise PackError(f"{ev.json_path}: evidence {result.status}: {ev.path} ({result.detail})")


def evidence_stats(data: dict[str, Any], base: Path) -> tuple[tuple[str, int, int, int, int], ...]:
    """(path, mtime_ns, ctime_ns, size, inode) of every evidence file (-1s when absent): a cheap key
    that changes whenever a file's bytes may have (ctime too: ``touch -d`` can restore an mtime, not a
    ctime), used to skip re-hashing on every runner loop."""
    # no realpath here (this runs every runner loop): a file swapped for a symlink changes the key
    # (stat follows it to another inode), and the re-load that follows applies safe_path
    out = []
    for ev in evidence_files(data):
        try:
            st = os.stat(os.path.join(base, ev.path)) if not ev.path.startswith("/") else None
        except OSError:
            st = None
        out.append(
            (ev.path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino) if st else (ev.path, -1, -1, -1, -1)
        )
    return tuple(out)
