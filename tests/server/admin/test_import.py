"""Spreadsheet import and export on the admin pages (server/web/admin/task_io.py, services/task_import.py):
preview, confirm, re-upload idempotency, bad files changing nothing, CSRF on the upload,
parsing off the event loop, the export of the filtered view, and the search by order number."""

from __future__ import annotations

import asyncio
import io
import re
import threading
from typing import Any

import pytest
from openpyxl import load_workbook

from cmbuyer.server.services import task_import
from tests.server.sheets.files import (
    HEADER,
    OLE2_ENCRYPTED,
    csv_bytes,
    encrypted_zip_flag,
    good_row,
    xlsx,
)
from tests.server.submissions.helpers import multipart

from .conftest import AdminClient

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_TOKEN = re.compile(r'name="token" value="([^"]+)"')


async def upload(ac: AdminClient, data: bytes, *, ctype: str = XLSX, csrf: str | None = None, **kw: Any) -> Any:
    body, content_type = multipart(
        {"csrf_token": ac.csrf if csrf is None else csrf}, data, file_headers=f"Content-Type: {ctype}\r\n"
    )
    headers = {"Content-Type": content_type, **kw.pop("headers", {})}
    return await ac.client.post("/tasks/import", data=body, headers=headers, allow_redirects=False, **kw)


async def preview_token(ac: AdminClient, data: bytes) -> tuple[str, str]:
    resp = await upload(ac, data)
    html = await resp.text()
    assert resp.status == 200, html
    m = _TOKEN.search(html)
    assert m, "no confirm form"
    return m.group(1), html


async def import_file(ac: AdminClient, data: bytes) -> str:
    token, _ = await preview_token(ac, data)
    resp = await ac.post_form("/tasks/import/confirm", {"token": token})
    assert resp.status == 200
    return await resp.text()


def count(conn: Any, sql: str = "SELECT count(*) FROM tasks") -> int:
    return int(conn.execute(sql).fetchone()[0])


async def test_preview_shows_every_row_then_confirm_creates_drafts(admin_client: AdminClient, sync_conn: Any) -> None:
    rows = [good_row(i) for i in range(5)]
    rows[1][HEADER.index("max_total_price")] = 30.123
    rows[3][HEADER.index("product_url")] = "https://evil.example/goods.html?goods_id=1"
    token, html = await preview_token(admin_client, xlsx(rows, header=[*HEADER, "备注"]))
    assert count(sync_conn) == 0  # the preview writes nothing
    assert 'data-line="3" data-status="error"' in html and "最高总价：金额最多两位小数" in html
    assert 'data-line="5" data-status="error"' in html and "商品链接：只接受拼多多商品链接" in html
    assert '<td class="muted">导入任务 3</td>' in html  # the refused row's title, as typed
    assert "以下列无法识别，已忽略：备注" in html and "确认导入 3 个草稿任务" in html
    result = await admin_client.post_form("/tasks/import/confirm", {"token": token})
    text = await result.text()
    assert "已导入 3 个草稿任务；0 行已存在（未重复创建）；2 行有错误（未导入）" in text
    assert count(sync_conn, "SELECT count(*) FROM tasks WHERE state = 'DRAFT'") == 3
    # one audit row for the import and one per task, naming the import
    (detail,) = sync_conn.execute("SELECT detail_json FROM audit_log WHERE action = 'task.import'").fetchone()
    assert '"created":3' in detail and '"refused":2' in detail and '"refused_lines":[3,5]' in detail
    assert (
        count(
            sync_conn, "SELECT count(*) FROM audit_log WHERE action = 'task.create' AND detail_json LIKE '%import_id%'"
        )
        == 3
    )
    # the same preview cannot be confirmed twice
    again = await admin_client.post_form("/tasks/import/confirm", {"token": token})
    assert again.status == 409 and count(sync_conn) == 3


async def test_reupload_creates_nothing_and_a_corrected_copy_creates_exactly_the_missing_task(
    admin_client: AdminClient, sync_conn: Any
) -> None:
    rows = [good_row(i) for i in range(6)]
    bad = [*rows]
    bad[2] = good_row(2, quantity=0)
    await import_file(admin_client, xlsx(bad))
    assert count(sync_conn) == 5
    _, html = await preview_token(admin_client, xlsx(bad))
    assert html.count('data-status="exists"') == 5 and "已存在（任务 " in html
    text = await import_file(admin_client, xlsx(bad))
    assert "已导入 0 个草稿任务；5 行已存在" in text and count(sync_conn) == 5
    text = await import_file(admin_client, xlsx(rows))  # "fix the bad row, upload again"
    assert "已导入 1 个草稿任务；5 行已存在" in text
    assert count(sync_conn) == 6
    assert count(sync_conn, "SELECT count(*) FROM tasks WHERE quantity = 3 AND goods_id = '900000002'") == 1


