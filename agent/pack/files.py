"""Reading pack files: one file loaded, compiled and its evidence re-hashed, and where the shipped packs
are. Which pack serves an app version (shipped or the operator's): :mod:`cmbuyer.agent.pack.resolve`.

Errors: :class:`~cmbuyer.agent.errors.PackError` with ONE line ``<file name>: <JSON path>: <problem>``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from cmbuyer.agent.errors import PackError
from cmbuyer.agent.pack import evidence
from cmbuyer.agent.pack.compile import MAX_PACK_BYTES, compile_pack, parse_pack_json
from cmbuyer.agent.screens.packmodel import Pack
from cmbuyer.schemas.files import FileTooLarge, read_regular


def load_pack(path: str | Path, *, verify_evidence: bool = True) -> Pack:
    """Load, validate and compile the pack file ``path`` and (unless ``verify_evidence`` is False:
    pack authoring tools only) re-hash its evidence files, relative to the file's directory.

    Raises PackError with ONE line ``<file name>: <JSON path>: <problem>``, e.g.
    ``pdd-9.0.0.json: $.layouts[0].id: 'foo' is not one of ['sku_sheet', 'order_sheet']``."""
    return load_pack_file(Path(path), verify_evidence=verify_evidence)[1]


def load_pack_file(path: Path, *, verify_evidence: bool = True) -> tuple[Any, Pack]:
    """:func:`load_pack` that also returns the parsed JSON (the evidence entries, for callers that
    cache on the evidence files' stats). Raises PackError as :func:`load_pack`."""
    try:
        raw = read_regular(path, MAX_PACK_BYTES)
    except FileTooLarge:
        raise PackError(f"{path.name}: $: pack file larger than {MAX_PACK_BYTES} bytes") from None
    except OSError as exc:
        raise PackError(f"{path.name}: $: cannot read the file ({exc.strerror or exc.__class__.__name__})") from exc
    try:
        data = parse_pack_json(raw)
        pack = compile_pack(data)
        if verify_evidence:
            evidence.verify_evidence(data, path.parent)
    except PackError as exc:
        raise PackError(f"{path.name}: {exc}") from None
    return data, pack


def shipped_pack_dir() -> Path:
    """The directory of the packs inside the installed package (``cmbuyer/agent/packs``)."""
    root = resources.files("cmbuyer.agent.packs")
    if not isinstance(root, Path):  # a zipped install: packs and their evidence must be plain files
        raise PackError("$: the shipped packs are not plain files (zipped install?)")
    return root
