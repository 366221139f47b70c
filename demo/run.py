"""`make demo` / `make demo-once`.

Sets up ./var/demo with fresh secrets and a demo admin (credentials printed), starts the server on
127.0.0.1:8080, the phone simulator with two phones and the demo catalogue, registers both phones as
devices, runs one agent per phone, creates and starts the demo tasks and prints a live line per task
until every task has settled. `make demo` then keeps serving until Ctrl-C; `--once` exits 0 only if
every task ended in its expected state and no goods was ordered twice for one task.

Supervised first orders: `make demo` keeps them on (``CMBUYER_SUPERVISED_ORDERS`` at its
default, 3) for ``SUPERVISED`` only — its orders wait at gate 3 until a person presses 批准 or 驳回 in
the admin task drawer — and exempts the other phone with the audited ``device supervision ID off``.
`--once` runs unwatched, so supervision is off there (``CMBUYER_SUPERVISED_ORDERS=0``).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

from cmbuyer.phonesim.journal import order_counts, payment_taps
from demo.stack import SETTLED, Stack, StackError, TaskSpec, port_is_free

SCENARIO = Path(__file__).with_name("scenario.yaml")
SERIALS = ["sim-1", "sim-2"]
# What each phone shows (scenario.yaml `phones:`): one phone per layout an app version may use.
LAYOUTS = {
    "sim-1": "拼多多 8.17.0 —— 单独的规格面板（确定），然后是确认订单页",
    "sim-2": "拼多多 8.22.0 —— 一个下单面板：规格、数量、支付方式和“提交订单”在一起",
}
SUPERVISED = "sim-2"  # `make demo` only: this phone's orders wait for a person's approval in the task drawer


def demo_tasks() -> list[TaskSpec]:
    """The demo's tasks and the state each must reach."""
    return [
        TaskSpec("纯棉短袖 黑M ×2", "937122477375", "黑色CHA(纯棉)", "M(建议100-115)", 2, "30.00"),
        TaskSpec("纯棉短袖 流砂灰L", "937122477375", "【流砂限定】灰色", "L(建议115-130)", 1, "20.00"),
        TaskSpec("卫裤 灰XL ×2", "700000000002", "灰色", "XL", 2, "90.00"),
        TaskSpec("珊瑚绒毛毯 樱花粉（只有一个规格维度）", "700000000003", "樱花粉", None, 1, "80.00"),
        TaskSpec(
            "冲锋衣 藏青L（提交后出现安全验证）",
            "700000000001",
            "藏青",
            "L",
            1,
            "200.00",
            expect=("RECONCILIATION_REQUIRED",),
        ),
        TaskSpec(
            "纯棉短袖 白XL ×3（超出总价上限）",
            "937122477375",
            "白色CHA(纯棉)",
            "XL(建议130-145)",
            3,
            "30.00",
            expect=("FAILED",),
        ),
    ]


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    """Pad to a terminal display width (CJK characters take two columns)."""
    while _width(text) > width:
        text = text[:-1]
    return text + " " * (width - _width(text))


def _line(spec: TaskSpec, detail: dict[str, Any], serial_of: dict[str, str]) -> str:
    task = detail["task"]
    attempts = detail["attempts"]
    device = serial_of.get(attempts[-1]["device_id"], attempts[-1]["device_id"][:8]) if attempts else "-"
    events = detail["events"]
    last = f"{events[-1]['step']}:{events[-1]['outcome']}" if events else ""
    reason = task.get("state_reason") or ""
    if last == "APPROVAL_WAIT:STARTED" and task["state"] not in SETTLED:
        reason = "等待人工确认 → /tasks：打开任务详情，点“批准”或“驳回”"
    mark = "✓" if task["state"] in spec.expect else ("…" if task["state"] not in SETTLED else "✗")
    return (
        f" {mark} {_pad(spec.title, 36)} {_pad(task['state_label'], 10)} {_pad(task['state'], 24)}"
        f" {_pad(device, 6)} {last} {reason}"
    )


def watch(stack: Stack, specs: list[TaskSpec], timeout: float | None, live: bool) -> dict[str, dict[str, Any]]:
    """Print progress until every task settled (or ``timeout`` s; None: no limit — `make demo` waits for
    the person approving the supervised phone's orders); returns the last details."""
    deadline = time.monotonic() + (timeout if timeout is not None else math.inf)
    seen: dict[str, str] = {}
    details: dict[str, dict[str, Any]] = {}
    drawn = 0
    while time.monotonic() < deadline:
        details = stack.task_details(specs)
        lines = [_line(s, details[s.task_id], stack.serial_of) for s in specs]
        if live:
            if drawn:
                sys.stdout.write(f"\x1b[{drawn}F")
            sys.stdout.write("".join(f"\x1b[2K{line}\n" for line in lines))
            drawn = len(lines)
        else:
            for spec, line in zip(specs, lines, strict=True):
                # a new state, or the supervised phone starting to wait for a person (same state)
                key = details[spec.task_id]["task"]["state"] + ("+wait" if "等待人工确认" in line else "")
                if seen.get(spec.task_id) != key:
                    seen[spec.task_id] = key
                    print(line, flush=True)
        sys.stdout.flush()
        if all(details[s.task_id]["task"]["state"] in SETTLED for s in specs):
            break
        check_alive(stack)
        time.sleep(0.5)
    return details


