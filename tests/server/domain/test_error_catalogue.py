"""One error catalogue and one exception root.

- ``Code`` (server/domain/codes.py) is every wire error code: its device codes are exactly the enum of
  ``device_error.response.json``, its admin codes exactly the enum of ``admin_error.response.json``;
- every code has one HTTP status, and every place in server/ that pairs a status with a code (the device
  and admin refusals, ``code=`` keywords, exception classes' ``code``/``status``) agrees with it; the admin
  web's ``refusal(code, …)`` calls name admin codes;
- every exception class the server defines derives from ``CmbuyerError``; storage failures and broken
  invariants are ``Unavailable`` (503).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import cmbuyer.server
from cmbuyer.schemas import enum_values
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain.codes import ADMIN_CODES, DEVICE_CODES, STATUS, Code
from cmbuyer.server.domain.errors import (
    BrokenInvariant,
    CmbuyerError,
    Conflict,
    DomainError,
    InvalidTransition,
    NotFound,
    SettingsError,
    StartupRefused,
    Unavailable,
    refusal,
)

SERVER = Path(__file__).parents[3] / "server"
DEVICE_SCHEMA = ("device_error.response", "/properties/error/enum")
ADMIN_SCHEMA = ("admin_error.response", "/properties/error/properties/code/enum")
# calls that answer (status, code): the device edge's and the admin web's
DEVICE_REFUSALS = {"DeviceHTTPError", "error_response"}
ADMIN_REFUSALS = {"Refused", "error_json", "error_page"}
ADMIN_WEB = SERVER / "web" / "admin"


def _server_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(cmbuyer.server.__path__, "cmbuyer.server."))


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text("utf-8"))) for p in sorted(SERVER.rglob("*.py"))]


def _code_of(node: ast.expr) -> str | None:
    """The code an argument names: a string literal or ``Code.X``; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Code":
        return Code[node.attr].value
    return None


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def test_device_codes_are_the_device_error_schema_enum() -> None:
    schema = enum_values(*DEVICE_SCHEMA)
    assert len(set(schema)) == len(schema)
    assert set(schema) == {c.value for c in DEVICE_CODES}


def test_admin_codes_are_the_admin_error_schema_enum() -> None:
    schema = enum_values(*ADMIN_SCHEMA)
    assert len(set(schema)) == len(schema)
    assert set(schema) == {c.value for c in ADMIN_CODES}


def test_every_code_has_one_status_and_an_audience() -> None:
    assert set(STATUS) == set(Code)
    assert all(400 <= status <= 599 for status in STATUS.values())
    assert STATUS[Code("version_conflict")] == 409 and STATUS[Code.STORAGE_UNAVAILABLE] == 503
    with pytest.raises(ValueError):
        Code("conflict")  # not a catalogue code
    # a code nobody on the wire hears is a command-line refusal (exit 1 with "<code>: <message>")
    assert set(Code) - DEVICE_CODES - ADMIN_CODES == {Code.USERNAME_TAKEN}


def test_codes_are_their_wire_strings() -> None:
    for code in Code:
        assert code == code.value and str(code) == code.value and f"{code}" == code.value
        assert code.name == code.value.upper()


@pytest.mark.parametrize("code", list(Code))
def test_refusal_builds_the_kind_and_status_of_each_code(code: Code) -> None:
    exc = refusal(code, "why")
    assert (exc.code, exc.status, exc.message, str(exc)) == (code, STATUS[code], "why", "why")
    expected = (
        InvalidTransition
        if code is Code.INVALID_STATE
        else NotFound
        if STATUS[code] == 404
        else Conflict
        if STATUS[code] == 409
        else DomainError
    )
    assert type(exc) is expected
    assert refusal(code).message == code.value


def test_domain_error_keeps_its_old_shape() -> None:
    exc = Conflict("task version changed", code="version_conflict")
    assert (exc.code, exc.status, exc.message) == (Code.VERSION_CONFLICT, 409, "task version changed")
    assert NotFound().message == "not_found" and NotFound().status == 404
    assert (InvalidTransition("x").code, InvalidTransition("x").status) == (Code.INVALID_STATE, 409)
    with pytest.raises(ValueError):
        Conflict("typo", code="version_conflcit")  # a code outside the catalogue never reaches the wire


