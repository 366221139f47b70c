"""The agent's layering and capability isolation, checked on the static import graph (every import
statement, deferred ones included: tests/imports.py) and on call sites, with ast over agent/**/*.py
(the agent's counterpart of tests/server/test_layers.py; docs/architecture.md "Agent" states the
rules in prose; that no source folder has an import circle is tests/test_import_circles.py):

- ``screens/`` is pure: it imports only ``screens``, ``errors``, ``cmbuyer.schemas`` (not the schema
  loader in its ``__init__`` nor ``schemas.files``), the non-I/O standard library and the in-memory
  image libraries, and never calls ``open``;
- ``phone/`` imports only ``phone``, ``screens``, ``errors``, the standard library and its device
  libraries (adbutils, uiautomator2, and Pillow for the screenshots uiautomator2 returns);
- ``pack/`` imports only ``pack``, ``screens``, ``errors`` and ``cmbuyer.schemas``;
- nothing but ``authoring/`` itself and the ``cli`` imports ``authoring/`` (the run path never loads a
  pack authoring tool);
- ``flow`` does not reach the HTTP ``client`` (it talks to the server through ``ports``);
- only ``client``, ``ports``, ``submit`` and ``flow`` import ``permit``; only ``flow`` imports ``submit``;
- the readers, the phone, capabilities, gates and the journal reach none of ``permit``, ``submit``,
  ``client``, ``flow``; the dry run (and the engine and capture code it runs) reaches no module that
  holds a permit or talks to the server.

Each rule is also run against a synthetic agent tree that breaks it, so the scanner is shown to fail.
"""

from __future__ import annotations

import ast
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.imports import Source, graph, import_statements, reach, sources, write_tree

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "agent"
ROOT = "cmbuyer.agent"

# The standard library ``screens/`` may use: computation only (``io`` for in-memory PNG buffers,
# ``logging`` for a warning; no files, processes, sockets or clocks).
SCREENS_STDLIB = {
    "__future__",
    "collections",
    "dataclasses",
    "decimal",
    "enum",
    "functools",
    "io",
    "itertools",
    "logging",
    "math",
    "re",
    "struct",
    "typing",
    "unicodedata",
    "xml",
    "zlib",
}
# third-party libraries screens/ may use: PNG masking in memory (Pillow, zlib-ng)
SCREENS_LIBRARIES = {"PIL", "zlib_ng"}
# the device libraries, and Pillow: uiautomator2 hands screenshots over as PIL images
PHONE_LIBRARIES = {"adbutils", "uiautomator2", "PIL"}
# packages of cmbuyer.agent, and what each may import of it (None: any)
MAY_IMPORT = {
    "screens": {"screens", "errors"},
    "phone": {"phone", "screens", "errors"},
    "pack": {"pack", "screens", "errors"},
}
PERMIT_IMPORTERS = {"client", "ports", "submit", "flow"}
SUBMIT_IMPORTERS = {"flow"}
AUTHORING_IMPORTERS = {"authoring", "cli"}
# modules that hold a permit, tap submit or talk to the server
PERMIT_SIDE = {"permit", "submit", "client", "flow"}
ISOLATED = ("screens", "phone", "capabilities", "gates", "journal")
DRY_RUN = ("authoring.dryrun", "prefence", "authoring.capture")
DRY_RUN_FORBIDDEN = {*PERMIT_SIDE, "ports", "runner", "outbox", "recovery", "confirm"}
DRY_RUN_NAMES = ("create_submission_fence", "submit_tap_once", "submit_order_once", "SubmissionPermit", "ResultSink")


def _local(module: str) -> str:
    """``cmbuyer.agent.screens.dump`` → ``screens.dump``; the package itself → ``""``."""
    return module[len(ROOT) + 1 :] if module.startswith(ROOT + ".") else ""


def _top(module: str) -> str:
    """The first segment of a local name: ``screens.dump`` → ``screens``, ``flow`` → ``flow``."""
    return _local(module).split(".")[0]


