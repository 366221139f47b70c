"""The server's layering rule, checked on the static import graph and on call sites with ast over
server/**/*.py (the import reading is tests/imports.py, shared with tests/agent/test_layers.py;
docs/architecture.md states the rule in prose):

- ``domain`` imports only ``domain`` and ``cmbuyer.schemas`` (pure rules: no I/O, no store);
- ``store`` imports no ``services``, ``tx``, ``web``, ``lifecycle`` or ``app``;
- ``tx`` (shared transaction helpers) imports no ``services``, ``web``, ``lifecycle`` or ``app``;
- ``services`` import no ``web``, ``lifecycle`` or ``app`` and never another service;
- ``web`` imports no ``app`` and no ``lifecycle`` (app.py builds the app and calls lifecycle);
- the command line (``cli``, ``cli_text``, ``task_summary``) and ``display`` (what people read, shared by
  the pages and the command line) import no ``web``;
- no ``.execute(`` call outside ``store/``, ``db.py`` and ``migrate.py`` (SQL lives in the store).

Each rule is also run against a synthetic server tree that breaks it, so the scanner is shown to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.imports import import_statements, sources, write_tree

SERVER = Path(__file__).resolve().parents[2] / "server"
ROOT = "cmbuyer.server"


def _layer(module: str) -> str:
    """``cmbuyer.server.services.fence`` → ``services``; ``cmbuyer.server.app`` → ``app``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def _service(module: str) -> str | None:
    parts = module.split(".")
    return parts[3] if len(parts) > 3 and parts[2] == "services" else None


def _executes(tree: ast.AST) -> int:
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "execute"
    )


FORBIDDEN = {
    "store": {"services", "tx", "web", "lifecycle", "app"},
    "tx": {"services", "web", "lifecycle", "app"},
    "services": {"web", "lifecycle", "app"},
    "web": {"app", "lifecycle"},
    "display": {"web", "lifecycle", "app"},
    "cli": {"web"},
    "cli_text": {"web"},
    "task_summary": {"web"},
}
SQL_HOMES = {"store", "db", "migrate"}


def _breach(module: str, layer: str, dep: str) -> str | None:
    """What importing ``dep`` from ``module`` (in ``layer``) breaks, or None."""
    if dep.startswith(ROOT + "."):
        target = _layer(dep)
        if layer == "domain" and target != "domain":
            return f"domain imports {dep}"
        if target in FORBIDDEN.get(layer, set()):
            return f"{layer} imports {dep}"
        if layer == "services" and target == "services":
            own, other = _service(module), _service(dep)
            if other is not None and other != own:
                return f"service imports service {dep}"
    elif layer == "domain" and dep.startswith("cmbuyer.") and not dep.startswith("cmbuyer.schemas"):
        return f"domain imports {dep}"
    return None


def violations(server: Path) -> list[str]:
    """Every breach of the layering rule in the tree ``server`` (laid out like ``cmbuyer.server``),
    as sorted ``"<module>: <what>"`` lines; empty when the tree keeps the rule."""
    found: list[str] = []
    for source in sources(server, ROOT):
        module, tree = source.name, source.tree
        layer = _layer(module)
        for names in import_statements(tree, module, source.is_package):
            # One line per import statement: its first name that breaks a rule.
            breach = next((b for b in (_breach(module, layer, dep) for dep in names) if b), None)
            if breach:
                found.append(f"{module}: {breach}")
        if layer not in SQL_HOMES and _executes(tree):
            found.append(f"{module}: .execute( outside the store")
    return sorted(set(found))


def test_the_server_keeps_its_layers() -> None:
    assert violations(SERVER) == []


CLEAN = {
    "domain/rules.py": "from cmbuyer.schemas import text\nfrom cmbuyer.server.domain import states\n",
    "store/tasks.py": "from cmbuyer.server.domain import states\ndef get(conn):\n    return conn.execute('x')\n",
    "tx/common.py": "from cmbuyer.server.store import tasks\n",
    "services/fence.py": (
        "from cmbuyer.server.tx import common\nfrom cmbuyer.server.domain import rules\nfrom . import fence\n"
    ),
    "web/routes.py": "from cmbuyer.server.services import fence\nfrom cmbuyer.server.display import labels\n",
    "display/labels.py": "from cmbuyer.server.domain import states\n",
    "cli.py": "from cmbuyer.server.display import labels\nfrom cmbuyer.server import app\n",
    "lifecycle.py": "from cmbuyer.server.web import routes\n",
    "app.py": "from cmbuyer.server import lifecycle\n",
    "db.py": "def q(conn):\n    conn.execute('x')\n",
}


@pytest.mark.parametrize(
    ("rel", "text", "expected"),
    [
        ("domain/bad.py", "from cmbuyer.server.store import tasks\n", "domain imports cmbuyer.server.store"),
        ("domain/bad.py", "import cmbuyer.agent.flow\n", "domain imports cmbuyer.agent.flow"),
        ("domain/bad.py", "from ..store import tasks\n", "domain imports cmbuyer.server.store"),
        ("store/bad.py", "from cmbuyer.server.services import fence\n", "store imports cmbuyer.server.services"),
        ("store/bad.py", "from cmbuyer.server.tx import common\n", "store imports cmbuyer.server.tx"),
        ("tx/bad.py", "from cmbuyer.server.services.fence import x\n", "tx imports cmbuyer.server.services.fence"),
        ("services/claim.py", "from cmbuyer.server.services.fence import x\n", "service imports service"),
        ("services/claim.py", "from .fence import x\n", "service imports service cmbuyer.server.services.fence"),
        ("services/claim.py", "from cmbuyer.server.web import routes\n", "services imports cmbuyer.server.web"),
        ("web/bad.py", "from cmbuyer.server import app\n", "web imports cmbuyer.server.app"),
        ("web/bad.py", "from cmbuyer.server.lifecycle import run\n", "web imports cmbuyer.server.lifecycle"),
        ("cli.py", "from cmbuyer.server.web.admin import labels\n", "cli imports cmbuyer.server.web"),
        ("cli_text.py", "from cmbuyer.server.web.admin.labels import x\n", "cli_text imports cmbuyer.server.web"),
        ("display/bad.py", "from cmbuyer.server.web.admin import render\n", "display imports cmbuyer.server.web"),
        ("health.py", "def f(conn):\n    conn.execute('select 1')\n", "health: .execute( outside the store"),
    ],
)
def test_each_rule_catches_a_synthetic_breach(tmp_path: Path, rel: str, text: str, expected: str) -> None:
    assert violations(write_tree(tmp_path / "server", CLEAN)) == []
    found = violations(write_tree(tmp_path / "server", {**CLEAN, rel: text}))
    assert len(found) == 1 and expected in found[0], found
