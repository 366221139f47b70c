"""Bidi and invisible characters are refused in every text a person reads or a gate
compares — task title, colour, size, reconciliation note — on the admin form and the JSON API, with a
Chinese error naming the code point, and nothing is written. The CLI paths and device names:
tests/server/test_cli.py; the rule itself: tests/shared/test_text_rule.py."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.tx.common import new_id

from .conftest import AdminClient, FencedTask
from .test_tasks import body, form

# Every code point the issue names (plus the other bidi embeddings, BOM, NUL and a line separator).
HIDDEN = [
    "\u202e",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u200e",
    "\u200f",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\ufeff",
    "\u061c",
    "\u2060",
    "\u00ad",
    "\x00",
    "\x1b",
    "\u2028",
    "\U000e0041",
]
TASK_FIELDS = {"title": "标题", "sku_color": "规格", "sku_size": "规格"}


def hide(ch: str) -> str:
    """A plausible value with ``ch`` inside (a bidi override here would show "袖短棉纯")."""
    return f"纯棉{ch}短袖"


def written(conn: sqlite3.Connection) -> tuple[int, int]:
    """(tasks, audit rows): both must stay unchanged by a refused request."""
    return (
        conn.execute("SELECT count(*) FROM tasks").fetchone()[0],
        conn.execute("SELECT count(*) FROM audit_log").fetchone()[0],
    )


@pytest.mark.parametrize("kind", ["json", "form"])
@pytest.mark.parametrize("field", sorted(TASK_FIELDS))
async def test_task_create_refuses_hidden_characters(
    admin_client: AdminClient, sync_conn: sqlite3.Connection, field: str, kind: str
) -> None:
    """A JSON caller gets the 400 with the character's code point and the field's label (never the character
    itself); a form gets the page again with the same words."""
    before = written(sync_conn)
    for ch in HIDDEN:
        if kind == "json":
            resp = await admin_client.post_json("/tasks", body(create_key=new_id(), **{field: hide(ch)}))
            err = (await resp.json())["error"]
            assert (resp.status, err["code"]) == (400, "invalid_request"), repr(ch)
            assert f"U+{ord(ch):04X}" in err["message"] and TASK_FIELDS[field] in err["message"], err
            assert ch not in err["message"]
        else:
            resp = await admin_client.post_form("/tasks", form(create_key=new_id(), **{field: hide(ch)}))
            html = await resp.text()
            assert resp.status == 400, repr(ch)
            assert f"U+{ord(ch):04X}" in html and TASK_FIELDS[field] in html
    if kind == "json":
        # a lone surrogate can only travel as a JSON escape
        raw = json.dumps(body(create_key=new_id(), **{field: "PLACEHOLDER"})).replace("PLACEHOLDER", "a\\ud800b")
        resp = await admin_client.client.post(
            "/tasks",
            data=raw.encode(),
            headers={"Content-Type": "application/json", "X-CSRF-Token": admin_client.csrf},
        )
        assert resp.status == 400
    assert written(sync_conn) == before


async def test_plain_text_still_accepted(admin_client: AdminClient, sync_conn: sqlite3.Connection) -> None:
    """Emoji, CJK punctuation, full-width forms (NFKC'd for SKU values) and spaces stay acceptable."""
    resp = await admin_client.post_json(
        "/tasks", body(title="🎉 夏季 T恤【限定】 «新款»", sku_color="【限定】黑色 ＸＬ", sku_size="M(建议100-115)")
    )
    assert resp.status == 201
    assert tuple(sync_conn.execute("SELECT title, sku_options FROM tasks").fetchone()) == (
        "🎉 夏季 T恤【限定】 «新款»",
        '[["颜色","【限定】黑色 XL"],["尺码","M(建议100-115)"]]',
    )


@pytest.fixture
def to_reconcile(fenced_task: FencedTask, sync_conn: sqlite3.Connection) -> tuple[str, int]:
    """A submission waiting for a person (RECONCILIATION_REQUIRED) and its task version."""
    task, sid = fenced_task(observation="EXTERNAL_PAYMENT_HANDOFF")
    version = sync_conn.execute("SELECT version FROM tasks WHERE id = ?", (task.id,)).fetchone()[0]
    return sid, version


def submission(conn: sqlite3.Connection) -> tuple[Any, ...]:
    return tuple(conn.execute("SELECT state, reconciled_by, reconciliation_note FROM order_submissions").fetchone())


async def test_reconcile_note_refuses_hidden_characters_on_both_paths(
    admin_client: AdminClient, sync_conn: sqlite3.Connection, to_reconcile: tuple[str, int]
) -> None:
    sid, version = to_reconcile
    before, audit_before = submission(sync_conn), written(sync_conn)
    for ch in HIDDEN:
        note = f"已在待付款列表核对{ch}订单存在"
        resp = await admin_client.post_json(
            f"/order-submissions/{sid}/reconcile",
            {"outcome": "created", "note": note, "expected_task_version": version},
        )
        err = (await resp.json())["error"]
        assert resp.status == 400 and f"U+{ord(ch):04X}" in err["message"] and "核对说明" in err["message"]
        resp = await admin_client.post_form(
            f"/order-submissions/{sid}/reconcile",
            {"outcome": "created", "note": note, "expected_task_version": str(version)},
        )
        assert resp.status == 400 and f"U+{ord(ch):04X}" in await resp.text()
    assert submission(sync_conn) == before and written(sync_conn) == audit_before


async def test_reconcile_note_keeps_line_breaks_from_a_textarea(
    admin_client: AdminClient, sync_conn: sqlite3.Connection, to_reconcile: tuple[str, int]
) -> None:
    """A browser submits a textarea's line breaks as CR LF: a multi-line note is plain text."""
    sid, version = to_reconcile
    resp = await admin_client.post_form(
        f"/order-submissions/{sid}/reconcile",
        {"outcome": "created", "note": "第一行\r\n第二行\t备注", "expected_task_version": str(version)},
    )
    assert resp.status == 303
    assert submission(sync_conn)[2] == "第一行\r\n第二行\t备注"


@pytest.mark.parametrize("field", sorted(TASK_FIELDS))
async def test_draft_edit_refuses_hidden_characters_on_both_paths(
    admin_client: AdminClient, sync_conn: sqlite3.Connection, make_task: Any, field: str
) -> None:
    """Editing a draft runs the same text rule as creating one."""
    task = make_task()
    before = written(sync_conn), tuple(sync_conn.execute("SELECT * FROM tasks").fetchone())
    fields = {k: v for k, v in form().items() if k != "create_key"}
    for ch in HIDDEN[:6]:
        resp = await admin_client.post_form(
            f"/tasks/{task.id}/edit", {**fields, "expected_task_version": "1", field: hide(ch)}
        )
        assert resp.status == 400 and f"U+{ord(ch):04X}" in await resp.text(), repr(ch)
        js = {k: v for k, v in body().items() if k != "create_key"}
        resp = await admin_client.post_json(
            f"/tasks/{task.id}/edit", {**js, "expected_task_version": 1, field: hide(ch)}
        )
        assert resp.status == 400 and f"U+{ord(ch):04X}" in (await resp.json())["error"]["message"], repr(ch)
    assert (written(sync_conn), tuple(sync_conn.execute("SELECT * FROM tasks").fetchone())) == before
