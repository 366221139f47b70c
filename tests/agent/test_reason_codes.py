"""Every reason code the agent can stop with is in the closed wire enum (common.json reason_code):
a static scan of the agent's sources for the codes passed to its errors."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# a code is the last string argument of an error constructor: FlowStop("…", "CODE"), PhoneError(…, "CODE")
CODE_RE = re.compile(r"(?:FlowStop|PhoneError|ScreenError|AgentError)\((?:[^()]|\([^()]*\))*?\"([A-Z][A-Z_]{2,})\"\)")


def test_agent_reason_codes_are_in_the_wire_enum() -> None:
    enum = set(json.loads((ROOT / "shared/schemas/common.json").read_text("utf-8"))["$defs"]["reason_code"]["enum"])
    found: dict[str, str] = {}
    for path in sorted((ROOT / "agent").rglob("*.py")):
        for code in CODE_RE.findall(path.read_text("utf-8")):
            found.setdefault(code, path.name)
    assert {
        "PAYMENT_MODE_UNSAFE",
        "SKU_DIMENSION_UNNAMED",
        "SKU_SELECTION_UNREADABLE",
        "QUANTITY_UNREADABLE",
        "TOTAL_ABOVE_ITEMS",
        "APP_UPDATE_PROMPT",
        "OUT_OF_STOCK",
        "SKU_VALUE_MISSING",
    } <= set(found)
    assert {c: f for c, f in found.items() if c not in enum} == {}


# --- the server's error codes: mapped through the device error schema's enum ----------

DEVICE_ENUM = ("device_error.response", "/properties/error/enum")


def _reason_enum() -> set[str]:
    return set(json.loads((ROOT / "shared/schemas/common.json").read_text("utf-8"))["$defs"]["reason_code"]["enum"])


def test_agent_server_codes_are_the_device_error_schema_enum_the_server_uses() -> None:
    from cmbuyer.agent.errors import SERVER_CODES
    from cmbuyer.schemas import enum_values
    from cmbuyer.server.domain.codes import DEVICE_CODES

    assert SERVER_CODES == set(enum_values(*DEVICE_ENUM)) == {c.value for c in DEVICE_CODES}


def test_rejection_tables_are_keyed_by_schema_codes_and_give_wire_reasons() -> None:
    from cmbuyer.agent import client, errors

    assert set(errors._REJECTION_REASONS) <= errors.SERVER_CODES
    assert set(errors._REJECTION_REASONS.values()) <= _reason_enum()
    assert set(client._TYPED_REJECTIONS) <= errors.SERVER_CODES
    assert all(issubclass(kind, errors.ServerRejected) for kind in client._TYPED_REJECTIONS.values())


def test_a_code_outside_the_schema_is_refused_at_import() -> None:
    from cmbuyer.agent.errors import by_server_code

    assert by_server_code({"fence_refused": 1}) == {"fence_refused": 1}
    with pytest.raises(ValueError, match="fence_refusd"):
        by_server_code({"fence_refused": 1, "fence_refusd": 2})


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("fence_refused", "FENCE_REFUSED"),
        ("submission_fenced", "FENCE_REFUSED"),
        ("version_conflict", "FENCE_REFUSED"),
        ("invalid_state", "FENCE_REFUSED"),
        ("approval_required", "FENCE_REFUSED"),
        ("claim_not_current", "LEASE_LOST"),
        ("claim_requires_manual", "LEASE_LOST"),
        ("app_version_not_allowed", "APP_VERSION_UNSUPPORTED"),
        ("not_supervised", "INTERNAL_ERROR"),
        ("invalid_request", "INTERNAL_ERROR"),  # every other schema code: a bug on one side, never a guess
        ("a_code_from_a_newer_server", "INTERNAL_ERROR"),
        (None, "INTERNAL_ERROR"),
    ],
)
def test_server_rejection_reason(code: str | None, reason: str) -> None:
    from cmbuyer.agent.errors import ServerRejected

    exc = ServerRejected(409, code)
    assert (exc.reason_code, exc.error, exc.final) == (reason, code, True)


def test_exit_codes_are_named_and_fixed() -> None:
    from cmbuyer.agent.errors import ExitCode

    assert {e.name: e.value for e in ExitCode} == {"OK": 0, "FAILED": 1, "USAGE": 2, "IDLE": 3, "INTERRUPTED": 130}


def _bare_numbers(value: ast.expr | None) -> bool:
    """A returned number written as a literal: ``return 2`` or ``return 0 if ok else 1``."""
    if isinstance(value, ast.IfExp):
        return _bare_numbers(value.body) or _bare_numbers(value.orelse)
    return isinstance(value, ast.Constant) and type(value.value) is int


def test_commands_return_named_exit_codes() -> None:
    """No exit status is a bare number in the command modules: ExitCode names every one."""
    commands = ("run", "exit_status", "_fail", "_error", "main")
    bare: list[str] = []
    for name in ("cli.py", "runner.py", "authoring/packtest.py", "authoring/dryrun.py"):
        tree = ast.parse((ROOT / "agent" / name).read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and (node.name.startswith("cmd_") or node.name in commands):
                bare += [
                    f"{name}:{r.lineno}" for r in ast.walk(node) if isinstance(r, ast.Return) and _bare_numbers(r.value)
                ]
    assert bare == []
    # the scan reads what it should: the old spelling is caught
    assert _bare_numbers(ast.parse("0 if ok else 1", mode="eval").body)