def test_every_refusal_site_pairs_a_code_with_its_catalogue_status() -> None:
    seen: dict[str, set[str]] = {"device": set(), "admin": set(), "keyword": set()}
    bad: list[str] = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            for kw in node.keywords:
                if kw.arg == "code" and (code := _code_of(kw.value)) is not None:
                    seen["keyword"].add(code)
                    if code not in set(Code):
                        bad.append(f"{path.name}:{node.lineno}: code={code!r} is not a catalogue code")
            if name == "refusal" and node.args and (code := _code_of(node.args[0])) is not None:
                # ``refusal(code)`` names its code like a ``code=`` keyword, its status from the catalogue
                seen["keyword"].add(code)
                if code not in set(Code):
                    bad.append(f"{path.name}:{node.lineno}: refusal({code!r}) is not a catalogue code")
                # the admin web's refusals: the code must be an admin one
                if ADMIN_WEB in path.parents:
                    seen["admin"].add(code)
                    if code not in {c.value for c in ADMIN_CODES}:
                        bad.append(f"{path.name}:{node.lineno}: refusal({code!r}) is not an admin code")
            if name == "DeviceHTTPError" and node.args and (code := _code_of(node.args[0])) is not None:
                # the device edge's refusals take their status from the catalogue: the code must be a device one
                seen["device"].add(code)
                if code not in {c.value for c in DEVICE_CODES}:
                    bad.append(f"{path.name}:{node.lineno}: DeviceHTTPError({code!r}) is not a device code")
            if name not in DEVICE_REFUSALS | ADMIN_REFUSALS:
                continue
            args = node.args
            for i, arg in enumerate(args[:-1]):
                if isinstance(arg, ast.Constant) and type(arg.value) is int:
                    code = _code_of(args[i + 1])
                    if code is None:
                        break  # e.g. error_response(exc.status, exc.code): the error carries a checked pair
                    audience = "device" if name in DEVICE_REFUSALS else "admin"
                    seen[audience].add(code)
                    allowed = DEVICE_CODES if audience == "device" else ADMIN_CODES
                    if code not in {c.value for c in allowed} or STATUS[Code(code)] != arg.value:
                        bad.append(f"{path.name}:{node.lineno}: {name}({arg.value}, {code!r})")
                    break
    assert bad == []
    # the scan really reads the refusal sites (a scan that matched nothing would prove nothing)
    assert {"invalid_request", "request_too_large", "unsupported_media_type"} <= seen["device"]
    assert {"csrf_failed", "login_failed", "storage_unavailable", "not_found"} <= seen["admin"]
    assert {"version_conflict", "claim_not_current", "username_taken"} <= seen["keyword"]


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_name in _server_modules():
        module = importlib.import_module(module_name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module_name:
                found[f"{module_name}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_server_exception_has_the_one_root() -> None:
    classes = _exception_classes()
    assert {StorageError, StartupRefused, SettingsError, DomainError} <= set(classes)
    assert [c.__qualname__ for c in classes if not issubclass(c, CmbuyerError)] == []


def test_domain_error_classes_name_a_catalogue_code_with_its_status() -> None:
    for cls in _exception_classes():
        if issubclass(cls, DomainError) and "code" in vars(cls):
            code = Code(cls.code)  # ValueError: a class code outside the catalogue
            assert cls.status == STATUS[code], cls.__qualname__


def test_storage_failures_and_broken_invariants_are_unavailable() -> None:
    assert issubclass(StorageError, Unavailable) and issubclass(BrokenInvariant, Unavailable)
    assert not issubclass(BrokenInvariant, StorageError)  # an invariant is not a storage failure
    for exc in (StorageError("read failed"), BrokenInvariant("task changed under the write lock")):
        assert (exc.status, exc.code) == (503, Code.STORAGE_UNAVAILABLE)
    assert issubclass(SettingsError, ValueError)  # callers that catch ValueError keep working
