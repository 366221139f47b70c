"""Purchase benchmark (issue 8): wall time and phone round trips per order on a phone with the
published real-phone timings (dump 150 ms, tap 40 ms, screenshot 90 ms, app start 3 s), beside the
minimum the flow needs — the sum of the simulated latencies of the calls no correct flow can avoid.

Run: `make bench` (or `.venv/bin/python bench/purchase.py [--orders N]`). Prints one JSON object.

The unavoidable calls of one order with quantity q on goods with D SKU dimensions:
- one app start (the deep link that opens the product page) and two shell reads (goods id, activity);
- a stable read (two equal consecutive dumps, design §7.3) of each screen the flow must verify:
  product page, SKU panel, panel after selection (gate 1), panel after quantity (gate 2),
  confirm page (gate 3), result screen — 6 screens, 12 dumps;
- taps: buy button, one tile per dimension, q-1 stepper taps, the panel's confirm, the submit tap;
- screenshots: the three gates and the post-submit observation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cmbuyer.phonesim.process import remote_state
from cmbuyer.phonesim.scenario import REALISTIC
from demo.stack import SETTLED, Stack, TaskSpec, free_port

SCENARIO = Path(__file__).resolve().parents[1] / "demo" / "scenario.yaml"
QUANTITY = 2
DIMENSIONS = 2


def unavoidable_seconds(quantity: int, dimensions: int) -> tuple[float, dict[str, int]]:
    """Minimum phone time of one order and the call counts it is made of."""
    calls = {"app_start": 1, "shell": 2, "dump": 12, "tap": 3 + dimensions + quantity - 1, "screenshot": 4}
    return sum(REALISTIC[kind] * n for kind, n in calls.items()), calls


def _ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def run(orders: int) -> dict[str, object]:
    """Run ``orders`` purchases one after another on one realistic phone; return the measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        # Supervised first orders (issue 17) would hold the phone's first orders for a person's approval;
        # the benchmark measures the unattended flow, as `make demo-once` does.
        stack = Stack(Path(tmp) / "data", server_port=free_port(), env={"CMBUYER_SUPERVISED_ORDERS": "0"})
        try:
            stack.init()
            stack.start_server()
            stack.start_sim(["sim-1"], SCENARIO, latency="realistic")
            stack.add_device("sim-1")
            specs = [
                TaskSpec(f"bench{i}", "937122477375", "黑色CHA(纯棉)", "M(建议100-115)", QUANTITY, "100.00")
                for i in range(orders)
            ]
            before = remote_state(stack.sim_port, "sim-1")["counters"]
            stack.create_tasks(specs)
            stack.start_agent("sim-1")
            deadline = time.monotonic() + 60 + 30 * orders
            details = stack.task_details(specs)
            while time.monotonic() < deadline:
                details = stack.task_details(specs)
                if all(d["task"]["state"] in SETTLED for d in details.values()):
                    break
                time.sleep(0.2)
            after = remote_state(stack.sim_port, "sim-1")["counters"]
        finally:
            stack.stop()
    states = sorted({d["task"]["state"] for d in details.values()})
    if states != ["WAITING_PAYMENT"]:
        raise SystemExit(f"benchmark run did not create every order: {states}")
    per_order = [_ts(d["submission"]["result_at"]) - _ts(d["attempts"][0]["created_at"]) for d in details.values()]
    minimum, calls = unavoidable_seconds(QUANTITY, DIMENSIONS)
    used = {k: (after[k] - before[k]) / orders for k in ("dumps", "taps", "screenshots", "shell_calls", "rpc_calls")}
    mean = sum(per_order) / len(per_order)
    return {
        "orders": orders,
        "wall_seconds_per_order": {
            "mean": round(mean, 3),
            "min": round(min(per_order), 3),
            "max": round(max(per_order), 3),
        },
        "phone_round_trips_per_order": used,
        "unavoidable_calls_per_order": calls,
        "unavoidable_seconds_per_order": round(minimum, 3),
        "ratio_wall_to_unavoidable": round(mean / minimum, 3),
        "target_ratio": 1.3,
    }


def main() -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3)
    args = parser.parse_args()
    result = run(args.orders)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
