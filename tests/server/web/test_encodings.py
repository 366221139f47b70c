"""Content-Encoding: one rule on every route (docs/api.md "Request bodies").

Any Content-Encoding other than ``identity`` → 415 ``unsupported_media_type`` before the body is read;
device routes authenticate first (401 wins). Before the fix a gzip header with a plain body was a 500
with a traceback, and a real gzip body was silently decompressed and accepted.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
import zlib
from typing import Any

import pytest

from tests.server.claims.conftest import HEARTBEAT, heartbeat_body, post
from tests.server.conftest import Maker
from tests.server.web.conftest import exchange, request

FORM = "application/x-www-form-urlencoded"


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


@pytest.mark.parametrize(
    ("values", "ok"),
    [
        ([], True),
        ([b"identity"], True),
        ([b" IDENTITY "], True),
        ([b"identity", b"identity"], True),
        ([b"gzip"], False),
        ([b"deflate"], False),
        ([b"br"], False),
        ([b"zstd"], False),
        ([b""], False),
        ([b"identity, gzip"], False),
        ([b"identity", b"gzip"], False),
        ([b"x-gzip"], False),
        ([b"identity;q=1"], False),
    ],
)
def test_identity_only_table(values: list[bytes], ok: bool) -> None:
    from cmbuyer.server.web.edge import identity_only  # imported here so the file runs against old code

    headers = (*((b"Content-Encoding", v) for v in values), (b"Host", b"x"))
    assert identity_only(headers) is ok


async def test_login_with_gzip_header_and_plain_body_is_415(
    server_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    body = b"username=ops&password=x&csrf_token=y"
    answer = await exchange(
        server_client, request("POST", "/login", {"Content-Type": FORM, "Content-Encoding": "gzip"}, body)
    )
    assert answer.status == 415
    _no_tracebacks(caplog)


async def test_login_with_a_real_gzip_body_is_not_decompressed(server_client: Any) -> None:
    body = gzip.compress(b"username=ops&password=x&csrf_token=y")
    for encoding in ("gzip", "deflate", "br", "GZIP", "identity, gzip"):
        answer = await exchange(
            server_client, request("POST", "/login", {"Content-Type": FORM, "Content-Encoding": encoding}, body)
        )
        assert answer.status == 415, encoding


@pytest.mark.serial  # "before any decompression": an upper bound on wall time
async def test_gzip_bomb_is_refused_before_any_decompression(
    server_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()  # 256 MiB inflated
    started = time.monotonic()
    answer = await exchange(
        server_client, request("POST", "/login", {"Content-Type": FORM, "Content-Encoding": "gzip"}, bomb)
    )
    assert answer.status == 415
    assert time.monotonic() - started < 3.0
    _no_tracebacks(caplog)


async def test_device_route_gzip_header_is_415_after_authentication(
    server_client: Any, make_device: Maker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    dev = make_device()
    plain = json.dumps(heartbeat_body(dev.device_id)).encode()
    status, raw, _ = await post(server_client, HEARTBEAT, dev, plain, **{"Content-Encoding": "gzip"})
    assert (status, json.loads(raw)) == (415, {"error": "unsupported_media_type"})
    status, raw, _ = await post(server_client, HEARTBEAT, dev, gzip.compress(plain), **{"Content-Encoding": "gzip"})
    assert (status, json.loads(raw)) == (415, {"error": "unsupported_media_type"})
    # authentication first: without credentials the same request is the empty 401
    status, raw, _ = await post(server_client, HEARTBEAT, None, plain, **{"Content-Encoding": "gzip"})
    assert (status, raw) == (401, b"")
    # identity is the one accepted value
    status, _, _ = await post(server_client, HEARTBEAT, dev, plain, **{"Content-Encoding": "identity"})
    assert status == 200
    _no_tracebacks(caplog)


async def test_device_expect_continue_with_gzip_gets_415_and_no_100(server_client: Any, make_device: Maker) -> None:
    dev = make_device()
    head = request(
        "POST",
        HEARTBEAT,
        {
            **dev.headers(),
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Expect": "100-continue",
            "Content-Length": "100",
        },
    )
    answer = await exchange(server_client, head)
    assert answer.status == 415
    assert json.loads(answer.body) == {"error": "unsupported_media_type"}


async def test_admin_post_with_gzip_is_415_and_changes_nothing(
    admin_client: Any, sync_conn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    before = sync_conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
    form = {
        "title": "t",
        "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=1",
        "sku_color": "黑",
        "sku_size": "M",
        "quantity": "1",
        "max_total_price": "10",
    }
    resp = await admin_client.post_form("/tasks", form, headers={"Content-Encoding": "gzip"})
    assert resp.status == 415
    resp = await admin_client.post_json("/tasks", {"title": "t"}, headers={"Content-Encoding": "deflate"})
    assert resp.status == 415
    assert (await resp.json())["error"]["code"] == "unsupported_media_type"
    assert sync_conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == before
    _no_tracebacks(caplog)
