"""No import circle in any source folder: the strongly connected components of each package's static
import graph (tests/imports.py; every import statement counts, a function-level one too, so a deferred
import cannot hide a circle) are single modules. The check is also run on synthetic folders that hold
a circle, so it is shown to fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import circles, graph, write_tree

REPO = Path(__file__).resolve().parents[1]
# source folder → the package it is installed as (setup.py ROOTS)
PACKAGES = {
    "agent": "cmbuyer.agent",
    "phonesim": "cmbuyer.phonesim",
    "server": "cmbuyer.server",
    "shared/schemas": "cmbuyer.schemas",
}


@pytest.mark.parametrize("folder", list(PACKAGES))
def test_no_import_circle(folder: str) -> None:
    assert circles(graph(REPO / folder, PACKAGES[folder])) == []


CLEAN = {
    "errors.py": "class AgentError(Exception):\n    pass\n",
    "screens/dump.py": "from cmbuyer.agent.errors import AgentError\n",
    "flow.py": "from cmbuyer.agent.screens import dump\nfrom . import errors\n",
    "cli.py": "def main():\n    from cmbuyer.agent import flow\n",
}


@pytest.mark.parametrize(
    "files",
    [
        {"a.py": "from cmbuyer.agent import b\n", "b.py": "from cmbuyer.agent.a import x\n"},
        # a deferred (function-level) import still closes the circle
        {"a.py": "from cmbuyer.agent.b import y\n", "b.py": "def f():\n    from cmbuyer.agent import a\n"},
        {"p/a.py": "from . import b\n", "p/b.py": "from .c import z\n", "p/c.py": "from cmbuyer.agent.p.a import w\n"},
        # an import only for type checking is a dependency as well
        {
            "a.py": "from cmbuyer.agent import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cmbuyer.agent.a\n",
        },
    ],
    ids=["direct", "deferred", "relative-three", "type-checking"],
)
def test_the_circle_check_catches_a_synthetic_circle(tmp_path: Path, files: dict[str, str]) -> None:
    clean = write_tree(tmp_path / "clean" / "agent", CLEAN)
    assert circles(graph(clean, "cmbuyer.agent")) == []
    broken = write_tree(tmp_path / "broken" / "agent", {**CLEAN, **files})
    (found,) = circles(graph(broken, "cmbuyer.agent"))
    assert {m.rsplit(".", 1)[-1] for m in found} == {Path(rel).stem for rel in files}