def font_line() -> str:
    """Which font the simulated phones' screenshots use, or a warning that Chinese will show as boxes."""
    from cmbuyer.phonesim.screenshot import font_path, has_cjk_font

    if has_cjk_font():
        return f"{font_path()}（截图能显示中文）"
    return "没有中文字体：截图里的中文会显示成方框（请运行 `make font`，它会安装 fonts-wqy-microhei）"


def check_alive(stack: Stack) -> None:
    """Say which demo process died (and where its log is), then stop the demo: its tasks could no longer
    move. Raises StackError."""
    dead = stack.dead()
    for line in dead:
        print(f" ! {line}", flush=True)
    if dead:
        raise StackError("演示的一个进程已退出：" + "；".join(dead))


def verify(stack: Stack, specs: list[TaskSpec], details: dict[str, dict[str, Any]]) -> list[str]:
    """Problems with the outcome: wrong end states, or more orders than tasks for a goods id."""
    problems = []
    for spec in specs:
        task = details[spec.task_id]["task"]
        state = task["state"]
        if state == "FAILED" and task.get("state_reason") == "REJECTED_BY_REVIEWER":
            continue  # `make demo`: a person pressed 驳回 on the supervised phone's order — their call
        if state not in spec.expect:
            problems.append(f"{spec.title}：结束于 {state}，预期 {'/'.join(spec.expect)}")
    entries = stack.phone_journal()
    orders = Counter(order_counts(entries))
    if payment_taps(entries):
        problems.append(f"点击了 {len(payment_taps(entries))} 次支付控件")
    ordering = ("WAITING_PAYMENT", "RECONCILIATION_REQUIRED")
    wanted = Counter(s.goods_id for s in specs if any(state in s.expect for state in ordering))
    for goods_id, count in orders.items():
        if count > wanted.get(goods_id, 0):
            problems.append(f"商品 {goods_id}：{wanted.get(goods_id, 0)} 个任务却创建了 {count} 个订单")
    return problems


def exempt_all_but(stack: Stack, serial: str) -> None:
    """Exempt every registered phone except ``serial`` from supervised first orders, through the audited
    server CLI ``device supervision ID off`` (docs/operations.md)."""
    for device_id, other in stack.serial_of.items():
        if other != serial:
            stack.cli("device", "supervision", device_id, "off")


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m demo.run`."""
    parser = argparse.ArgumentParser(prog="demo", description=__doc__)
    parser.add_argument("--once", action="store_true", help="headless: exit when every task settled")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--data-dir", type=Path, default=Path("var/demo"))
    parser.add_argument(
        "--timeout",
        type=float,
        default=240.0,
        help="--once: seconds every task may take to settle (without --once: no limit)",
    )
    args = parser.parse_args(argv)
    if not port_is_free(args.port):
        print(
            f"demo：127.0.0.1:{args.port} 已被占用；请停掉占用它的进程，或换一个端口：`make demo DEMO_PORT=8090`",
            file=sys.stderr,
        )
        return 2
    specs = demo_tasks()
    # demo-once runs unwatched: no person approves, so supervised first orders are off there
    stack = Stack(args.data_dir, server_port=args.port, env={"CMBUYER_SUPERVISED_ORDERS": "0"} if args.once else {})
    interrupted = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        stack.init()
        print(f"管理页面：{stack.url}/login   用户 admin   密码 {stack.admin_password}")
        stack.start_server()
        stack.start_sim(SERIALS, SCENARIO)
        for serial in SERIALS:
            stack.add_device(serial)
        if not args.once:
            exempt_all_but(stack, SUPERVISED)
        stack.create_tasks(specs)
        for serial in SERIALS:
            stack.start_agent(serial)
        print(f"手机：    {', '.join(SERIALS)}（模拟器；adb 在 127.0.0.1:{stack.sim_port}）")
        for serial, layout in LAYOUTS.items():
            print(f"          {serial}：{layout}")
        if not args.once:
            print(
                f"人工确认：{SUPERVISED} 的订单在闸门三等人确认（前几单人工监督）：在 {stack.url}/tasks "
                "打开标着“等待人工确认”的任务，点“批准”或“驳回”；另一台手机免除监督"
            )
        print(f"日志：    {stack.logs}")
        print(f"字体：    {font_line()}")
        print("任务：")
        details = watch(stack, specs, args.timeout if args.once else None, live=not args.once and sys.stdout.isatty())
        problems = verify(stack, specs, details)
        for problem in problems:
            print(f"问题：{problem}")
        if args.once:
            print("demo：每个任务都到达了预期状态" if not problems else "demo：失败（FAILED）")
            return 0 if not problems else 1
        print(f"\n所有任务都已结束。管理页面仍在 {stack.url}/tasks —— 按 Ctrl-C 全部停止。")
        while True:
            check_alive(stack)
            time.sleep(1)
    except KeyboardInterrupt:
        print("\n正在停止…")
        return 0 if not args.once or interrupted else 1
    except StackError as exc:
        print(f"demo：{exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    raise SystemExit(main())
