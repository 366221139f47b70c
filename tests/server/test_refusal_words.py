"""Services and transactions raise codes only: no module under server/services/ or server/tx/ builds a refusal
(a :class:`~cmbuyer.server.domain.errors.DomainError` of any kind, or through ``refusal``) with a message of its
own; it names its reason and facts (``DomainError.because``) and ``display/labels.py`` ``REFUSAL_TEXTS`` words
them (docs/architecture.md "Refusals"). Checked with ast over the source, and on a synthetic module that
breaks the rule, so the scanner is shown to fail."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

from cmbuyer.server import services, tx
from cmbuyer.server.domain import errors

SERVER = Path(__file__).resolve().parents[2] / "server"


def _refusal_kinds() -> dict[str, int]:
    """The name of every refusal constructor → the position of its message argument: ``refusal(code,
    message)``, ``ValidationFailed(field, message)``, any other DomainError kind ``Kind(message)``. Kinds
    defined by a service or transaction module count too (they are imported first, so they are known)."""
    for package in (services, tx):
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{info.name}")
    kinds: dict[str, int] = {"refusal": 1}
    todo: list[type[errors.DomainError]] = [errors.DomainError]
    while todo:
        kind = todo.pop()
        if kind.__module__.startswith(("cmbuyer.server.domain", "cmbuyer.server.services", "cmbuyer.server.tx")):
            kinds[kind.__name__] = 1 if issubclass(kind, errors.ValidationFailed) else 0
        todo.extend(kind.__subclasses__())
    return kinds


def worded_refusals(path: Path) -> list[str]:
    """``file:line`` of every refusal built with a message in ``path`` (any message but ``""``: a literal, an
    f-string or a variable all put a person's words in the module)."""
    kinds = _refusal_kinds()
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in kinds:
            continue
        at = kinds[name]
        given = node.args[at] if len(node.args) > at else None
        given = next((k.value for k in node.keywords if k.arg == "message"), given)
        if given is not None and not (isinstance(given, ast.Constant) and given.value == ""):
            found.append(f"{path.name}:{node.lineno}")
    return found


SYNTHETIC = """
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain import errors
from cmbuyer.server.domain.codes import Code
from cmbuyer.server.domain.errors import InvalidTransition, NotFound, ValidationFailed, refusal


def words(n, text):
    raise NotFound("任务不存在")
    raise ValidationFailed("note", f"最多 {n} 字")
    raise refusal(Code.VERSION_CONFLICT, "任务已变化")
    raise errors.Conflict(message=text, code=Code.VERSION_CONFLICT)
    raise InvalidTransition("not allowed", use_case="cancel", state="PAID")


def codes(n):
    raise NotFound().because("task")
    raise ValidationFailed("note", "").because("note_length", max=str(n))
    raise refusal(Code.VERSION_CONFLICT).because("task_changed")
    raise StorageError("evidence file missing")  # not a refusal: a storage failure
    raise ValueError("x")
"""


def test_the_scanner_finds_every_worded_refusal_of_a_synthetic_module(tmp_path: Path) -> None:
    module = tmp_path / "synthetic.py"
    module.write_text(SYNTHETIC, encoding="utf-8")
    assert worded_refusals(module) == [f"synthetic.py:{n}" for n in (9, 10, 11, 12, 13)]


def test_services_and_transactions_raise_codes_only() -> None:
    paths = sorted([*(SERVER / "services").glob("*.py"), *(SERVER / "tx").glob("*.py")])
    assert len(paths) > 20 and any(p.name == "tasks.py" for p in paths)  # the scan reads the real tree
    assert [where for path in paths for where in worded_refusals(path)] == []
