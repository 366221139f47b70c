"""Rules of the task spreadsheet import (docs/admin.md "Import"). Pure: the file readers
(server/sheets/) hand over a header row and data rows of plain cell values; this module decides what each
row means.

- :data:`COLUMNS` is the column mapping as a table: one :class:`Column` per task field, with the header
  names that select it (the API field name and the documented Chinese names). A new field (e.g. the
  ordered SKU options) is a new row here plus its cell rule, not a new parser.
- :func:`map_header` matches headers after NFKC, outer-space trimming and ASCII lower-casing; unknown
  headers are listed (and ignored), a missing required column or a column named twice refuses the file.
- :func:`check_rows` applies the single-task rules (:func:`task_fields.parse_task_fields`) to every row,
  with the cell rules of spreadsheets: numeric cells for quantity and money are read from their stored
  value under the one money rule; dates, booleans and formulas are refused; a row equal to an earlier
  row of the same file (same canonical identity, no ``create_key``) is refused as a duplicate.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cmbuyer.schemas import is_uuid4
from cmbuyer.schemas.sku import split_option
from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.domain.task_fields import TaskFields, decimal_money_text, parse_task_fields, person_money


@dataclass(frozen=True)
class Formula:
    """A formula cell as read from a workbook (never evaluated): its text, only to say what was refused."""

    text: str


Cell = str | int | float | Decimal | bool | dt.datetime | dt.date | dt.time | dt.timedelta | Formula | None


class FileRefused(ValidationFailed):
    """The whole file is refused (not a spreadsheet, too large, missing column …): nothing is imported.
    ``message`` is the Chinese reason shown to the person."""

    def __init__(self, message: str) -> None:
        super().__init__("file", message)


def _text(field: str, cell: Cell) -> str | None:
    """A text cell: ``str`` as it is (empty → None); a whole number (a size typed as 40) as its digits."""
    if cell is None or cell == "":
        return None
    if isinstance(cell, str):
        return cell
    if type(cell) is int:
        return str(cell)
    raise ValidationFailed(field, "应为文本")


def _quantity(field: str, cell: Cell) -> int | str | None:
    """A quantity cell: an integer (a number cell with a whole value, or ASCII digits) as ``int``; other text
    is passed on for the single-task rule to refuse with its own message."""
    if cell is None or cell == "":
        return None
    if type(cell) is int:
        return cell
    if type(cell) is float and cell.is_integer():
        return int(cell)
    if isinstance(cell, str):
        return int(cell) if cell.isascii() and cell.isdigit() and len(cell) <= 6 else cell
    raise ValidationFailed(field, "数量应为整数")


def _money(field: str, cell: Cell) -> str | None:
    """A money cell: text under the one money rule for people; a number from its stored decimal value (at
    most two places). Dates, booleans and formulas are refused."""
    if cell is None or cell == "":
        return None
    if isinstance(cell, str):
        return person_money(field, cell)
    if type(cell) is int:
        return decimal_money_text(field, Decimal(cell))
    if type(cell) is float:
        # repr is the shortest text that reads back as the stored double: 30.1 → "30.1", 0.1+0.2 → 17 digits
        return decimal_money_text(field, Decimal(repr(cell)))
    if isinstance(cell, Decimal):
        return decimal_money_text(field, cell)
    raise ValidationFailed(field, "金额应为数字，例如 30 或 30.00")


def _option(field: str, cell: Cell) -> list[str] | None:
    """An option cell: text ``维度=值`` (:func:`cmbuyer.schemas.sku.split_option`) as a ``[dimension, value]``
    pair; the single-task rule then checks lengths, characters and repeated dimensions."""
    text = _text(field, cell)
    if text is None:
        return None
    try:
        return list(split_option(text))
    except ValueError:
        raise ValidationFailed(field, "请写成 维度=值，例如 规格=3层100抽") from None


@dataclass(frozen=True)
class Column:
    """One importable column: the task field it fills, the header names that select it (the first is the
    API field name), whether the file must have it, and the rule that turns a cell into the field's raw
    value (then validated by the single-task rules)."""

    field: str
    names: tuple[str, ...]
    required: bool
    read: Callable[[str, Cell], Any]
    label: str  # the Chinese name used in messages and the template


COLUMNS: tuple[Column, ...] = (
    Column("title", ("title", "标题", "商品标题"), True, _text, "标题"),
    Column("product_url", ("product_url", "商品链接", "链接"), True, _text, "商品链接"),
    # The SKU options: one cell per option, written 维度=值 like the CLI's --option; or, for
    # colour/size goods, the colour and size columns. A row uses one form or the other (never both).
    Column("option1", ("option1", "选项1", "规格选项1"), False, _option, "选项1"),
    Column("option2", ("option2", "选项2", "规格选项2"), False, _option, "选项2"),
    Column("option3", ("option3", "选项3", "规格选项3"), False, _option, "选项3"),
    Column("sku_color", ("sku_color", "颜色", "规格1"), False, _text, "颜色"),
    Column("sku_size", ("sku_size", "尺码", "规格2"), False, _text, "尺码"),
    Column("quantity", ("quantity", "数量"), True, _quantity, "数量"),
    Column("max_total_price", ("max_total_price", "最高总价", "最高总价（元）"), True, _money, "最高总价"),
    Column("create_key", ("create_key", "创建键"), False, _text, "创建键"),
)
OPTION_FIELDS = ("option1", "option2", "option3")
LABELS = {c.field: c.label for c in COLUMNS} | {"sku_options": "规格选项"}


def header_key(cell: Cell) -> str:
    """The form a header is compared in: NFKC, outer whitespace trimmed, ASCII letters lower-cased (so
    ``Title``, `` title `` and full-width ``ｔｉｔｌｅ`` all select ``title``)."""
    if not isinstance(cell, str):
        return "" if cell is None else str(cell)
    text = unicodedata.normalize("NFKC", cell).strip()
    return "".join(ch.lower() if ch.isascii() else ch for ch in text)


_BY_NAME = {header_key(name): column for column in COLUMNS for name in column.names}


@dataclass(frozen=True)
class HeaderMap:
    """Which cell index holds which field, and the headers that matched nothing (ignored, listed)."""

    positions: dict[str, int]
    unknown: tuple[str, ...]


def map_header(header: Sequence[Cell]) -> HeaderMap:
    """Match the header row to :data:`COLUMNS`. Raises FileRefused when a required column is missing or
    one field is named by two columns."""
    positions: dict[str, int] = {}
    unknown: list[str] = []
    for index, cell in enumerate(header):
        key = header_key(cell)
        if not key:
            continue
        column = _BY_NAME.get(key)
        if column is None:
            unknown.append(str(cell).strip()[:64])
            continue
        if column.field in positions:
            raise FileRefused(f"“{column.label}”列出现了两次")
        positions[column.field] = index
    missing = [c.label + f"（{c.field}）" for c in COLUMNS if c.required and c.field not in positions]
    if missing:
        raise FileRefused("缺少必需的列：" + "、".join(missing) + "。请使用模板的表头")
    return HeaderMap(positions, tuple(unknown))


@dataclass(frozen=True)
class RowCheck:
    """One data row's verdict: its line in the file (header = 1), the validated fields and create key when
    ok, else the Chinese error ("数量：数量必须是 1 到 99 的整数")."""

    line: int
    fields: TaskFields | None
    create_key: str | None
    error: str | None
    label: str = ""  # the row's title cell as typed (at most 60 characters), so a refused row can be found


def check_row(
    line: int, cells: Sequence[Cell], header: HeaderMap, *, max_quantity: int, max_price: Decimal
) -> RowCheck:
    """Validate one data row (see the module docstring); never raises for bad content."""
    raw: dict[str, Any] = {}
    try:
        for column in COLUMNS:
            index = header.positions.get(column.field)
            cell = cells[index] if index is not None and index < len(cells) else None
            if isinstance(cell, Formula):
                raise ValidationFailed(column.field, "不接受公式，请粘贴为数值")
            if isinstance(cell, str) and not cell.strip():
                cell = None  # a cell of spaces only is an empty cell
            raw[column.field] = column.read(column.field, cell)
        options = [o for o in (raw.pop(f) for f in OPTION_FIELDS) if o is not None]
        raw["sku_options"] = options or None
        key = raw.pop("create_key")
        if key is not None and not is_uuid4(key):
            raise ValidationFailed("create_key", "创建键必须是小写 UUIDv4（或留空）")
        for column in COLUMNS:
            if column.required and raw.get(column.field) is None:
                raise ValidationFailed(column.field, "不能为空")
        fields = parse_task_fields(raw, max_quantity=max_quantity, max_total_price=max_price)
    except ValidationFailed as exc:
        title_at = header.positions["title"]
        title = cells[title_at] if title_at < len(cells) else None
        shown = title[:60] if isinstance(title, str) else ""
        return RowCheck(line, None, None, f"{LABELS.get(exc.field, exc.field)}：{exc.message}", shown)
    return RowCheck(line, fields, key, None)


def check_rows(
    rows: Sequence[tuple[int, Sequence[Cell]]], header: HeaderMap, *, max_quantity: int, max_price: Decimal
) -> list[RowCheck]:
    """:func:`check_row` for every ``(line, cells)``, then duplicates within the file: a later row with the
    identity (or ``create_key``) of an earlier ok row is refused as "与第 N 行重复"."""
    out: list[RowCheck] = []
    seen: dict[object, int] = {}
    for line, cells in rows:
        check = check_row(line, cells, header, max_quantity=max_quantity, max_price=max_price)
        if check.fields is not None:
            key: object = ("key", check.create_key) if check.create_key else check.fields.identity()
            first = seen.get(key)
            if first is not None:
                check = RowCheck(line, None, None, f"与第 {first} 行重复", check.fields.title[:60])
            else:
                seen[key] = line
        out.append(check)
    return out
