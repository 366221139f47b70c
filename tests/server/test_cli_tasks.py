"""``cmbuyer-server task import/export/cancel/reset/mark-paid`` and ``submission reconcile``
on a real data dir (made by the real ``init`` in a subprocess). The commands run in-process through
``cli.main`` — the same entry point as the console script, without a second of interpreter start per call;
device-side rows come from the admin tests' Seeder."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from openpyxl import load_workbook

from cmbuyer.server import cli as cli_module
from cmbuyer.server.clock import ManualClock
from cmbuyer.server.config import load_settings
from cmbuyer.server.db import connect_sync
from tests.server.admin.seed import Seeder
from tests.server.sheets.files import csv_bytes, good_row, xlsx
from tests.server.test_cli import ddir, task_add

__all__ = ["ddir"]  # the fixture, imported for this module


@dataclass
class Ran:
    """One in-process command: exit code, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """``run(ddir, *args)``: ``cmbuyer-server --data-dir ddir *args`` in-process (no CMBUYER_* variables)."""
    for key in [k for k in os.environ if k.startswith("CMBUYER_")]:
        monkeypatch.delenv(key)

    def call(data_dir: Path, *args: str) -> Ran:
        capsys.readouterr()
        code = cli_module.main(["--data-dir", str(data_dir), *args])
        out = capsys.readouterr()
        return Ran(int(code), out.out, out.err)

    return call


