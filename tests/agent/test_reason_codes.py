"""Every reason code the agent can stop with is in the closed wire enum (common.json reason_code):
a static scan of the agent's sources for the codes passed to its errors (issue 15 §8)."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
