"""Fleet benchmark: N simulated phones with the published real-phone latencies, one real
``cmbuyer-agent run`` process per phone and one server — what a phone host carries.

Run: `make bench` (N = 8) or `make soak` (N = 32), or `.venv/bin/python bench/fleet.py [--phones N]
[--orders-per-phone K]`. Prints one JSON object:

- ``ratio_wall_to_unavoidable``: each order's wall time (attempt created → submit result recorded, as in
  bench/purchase.py) divided by the unavoidable phone time of one order — the model of
  :func:`bench.purchase.unavoidable_seconds`, the one home of that rule — mean and max over all orders.
  On a host whose cores keep up this is the purchase bench's ratio; above it is time the phones waited
  for the host.
- ``agent``: CPU seconds (user + system, every thread: ``/proc/<pid>/stat``) and peak RSS
  (``VmHWM`` in ``/proc/<pid>/status``) of each agent process. ``cpu_seconds_per_order`` counts only
  what the agents spent between "all agents idle" and "every order settled", divided by the orders;
  ``startup_cpu_seconds`` (imports, connecting, the first polls) and ``idle_rss_mb`` (resident memory
  of an agent that has started and waits for work) are reported apart. RSS counts the shared libraries'
  pages in full in every agent; ``*_pss_mb`` divides them among the processes that map them — what one
  more phone costs a host (``peak_pss_mb_sampled``: the largest of samples taken every 0.5 s).
- ``server_cpu_seconds_per_order`` and ``simulator_cpu_seconds_per_order``: the same window for the
  server and for the phone simulator — the latter is work real phones do themselves, reported apart
  because on this machine it competes with the agents for the same cores.
- ``load``: the 1-minute load average before and after, and the machine's core count: the machine
  may be shared, so a run's numbers mean something only beside its load.
- ``states`` and ``not_created``: every order must end WAITING_PAYMENT; any other ends the run with exit
  status 1 after printing, each named with the reason code of its last event (the figures above then
  count the created orders only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.purchase import DIMENSIONS, QUANTITY, SCENARIO, unavoidable_seconds
from cmbuyer.phonesim.process import remote_state
from demo.stack import GOODS_URL, SETTLED, Stack, free_port

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
GOODS_ID = "937122477375"
IDLE_SECONDS = 3.0  # agents are "idle" when none spent CPU for this long (they poll the server meanwhile)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) from ``/proc/<pid>/stat``."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15 of proc(5))


def memory_mb(pid: int) -> dict[str, float]:
    """Memory of process ``pid`` in MiB: ``rss`` now and ``peak`` (high-water mark) from
    ``/proc/<pid>/status``; ``pss`` (shared pages divided among the processes that map them — the
    libraries' code is mapped by every agent of the host) and ``uss`` (pages no other process shares)
    from ``/proc/<pid>/smaps_rollup``."""
    out: dict[str, float] = {"uss": 0.0}
    names = {"VmRSS": "rss", "VmHWM": "peak", "Pss": "pss"}
    for path in (f"/proc/{pid}/status", f"/proc/{pid}/smaps_rollup"):
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(":")
            if key in names:
                out[names[key]] = int(value.split()[0]) / 1024
            elif key in ("Private_Clean", "Private_Dirty"):
                out["uss"] += int(value.split()[0]) / 1024
    return out


def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def _wait_idle(pids: list[int], timeout: float) -> None:
    """Until no process in ``pids`` used CPU (beyond a poll's crumbs) for :data:`IDLE_SECONDS`."""
    deadline = time.monotonic() + timeout
    last = {pid: cpu_seconds(pid) for pid in pids}
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = {pid: cpu_seconds(pid) for pid in pids}
        if any(now[pid] - last[pid] > 0.05 for pid in pids):
            quiet_since = time.monotonic()
        last = now
        if time.monotonic() - quiet_since >= IDLE_SECONDS:
            return
    raise SystemExit("the agents never became idle")


def _summary(values: list[float], digits: int = 3) -> dict[str, float]:
    return {
        "mean": round(statistics.fmean(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


def run(phones: int, orders_per_phone: int, profile: Path | None = None) -> dict[str, object]:
    """Run ``phones`` × ``orders_per_phone`` purchases on a fleet; return the measurements. ``profile``: write
    py-spy's collapsed stacks of the first agent over the measured window there (py-spy must be installed)."""
    serials = [f"sim-{i + 1}" for i in range(phones)]
    orders = phones * orders_per_phone
    with tempfile.TemporaryDirectory() as tmp:
        # unattended flow, as bench/purchase.py: no supervised first orders waiting for a person
        stack = Stack(Path(tmp) / "data", server_port=free_port(), env={"CMBUYER_SUPERVISED_ORDERS": "0"})
        try:
            stack.init()
            stack.start_server()
            stack.start_sim(serials, SCENARIO, latency="realistic")
            for serial in serials:
                stack.add_device(serial)
            # tasks are added as drafts first and started in one batch once the agents idle, so neither
            # the CLI's processes nor the agents' start-up fall inside the measured window
            task_ids = []
            for i in range(orders):
                out = stack.cli(
                    "task", "add", "--title", f"fleet{i}", "--url", GOODS_URL.format(goods_id=GOODS_ID),
                    "--color", "黑色CHA(纯棉)", "--size", "M(建议100-115)",
                    "--quantity", str(QUANTITY), "--max-total-price", "100.00",
                )  # fmt: skip
                task_ids.append(out["task_id"])
            started = time.monotonic()
            for serial in serials:
                stack.start_agent(serial)
            agents = {serial: proc.pid for serial, proc in stack.agents.items()}
            assert stack.server is not None and stack.sim is not None
            server_pid, sim_pid = stack.server.pid, stack.sim.pid
            _wait_idle(list(agents.values()), 60 + 5 * phones)
            startup_wait = time.monotonic() - started
            idle_mem = {s: memory_mb(pid) for s, pid in agents.items()}
            load_before = os.getloadavg()[0]
            cpu0 = {s: cpu_seconds(pid) for s, pid in agents.items()}
            server0, sim0 = cpu_seconds(server_pid), cpu_seconds(sim_pid)
            spy = _py_spy(agents[serials[0]], profile) if profile is not None else None
            calls0 = _phone_calls(stack, serials)
            window = time.monotonic()
            stack.cli("task", "start", *task_ids)
            details = {}
            deadline = time.monotonic() + 120 + 30 * orders_per_phone * max(1.0, phones / 4)
            pss_peak = {s: 0.0 for s in agents}
            while time.monotonic() < deadline:
                for s, pid in agents.items():  # the kernel keeps no high-water mark of PSS: sample it
                    pss_peak[s] = max(pss_peak[s], memory_mb(pid)["pss"])
                details = _details(stack, task_ids)
                if all(d["task"]["state"] in SETTLED for d in details.values()):
                    break
                dead = stack.dead()  # a crashed agent's orders would go to the others and skew every number
                if dead:
                    raise SystemExit("fleet run: a process died: " + "; ".join(dead))
                time.sleep(0.5)
            window = time.monotonic() - window
            cpu1 = {s: cpu_seconds(pid) for s, pid in agents.items()}
            server1, sim1 = cpu_seconds(server_pid), cpu_seconds(sim_pid)
            mem = {s: memory_mb(pid) for s, pid in agents.items()}
            calls1 = _phone_calls(stack, serials)
            load_after = os.getloadavg()[0]
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                spy.wait(timeout=30)
        finally:
            stack.stop()
    states: dict[str, int] = {}
    for d in details.values():
        states[d["task"]["state"]] = states.get(d["task"]["state"], 0) + 1
    # an order that did not end waiting for payment is reported with the reason of its last event (on a
    # saturated host: a phone call past its deadline, a lease lost) — and the run fails (see main)
    not_created = sorted(
        f"{d['task']['state']}: {_last_reason(d)}" for d in details.values() if d["task"]["state"] != "WAITING_PAYMENT"
    )
    created = [d for d in details.values() if d["task"]["state"] == "WAITING_PAYMENT"]
    if not created:
        raise SystemExit(f"fleet run created no order: {states}")
    minimum, _calls = unavoidable_seconds(QUANTITY, DIMENSIONS)
    ratios = [(_ts(d["submission"]["result_at"]) - _ts(d["attempts"][0]["created_at"])) / minimum for d in created]
    done: dict[str, int] = {}
    by_device = {device_id: serial for device_id, serial in stack.serial_of.items()}
    for d in created:
        serial = by_device[d["attempts"][-1]["device_id"]]
        done[serial] = done.get(serial, 0) + 1
    agent_cpu = {s: cpu1[s] - cpu0[s] for s in agents}
    per_phone = [
        {
            "serial": s,
            "orders": done.get(s, 0),
            "cpu_seconds": round(agent_cpu[s], 3),
            "cpu_seconds_per_order": round(agent_cpu[s] / done[s], 3) if done.get(s) else None,
            "startup_cpu_seconds": round(cpu0[s], 3),
            "idle_rss_mb": round(idle_mem[s]["rss"], 1),
            "peak_rss_mb": round(mem[s]["peak"], 1),
            "rss_after_mb": round(mem[s]["rss"], 1),
        }
        for s in serials
    ]
    return {
        "phones": phones,
        "orders": orders,
        "states": states,
        "not_created": not_created,
        "unavoidable_seconds_per_order": round(minimum, 3),
        "ratio_wall_to_unavoidable": _summary(ratios),
        "agent": {
            "cpu_seconds_per_order": round(sum(agent_cpu.values()) / len(created), 3),
            "cpu_seconds_per_order_by_phone": _summary(
                [p["cpu_seconds_per_order"] for p in per_phone if p["cpu_seconds_per_order"] is not None]
            ),
            "peak_rss_mb": _summary([m["peak"] for m in mem.values()], 1),
            "idle_rss_mb": _summary([m["rss"] for m in idle_mem.values()], 1),
            "rss_after_mb": _summary([m["rss"] for m in mem.values()], 1),
            "idle_pss_mb": _summary([m["pss"] for m in idle_mem.values()], 1),
            "peak_pss_mb_sampled": _summary(list(pss_peak.values()), 1),
            "idle_uss_mb": _summary([m["uss"] for m in idle_mem.values()], 1),
            "startup_cpu_seconds": _summary(list(cpu0.values())),
            "startup_wait_seconds": round(startup_wait, 1),
            "per_phone": per_phone,
        },
        "phone_calls_per_order": {k: round((calls1[k] - calls0[k]) / len(created), 2) for k in calls0},
        "server_cpu_seconds_per_order": round((server1 - server0) / len(created), 3),
        "simulator_cpu_seconds_per_order": round((sim1 - sim0) / len(created), 3),
        "window_seconds": round(window, 1),
        "load": {"before": round(load_before, 2), "after": round(load_after, 2), "cores": os.cpu_count()},
        "targets": {"ratio_mean": 1.15, "agent_cpu_seconds_per_order": 0.25, "agent_peak_rss_mb": 40},
    }


def _phone_calls(stack: Stack, serials: list[str]) -> dict[str, int]:
    """The simulator's call counters summed over the fleet's phones."""
    total: dict[str, int] = {}
    for serial in serials:
        for key, value in remote_state(stack.sim_port, serial)["counters"].items():
            total[key] = total.get(key, 0) + int(value)
    return total


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` into ``out`` as collapsed stacks: every thread, but only while it holds the
    GIL (``--gil``), so waits on the phone, the server or a lock are not counted as work."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy into the venv)")
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--threads",
            "--gil",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _last_reason(detail: dict[str, Any]) -> str:
    """The reason code of the task's last event that has one (``?`` when none does)."""
    for event in reversed(detail.get("events") or []):
        if event.get("reason_code"):
            return str(event["reason_code"])
    return "?"


def _details(stack: Stack, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    from cmbuyer.server.db import connect_sync
    from cmbuyer.server.display import task_view

    conn = connect_sync(stack.data_dir / "cmbuyer.sqlite3", read_only=True)
    try:
        return {t: task_view.task_detail(conn, t) for t in task_ids}
    finally:
        conn.close()


def main() -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phones", type=int, default=8)
    parser.add_argument("--orders-per-phone", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="py-spy collapsed stacks of the first agent, written here")
    args = parser.parse_args()
    result = run(args.phones, args.orders_per_phone, args.profile)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 1 if result["not_created"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
