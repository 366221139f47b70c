"""Summary filter bypasses (spec 002: no phone numbers, markup, page text or tokens in event/fail
summaries): full-width digits, zero-width characters, bidi controls, HTML entities without ``;``,
secret words glued to identifiers. Refused summaries are ``400 invalid_request`` and write nothing —
so no token or phone number can reach the events table or an audit row through them."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.services.events import check_summary
from tests.server.submissions.helpers import (
    Claim,
    event,
    events_body,
    events_path,
    fail_body,
    fail_path,
    fingerprint,
    post_json,
)

ZW = "\u200b"
TOKEN = "0123456789abcdef" * 4

BYPASSES = {
    "fullwidth_phone": "call １３８１２３４５６７８",
    "zero_width_phone": ZW.join("13812345678"),
    "word_joiner_phone": "\u2060".join(["138", "1234", "5678"]),
    "soft_hyphen_phone": "\u00ad".join(["138", "1234", "5678"]),
    "zwnj_phone": "\u200c".join(["138", "1234", "5678"]),
    "bom_phone": "\ufeff".join(["138", "1234", "5678"]),
    "mongolian_vs_phone": "\u180e".join(["138", "1234", "5678"]),
    "arabic_indic_digits": "١٣٨١٢٣٤٥٦٧٨",
    "math_bold_digits": "𝟏𝟑𝟖𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖",
    "zero_width_token": ZW.join([TOKEN[i:i + 8] for i in range(0, 64, 8)]),
    "zero_width_word": f"t{ZW}oken seen",
    "claim_token_word": "claim_token leaked",
    "token_digit": "token2 here",
    "bearer_glued": "X_Bearer abc",
    "fullwidth_token_word": "ｔｏｋｅｎ",
    "entity_no_semicolon_dec": "a &#60script",
    "entity_no_semicolon_hex": "a &#x3c;script",
    "entity_named_no_semicolon": "a &lt script",
    "entity_uppercase": "a &LT; script",
    "fullwidth_lt": "a ＜b＞",
    "small_lt": "a \ufe64b\ufe65",
    "bidi_override": "price \u202e88.21",
    "bidi_isolate": "ok \u2066x\u2069",
    "hierarchy_glued": "dump_hierarchy node",
    "nul": "a\x00b",
    "del_c1": "a\x85b",
    "lone_surrogate": "a\ud800b",
}

ACCEPTED = ["option not found", "gate 1 ok", "unit price 12.88 x 2 = 25.76", "tokens are not mentioned",
            "SKU 黑色CHA(纯棉) M(建议100-115)", "emoji 👨\u200d👩\u200d👧 ok", "Tom & Jerry", "step 3 of 12",
            "CONFIRM_AMOUNT_UNREADABLE"]


@pytest.mark.parametrize("name", sorted(BYPASSES))
def test_bypass_is_refused(name: str) -> None:
    with pytest.raises(ValidationFailed):
        check_summary(BYPASSES[name])


@pytest.mark.parametrize("text", ACCEPTED)
def test_plain_summaries_pass(text: str) -> None:
    assert check_summary(text) == text


async def test_bypasses_over_http_write_nothing(server_client: Any, claimed: Claim,
                                                sync_conn: sqlite3.Connection) -> None:
    before = fingerprint(sync_conn)
    for name, text in BYPASSES.items():
        if name == "lone_surrogate":
            continue  # not encodable as UTF-8 JSON; the strict reader covers it
        for path, body in ((events_path(claimed.task_id), events_body(claimed, [event(summary=text)])),
                           (fail_path(claimed.attempt_id), fail_body(claimed, summary=text))):
            status, raw = await post_json(server_client, path, claimed.device, body)
            assert (status, json.loads(raw)) == (400, {"error": "invalid_request"}), (name, path)
    assert fingerprint(sync_conn) == before
    # an escaped lone surrogate in the JSON text
    raw_body = json.dumps(events_body(claimed, [event(summary="x")])).replace('"x"', '"\\ud800"').encode()
    status, raw = await post_json(server_client, events_path(claimed.task_id), claimed.device, raw_body)
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    assert fingerprint(sync_conn) == before
