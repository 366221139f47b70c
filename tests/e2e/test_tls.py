"""The whole system over HTTPS: a server on 127.0.0.2 with a private CA from
``cmbuyer-server tls init``, two agents that trust it with ``--server-ca`` completing orders, and an agent
without the CA that refuses to talk (no retry, no plain HTTP) — all in one run of the real processes."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from cmbuyer.phonesim.journal import order_counts, payment_taps
from demo.stack import BIN, SETTLED, Stack, free_port
from tests.e2e.conftest import STACK_ENV, stop_and_show_logs
from tests.e2e.test_system import goods_per_task, shirt

pytestmark = pytest.mark.e2e


def test_two_agents_complete_orders_over_tls_and_one_without_the_ca_refuses(tmp_path: Path) -> None:
    stack = Stack(
        tmp_path / "data",
        server_port=free_port(),
        server_host="127.0.0.2",  # not 127.0.0.1: the agents reach it by the name in its certificate
        env=STACK_ENV,
    )
    stack.init()
    try:
        tls = stack.cli("tls", "init", "--host", "127.0.0.2")
        ca = Path(tls["ca_cert"])
        stack.ca = ca
        stack.start_server()
        specs = [shirt(f"tls{i}", color=["黑色CHA(纯棉)", "白色CHA(纯棉)"][i % 2]) for i in range(4)]
        stack.start_sim(["sim-1", "sim-2"], goods_per_task(stack, specs))
        creds = {serial: stack.add_device(serial) for serial in ("sim-1", "sim-2")}
        stack.create_tasks(specs)

        # Without the CA: a clear TLS refusal at start, exit 2, and the server never heard from it.
        refused = subprocess.run(
            [
                *(str(BIN / "cmbuyer-agent"), "run", "--device", "sim-1", "--server", stack.url),
                *("--credentials-file", str(creds["sim-1"]), "--once"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in stack.agent_env().items() if k != "CMBUYER_SERVER_CA"},
        )
        assert refused.returncode == 2, refused.stderr
        assert "TLS" in refused.stderr and "--server-ca" in refused.stderr
        devices = stack.cli("device", "list")["devices"]
        assert all(d["last_heartbeat_at"] is None for d in devices), "the refusing agent must send nothing"

        for serial in ("sim-1", "sim-2"):
            stack.start_agent(serial, ("--server-ca", str(ca)))
        deadline = time.monotonic() + 180
        details: dict[str, dict] = {}
        while time.monotonic() < deadline:
            details = stack.task_details(specs)
            if all(d["task"]["state"] in SETTLED for d in details.values()):
                break
            time.sleep(0.3)
        assert all(d["task"]["state"] == "WAITING_PAYMENT" for d in details.values()), {
            s.title: details[s.task_id]["task"]["state"] for s in specs
        }
        journal = stack.phone_journal()
        assert order_counts(journal) == dict(Counter(s.goods_id for s in specs))
        assert payment_taps(journal) == []
        workers = {d["attempts"][0]["device_id"] for d in details.values() if d.get("attempts")}
        assert len(workers) == 2, "both agents must have worked over TLS"
    finally:
        stop_and_show_logs(stack)


def test_serve_on_every_interface_without_tls_refuses_to_start(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "data", server_port=free_port())
    stack.init()
    result = subprocess.run(
        [
            *(str(BIN / "cmbuyer-server"), "--data-dir", str(stack.data_dir), "serve"),
            *("--host", "0.0.0.0", "--port", str(stack.server_port)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("CMBUYER_")},
    )
    assert result.returncode == 3
    assert "TLS" in result.stderr and "0.0.0.0" in result.stderr
