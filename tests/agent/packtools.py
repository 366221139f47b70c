"""Packs for tests: the shipped packs as loaded objects, and operator pack directories — a copy of a
shipped pack (and its evidence bundles) re-bound to another app version, written with the modes ``run``
trusts (dir 0755, files 0644, owned by us)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack.files import shipped_pack_dir
from cmbuyer.agent.pack.resolve import resolve_pack, scan
from cmbuyer.agent.screens.packmodel import Pack


def shipped_packs() -> list[Pack]:
    """Every pack under ``cmbuyer/agent/packs/*.json`` (evidence verified), sorted by file name, through
    the operator-dir loader's per-file cache (no re-hashing on every call). A broken shipped pack
    raises PackError (a release defect)."""
    found = scan(None, check_permissions=False).shipped
    broken = next((f.error for f in found if f.error is not None), None)
    if broken is not None:
        raise PackError(broken)
    return [f.pack for f in found if f.pack is not None]


def pack_for_version(version_name: str, version_code: int) -> Pack:
    """The shipped pack for exactly this version (no operator pack dir). Raises PackError."""
    return resolve_pack(version_name, version_code, None, check_permissions=False)


def shipped_raw(version_name: str) -> dict[str, Any]:
    """The JSON of the shipped pack of ``version_name`` (8.17.0 or 8.22.0)."""
    (path,) = [p for p in shipped_pack_dir().glob("*.json") if f"-{version_name}-" in p.name]
    return json.loads(path.read_text("utf-8"))


def make_pack_dir(root: Path) -> Path:
    """An empty operator pack dir, mode 0755."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    return root


def write_pack(pack_dir: Path, data: dict[str, Any], name: str | None = None) -> Path:
    """Write ``data`` as ``<name or id>.json`` (0644) and copy the evidence bundles it names from the
    shipped evidence (same relative paths) into ``pack_dir``."""
    for entry in data["evidence"].values():
        for spec in entry["files"].values():
            src = shipped_pack_dir() / spec["path"]
            dest = pack_dir / spec["path"]
            if src.is_file() and not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
    path = pack_dir / (name or f"{data['id']}.json")
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    path.chmod(0o644)
    return path


def rebound(version_name: str, new_name: str, new_code: int, pack_id: str | None = None) -> dict[str, Any]:
    """The shipped pack of ``version_name`` bound to ``new_name``/``new_code`` under a new id."""
    data = shipped_raw(version_name)
    data["app"].update(version_name=new_name, version_code=new_code)
    data["id"] = pack_id or f"ops-{new_name}-{new_code}"
    return data


def evidence_path(pack_dir: Path, data: dict[str, Any], evidence_id: str, kind: str) -> Path:
    """The file of one evidence entry inside ``pack_dir``."""
    return pack_dir / data["evidence"][evidence_id]["files"][kind]["path"]


def flip_byte(path: Path, offset: int = -1) -> None:
    """Change one byte (the last by default) of ``path`` in place."""
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (what ``sha256sum`` prints)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_capture_evidence(
    pack_path: Path, captures_dir: Path, *, prefix: str, source: str, justify: dict[str, str]
) -> list[str]:
    """Edit the pack file ``pack_path`` as an operator does after a dry run (docs/agent.md "New app
    version runbook", step 6): copy every capture of ``captures_dir`` (its ``dump.xml``,
    ``screenshot.png``, ``meta.json``) to ``evidence/<pack id>/<capture>/`` next to the pack, add one
    ``evidence`` entry per capture (id ``<prefix><capture>``, label/time/device from its ``meta.json``,
    each file's SHA-256) and add that id to every selector evidence list that names
    ``justify[<screen>]`` — the old evidence of the same screen (the screen is the capture's confirmed
    ``expected.json``). Rewrites the file (0644); returns the new evidence ids in capture order."""
    data = json.loads(pack_path.read_text("utf-8"))
    added: dict[str, list[str]] = {}
    new_ids: list[str] = []
    for capture in sorted(p for p in captures_dir.iterdir() if (p / "meta.json").is_file()):
        meta = json.loads((capture / "meta.json").read_text("utf-8"))
        screen = json.loads((capture / "expected.json").read_text("utf-8"))["screen"]
        dest = pack_path.parent / "evidence" / data["id"] / capture.name
        dest.mkdir(parents=True, exist_ok=True)
        files = {}
        for kind, name in (("dump", "dump.xml"), ("screenshot", "screenshot.png"), ("meta", "meta.json")):
            shutil.copyfile(capture / name, dest / name)
            files[kind] = {"path": f"evidence/{data['id']}/{capture.name}/{name}", "sha256": sha256_file(dest / name)}
        evidence_id = f"{prefix}{capture.name}"
        data["evidence"][evidence_id] = {
            "label": f"{meta['label']} ({meta['app_version_name']})",
            "captured_at": meta["captured_at"],
            "device": meta["device"],
            "source": source,
            "files": files,
        }
        new_ids.append(evidence_id)
        if screen in justify:
            added.setdefault(justify[screen], []).append(evidence_id)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            refs = node.get("evidence")
            if isinstance(refs, list):
                node["evidence"] = refs + [new for old, ids in added.items() if old in refs for new in ids]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit({k: v for k, v in data.items() if k != "evidence"})  # the selectors; entries stay as written
    pack_path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    pack_path.chmod(0o644)
    return new_ids