def _is(module: str, *locals_: str) -> bool:
    """True when ``module`` is one of ``locals_`` or inside one of them (``screens`` holds ``screens.dump``)."""
    name = _local(module)
    return any(name == x or name.startswith(x + ".") for x in locals_)


def _owner(name: str, modules: set[str]) -> str:
    parts = name.split(".")
    return next((".".join(parts[:end]) for end in range(len(parts), 0, -1) if ".".join(parts[:end]) in modules), name)


def _targets(source: Source, modules: set[str]) -> list[str]:
    """Every module one source imports: agent modules by the module a name lives in, others by the
    statement's module name (``from PIL import Image`` → ``PIL``)."""
    out: list[str] = []
    for base, *names in import_statements(source.tree, source.name, source.is_package):
        if base.startswith(ROOT + ".") or base == ROOT:
            owners = {_owner(n, modules) for n in names if n in modules}
            if not names or any(n not in modules for n in names):
                owners.add(_owner(base, modules))
            out.extend(sorted(owners))
        else:
            out.append(base)
    return out


def _import_breach(module: str, target: str) -> str | None:
    """What importing ``target`` from ``module`` breaks, or None."""
    layer = _top(module)
    if target.startswith(ROOT + "."):
        if layer in MAY_IMPORT and _top(target) not in MAY_IMPORT[layer]:
            return f"{layer} imports {target}"
        if _is(target, "authoring") and layer not in AUTHORING_IMPORTERS:
            return f"{layer} imports {target}"
        if _is(target, "permit") and layer not in PERMIT_IMPORTERS:
            return f"permit imported by {layer}"
        if _is(target, "submit") and layer not in SUBMIT_IMPORTERS:
            return f"submit imported by {layer}"
        return None
    top = target.split(".")[0]
    if layer == "screens":
        if target in ("cmbuyer.schemas", "cmbuyer.schemas.files") or (
            top != "cmbuyer" and top not in SCREENS_STDLIB | SCREENS_LIBRARIES
        ):
            return f"screens imports {target}"
        if top == "cmbuyer" and not target.startswith("cmbuyer.schemas."):
            return f"screens imports {target}"
    if layer == "phone" and top not in sys.stdlib_module_names and top not in PHONE_LIBRARIES:
        return f"phone imports {target}"
    if layer == "pack" and top not in sys.stdlib_module_names and not target.startswith("cmbuyer.schemas"):
        return f"pack imports {target}"
    return None


def _opens(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"
        for node in ast.walk(tree)
    )


def _names(tree: ast.AST) -> set[str]:
    return {
        node.attr if isinstance(node, ast.Attribute) else node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute | ast.Name)
    }


TAPPERS = ("submit", "phone.adapter")  # the submit tap's caller and the adapter that performs it


def _call_site_breaches(source: Source) -> list[str]:
    """Taps and uiautomator2 calls outside the modules allowed to make them."""
    found: list[str] = []
    local = _local(source.name)
    for node in ast.walk(source.tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "submit_tap_once"
            and local not in ("submit", "phone.adapter")
        ):
            found.append(f"{local} uses submit_tap_once")
        if isinstance(node, ast.Constant) and node.value == "input" and local != "phone.adapter":
            found.append(f"{local} builds an input tap command")
        if isinstance(node, ast.Attribute) and node.attr in ("click", "long_click", "watcher"):
            found.append(f"{local} uses uiautomator2 {node.attr}")
    return found


