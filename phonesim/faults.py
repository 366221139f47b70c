"""Fault injection: what can go wrong on a real phone, armed by simple triggers.

A fault spec is a dict ``{"kind": ..., "when": {...}, "times": n, **params}``:

* ``when`` (all given conditions must hold): ``after_dumps`` / ``after_taps`` /
  ``after_calls`` = that many dumps / taps / adb device calls already served,
  ``on_screen`` = the current screen name (see :mod:`.screens`). Empty = armed now.
* ``times``: how many times it fires (default 1); ``null`` = every time while armed.

Kinds and their parameters are listed in :data:`KINDS`; docs/phonesim.md has examples.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from .names import OVERLAYS, PAYMENT_MODES

DUMP_KINDS = frozenset({"empty_dump", "single_node_dump", "partial_dump", "malformed_dump", "emoji_dump"})
MUTATION_KINDS = frozenset(
    {"price_change", "stock_out", "version_change", "popup", "duplicate_submit", "payment_mode_change", "overlay"}
)
POPUPS = (
    "update",
    "coupon",
    "splash",
    "float_video",
    "order_success",
    "risk_wall",
    "face_check",
    "account_risk",
    "real_name",
    "too_busy",
)
# popups that BACK cannot dismiss and no tap leaves: the agent must stop and report
WALLS = frozenset({"risk_wall", "face_check", "account_risk", "real_name", "too_busy"})

# kind -> (required params, optional params with defaults)
KINDS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "empty_dump": ((), {"form": "xml"}),  # form: "xml" (<hierarchy rotation="0" />) or "string" ("")
    "single_node_dump": ((), {}),
    "partial_dump": ((), {"keep_depth": 3}),
    "malformed_dump": ((), {}),
    "emoji_dump": ((), {"mode": "intact"}),  # intact: emoji in texts; broken: lone UTF-16 surrogates
    "slow": (("seconds",), {"op": "dump"}),  # op: dump|tap|screenshot|rpc|shell|key|any
    "price_change": (("goods_id", "price"), {"options": None}),
    "stock_out": (("goods_id",), {"options": None, "stock": 0}),
    "version_change": (("version_name", "version_code"), {}),
    "duplicate_version": (("version_name", "version_code"), {}),
    # on: any (next device call) | tap | submit_tap | shell (with match=regex); n: the n-th device call
    "drop_connection": ((), {"on": "any", "match": None, "applied": None, "offline_for": 0.0, "n": None}),
    "rpc_crash": ((), {"method": None, "applied": True}),
    "popup": (("popup",), {"text": None}),
    # from when it fires, every confirm page draws a second clickable 提交订单 control (left of the real one)
    "duplicate_submit": ((), {}),
    # from when it fires, the order sheet's payment row shows this mode (names.PAYMENT_MODES), e.g. an
    # A/B switch to 先用后付 while the agent waits for a person's approval
    "payment_mode_change": (("mode",), {}),
    # from when it fires, a window lies over the app's submit control (phonesim/overlays.py: coupon | toast |
    # foreign), e.g. after the agent's last gate: the submit tap, sent as coordinates, would land on it
    "overlay": (("window",), {}),
    "wrong_focus": ((), {"package": "com.android.systemui", "activity": "com.android.systemui.statusbar.StatusBar"}),
}
_WHEN_KEYS = ("after_dumps", "after_taps", "after_calls", "on_screen")


def validate_fault(spec: dict[str, Any]) -> dict[str, Any]:
    """Check one spec; returns a normalised copy with defaults filled in. Raises ValueError."""
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        raise ValueError(f"fault needs a kind from {sorted(KINDS)}: {spec!r}")
    kind = spec["kind"]
    required, optional = KINDS[kind]
    allowed = {"kind", "when", "times", *required, *optional}
    extra = set(spec) - allowed
    if extra:
        raise ValueError(f"fault {kind}: unknown keys {sorted(extra)}")
    missing = [k for k in required if k not in spec]
    if missing:
        raise ValueError(f"fault {kind}: missing {missing}")
    out = {**optional, **spec}
    when = dict(out.get("when") or {})
    if set(when) - set(_WHEN_KEYS):
        raise ValueError(f"fault {kind}: unknown when keys {sorted(set(when) - set(_WHEN_KEYS))}")
    out["when"] = when
    out.setdefault("times", 1)
    if kind == "popup" and out["popup"] not in POPUPS:
        raise ValueError(f"popup must be one of {POPUPS}")
    if kind == "drop_connection":
        if out["on"] not in ("any", "tap", "submit_tap", "shell"):
            raise ValueError("drop_connection.on must be any|tap|submit_tap|shell")
        if out["n"] is not None:
            # "drop the n-th device call" == armed once n-1 calls were served
            when["after_calls"] = int(out["n"]) - 1
        if out["applied"] is None:
            # a dropped submit tap that still reached the screen is the dangerous, realistic case
            out["applied"] = out["on"] in ("tap", "submit_tap")
        if out["match"] is not None:
            re.compile(out["match"])
    if kind == "payment_mode_change":
        if out["mode"] not in PAYMENT_MODES:
            raise ValueError(f"payment_mode_change.mode must be one of {PAYMENT_MODES}")
    if kind == "overlay":
        if out["window"] not in OVERLAYS:
            raise ValueError(f"overlay.window must be one of {OVERLAYS}")
    if kind == "slow" and out["op"] not in ("dump", "tap", "screenshot", "rpc", "shell", "key", "any"):
        raise ValueError("slow.op must be dump|tap|screenshot|rpc|shell|key|any")
    return out


_ids = itertools.count(1)


@dataclass
class Fault:
    """An armed-or-waiting fault. ``fired`` counts how often it has taken effect."""

    kind: str
    params: dict[str, Any]
    when: dict[str, Any]
    times: int | None
    id: int = field(default_factory=lambda: next(_ids))
    fired: int = 0

    def armed(self, counters: dict[str, int], screen: str) -> bool:
        w = self.when
        if "after_dumps" in w and counters.get("dumps", 0) < w["after_dumps"]:
            return False
        if "after_taps" in w and counters.get("taps", 0) < w["after_taps"]:
            return False
        if "after_calls" in w and counters.get("adb_calls", 0) < w["after_calls"]:
            return False
        return not ("on_screen" in w and screen != w["on_screen"])

    @property
    def spent(self) -> bool:
        return self.times is not None and self.fired >= self.times

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "when": self.when,
            "times": self.times,
            "fired": self.fired,
            **self.params,
        }


class FaultBook:
    """The faults of one phone. Not thread-safe on its own: the phone's lock guards it."""

    def __init__(self, specs: list[dict[str, Any]] | None = None):
        self._faults: list[Fault] = []
        for spec in specs or []:
            self.add(spec)

    def add(self, spec: dict[str, Any]) -> Fault:
        norm = validate_fault(spec)
        params = {k: v for k, v in norm.items() if k not in ("kind", "when", "times")}
        fault = Fault(norm["kind"], params, norm["when"], norm["times"])
        self._faults.append(fault)
        return fault

    def clear(self, kind: str | None = None) -> None:
        self._faults = [f for f in self._faults if kind is not None and f.kind != kind]

    def take(
        self, kinds: frozenset[str] | set[str], counters: dict[str, int], screen: str, accept: Any = None
    ) -> Fault | None:
        """Fire the first armed, unspent fault of ``kinds`` (optionally filtered by ``accept(fault)``)."""
        for fault in self._faults:
            if fault.kind in kinds and not fault.spent and fault.armed(counters, screen):
                if accept is not None and not accept(fault):
                    continue
                fault.fired += 1
                return fault
        return None

    def active(self, kind: str, counters: dict[str, int], screen: str) -> list[Fault]:
        """Armed, unspent faults of one kind, without firing them."""
        return [f for f in self._faults if f.kind == kind and not f.spent and f.armed(counters, screen)]

    def describe(self) -> list[dict[str, Any]]:
        return [f.describe() for f in self._faults]
