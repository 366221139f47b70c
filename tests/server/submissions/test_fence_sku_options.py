"""The fence re-checks SKU options per dimension by name (docs/api.md "SKU options" and "Fence
refusals"): a task with three dimensions fences with its options in any order; one dimension read
differently, missing, extra, renamed or named twice is refused with nothing written; an agent that knows
only colour/size (``selected_color``/``selected_size``) is refused with ``sku_options_required`` for such a task."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from cmbuyer.schemas import validate
from tests.server.conftest import Maker
from tests.server.submissions.helpers import claim_http, fence_body, fence_path, post_json, post_writing_nothing

THREE = [["规格", "3层100抽"], ["数量", "6包"], ["口味", "原味"]]


async def test_three_dimensions_claim_and_fence_per_dimension(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(options=THREE, start=True)
    c = await claim_http(server_client, make_device())
    assert (c.sku_options, c.sku_color, c.sku_size) == (THREE, None, None)
    refused: dict[str, tuple[list[list[str]], str]] = {
        "one value differs": ([["规格", "3层100抽"], ["数量", "8包"], ["口味", "原味"]], "sku_mismatch"),
        "a dimension not read": (THREE[:2], "sku_mismatch"),
        "a dimension the task does not name": ([*THREE[:2], ["颜色", "白色"]], "sku_mismatch"),
        "a dimension under another name": ([["规格", "3层100抽"], ["包数", "6包"], ["口味", "原味"]], "sku_mismatch"),
        "a dimension read twice": ([["规格", "3层100抽"], ["数量", "6包"], ["数量", "6包"]], "sku_mismatch"),
    }
    for label, (read, detail) in refused.items():
        body = fence_body(c, selected_options=read)
        status, raw = await post_writing_nothing(server_client, sync_conn, fence_path(c.attempt_id), c.device, body)
        assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": detail}), label
    # an agent that knows only colour/size can only say colour/size: a clear refusal, not a silent mismatch
    old = fence_body(c, selected_color="3层100抽", selected_size="6包")
    status, raw = await post_writing_nothing(server_client, sync_conn, fence_path(c.attempt_id), c.device, old)
    assert (status, json.loads(raw)) == (409, {"error": "fence_refused", "detail": "sku_options_required"})
    # per dimension by name: the order of the pairs does not matter; full-width text equals after NFKC
    read = [["口味", "原味"], ["数量", "６包"], [" 规格", "3层100抽"]]
    body = fence_body(c, selected_options=read)
    validate("submission_fence.request", body)
    status, raw = await post_json(server_client, fence_path(c.attempt_id), c.device, body)
    assert status == 200 and json.loads(raw)["click_permitted"] is True
    stored = sync_conn.execute("SELECT selected_options FROM order_submissions").fetchone()[0]
    assert json.loads(stored) == read  # as read


async def test_both_report_forms_at_once_are_a_bad_request(
    server_client: Any, make_task: Maker, make_device: Maker, sync_conn: sqlite3.Connection
) -> None:
    make_task(start=True)
    c = await claim_http(server_client, make_device())
    body = fence_body(c) | {"selected_color": c.sku_color, "selected_size": c.sku_size}
    status, _ = await post_writing_nothing(server_client, sync_conn, fence_path(c.attempt_id), c.device, body)
    assert status == 400