def violations(folder: Path) -> list[str]:
    """Every breach of the agent's layer and isolation rules (the module docstring, circles aside:
    :func:`tests.imports.circles`) in the tree ``folder``, laid out like ``cmbuyer.agent``, as sorted
    ``"<module>: <what>"`` lines; empty when the tree keeps the rules."""
    found: list[str] = []
    tree = sources(folder, ROOT)
    modules = {s.name for s in tree}
    edges = graph(folder, ROOT, tree)
    for source in tree:
        for target in _targets(source, modules):
            breach = _import_breach(source.name, target)
            if breach:
                found.append(f"{source.name}: {breach}")
        if _is(source.name, "screens") and _opens(source.tree):
            found.append(f"{source.name}: screens calls open")
        found.extend(f"{source.name}: {b}" for b in _call_site_breaches(source))
        reached = reach(edges, source.name)
        if _local(source.name) == "flow" and f"{ROOT}.client" in reached:
            found.append(f"{source.name}: flow reaches {ROOT}.client")
        if _is(source.name, *ISOLATED):
            for bad in sorted(m for m in reached if _is(m, *PERMIT_SIDE)):
                found.append(f"{source.name}: {_top(source.name)} reaches {bad}")
        if _local(source.name) in DRY_RUN:
            for bad in sorted(m for m in reached if _is(m, *DRY_RUN_FORBIDDEN)):
                found.append(f"{source.name}: the dry run reaches {bad}")
            for name in sorted(_names(source.tree) & set(DRY_RUN_NAMES)):
                found.append(f"{source.name}: the dry run names {name}")
    return sorted(set(found))


def test_the_agent_keeps_its_layers() -> None:
    assert violations(AGENT) == []


def test_the_isolation_rules_name_modules_that_exist() -> None:
    """A renamed module must not leave a rule checking nothing."""
    modules = {_local(s.name) for s in sources(AGENT, ROOT)}
    for name in (*PERMIT_IMPORTERS, *SUBMIT_IMPORTERS, *ISOLATED, *DRY_RUN, *DRY_RUN_FORBIDDEN, "authoring", "pack"):
        assert name in modules, name
    # the one submit importer does import it (the tap has exactly one caller)
    edges = graph(AGENT, ROOT)
    assert {m for m, deps in edges.items() if f"{ROOT}.submit" in deps} == {f"{ROOT}.flow"}


CLEAN = {
    "errors.py": "class AgentError(Exception):\n    pass\n",
    "screens/dump.py": "import re\nfrom cmbuyer.agent.errors import AgentError\nfrom cmbuyer.schemas.text import x\n",
    "screens/packmodel.py": "from cmbuyer.agent.screens.dump import Dump\n",
    "phone/adapter.py": (
        "import socket\nimport uiautomator2\nfrom cmbuyer.agent.screens import dump\n"
        "def tap(d):\n    d.shell(['input', 'tap'])\n    d.submit_tap_once()\n"
    ),
    "pack/compile.py": (
        "import json\nfrom cmbuyer.agent.screens.packmodel import Pack\nfrom cmbuyer.schemas import validate\n"
    ),
    "pack/files.py": "from pathlib import Path\nfrom cmbuyer.agent.pack.compile import compile_pack\n",
    "authoring/inspect.py": "from cmbuyer.agent.pack import files\n",
    "authoring/capture.py": "from cmbuyer.agent.authoring.inspect import x\nfrom cmbuyer.agent.phone import adapter\n",
    "authoring/dryrun.py": "from cmbuyer.agent.authoring import capture\nfrom cmbuyer.agent import prefence\n",
    "prefence.py": "from cmbuyer.agent import capabilities\n",
    "capabilities.py": "from cmbuyer.agent.screens import packmodel\n",
    "gates.py": "from cmbuyer.agent.screens import dump\n",
    "journal.py": "import sqlite3\n",
    "permit.py": "class SubmissionPermit:\n    pass\n",
    "ports.py": "from cmbuyer.agent.permit import SubmissionPermit\n",
    "client.py": "from cmbuyer.agent.permit import SubmissionPermit\nimport urllib.request\n",
    "submit.py": "from cmbuyer.agent.permit import SubmissionPermit\ndef go(phone):\n    phone.submit_tap_once()\n",
    "flow.py": "from cmbuyer.agent import ports, submit, gates\nfrom cmbuyer.agent.permit import SubmissionPermit\n",
    "runner.py": "from cmbuyer.agent import flow\nfrom cmbuyer.agent.pack import files\n",
    "cli.py": "from cmbuyer.agent import client, runner\nfrom cmbuyer.agent.authoring import dryrun\n",
}


