"""The checked-in import root ``typecheck/cmbuyer/`` (mypy's ``mypy_path``, pyright's ``extraPaths``)
states the same folder mapping as setup.py's ``ROOTS``, with relative links that work in any clone."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT_ROOT = ROOT / "typecheck" / "cmbuyer"


def _setup_roots() -> dict[str, str]:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ROOTS" for t in node.targets):
            roots = ast.literal_eval(node.value)
            assert isinstance(roots, dict)
            return {str(k): str(v) for k, v in roots.items()}
    raise AssertionError("setup.py has no ROOTS mapping")


def test_every_installed_package_has_a_relative_link_to_its_folder() -> None:
    links = {p.name: p for p in IMPORT_ROOT.iterdir() if p.is_symlink()}
    expected = {name.removeprefix("cmbuyer."): folder for name, folder in _setup_roots().items()}
    assert set(links) == set(expected)
    for name, folder in expected.items():
        target = os.readlink(links[name])
        assert not os.path.isabs(target), name
        assert (IMPORT_ROOT / target).resolve() == (ROOT / folder).resolve(), name
    assert (IMPORT_ROOT / "__init__.py").is_file()