@pytest.fixture
def run_json(run: Callable[..., Ran]) -> Callable[..., Any]:
    """``run_json(ddir, *args)``: the command with ``--json``, which must succeed; its decoded stdout."""

    def call(data_dir: Path, *args: str) -> Any:
        done = run(data_dir, *args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return call


def test_task_add_takes_money_as_people_type_it(ddir: Path, run: Any, run_json: Any) -> None:
    assert run(ddir, *task_add(price="50")).returncode == 0
    listing = run_json(ddir, "task", "show", run_json(ddir, "task", "list")["tasks"][0]["task_id"])
    assert listing["task"]["max_total_price"] == "50.00"


def test_import_dry_run_then_import_then_again(ddir: Path, tmp_path: Path, run: Any, run_json: Any) -> None:
    bad = good_row(3, quantity=0)
    path = tmp_path / "tasks.xlsx"
    path.write_bytes(xlsx([good_row(1), good_row(2), bad]))
    dry = run(ddir, "task", "import", str(path), "--dry-run", "--json")
    out = json.loads(dry.stdout)
    assert dry.returncode == 1 and out["counts"] == {"ok": 2, "exists": 0, "error": 1} and out["dry_run"] is True
    assert out["rows"][2]["message"].startswith("数量：")
    assert run_json(ddir, "task", "list")["tasks"] == []
    first = run(ddir, "task", "import", str(path))
    assert first.returncode == 1 and "已导入 2 行，已存在 0 行，拒绝 1 行" in first.stdout
    assert "第 4 行：有错误 (error) 数量：" in first.stdout
    fixed = tmp_path / "fixed.csv"
    fixed.write_bytes(csv_bytes([good_row(1), good_row(2), good_row(3)]))
    again = json.loads(run(ddir, "task", "import", str(fixed), "--json").stdout)
    assert again["counts"] == {"ok": 1, "exists": 2, "error": 0}
    assert run(ddir, "task", "import", str(fixed)).returncode == 0  # every row imported or already there
    assert len(run_json(ddir, "task", "list")["tasks"]) == 3
    junk = tmp_path / "junk.xlsx"
    junk.write_bytes(b"PK\x03\x04garbage")
    refused = run(ddir, "task", "import", str(junk), "--json")
    assert refused.returncode == 1 and "xlsx 文件已损坏" in json.loads(refused.stdout)["refused"]


def test_export_to_stdout_and_file(ddir: Path, tmp_path: Path, run: Any) -> None:
    assert run(ddir, *task_add("=cmd|' /C calc'!A0")).returncode == 0
    text = run(ddir, "task", "export", "--state", "DRAFT", "--format", "csv").stdout
    assert text.startswith("\ufeff任务 id,") and "'=cmd|' /C calc'!A0" in text and "草稿,DRAFT" in text
    out = tmp_path / "out.xlsx"
    assert run(ddir, "task", "export", "--format", "xlsx", "--out", str(out)).returncode == 0
    rows = list(load_workbook(io.BytesIO(out.read_bytes())).worksheets[0].iter_rows(values_only=True))
    assert len(rows) == 2 and rows[1][1] == "'=cmd|' /C calc'!A0"
    assert run(ddir, "task", "export", "--state", "PAID").stdout.count("\n") == 1  # the header only


def _seeded(ddir: Path) -> tuple[sqlite3.Connection, Seeder]:
    settings = load_settings(ddir)
    conn = connect_sync(settings.db_path)
    clock = ManualClock()
    clock.set(datetime.now(UTC))
    return conn, Seeder(conn, clock, settings)


def test_cancel_reset_mark_paid_reconcile(ddir: Path, run: Any, run_json: Any) -> None:
    ids = [run_json(ddir, *task_add(f"t{i}"))["task_id"] for i in range(4)]
    run_json(ddir, "task", "start", *ids[1:])
    device = run_json(ddir, "device", "add", "--name", "phone-1")["device_id"]
    conn, seed = _seeded(ddir)
    try:
        paid_attempt = seed.claim(ids[2], device)
        seed.fence(ids[2], paid_attempt, device, observation="SUBMITTED", order_sn="231204-00000001")
        unsure_attempt = seed.claim(ids[3], device)
        sid = seed.fence(ids[3], unsure_attempt, device, observation="UNKNOWN")
    finally:
        conn.close()
    cancelled = run_json(ddir, "task", "cancel", ids[0])
    assert cancelled["state"] == "CANCELLED"
    stale = run(ddir, "task", "reset", ids[1], "--expected-version", "1")
    assert stale.returncode == 1 and "version_conflict" in stale.stderr
    assert run_json(ddir, "task", "reset", ids[1])["state"] == "DRAFT"
    assert run_json(ddir, "task", "mark-paid", ids[2])["state"] == "PAID"
    final = run(ddir, "task", "mark-paid", ids[2])  # PAID is final
    assert final.returncode == 1
    # the code as it is, the rest in Chinese from the pages' label tables
    assert final.stderr.strip().endswith("invalid_state: 任务状态为已付款（PAID）时不能标记已付款"), final.stderr
    again = run(ddir, "task", "reset", ids[0])
    assert again.returncode == 1
    assert again.stderr.strip().endswith("invalid_state: 任务状态为已取消（CANCELLED）时不能重置为草稿"), again.stderr
    done = run_json(ddir, "submission", "reconcile", sid, "--outcome", "created", "--note", "手机上看到了待付款订单")
    assert done["state"] == "WAITING_PAYMENT"
    conn = connect_sync(load_settings(ddir).db_path)
    try:
        actors = {
            r[0]
            for r in conn.execute(
                "SELECT actor_kind || ':' || actor_id FROM audit_log WHERE action IN"
                " ('task.cancel', 'task.reset_to_draft', 'task.mark_paid', 'submission.reconcile')"
            )
        }
    finally:
        conn.close()
    assert len(actors) == 1 and next(iter(actors)).startswith("cli:")


def test_task_show_text_summary_and_unchanged_json(ddir: Path, run: Any) -> None:
    """``task show`` prints labelled Chinese lines (phone, order number, result from the fence row);
    ``task show --json`` still prints the admin detail view as one sorted JSON object, byte for byte."""
    from cmbuyer.server.display.task_view import task_detail

    task_id = json.loads(
        run(ddir, *task_add("纸巾", color="黑色", size="M", quantity="3", price="45.00"), "--json").stdout
    )["task_id"]
    draft = run(ddir, "task", "show", task_id).stdout
    assert (
        "状态      草稿 (DRAFT) · 版本 v1" in draft
        and "尝试      0 次" in draft
        and "结果      -（尚未提交订单）" in draft
    )
    run(ddir, "task", "start", task_id)
    device = json.loads(run(ddir, "device", "add", "--name", "phone-7", "--json").stdout)["device_id"]
    conn, seed = _seeded(ddir)
    try:
        attempt = seed.claim(task_id, device)
        seed.fence(task_id, attempt, device, observation="SUBMITTED", order_sn="231204-00000042")
        expected = json.dumps(task_detail(conn, task_id), ensure_ascii=False, sort_keys=True) + "\n"
    finally:
        conn.close()
    shown = run(ddir, "task", "show", task_id)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    for wanted in (
        "状态      待付款 (WAITING_PAYMENT) · 版本 v",
        "商品      937122477375 https://",
        "规格      颜色=黑色 / 尺码=M",
        "数量      3",
        "价格上限  ¥45.00",
        "尝试      1 次",
        "手机      phone-7",
        "订单号    231204-00000042",
        "结果      ",
        "创建      ",
        "更新      ",
    ):
        assert any(line.startswith(wanted) for line in lines), (wanted, shown.stdout)
    assert "（北京时间）" in shown.stdout and "手机 phone-7" in shown.stdout and "{" not in shown.stdout
    as_json = run(ddir, "task", "show", task_id, "--json")
    assert as_json.returncode == 0 and as_json.stdout == expected
