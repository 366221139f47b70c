"""Which selector pack the agent uses for an app version: shipped packs + the operator pack directory.

Sources (docs/agent.md "The operator pack directory"):

- **shipped** packs: ``cmbuyer/agent/packs/*.json`` inside the installed package, with their evidence
  under ``packs/evidence/``;
- **operator** packs: every ``*.json`` (not starting with ``.``) directly inside the directory given by
  ``--pack-dir DIR`` or env ``CMBUYER_AGENT_PACK_DIR`` (agent/settings.py); none when neither is set.

Rules (the one home of them):

1. A pack binds one exact ``versionName`` + ``versionCode``. For a version, an operator pack wins over
   a shipped pack of the same version (so a cmbuyer upgrade that ships a pack for a version the fleet
   already has its own pack for changes nothing); the override is reported by :func:`resolve` and
   ``doctor``, and the runner logs it when the pack in use changes.
2. Two operator files for one version → refused for that version, naming both files (no guessing which
   one the operator meant). The same pack id in two operator files → both refused. An operator pack
   reusing the id of a shipped pack of ANOTHER version → refused (the heartbeat reports the id).
3. Trusted input (``check_permissions=True``: ``run``, ``doctor``): the directory and each pack file
   must be owned by the agent's effective uid and not group/world-writable; a pack file may not be a
   symlink. A refused DIRECTORY refuses every version (fail closed: the operator meant its packs to
   override); a refused FILE is a broken pack (rule 5).
4. Every pack is validated against ``shared/schemas/selector_pack.json``, compiled, and its evidence
   files re-hashed at load (:mod:`cmbuyer.agent.pack.evidence`). Loads are cached per file by
   (mtime, ctime, size, inode) of the pack file and of every evidence file (broken packs too), so the
   runner's per-loop lookup costs a directory listing and some ``stat`` calls, no hashing.
5. A broken operator pack (unreadable, invalid JSON, schema violation, duplicate id/version, evidence
   missing or changed, refused permissions) affects ONLY the version it claims — read from its
   ``app`` block when the JSON parses, else from a ``…-<versionName>-<versionCode>.json`` file name:
   that version gets no pack (no fallback to a shipped pack the operator meant to replace). Packs for
   other versions keep working. A broken file whose version cannot be told affects no version; it is
   named in the "no selector pack" error and by ``doctor``. Every broken file is logged once (per
   change of the file) at WARNING.

Errors: :class:`~cmbuyer.agent.errors.PackError`, one line, naming the file and the JSON path.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack import evidence
from cmbuyer.agent.pack.compile import MAX_PACK_BYTES, pack_shape_problem
from cmbuyer.agent.pack.files import load_pack_file, shipped_pack_dir
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.schemas.files import read_regular

log = logging.getLogger(__name__)
# file names as authoring/make_pack.py / the runbook write them: pdd-<versionName>-<versionCode>.json
_NAME_VERSION_RE = re.compile(r".*-(?P<name>[0-9A-Za-z._]{1,32})-(?P<code>[0-9]{1,10})\.json", re.ASCII)


# where a pack file came from, as an operator reads it (``origin`` stays the English word in code)
ORIGINS = {"operator": "运维", "shipped": "随附"}


@dataclass(frozen=True)
class PackFile:
    """One pack file as loaded: ``pack`` or ``error`` (one line ``<file>: $…: <problem>``) is set.
    ``origin`` is ``operator`` or ``shipped``; ``version`` is the (versionName, versionCode) it is for —
    for a broken file, what it claims (rule 5), or None."""

    path: Path
    origin: str
    pack: Pack | None
    error: str | None
    version: tuple[str, int] | None

    def describe(self) -> str:
        """``pdd-x（运维 /dir/file.json）`` — for logs and doctor (the origin as :data:`ORIGINS` words it)."""
        name = self.pack.id if self.pack is not None else "损坏的识别包"
        return f"{name}（{ORIGINS.get(self.origin, self.origin)} {self.path}）"


@dataclass(frozen=True)
class Resolution:
    """The pack for one version and where it came from; ``overrides`` is the shipped pack an operator
    pack replaces (None when there is none or the pack is the shipped one)."""

    pack: Pack
    origin: str
    path: Path
    overrides: PackFile | None = None

    def describe(self) -> str:
        """One line: id, origin, file and the override, e.g. for the runner's log and doctor:
        ``site-8.22.0（运维识别包 /dir/x.json），取代随附识别包 pdd-8.22.0-82200``."""
        text = f"{self.pack.id}（{ORIGINS.get(self.origin, self.origin)}识别包 {self.path}）"
        if self.overrides is not None and self.overrides.pack is not None:
            text += f"，取代随附识别包 {self.overrides.pack.id}"
        return text


@dataclass(frozen=True)
class PackScan:
    """Everything :func:`scan` found: ``dir_error`` set when the operator directory itself is refused."""

    pack_dir: Path | None
    dir_error: str | None
    operator: tuple[PackFile, ...]
    shipped: tuple[PackFile, ...]

    def broken(self) -> list[PackFile]:
        """Operator and shipped files that did not load (or were refused), in scan order."""
        return [f for f in (*self.shipped, *self.operator) if f.error is not None]


# path → (stat key of the pack file, its parsed JSON or None, stat key of its evidence files, PackFile);
# broken packs too: the runner resolves every second, and a broken pack must not be re-parsed and its
# evidence re-hashed each time (it is loaded again when the pack file or an evidence file changes)
_cache: dict[tuple[Path, str], tuple[tuple[int, ...], Any, tuple[Any, ...], PackFile]] = {}
_logged: set[tuple[Path, str]] = set()


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def _trust_problem(st: os.stat_result, what: str) -> str | None:
    """Why ``st`` is not trusted input for this process (rule 3), or None."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return f"{what} is group- or world-writable (mode {mode:04o}); run chmod go-w"
    if st.st_uid != os.geteuid():
        return f"{what} is owned by uid {st.st_uid}, not by the agent's uid {os.geteuid()}"
    return None


