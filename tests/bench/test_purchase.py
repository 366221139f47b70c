"""bench/purchase.py's accounting: which step each phone call is put in, and the model's
counts. The bench itself runs the real stack (`make bench`); here its attribution runs on a journal and
an agent log written by hand, so a wrong boundary shows without a 30 s run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench" / "purchase.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_purchase", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T0 = 1_800_000_000.0


def _line(at: float, text: str) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(T0 + at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z " + text


def _call(at: float, kind: str, **extra: Any) -> dict[str, Any]:
    return {"ts": T0 + at, "kind": kind, **extra}


def test_each_call_lands_in_the_step_the_agent_had_started() -> None:
    bench = _bench()
    log = "\n".join(
        [
            _line(0.0, "已领取任务 t1（尝试 a1）"),  # not a boundary: the first step's line is
            _line(0.1, "OPEN_PRODUCT STARTED"),
            _line(1.0, "OPEN_PRODUCT OK"),  # an OK line is no boundary
            _line(1.0, "OPEN_SKU_PANEL STARTED"),
            _line(2.0, "SELECT_SKU STARTED"),
            _line(3.0, "SET_QUANTITY STARTED"),
            _line(3.5, "GATE_2 STARTED"),
            _line(4.0, "GO_TO_CONFIRM STARTED"),  # after gate 2: gate 3's step
            _line(5.0, "FENCE STARTED"),
            _line(7.0, "CONFIRM_ORDER_READONLY STARTED: read-only order confirmation"),
            _line(8.0, "RESULT SUBMITTED"),
        ]
    )
    journal = [
        _call(0.5, "shell", cmd="dumpsys activity top"),
        _call(0.9, "rpc", method="dumpWindowHierarchy"),
        _call(0.95, "dump"),
        _call(1.5, "tap", role="buy"),
        _call(1.5, "shell", cmd="input tap 1 2"),
        _call(2.5, "screenshot"),
        _call(4.5, "dump"),
        _call(5.5, "dump"),  # the last look
        _call(6.0, "tap", role="submit"),
        _call(6.0, "shell", cmd="input tap 3 4"),
        _call(6.5, "dump"),
        _call(6.6, "shell", cmd="dumpsys window windows"),
        _call(7.5, "dump"),
        _call(9.0, "dump"),  # after the last result: not counted
    ]
    rows = bench.per_step(journal, log, 1, claims=[T0 + 0.05])
    timing = ("seconds", "wall", "gap")
    got = {step: {k: v for k, v in cell.items() if v and k not in timing} for step, cell in rows.items()}
    assert got == {
        "between orders": {},
        "claim": {},
        "product page": {"dumps": 1, "shell_calls": 1, "rpc_calls": 1},
        "SKU panel": {"taps": 1, "shell_calls": 1},
        "gate 1": {"screenshots": 1},
        "gate 2": {},
        "order sheet / gate 3": {"dumps": 1},
        "pre-tap last look": {"dumps": 1},
        "submit": {"taps": 1, "shell_calls": 1},
        "post-tap observation": {"dumps": 1, "shell_calls": 1},
        "read-only confirmation": {"dumps": 1},
    }
    # latencies: a tap through `input tap` is tap + shell; a dump's rpc costs its dump only
    assert rows["submit"]["seconds"] == 0.06 and rows["product page"]["seconds"] == 0.17
    # wall: from each boundary to the next; the submit row from the tap's start (its end − 60 ms)
    walls = {step: cell["wall"] for step, cell in rows.items()}
    assert walls["claim"] == 0.05 and walls["product page"] == 0.9 and walls["gate 2"] == 1.0
    assert walls["pre-tap last look"] == 0.94 and walls["submit"] == 0.06 and walls["read-only confirmation"] == 1.0
    assert round(sum(walls.values()), 2) == 7.95  # claim → RESULT
    assert rows["product page"]["gap"] == round(0.9 - 0.17, 2)


def test_warm_rows_leave_the_first_order_out() -> None:
    bench = _bench()
    log = "\n".join(
        _line(at, text)
        for base in (0.0, 10.0)
        for at, text in ((base + 0.1, "OPEN_PRODUCT STARTED"), (base + 5.0, "RESULT SUBMITTED"))
    )
    journal = [_call(1.0, "dump"), _call(2.0, "dump"), _call(11.0, "dump")]
    rows = bench.per_step(journal, log, 2, claims=[T0, T0 + 10.0], skip=1)
    assert rows["product page"]["dumps"] == 1 and rows["product page"]["wall"] == 4.9
    assert rows["claim"]["wall"] == 0.1


def test_the_model_counts() -> None:
    bench = _bench()
    seconds, calls = bench.unavoidable_seconds(2, 2)
    assert calls == {"app_start": 1, "shell": 9, "dump": 17, "tap": 6, "screenshot": 5}
    assert round(seconds, 2) == 6.42 and bench.TARGET_RATIO == 1.10