async def test_a_cancelled_task_does_not_block_its_row(admin_client: AdminClient, sync_conn: Any) -> None:
    await import_file(admin_client, csv_bytes([good_row(1)]))
    (task_id, version) = sync_conn.execute("SELECT id, version FROM tasks").fetchone()
    resp = await admin_client.post_form(f"/tasks/{task_id}/cancel", {"expected_task_version": str(version)})
    assert resp.status == 303
    assert "已导入 1 个草稿任务" in await import_file(admin_client, csv_bytes([good_row(1)]))
    assert count(sync_conn) == 2


async def test_create_key_column_overrides_content_identity(admin_client: AdminClient, sync_conn: Any) -> None:
    keys = ["0b6f5c8e-1d2a-4c3b-9e4f-5a6b7c8d9e0f", "1b6f5c8e-1d2a-4c3b-9e4f-5a6b7c8d9e0f"]
    data = csv_bytes([[*good_row(1), k] for k in keys], header=[*HEADER, "create_key"], bom=True)
    assert "已导入 2 个草稿任务" in await import_file(admin_client, data)
    assert "已导入 0 个草稿任务；2 行已存在" in await import_file(admin_client, data)
    assert count(sync_conn) == 2


BAD_UPLOADS = [
    ("not a spreadsheet", b"\x89PNG\r\n\x1a\n" + bytes(range(200)), 400, "无法识别的文件"),
    ("password-protected", OLE2_ENCRYPTED, 400, "文件有密码保护"),
    ("zip encryption", encrypted_zip_flag(), 400, "xlsx 文件有密码保护"),
    ("corrupt xlsx", xlsx([good_row(1)])[:500], 400, "xlsx 文件已损坏"),
    ("missing column", csv_bytes([["a", "b"]], header=["title", "product_url"]), 400, "缺少必需的列"),
    ("too many rows", csv_bytes([good_row(i) for i in range(9)]), 400, "文件超过 8 行数据"),
    ("too large", b"title\r\n" + b"x" * 70_000, 413, "文件超过 64 KiB"),
]


@pytest.fixture
def settings(settings: Any) -> Any:
    """Small limits so the bad-file table's files stay small: 8 rows, 64 KiB."""
    from dataclasses import replace

    return replace(settings, import_max_rows=8, import_max_bytes=64 * 1024)


@pytest.mark.parametrize(("name", "data", "status", "message"), BAD_UPLOADS, ids=[b[0] for b in BAD_UPLOADS])
async def test_bad_files_get_a_clear_error_and_change_nothing(
    admin_client: AdminClient, sync_conn: Any, name: str, data: bytes, status: int, message: str
) -> None:
    audit_before = count(sync_conn, "SELECT count(*) FROM audit_log")
    resp = await upload(admin_client, data)
    text = await resp.text()
    assert resp.status == status, text
    assert message in text
    assert 'name="token"' not in text  # no confirm form
    assert count(sync_conn) == 0 and count(sync_conn, "SELECT count(*) FROM audit_log") == audit_before


async def test_rows_refused_inside_a_file_import_nothing_when_none_is_valid(
    admin_client: AdminClient, sync_conn: Any
) -> None:
    rows = [good_row(1), good_row(1), good_row(2, max_total_price="=A1")]
    data = xlsx([rows[0], rows[1], [*good_row(2)[:5], "=1+1"]])
    _, html = await preview_token(admin_client, data)
    assert "与第 2 行重复" in html and "不接受公式" in html
    assert "确认导入 1 个草稿任务" in html  # only the first row