def _claimed_version(path: Path) -> tuple[str, int] | None:
    """The version a (possibly broken) pack file is for: its ``app`` block, else its file name."""
    try:
        raw = read_regular(path, MAX_PACK_BYTES)  # never blocks: a symlink may name a FIFO
        if pack_shape_problem(raw) is not None:
            raise ValueError("not parsed")
        data = json.loads(raw)
        app = data["app"]
        name, code = app["version_name"], app["version_code"]
        if isinstance(name, str) and type(code) is int:
            return name, code
    except (OSError, ValueError, TypeError, KeyError):
        pass
    m = _NAME_VERSION_RE.fullmatch(path.name)
    return (m.group("name"), int(m.group("code"))) if m else None


def _load(path: Path, origin: str, st: os.stat_result) -> PackFile:
    """Load one pack file through the cache (rule 4)."""
    key = _stat_key(st)
    hit = _cache.get((path, origin))
    if hit is not None and hit[0] == key and _evidence_key(hit[1], path) == hit[2]:
        return hit[3]
    try:
        data, pack = load_pack_file(path)
    except PackError as exc:
        # the fix may be a new evidence file while the pack file stays the same: keyed on both
        data = _parsed(path)
        pf = PackFile(path, origin, None, str(exc), _claimed_version(path))
    else:
        pf = PackFile(path, origin, pack, None, (pack.version_name, pack.version_code))
    _cache[(path, origin)] = (key, data, _evidence_key(data, path), pf)
    return pf


def _parsed(path: Path) -> Any:
    """A broken pack's JSON when it parses (its evidence files key the cache), else None."""
    try:
        raw = read_regular(path, MAX_PACK_BYTES)
        return None if pack_shape_problem(raw) is not None else json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None


