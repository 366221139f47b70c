"""The summary filter (docs/api.md "POST /api/v1/tasks/{id}/events": no phone numbers, markup, page text or tokens
in event/fail summaries): the plain forms and their bypasses — full-width digits, zero-width characters, bidi
controls, HTML entities without ``;``, secret words glued to identifiers. Refused summaries are
``400 invalid_request`` and write nothing — so no token or phone number can reach the events table or an audit
row through them."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.domain.reports import check_summary
from tests.server.submissions import helpers

ZW = "\u200b"
TOKEN = "0123456789abcdef" * 4

# The plain forms: markup and entities, phone numbers, tokens and secret words, too long, line breaks.
SENSITIVE = {
    "markup": "<node text='x'/>",
    "entity": "a &lt;b&gt;",
    "phone": "13812345678",
    "phone_after_word": "call 13812345678",
    "spaced_phone_after_word": "tel 138 1234 5678",
    "fullwidth_phone_after_label": "电话１３８１２３４５６７８",
    "hex_token": "token 0123456789abcdef0123",
    "bearer": "Bearer abc",
    "key_value": "key=ab12cd34ef56ab12cd34ef56ab",
    "too_long": "x" * 201,
    "line_break": "line\nbreak",
}

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
    "zero_width_token": ZW.join([TOKEN[i : i + 8] for i in range(0, 64, 8)]),
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

ACCEPTED = [
    "option not found",
    "gate 1 ok",
    "unit price 12.88 x 2 = 25.76",
    "tokens are not mentioned",
    "SKU 黑色CHA(纯棉) M(建议100-115)",
    "emoji 👨\u200d👩\u200d👧 ok",
    "Tom & Jerry",
    "step 3 of 12",
    "CONFIRM_AMOUNT_UNREADABLE",
    "CONFIRM_AMOUNT_UNREADABLE after 2 dumps",
    "",
    "price 12.88 then 12.98",
    "DumpEmpty",
    "规格面板未找到选项 M(建议100-115)",
]


async def _refused_in_events_and_fail(
    client: Any, claimed: helpers.Claim, conn: sqlite3.Connection, texts: dict[str, str]
) -> None:
    """Each text as an event summary and as a fail summary: ``400 invalid_request``, nothing written."""
    before = helpers.fingerprint(conn)
    for name, text in texts.items():
        for path, body in (
            (helpers.events_path(claimed.task_id), helpers.events_body(claimed, [helpers.event(summary=text)])),
            (helpers.fail_path(claimed.attempt_id), helpers.fail_body(claimed, summary=text)),
        ):
            status, raw = await helpers.post_json(client, path, claimed.device, body)
            assert (status, json.loads(raw)) == (400, {"error": "invalid_request"}), (name, path)
    assert helpers.fingerprint(conn) == before


# Personal data of the order sheet: addresses, recipients' names, masked and separated
# phone numbers, identity card numbers. Every one of these passed the filter before.
PERSONAL = {
    "address_line": "收货地址 北京市朝阳区建国路88号 张三",
    "address_label_colon": "收件地址：某处",
    "province_city_district": "广东省深圳市南山区",
    "province_no_suffix": "浙江杭州西湖区",
    "autonomous_region": "广西壮族自治区南宁市",
    "district_road": "朝阳区建国路",
    "road_number": "建国路88号",
    "lane_number": "幸福巷 3 弄",
    "building_unit_room": "3号楼2单元501室",
    "recipient_name": "收货人 张三",
    "recipient_colon": "收件人：李四",
    "contact_latin": "联系人 Zhang San",
    "masked_name_and_phone": "张** 138****5678",
    "masked_name": "李* 已选",
    "masked_phone": "138****5678",
    "masked_phone_spaced": "138 **** 5678",
    "masked_phone_fullwidth": "１３８＊＊＊＊５６７８",
    "dashed_phone": "138-1234-5678",
    "dotted_phone": "138.1234.5678",
    "spaced_phone": "138 1234 5678",
    "en_dash_phone": "138–1234–5678",
    "slashed_phone": "138/1234/5678",
    "plus86_phone": "+86 138 1234 5678",
    "glued_86_phone": "8613812345678",
    "phone_after_price": "¥59 13812345678",
    "landline": "010-12345678",
    "landline_parens": "(0571)8888 1234",
    "landline_spaced": "0571 8888 1234",
    "identity_card": "身份证 11010519491231002X",
    "arabic_indic_masked": "١٣٨****٥٦٧٨",
}

# What must keep passing: prices, quantities, sizes, goods ids, order numbers, dates, reason codes.
NOT_PERSONAL = [
    "价格 ¥12.88 超过上限",
    "unit ¥12.88 × 3 = ¥38.64",
    "最后5件 ¥59",
    "M(建议100-115)",
    "尺码 38号",
    "goods 937122477375",
    "goods id 138123456789012",
    "order 231201-493047618902345",
    "订单编号：231201493047618902345",
    "order_sn 190312-4930476189",
    "amount 1388.00",
    "2026-08-04 09:00:00",
    "step 3 of 12",
    "超出市场价区间",
    "1号色 已选",
    "规格 3XL",
    "qty 2 → 3",
    "tiles 12, visible 7",
    "110105194912310021 is not a valid id",  # wrong check digit: not an id number
]


REFUSED = {**SENSITIVE, **BYPASSES, **PERSONAL}
PASSING = ACCEPTED + NOT_PERSONAL


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_filtered_summary_is_refused(name: str) -> None:
    with pytest.raises(ValidationFailed):
        check_summary(REFUSED[name])


@pytest.mark.parametrize("text", PASSING)
def test_plain_summary_passes(text: str) -> None:
    assert check_summary(text) == text


async def test_refused_summaries_over_http_write_nothing(
    server_client: Any, claimed: helpers.Claim, sync_conn: sqlite3.Connection
) -> None:
    # lone_surrogate is not encodable as UTF-8 JSON; the strict reader covers it (below)
    await _refused_in_events_and_fail(
        server_client, claimed, sync_conn, {k: v for k, v in REFUSED.items() if k != "lone_surrogate"}
    )
    before = helpers.fingerprint(sync_conn)
    # an escaped lone surrogate in the JSON text
    raw_body = (
        json.dumps(helpers.events_body(claimed, [helpers.event(summary="x")])).replace('"x"', '"\\ud800"').encode()
    )
    status, raw = await helpers.post_json(server_client, helpers.events_path(claimed.task_id), claimed.device, raw_body)
    assert (status, json.loads(raw)) == (400, {"error": "invalid_request"})
    assert helpers.fingerprint(sync_conn) == before
