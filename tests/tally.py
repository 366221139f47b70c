"""The per-task tally of submit taps against fences.

"Orders ≤ tasks" cannot see a double tap when every task buys the same goods: one task tapped twice
plus one task that failed before its fence still adds up. The invariant is per task:

- every submit tap on the phone belongs to a task (each task buys its own goods id, so the
  simulator's journal names the task of every tap) and lies inside that task's fence window — at or
  after the server created the task's submission (no tap outside a fence);
- at most one submit tap per fenced submission (and so at most one order);
- the orders the phone created for the task's goods ≤ its submissions.

:func:`fences` reads the server side (``order_submissions``, committed rows only), :func:`tally`
matches it with the simulator's journal entries and returns the violations (empty = sane).
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml


def fences(db: Path, task_ids: Iterable[str]) -> dict[str, list[float]]:
    """``{task_id: [creation time (Unix seconds) of each submission]}`` for the given tasks."""
    wanted = list(task_ids)
    out: dict[str, list[float]] = {t: [] for t in wanted}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        for task_id, created in conn.execute("SELECT task_id, created_at FROM order_submissions"):
            if task_id in out:
                out[task_id].append(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())
    finally:
        conn.close()
    return out


def tally(journal: list[dict[str, Any]], goods_of: dict[str, str], fenced: dict[str, list[float]]) -> list[str]:
    """Violations of the per-task invariant (module docstring); ``goods_of`` maps task id → goods id
    (distinct per task), ``fenced`` is :func:`fences`. Taps count whether or not the simulator
    applied them: a tap sent outside a fence is the bug even if the connection dropped."""
    task_of = {g: t for t, g in goods_of.items()}
    if len(task_of) != len(goods_of):
        return ["tasks share a goods id: a double tap could hide behind another task"]
    problems: list[str] = []
    taps: dict[str, list[float]] = {t: [] for t in goods_of}
    for e in journal:
        if e.get("kind") != "tap" or e.get("role") != "submit":
            continue
        task = task_of.get(str(e.get("goods_id")))
        if task is None:
            problems.append(f"submit tap #{e.get('seq')} on goods {e.get('goods_id')} of no task")
            continue
        taps[task].append(float(e["ts"]))
    orders = Counter(str(e.get("goods_id")) for e in journal if e.get("kind") == "order")
    for task, times in taps.items():
        windows = sorted(fenced.get(task, []))
        if len(times) > len(windows):
            problems.append(f"task {task}: {len(times)} submit taps for {len(windows)} fenced submissions")
        if times and (not windows or min(times) < windows[0]):
            problems.append(f"task {task}: a submit tap outside a fence")
        if orders.get(goods_of[task], 0) > len(windows):
            problems.append(f"task {task}: {orders[goods_of[task]]} orders for {len(windows)} fenced submissions")
    return problems


def goods_per_task(data: dict[str, Any], bases: list[str]) -> list[str]:
    """Give every task its own goods: append to the scenario ``data`` (changed in place) one copy of
    the catalogue goods ``bases[i]`` per task under a new, distinct goods id (same title, options,
    prices and stock). Returns the new ids, one per entry of ``bases``."""
    by_id = {g["goods_id"]: g for g in data["catalogue"]}
    ids = [f"8{i:011d}" for i in range(1, len(bases) + 1)]
    for gid, base in zip(ids, bases, strict=True):
        clone = copy.deepcopy(by_id[base])
        clone["goods_id"] = gid
        data["catalogue"].append(clone)
    return ids


def scenario_with_goods_per_task(scenario: Path, out: Path, bases: list[str]) -> list[str]:
    """:func:`goods_per_task` on a scenario file; the result is written to ``out`` (JSON)."""
    data = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    ids = goods_per_task(data, bases)
    out.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return ids
