"""GET /tasks (table, filters, keyset pages, Chinese labels), POST /tasks, POST /tasks/start-purchases."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest

from cmbuyer.schemas import validate
from cmbuyer.server.clock import from_wire
from cmbuyer.server.display.labels import TASK_STATE_LABELS
from cmbuyer.server.domain.states import TaskState
from cmbuyer.server.tx.common import new_id
from cmbuyer.server.web.admin.tasks import PAGE_SIZE, START_BUTTON

from .conftest import AdminClient

URL = "https://mobile.yangkeduo.com/goods.html?goods_id=937122477375"


def row_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-task-id="([0-9a-f-]{36})"', html)


def form(**over: Any) -> dict[str, str]:
    base = {
        "create_key": new_id(),
        "title": "纯棉短袖",
        "product_url": URL,
        "sku_color": "黑色CHA(纯棉)",
        "sku_size": "M(建议100-115)",
        "quantity": "2",
        "max_total_price": "30.00",
    }
    base.update(over)
    return base


def body(**over: Any) -> dict[str, Any]:
    b: dict[str, Any] = dict(form())
    b["quantity"] = 2
    b.update(over)
    return b


async def test_list_shows_chinese_state_labels_and_start_button(admin_client: AdminClient, make_task: Any) -> None:
    make_task(title="草稿任务")
    make_task(title="已开始任务", start=True)
    html = await (await admin_client.client.get("/tasks")).text()
    assert TASK_STATE_LABELS[TaskState.DRAFT] in html and TASK_STATE_LABELS[TaskState.PENDING] in html
    assert f">{START_BUTTON}</button>" in html
    assert START_BUTTON == "开始采购（只创建待付款订单）"
    # DRAFT and PENDING rows are selectable: the batch start takes the drafts (its confirmation names the
    # others), the bulk cancel both
    assert html.count('name="task" value=') == 2


async def test_filters_state_keyword_dates(admin_client: AdminClient, make_task: Any, clock: Any) -> None:
    t0 = clock.now()
    a = make_task(title="纯棉短袖 黑", goods_id="111111111")
    clock.advance(86400 * 3)
    b = make_task(title="加绒卫衣", goods_id="222222222", color="藏青", start=True)
    c = make_task(title="短袖", goods_id="333333333")
    clock.set(t0 + timedelta(seconds=60))  # back inside the session's idle window
    get = admin_client.client.get

    async def ids(query: str) -> set[str]:
        resp = await get("/tasks" + query)
        assert resp.status == 200
        return set(row_ids(await resp.text()))

    assert await ids("") == {a.id, b.id, c.id}
    assert await ids("?state=PENDING") == {b.id}
    assert await ids("?state=DRAFT&state=PENDING") == {a.id, b.id, c.id}
    assert await ids("?state=BOGUS") == {a.id, b.id, c.id}  # ignored with a message
    assert await ids("?q=纯棉短袖") == {a.id}  # trigram index
    assert await ids("?q=短袖") == {a.id, c.id}  # short keyword: bounded window
    assert await ids("?q=藏青") == {b.id}  # SKU text is searchable too
    assert await ids("?q=222222222") == {b.id}  # exact goods id
    assert await ids(f"?q={c.id}") == {c.id}  # task id
    assert await ids("?q=不存在的商品") == set()
    assert await ids('?q=" OR 1') == set()  # FTS syntax is quoted, not interpreted
    day_a = (from_wire(a.created_at) + timedelta(hours=8)).strftime("%Y-%m-%d")
    day_b = (from_wire(b.created_at) + timedelta(hours=8)).strftime("%Y-%m-%d")
    assert await ids(f"?from={day_a}&to={day_a}") == {a.id}
    assert await ids(f"?from={day_b}") == {b.id, c.id}
    resp = await get("/tasks?from=2026-13-45")
    assert resp.status == 200 and "日期格式" in await resp.text()


async def test_keyset_pagination(admin_client: AdminClient, make_task: Any, clock: Any) -> None:
    made = []
    for i in range(PAGE_SIZE + 7):
        made.append(make_task(title=f"任务{i:03d}").id)
        clock.advance(1)
    newest_first = list(reversed(made))
    html = await (await admin_client.client.get("/tasks")).text()
    first = row_ids(html)
    assert first == newest_first[:PAGE_SIZE]
    nxt = re.search(r'href="([^"]+)" rel="next"', html)
    assert nxt is not None
    html2 = await (await admin_client.client.get(nxt.group(1).replace("&amp;", "&"))).text()
    assert row_ids(html2) == newest_first[PAGE_SIZE:]
    assert 'rel="next"' not in html2
    prev = re.search(r'href="([^"]+)" rel="prev"', html2)
    assert prev is not None
    html3 = await (await admin_client.client.get(prev.group(1).replace("&amp;", "&"))).text()
    assert row_ids(html3) == newest_first[:PAGE_SIZE]


async def test_create_form_makes_a_draft(admin_client: AdminClient, sync_conn: Any) -> None:
    resp = await admin_client.post_form("/tasks", form(sku_color="ＸＬ黑色", title="  标题  "))
    assert resp.status == 303 and resp.headers["Location"] == "/tasks?notice=created"
    row = sync_conn.execute("SELECT state, version, sku_options, title, goods_id, product_url FROM tasks").fetchone()
    options = '[["颜色","XL黑色"],["尺码","M(建议100-115)"]]'  # the colour/size fields: the special case
    assert row[:] == ("DRAFT", 1, options, "标题", "937122477375", URL)  # NFKC, trimmed, canonical
    assert sync_conn.execute("SELECT count(*) FROM authorizations").fetchone()[0] == 0
    html = await (await admin_client.client.get("/tasks?notice=created")).text()
    assert "已创建草稿任务" in html


async def test_create_json_idempotency(admin_client: AdminClient, sync_conn: Any) -> None:
    b = body()
    first = await admin_client.post_json("/tasks", b)
    assert first.status == 201
    created = await first.json()
    assert created["state"] == "DRAFT" and created["task_version"] == 1
    again = await admin_client.post_json("/tasks", b)
    assert again.status == 200 and (await again.json())["task_id"] == created["task_id"]
    conflict = await admin_client.post_json("/tasks", {**b, "quantity": 3})
    assert conflict.status == 409
    err = await conflict.json()
    validate("admin_error.response", err)
    assert err["error"]["code"] == "idempotency_conflict"
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 1


BAD_FIELDS = [
    ("product_url", "https://evil.example/goods.html?goods_id=1"),
    ("product_url", "https://mobile.yangkeduo.com/goods.html?goods_id=1&goods_id=2"),
    ("product_url", "https://mobile.yangkeduo.com/goods.html?goods_id=12a"),
    ("product_url", "https://mobile.yangkeduo.com/goods.html"),
    ("product_url", "javascript:alert(1)"),
    ("product_url", "https://user@mobile.yangkeduo.com/goods.html?goods_id=1"),
    ("sku_color", "x" * 65),
    ("sku_color", ""),
    ("sku_size", "M\x00"),
    ("title", ""),
    ("quantity", 0),
    ("quantity", 100),
    ("quantity", "2"),
    ("quantity", True),
    ("max_total_price", "30"),
    ("max_total_price", "30.001"),
    ("max_total_price", "-1.00"),
    ("max_total_price", "５.00"),
    ("max_total_price", "99999.00"),
    ("max_total_price", 30),
    ("create_key", "not-a-uuid"),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
async def test_create_json_rejects_bad_fields(
    admin_client: AdminClient, sync_conn: Any, field: str, value: Any
) -> None:
    resp = await admin_client.post_json("/tasks", body(**{field: value}))
    assert resp.status == 400
    err = await resp.json()
    validate("admin_error.response", err)
    assert err["error"]["code"] == "invalid_request"
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_create_json_rejects_unknown_duplicate_and_float(admin_client: AdminClient) -> None:
    assert (await admin_client.post_json("/tasks", {**body(), "extra": 1})).status == 400
    raw = b'{"create_key":"d3c9f507-7473-4fa6-8d71-8786c34c6301","quantity":1.0}'
    for payload in (raw, b'{"a":1,"a":2}', b"[]", b"{} {}", b"\xef\xbb\xbf{}"):
        resp = await admin_client.client.post(
            "/tasks", data=payload, headers={"Content-Type": "application/json", "X-CSRF-Token": admin_client.csrf}
        )
        assert resp.status == 400, payload


async def test_create_form_error_keeps_values_and_names_field(admin_client: AdminClient) -> None:
    resp = await admin_client.post_form("/tasks", form(max_total_price="30.001", title="保留的标题"))
    assert resp.status == 400
    html = await resp.text()
    assert "最高总价" in html and 'value="保留的标题"' in html
    resp = await admin_client.post_form("/tasks", form(quantity="1.5"))
    assert resp.status == 400 and "数量" in await resp.text()


async def test_start_purchases_json(
    admin_client: AdminClient, make_task: Any, sync_conn: Any, clock: Any, settings: Any
) -> None:
    a, b = make_task(), make_task()
    req = {
        "start_key": new_id(),
        "tasks": [{"task_id": a.id, "expected_task_version": 1}, {"task_id": b.id, "expected_task_version": 1}],
    }
    resp = await admin_client.post_json("/tasks/start-purchases", req)
    assert resp.status == 200
    out = await resp.json()
    validate("start_purchases.response", out)
    assert out["payment_automated"] is False and out["authorized_count"] == 2
    assert {t["task_version"] for t in out["tasks"]} == {2}
    rows = sync_conn.execute("SELECT state, expires_at FROM authorizations").fetchall()
    expected_expiry = clock.now() + timedelta(seconds=settings.authorization_ttl)
    assert all(r[0] == "ACTIVE" and from_wire(r[1]) == expected_expiry for r in rows) and len(rows) == 2
    # replay: same key + same set → same body; different set → 409
    replay = await admin_client.post_json("/tasks/start-purchases", req)
    assert replay.status == 200 and await replay.json() == out
    other = await admin_client.post_json("/tasks/start-purchases", {**req, "tasks": req["tasks"][:1]})
    assert other.status == 409 and (await other.json())["error"]["code"] == "idempotency_conflict"


async def test_start_purchases_is_atomic_and_checks_versions(
    admin_client: AdminClient, make_task: Any, sync_conn: Any
) -> None:
    a, b = make_task(), make_task(start=True)
    stale = await admin_client.post_json(
        "/tasks/start-purchases",
        {
            "start_key": new_id(),
            "tasks": [{"task_id": a.id, "expected_task_version": 1}, {"task_id": b.id, "expected_task_version": 1}],
        },
    )
    assert stale.status == 409 and (await stale.json())["error"]["code"] == "version_conflict"
    not_draft = await admin_client.post_json(
        "/tasks/start-purchases",
        {
            "start_key": new_id(),
            "tasks": [{"task_id": a.id, "expected_task_version": 1}, {"task_id": b.id, "expected_task_version": 2}],
        },
    )
    assert not_draft.status == 409
    assert sync_conn.execute("SELECT state, version FROM tasks WHERE id = ?", (a.id,)).fetchone()[:] == ("DRAFT", 1)
    assert sync_conn.execute("SELECT count(*) FROM authorizations WHERE task_id = ?", (a.id,)).fetchone()[0] == 0
    unknown = await admin_client.post_json(
        "/tasks/start-purchases", {"start_key": new_id(), "tasks": [{"task_id": new_id(), "expected_task_version": 1}]}
    )
    assert unknown.status == 404
    for bad in (
        {"start_key": new_id(), "tasks": []},
        {"start_key": new_id(), "tasks": [{"task_id": a.id, "expected_task_version": 1}] * 2},
        {"start_key": "x", "tasks": [{"task_id": a.id, "expected_task_version": 1}]},
        {"start_key": new_id(), "tasks": [{"task_id": a.id, "expected_task_version": "1"}]},
    ):
        assert (await admin_client.post_json("/tasks/start-purchases", bad)).status == 400


async def test_start_purchases_form(admin_client: AdminClient, make_task: Any, sync_conn: Any) -> None:
    a, b = make_task(), make_task()
    key = new_id()
    fields = [("start_key", key), ("task", f"{a.id}:1"), ("task", f"{b.id}:1")]
    # without confirm=yes the form answers the confirmation page and starts nothing
    ask = await admin_client.post_form("/tasks/start-purchases", fields)
    assert ask.status == 200 and 'id="confirm-start"' in await ask.text()
    assert {r[0] for r in sync_conn.execute("SELECT state FROM tasks")} == {"DRAFT"}
    fields.append(("confirm", "yes"))
    resp = await admin_client.post_form("/tasks/start-purchases", fields)
    assert resp.status == 303 and resp.headers["Location"] == f"/tasks?notice=started&count=2&start_key={key}"
    # the notice links the export of this start batch
    page = await (await admin_client.client.get(resp.headers["Location"])).text()
    assert f'href="/tasks/export?start_key={key}&amp;format=xlsx"' in page
    batch = await (await admin_client.client.get(f"/tasks/export?start_key={key}&format=csv")).read()
    lines = batch.decode("utf-8-sig").splitlines()
    assert len(lines) == 3 and {line.split(",")[0] for line in lines[1:]} == {a.id, b.id}
    assert all(",待领取,PENDING," in line for line in lines[1:])
    assert {r[0] for r in sync_conn.execute("SELECT state FROM tasks")} == {"PENDING"}
    again = await admin_client.post_form("/tasks/start-purchases", fields)  # double submit replays
    assert again.status == 303
    assert sync_conn.execute("SELECT count(*) FROM authorizations").fetchone()[0] == 2
    stale = await admin_client.post_form(
        "/tasks/start-purchases", [("start_key", new_id()), ("task", f"{a.id}:1"), ("confirm", "yes")]
    )
    assert stale.status == 409 and "任务已变化" in await stale.text()
    empty = await admin_client.post_form("/tasks/start-purchases", [("start_key", new_id())])
    assert empty.status == 400 and "请至少选择" in await empty.text()


# -- one-dimension goods: no size is NULL, never an empty string ---------------------------


async def test_create_without_size_json_form_and_list(admin_client: AdminClient, sync_conn: Any) -> None:
    resp = await admin_client.post_json("/tasks", body(sku_size=None, title="单规格 JSON"))
    assert resp.status == 201, await resp.text()
    resp = await admin_client.post_form("/tasks", form(sku_size="  ", title="单规格 表单"))  # blank = no size
    assert resp.status == 303
    rows = sync_conn.execute("SELECT title, sku_options FROM tasks ORDER BY title").fetchall()
    one = '[["颜色","黑色CHA(纯棉)"]]'
    assert [tuple(r) for r in rows] == [("单规格 JSON", one), ("单规格 表单", one)]
    html = await (await admin_client.client.get("/tasks")).text()
    assert "<td>颜色=黑色CHA(纯棉)</td>" in html and "None" not in html
    assert "页面显示几项就填几项" in html  # the form says how many options to name


@pytest.mark.parametrize("value", ["", " M"])
async def test_json_size_empty_or_untrimmed_is_refused(admin_client: AdminClient, sync_conn: Any, value: str) -> None:
    # JSON says "no size" with null only; "" is a mistake, not a way to spell it
    resp = await admin_client.post_json("/tasks", body(sku_size=value))
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_request"
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_json_size_missing_is_refused(admin_client: AdminClient, sync_conn: Any) -> None:
    b = body()
    del b["sku_size"]
    assert (await admin_client.post_json("/tasks", b)).status == 400
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_colour_is_still_required(admin_client: AdminClient, sync_conn: Any) -> None:
    assert (await admin_client.post_json("/tasks", body(sku_color=None, sku_size=None))).status == 400
    resp = await admin_client.post_form("/tasks", form(sku_color="", sku_size=""))
    assert resp.status == 400 and "颜色" in await resp.text()
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


# -- SKU options by dimension: the form's option rows, the JSON list ---------------------------


def option_form(*rows: tuple[str, str], **over: Any) -> dict[str, str]:
    """The create form with option rows instead of the colour/size fields."""
    base = {k: v for k, v in form(**over).items() if k not in ("sku_color", "sku_size")}
    for n, (dim, value) in enumerate(rows, start=1):
        base |= {f"option_dim_{n}": dim, f"option_value_{n}": value}
    return base


async def test_option_rows_create_any_goods(admin_client: AdminClient, sync_conn: Any) -> None:
    resp = await admin_client.post_form("/tasks", option_form(("规格", "3层100抽"), ("数量", "6包"), title="抽纸"))
    assert resp.status == 303, await resp.text()
    three = [["颜色分类", "黑色"], ["尺码", "M"], ["款式", "短袖"]]
    resp = await admin_client.post_json("/tasks", body(sku_options=three, sku_color=None, sku_size=None, title="三维"))
    assert resp.status == 201, await resp.text()
    rows = sync_conn.execute("SELECT title, sku_options FROM tasks ORDER BY title").fetchall()
    assert [(r[0], json.loads(r[1])) for r in rows] == [
        ("三维", three),
        ("抽纸", [["规格", "3层100抽"], ["数量", "6包"]]),
    ]
    html = await (await admin_client.client.get("/tasks")).text()
    assert "规格=3层100抽 / 数量=6包" in html
    assert '<datalist id="sku-dimensions">' in html and '<option value="颜色分类">' in html  # the pack's names
    tid = sync_conn.execute("SELECT id FROM tasks WHERE title = '抽纸'").fetchone()[0]
    detail = await (await admin_client.client.get(f"/tasks/{tid}")).text()
    assert "<dt>规格</dt><dd>3层100抽</dd><dt>数量</dt><dd>6包</dd>" in detail
    assert 'name="option_dim_2" value="数量"' in detail  # the edit form shows the rows to change


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((("规格", ""),), "规格选项"),  # a value missing
        ((("", "6包"),), "规格选项"),  # a dimension missing
        ((("规格", "a"), ("规格", "b")), "重复"),
        ((), "规格选项"),
    ],
)
async def test_bad_option_rows_are_refused_naming_the_field(
    admin_client: AdminClient, sync_conn: Any, rows: tuple[tuple[str, str], ...], message: str
) -> None:
    resp = await admin_client.post_form("/tasks", option_form(*rows, option_dim_3=""))
    text = await resp.text()
    assert resp.status == 400 and message in text
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_json_options_and_colour_together_are_refused(admin_client: AdminClient, sync_conn: Any) -> None:
    resp = await admin_client.post_json("/tasks", body(sku_options=[["规格", "a"]]))
    assert resp.status == 400
    four = [["a", "1"], ["b", "2"], ["c", "3"], ["d", "4"]]
    resp = await admin_client.post_json("/tasks", body(sku_options=four, sku_color=None, sku_size=None))
    assert resp.status == 400
    assert sync_conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0