# what a synthetic breach must be reported as → (the file it adds or replaces in CLEAN, its text)
BREACHES = {
    "screens imports os": ("screens/bad.py", "import os\n"),
    "screens imports pathlib": ("screens/bad.py", "from pathlib import Path\n"),
    "screens calls open": ("screens/bad.py", "def f(p):\n    return open(p).read()\n"),
    "screens imports cmbuyer.schemas.files": ("screens/bad.py", "from cmbuyer.schemas.files import read_regular\n"),
    "screens imports cmbuyer.agent.pack.files": ("screens/bad.py", "from cmbuyer.agent.pack.files import x\n"),
    "screens imports cmbuyer.agent.journal": ("screens/bad.py", "def f():\n    import cmbuyer.agent.journal\n"),
    "screens imports requests": ("screens/bad.py", "import requests\n"),
    "phone imports cmbuyer.agent.pack.compile": ("phone/bad.py", "from cmbuyer.agent.pack import compile\n"),
    "phone imports requests": ("phone/bad.py", "import requests\n"),
    "pack imports cmbuyer.agent.authoring": ("pack/bad.py", "from cmbuyer.agent.authoring.inspect import x\n"),
    "pack imports cmbuyer.agent.runner": ("pack/bad.py", "from cmbuyer.agent import runner\n"),
    "runner2 imports cmbuyer.agent.authoring": ("runner2.py", "from cmbuyer.agent.authoring import inspect\n"),
    "flow reaches cmbuyer.agent.client": (
        "flow.py",
        "from cmbuyer.agent import ports, submit\nfrom cmbuyer.agent.client import E\n",
    ),
    "permit imported by runner": ("runner.py", "from cmbuyer.agent.permit import SubmissionPermit\n"),
    "submit imported by runner": ("runner.py", "from cmbuyer.agent.submit import go\n"),
    "journal reaches cmbuyer.agent.permit": ("journal.py", "from cmbuyer.agent import ports\n"),
    "the dry run reaches cmbuyer.agent.flow": ("prefence.py", "from cmbuyer.agent import runner\n"),
    "names create_submission_fence": ("authoring/dryrun.py", "def f(s):\n    s.create_submission_fence()\n"),
    "gates uses submit_tap_once": ("gates.py", "def f(phone):\n    phone.submit_tap_once()\n"),
    "gates builds an input tap command": ("gates.py", "def f(d):\n    d.shell(['input', 'tap'])\n"),
    "gates uses uiautomator2 click": ("gates.py", "def f(d):\n    d(text='x').click()\n"),
}


@pytest.mark.parametrize("expected", list(BREACHES))
def test_each_rule_catches_a_synthetic_breach(tmp_path: Path, expected: str) -> None:
    rel, text = BREACHES[expected]
    assert violations(write_tree(tmp_path / "agent", CLEAN)) == []
    found = violations(write_tree(tmp_path / "agent", {**CLEAN, rel: text}))
    assert any(expected in line for line in found), found
    # one rule broken, one kind of line (a reach breach may name each module it reaches)
    assert len({line.split(": ", 1)[1].split(" cmbuyer.")[0] for line in found}) == 1, found


def test_permit_cannot_be_forged_or_built_from_a_replay() -> None:
    from cmbuyer.agent.permit import PermitRefused, SubmissionPermit, _from_fence_response
    from tests.agent.fakes import make_purchase, read_proof

    proof = read_proof(make_purchase().task, Decimal("12.88"))
    with pytest.raises(TypeError):
        SubmissionPermit(object(), submission_id="x", attempt_id="y", task_id="z", proof=proof)
    body = {
        "submission_id": "f3c9f507-7473-4fa6-8d71-8786c34c6301",
        "status": "FENCED",
        "click_permitted": False,
        "reconciliation_required": True,
        "submit_text": "提交订单",
    }
    with pytest.raises(PermitRefused):
        _from_fence_response(body, attempt_id="a", task_id="t", proof=proof)
    first = dict(body, click_permitted=True, reconciliation_required=False)
    permit = _from_fence_response(first, attempt_id="a", task_id="t", proof=proof)
    assert permit.submission_id == body["submission_id"] and permit.proof is proof
    with pytest.raises(AttributeError):
        permit._submission_id = "other"  # type: ignore[misc]