def _evidence_key(data: Any, path: Path) -> tuple[Any, ...]:
    """:func:`evidence.evidence_stats` of a pack's JSON; () when it names no readable evidence list."""
    try:
        return evidence.evidence_stats(data, path.parent)
    except (KeyError, TypeError, AttributeError):  # a schema-invalid pack: its file's stat is the key
        return ()


def _refused(path: Path, origin: str, problem: str) -> PackFile:
    return PackFile(path, origin, None, f"{path.name}: $: {problem}", _claimed_version(path))


def _scan_shipped() -> tuple[PackFile, ...]:
    try:
        root = shipped_pack_dir()
    except PackError as exc:
        return (PackFile(Path("cmbuyer/agent/packs"), "shipped", None, str(exc), None),)
    out = []
    for path in sorted(root.glob("*.json")):
        try:
            out.append(_load(path, "shipped", path.stat()))
        except OSError as exc:
            out.append(_refused(path, "shipped", f"cannot stat ({exc.strerror})"))
    return tuple(out)


def _scan_operator(pack_dir: Path, check_permissions: bool) -> tuple[str | None, tuple[PackFile, ...]]:
    try:
        dst = pack_dir.stat()
    except OSError as exc:
        return f"cannot read the pack dir ({exc.strerror or exc.__class__.__name__})", ()
    if not stat.S_ISDIR(dst.st_mode):
        return "the pack dir is not a directory", ()
    if check_permissions:
        problem = _trust_problem(dst, "the pack dir")
        if problem is not None:
            return problem, ()
    try:
        entries = sorted(
            (e for e in os.scandir(pack_dir) if e.name.endswith(".json") and not e.name.startswith(".")),
            key=lambda e: e.name,
        )
    except OSError as exc:
        return f"cannot list the pack dir ({exc.strerror or exc.__class__.__name__})", ()
    out = []
    for entry in entries:
        path = Path(entry.path)
        try:
            lst = entry.stat(follow_symlinks=False)
        except OSError as exc:
            out.append(_refused(path, "operator", f"cannot stat ({exc.strerror})"))
            continue
        if check_permissions and stat.S_ISLNK(lst.st_mode):
            out.append(_refused(path, "operator", "the pack file is a symlink (put the file itself in the pack dir)"))
            continue
        try:
            st = path.stat()
        except OSError as exc:
            out.append(_refused(path, "operator", f"cannot stat ({exc.strerror})"))
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        problem = _trust_problem(st, "the pack file") if check_permissions else None
        out.append(_refused(path, "operator", problem) if problem else _load(path, "operator", st))
    return None, _mark_duplicate_ids(out)


def _mark_duplicate_ids(files: list[PackFile]) -> tuple[PackFile, ...]:
    """Rule 2: the same pack id in two operator files refuses both (the id is what the server sees)."""
    by_id: dict[str, list[PackFile]] = {}
    for pf in files:
        if pf.pack is not None:
            by_id.setdefault(pf.pack.id, []).append(pf)
    out = []
    for pf in files:
        same = by_id.get(pf.pack.id, []) if pf.pack is not None else []
        if pf.pack is not None and len(same) > 1:
            others = ", ".join(o.path.name for o in same if o is not pf)
            pf = PackFile(
                pf.path,
                pf.origin,
                None,
                f"{pf.path.name}: $.id: duplicate pack id '{pf.pack.id}' (also in {others})",
                pf.version,
            )
        out.append(pf)
    return tuple(out)


def _mark_shipped_id_clash(operator: tuple[PackFile, ...], shipped: tuple[PackFile, ...]) -> tuple[PackFile, ...]:
    """Rule 2: an operator pack may reuse a shipped pack's id only for that pack's own version."""
    shipped_ids = {pf.pack.id: pf.pack for pf in shipped if pf.pack is not None}
    out = []
    for pf in operator:
        other = shipped_ids.get(pf.pack.id) if pf.pack is not None else None
        if pf.pack is not None and other is not None and not other.matches_version(*pf.version or ("", -1)):
            pf = PackFile(
                pf.path,
                pf.origin,
                None,
                f"{pf.path.name}: $.id: '{pf.pack.id}' 是拼多多 {other.version_name} ({other.version_code}) "
                "的随附识别包的 id",
                pf.version,
            )
        out.append(pf)
    return tuple(out)


