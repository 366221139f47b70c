"""The one money rule for people and the spreadsheet row rules (server/domain/task_fields.py,
server/domain/task_import.py). Pure: no files, no database."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.domain.task_fields import decimal_money_text, person_money
from cmbuyer.server.domain.task_import import FileRefused, Formula, check_rows, header_key, map_header
from tests.server.sheets.files import HEADER, good_row

CAP = Decimal("5000.00")


@pytest.mark.parametrize(
    ("typed", "canonical"), [("50", "50.00"), ("50.0", "50.00"), ("50.00", "50.00"), ("0.5", "0.50")]
)
def test_person_money_accepts_up_to_two_places(typed: str, canonical: str) -> None:
    assert person_money("m", typed) == canonical


@pytest.mark.parametrize(
    "typed",
    ["50.001", "-50", "+50", "5e1", " 50", "50 ", "５０", "050", "50.", ".5", "1_000", "", "50,00", None, 50, 50.0],
)
def test_person_money_refuses_everything_else(typed: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        person_money("max_total_price", typed)
    assert info.value.field == "max_total_price"


@pytest.mark.parametrize(
    ("stored", "canonical"), [(Decimal("30"), "30.00"), (Decimal("30.1"), "30.10"), (Decimal("30.10"), "30.10")]
)
def test_a_stored_decimal_reads_as_money(stored: Decimal, canonical: str) -> None:
    assert decimal_money_text("m", stored) == canonical


@pytest.mark.parametrize(
    "stored", [Decimal("30.123"), Decimal("-1"), Decimal("NaN"), Decimal("Infinity"), Decimal("-0")]
)
def test_a_stored_decimal_with_more_places_or_a_sign_is_refused(stored: Decimal) -> None:
    with pytest.raises(ValidationFailed):
        decimal_money_text("m", stored)


def _check(*rows: list[Any], header: tuple[Any, ...] = HEADER) -> list[Any]:
    return check_rows([(i + 2, row) for i, row in enumerate(rows)], map_header(header), max_quantity=99, max_price=CAP)


# cell → the error the preview shows ("" = the row is fine)
CELLS: list[tuple[str, Any, str]] = [
    ("max_total_price", 30, ""),
    ("max_total_price", 30.1, ""),
    ("max_total_price", "30", ""),
    ("max_total_price", 0.1 + 0.2, "最高总价：金额最多两位小数"),  # the stored double has 17 digits
    ("max_total_price", 30.123, "最高总价：金额最多两位小数"),
    ("max_total_price", True, "最高总价：金额应为数字"),
    ("max_total_price", dt.datetime(2026, 1, 1), "最高总价：金额应为数字"),
    ("max_total_price", "¥30", "最高总价：请输入金额数字"),
    ("max_total_price", 5000.01, "最高总价：金额必须在 0.01 到 5000.00 之间"),
    ("max_total_price", Formula("=A1*2"), "最高总价：不接受公式"),
    ("quantity", 2.0, ""),
    ("quantity", "2", ""),
    ("quantity", 2.5, "数量：数量应为整数"),
    ("quantity", 0, "数量：数量必须是 1 到 99 的整数"),
    ("quantity", 100, "数量：数量必须是 1 到 99 的整数"),
    ("quantity", None, "数量：不能为空"),
    ("sku_size", None, ""),  # one-dimension goods
    ("sku_size", "  ", ""),  # spaces only = empty
    ("sku_size", 40, ""),  # a size typed as a number
    ("sku_color", " 黑色", "颜色：规格为空、过长或含控制字符"),  # exact SKU texts: no silent trimming
    ("sku_color", "黑\u202e色", "颜色：规格含不可见字符或文字方向控制符"),
    ("title", '=HYPERLINK("http://x")', ""),  # stored as typed; neutralised on export
    ("title", Formula("=A1"), "标题：不接受公式"),
    ("product_url", "https://evil.example/goods.html?goods_id=1", "商品链接：只接受拼多多商品链接"),
    ("product_url", dt.date(2026, 1, 1), "商品链接：应为文本"),
]


@pytest.mark.parametrize(("field", "cell", "error"), CELLS, ids=[f"{f}-{c!r}" for f, c, _ in CELLS])
def test_cell_rules(field: str, cell: Any, error: str) -> None:
    row = good_row(1)
    row[HEADER.index(field)] = cell
    (check,) = _check(row)
    if error:
        assert check.fields is None and check.error is not None and check.error.startswith(error), check.error
    else:
        assert check.error is None and check.fields is not None


def test_money_cell_and_text_mean_the_same_amount() -> None:
    a, b, c = _check(
        good_row(1, max_total_price=50), good_row(2, max_total_price="50.0"), good_row(3, max_total_price=50.0)
    )
    assert a.fields.max_total_price == b.fields.max_total_price == c.fields.max_total_price == "50.00"


def test_duplicate_rows_within_a_file_name_the_first() -> None:
    first, other, again = _check(good_row(1), good_row(2), good_row(1, title="别的标题"))
    assert first.error is None and other.error is None
    assert again.error == "与第 2 行重复"  # same goods, SKU, quantity and cap: the title does not matter
    assert again.label == "别的标题"  # a refused row shows its title cell, so a person finds it


def test_create_key_column_lets_two_equal_rows_through() -> None:
    header = (*HEADER, "create_key")
    k1, k2 = "0b6f5c8e-1d2a-4c3b-9e4f-5a6b7c8d9e0f", "1b6f5c8e-1d2a-4c3b-9e4f-5a6b7c8d9e0f"
    a, b, c = _check([*good_row(1), k1], [*good_row(1), k2], [*good_row(1), k1], header=header)
    assert a.error is None and b.error is None and c.error == "与第 2 行重复"
    (bad,) = _check([*good_row(1), "row-1"], header=header)
    assert bad.error is not None and bad.error.startswith("创建键：")


def test_headers_by_api_name_or_chinese_name_unknown_listed() -> None:
    mapped = map_header(["标题", "商品链接", "颜色", "数量", "最高总价", "备注", " Sku_Size "])
    assert mapped.positions == {
        "title": 0,
        "product_url": 1,
        "sku_color": 2,
        "quantity": 3,
        "max_total_price": 4,
        "sku_size": 6,
    }
    assert mapped.unknown == ("备注",)
    assert header_key("ｔｉｔｌｅ") == "title"


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (("title", "product_url", "sku_color", "quantity"), "缺少必需的列：最高总价（max_total_price）"),
        ((*HEADER, "标题"), "“标题”列出现了两次"),
    ],
)
def test_bad_headers_refuse_the_file(header: tuple[str, ...], message: str) -> None:
    with pytest.raises(FileRefused) as info:
        map_header(header)
    assert info.value.message.startswith(message)


# -- SKU options: one cell per option, written 维度=值 like the CLI --------------------------------

OPTION_HEADER = ("标题", "商品链接", "选项1", "选项2", "选项3", "数量", "最高总价")


def _option_row(*options: Any) -> list[Any]:
    cells = [*options, *([None] * (3 - len(options)))]
    return ["抽纸", "https://mobile.yangkeduo.com/goods.html?goods_id=42", *cells, 1, 30]


def test_option_columns_name_any_goods() -> None:
    header = map_header(OPTION_HEADER)
    assert [header.positions[f] for f in ("option1", "option2", "option3")] == [2, 3, 4]
    (two,) = _check(_option_row("规格=3层100抽", "数量 = ６包"), header=OPTION_HEADER)
    assert two.error is None and two.fields.sku_options == '[["规格","3层100抽"],["数量","6包"]]'
    (three,) = _check(_option_row("颜色分类=黑色", "尺码=M", "款式=a=b"), header=OPTION_HEADER)
    assert three.fields.sku_options == '[["颜色分类","黑色"],["尺码","M"],["款式","a=b"]]'  # split at the first =
    (gap,) = _check(_option_row(None, "规格=1"), header=OPTION_HEADER)  # an empty cell between is skipped
    assert gap.fields.sku_options == '[["规格","1"]]'


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (("规格",), "选项1：请写成 维度=值"),
        (("=6包",), "选项1：请写成 维度=值"),
        (("规格=1", "规格=2"), "规格选项：规格维度“规格”重复"),
        ((), "规格选项：请填写规格选项"),
        ((Formula("=A1"),), "选项1：不接受公式"),
    ],
)
def test_bad_option_cells_name_the_column(options: tuple[Any, ...], error: str) -> None:
    (check,) = _check(_option_row(*options), header=OPTION_HEADER)
    assert check.fields is None and check.error is not None and check.error.startswith(error), check.error


def test_options_and_colour_in_one_row_are_refused() -> None:
    header = (*HEADER, "option1")
    (check,) = _check([*good_row(1), "规格=1"], header=header)
    assert check.error is not None and check.error.startswith("规格选项：请只用"), check.error