async def test_upload_needs_session_csrf_and_same_origin(
    admin_client: AdminClient, server_client: Any, sync_conn: Any
) -> None:
    data = csv_bytes([good_row(1)])
    assert (await upload(admin_client, data, csrf="0" * 64)).status == 403
    assert (await upload(admin_client, data, headers={"Origin": "http://evil.example"})).status == 403
    assert (await upload(admin_client, data, ctype="image/png")).status == 400
    body, ctype = multipart({"csrf_token": admin_client.csrf}, data, file_headers="Content-Type: text/csv\r\n")
    server_client.session.cookie_jar.clear()
    anonymous = await server_client.post("/tasks/import", data=body, headers={"Content-Type": ctype})
    assert anonymous.status == 401
    assert count(sync_conn) == 0


async def test_parsing_runs_off_the_event_loop(admin_client: AdminClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse runs in a worker thread (not the loop's), and the server answers other requests meanwhile."""
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = task_import.parse
    release, started = threading.Event(), threading.Event()

    def parse(data: bytes, settings: Any) -> Any:
        seen.append(threading.get_ident())
        started.set()
        assert release.wait(10)  # held until the loop has served another request
        return real(data, settings)

    monkeypatch.setattr(task_import, "parse", parse)
    pending = asyncio.ensure_future(upload(admin_client, csv_bytes([good_row(1)])))
    await asyncio.wait_for(asyncio.to_thread(started.wait, 10), 15)
    health = await admin_client.client.get("/healthz")
    assert health.status == 200
    release.set()
    assert (await pending).status == 200
    assert seen and seen[0] != loop_thread


async def test_template_downloads(admin_client: AdminClient) -> None:
    resp = await admin_client.client.get("/tasks/import/template.xlsx")
    assert resp.status == 200 and resp.headers["Content-Type"] == XLSX
    sheet = load_workbook(io.BytesIO(await resp.read())).worksheets[0]
    rows = [[c.value for c in r] for r in sheet.iter_rows()]
    columns = ["option1", "option2", "option3", "sku_color", "sku_size"]  # options, or colour/size
    assert rows[0] == ["title", "product_url", *columns, "quantity", "max_total_price", "create_key"]
    assert len(rows) == 2 and rows[1][2:4] == ["颜色分类=黑色", "尺码=M"]
    csv_resp = await admin_client.client.get("/tasks/import/template.csv")
    assert (await csv_resp.read()).startswith(b"\xef\xbb\xbftitle,product_url,")


async def test_export_of_the_filtered_view(
    admin_client: AdminClient, sync_conn: Any, fenced_task: Any, seed: Any
) -> None:
    await import_file(admin_client, csv_bytes([good_row(1, title='=HYPERLINK("http://evil")'), good_row(2)]))
    task, sid = fenced_task(observation="SUBMITTED")
    sync_conn.execute("UPDATE order_submissions SET order_sn = '231204-55667788' WHERE id = ?", (sid,))
    sync_conn.commit()
    resp = await admin_client.client.get("/tasks/export?state=DRAFT&format=xlsx")
    assert resp.status == 200 and "attachment" in resp.headers["Content-Disposition"]
    sheet = load_workbook(io.BytesIO(await resp.read())).worksheets[0]
    rows = [[c.value for c in r] for r in sheet.iter_rows()]
    assert rows[0][:3] == ["任务 id", "标题", "商品 id"] and len(rows) == 3
    assert {r[1] for r in rows[1:]} == {'\'=HYPERLINK("http://evil")', "导入任务 2"}  # neutralised on export
    assert sync_conn.execute("SELECT title FROM tasks WHERE goods_id = '900000001'").fetchone()[0].startswith("=")
    every = await admin_client.client.get("/tasks/export?format=csv")
    text = (await every.read()).decode("utf-8-sig")
    line = next(line for line in text.splitlines() if task.id in line)
    assert "待付款" in line and "WAITING_PAYMENT" in line and "231204-55667788" in line
    assert (await admin_client.client.get("/tasks/export?format=pdf")).status == 400
    # the task search finds the task by its order number
    found = await (await admin_client.client.get("/tasks?q=231204-55667788")).text()
    assert task.id in found and found.count("data-task-id=") == 1


async def test_state_counts_at_the_top(admin_client: AdminClient, make_task: Any) -> None:
    make_task(), make_task(), make_task(start=True)
    html = await (await admin_client.client.get("/tasks")).text()
    assert re.search(r"全部 <b>3</b>", html)
    assert re.search(r'data-state="DRAFT">草稿 <b>2</b>', html) and re.search(
        r'data-state="PENDING">待领取 <b>1</b>', html
    )