def scan(pack_dir: Path | None, *, check_permissions: bool, reported: tuple[str, int] | None = None) -> PackScan:
    """Load (through the cache) every shipped pack and every operator pack in ``pack_dir``; never
    raises for a bad pack — each broken file is a :class:`PackFile` with ``error`` (logged once).

    ``reported`` = the version a caller is resolving: :func:`resolve` raises the errors of that
    version's files and of a refused directory, and its caller reports them (``run``'s ``NO_PACK: …``
    line, ``dry-run``'s error JSON), so they are not logged here too — one error, one line."""
    shipped = _scan_shipped()
    dir_error, operator = (None, ()) if pack_dir is None else _scan_operator(pack_dir, check_permissions)
    result = PackScan(pack_dir, dir_error, _mark_shipped_id_clash(operator, shipped), shipped)
    if dir_error is not None and reported is None:
        _log_once(pack_dir or Path(), f"operator pack dir {pack_dir}: {dir_error}")
    for pf in result.broken():
        if reported is None or pf.version != reported:
            _log_once(pf.path, f"selector pack refused: {pf.error}")
    return result


def _log_once(path: Path, message: str) -> None:
    if (path, message) not in _logged:
        _logged.add((path, message))
        log.warning("%s", message)


def resolve(version_name: str, version_code: int, pack_dir: Path | None, *, check_permissions: bool) -> Resolution:
    """The pack for exactly this app version and its origin (rules 1-5). Raises PackError (one line)
    when there is none, when the operator dir is refused, or when the version's operator packs are
    broken or ambiguous."""
    found = scan(pack_dir, check_permissions=check_permissions, reported=(version_name, version_code))
    if found.dir_error is not None:
        raise PackError(f"operator pack dir {pack_dir}: {found.dir_error}")
    version = (version_name, version_code)
    ops = [pf for pf in found.operator if pf.version == version]
    if len(ops) > 1:
        raise PackError(
            f"应用版本 {version_name}（{version_code}）有两个运维识别包："
            f"{'、'.join(pf.path.name for pf in ops)}（只保留一个）"
        )
    shipped = next((pf for pf in found.shipped if pf.version == version), None)
    if ops:
        (op,) = ops
        if op.pack is None:
            raise PackError(str(op.error))
        return Resolution(op.pack, "operator", op.path, shipped)
    if shipped is not None:
        if shipped.pack is None:
            raise PackError(str(shipped.error))
        return Resolution(shipped.pack, "shipped", shipped.path)
    text = f"没有适用于应用版本 {version_name}（{version_code}）的识别包"
    unknown = [pf.path.name for pf in found.operator if pf.error is not None and pf.version is None]
    if unknown:
        text += f"；无法读取的运维识别包文件：{'、'.join(unknown)}"
    raise PackError(text)


def resolve_pack(version_name: str, version_code: int, pack_dir: Path | None, *, check_permissions: bool) -> Pack:
    """:func:`resolve`'s pack (the contract's entry point for ``run``, ``dry-run``, ``pack`` commands).
    Raises PackError."""
    return resolve(version_name, version_code, pack_dir, check_permissions=check_permissions).pack


def all_packs(pack_dir: Path | None) -> list[Pack]:
    """Every usable pack, one per version (the one :func:`resolve` picks; no permission check), for
    ``inspect`` without a version: shipped packs by file name, then operator-only versions."""
    found = scan(pack_dir, check_permissions=False)
    versions = [pf.version for pf in (*found.shipped, *found.operator) if pf.pack is not None]
    out: list[Pack] = []
    for version in dict.fromkeys(versions):
        assert version is not None
        try:
            out.append(resolve_pack(*version, pack_dir, check_permissions=False))
        except PackError:
            continue  # that version's packs are broken/ambiguous: inspect reads with the others
    return out
