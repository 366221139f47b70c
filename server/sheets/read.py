"""Read a task spreadsheet (``.xlsx`` or ``.csv``) into a header row and data rows of plain cell values,
within hard bounds (docs/admin.md "Import"). What the values mean is decided by
:mod:`cmbuyer.server.domain.task_import`.

The format is recognised from the bytes, never from a file name: a zip (``PK\\x03\\x04``) is read as
xlsx with openpyxl (read-only mode, ``data_only=False`` so formulas are seen, not evaluated; defusedxml
is installed, so openpyxl refuses XML entities); an OLE2 compound file (``D0CF11E0``) is an encrypted
(password-protected) xlsx or an old ``.xls`` and is refused; anything else must be UTF-8 text (with or
without BOM) and is read as CSV.

Bounds, each a :class:`~cmbuyer.server.domain.task_import.FileRefused` with a Chinese reason:

- the file at most ``max_bytes`` (the caller has already stopped reading there);
- xlsx: at most :data:`MAX_MEMBERS` zip members, none encrypted, and their declared uncompressed sizes
  together at most ``max_bytes × INFLATE_FACTOR`` — Python's zipfile never inflates a member past its
  declared size (and a member that inflates to a different size fails its CRC), so this bounds the memory
  openpyxl can use: a zip bomb is refused before a single byte is inflated;
- at most ``max_rows`` non-empty data rows and :data:`MAX_COLUMNS` columns are read (a longer file is
  refused whole, not cut); CSV fields at most :data:`MAX_CSV_FIELD` characters.

CPU-bound and synchronous: the web layer runs it in a worker thread so the event loop keeps serving
phones during a 5 MiB import.
"""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from cmbuyer.server.domain.task_import import Cell, FileRefused, Formula

INFLATE_FACTOR = 8
MAX_MEMBERS = 1000
MAX_COLUMNS = 64
MAX_CSV_FIELD = 4096
_ZIP = b"PK\x03\x04"
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


@dataclass(frozen=True)
class Sheet:
    """The first sheet of a file: its header row and the non-empty data rows as ``(line, cells)``, where
    ``line`` is the row's number in the file (the header is line 1)."""

    kind: str  # "xlsx" | "csv"
    header: tuple[Cell, ...]
    rows: list[tuple[int, tuple[Cell, ...]]]


def _blank(cells: Sequence[Cell]) -> bool:
    return all(c is None or (isinstance(c, str) and not c.strip()) for c in cells)


def _collect(kind: str, numbered: Iterable[tuple[int, Sequence[Cell]]], max_rows: int) -> Sheet:
    """The first non-empty row as the header, then at most ``max_rows`` non-empty rows."""
    header: tuple[Cell, ...] | None = None
    rows: list[tuple[int, tuple[Cell, ...]]] = []
    for line, cells in numbered:
        if _blank(cells):
            continue
        if header is None:
            header = tuple(cells[:MAX_COLUMNS])
            continue
        if len(rows) >= max_rows:
            raise FileRefused(f"文件超过 {max_rows} 行数据，未导入任何任务；请拆分后再上传")
        rows.append((line, tuple(cells[:MAX_COLUMNS])))
    if header is None:
        raise FileRefused("文件是空的：没有表头行")
    if not rows:
        raise FileRefused("文件只有表头，没有数据行")
    return Sheet(kind, header, rows)


def _csv_rows(text: str) -> Iterator[tuple[int, Sequence[Cell]]]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    for number, row in enumerate(reader, start=1):
        if any(len(value) > MAX_CSV_FIELD for value in row):
            raise FileRefused(f"第 {number} 行有超过 {MAX_CSV_FIELD} 个字符的单元格")
        yield number, row


def read_csv(data: bytes, *, max_rows: int) -> Sheet:
    """A UTF-8 CSV (a leading BOM is dropped; comma-separated, RFC 4180 quoting)."""
    try:
        text = data.decode("utf-8-sig", errors="strict")
    except UnicodeDecodeError:
        raise FileRefused("无法识别的文件：请上传 .xlsx，或 UTF-8 编码的 .csv") from None
    if "\x00" in text:
        raise FileRefused("无法识别的文件：请上传 .xlsx，或 UTF-8 编码的 .csv")
    try:
        return _collect("csv", _csv_rows(text), max_rows)
    except csv.Error:
        raise FileRefused("CSV 格式错误（引号未闭合或多余）") from None


def _check_zip(data: bytes, max_inflated: int) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError):
        raise FileRefused("xlsx 文件已损坏，无法读取") from None
    if len(members) > MAX_MEMBERS:
        raise FileRefused("xlsx 文件结构异常（成员过多），已拒绝")
    if any(m.flag_bits & 0x1 for m in members):
        raise FileRefused("xlsx 文件有密码保护，请去掉密码后再上传")
    if sum(m.file_size for m in members) > max_inflated:
        raise FileRefused(f"xlsx 文件解压后超过 {max_inflated // (1024 * 1024)} MiB，已拒绝（疑似压缩炸弹）")


def _xlsx_rows(sheet: object) -> Iterator[tuple[int, Sequence[Cell]]]:
    for number, row in enumerate(sheet.iter_rows(max_col=MAX_COLUMNS), start=1):  # type: ignore[attr-defined]
        cells: list[Cell] = []
        for cell in row:
            value = getattr(cell, "value", None)
            if getattr(cell, "data_type", None) == "f":
                cells.append(Formula(str(value)))
            else:
                cells.append(value)
        while cells and cells[-1] is None:  # read-only rows are padded to max_col
            cells.pop()
        yield number, cells


def read_xlsx(data: bytes, *, max_rows: int, max_inflated: int) -> Sheet:
    """The first worksheet of an xlsx (bounds in the module docstring)."""
    _check_zip(data, max_inflated)
    import openpyxl  # imported here: only an import pays for it

    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=False, keep_links=False)
    except FileRefused:
        raise
    except Exception:  # openpyxl raises many kinds (KeyError, XML errors, InvalidFileException …)
        raise FileRefused("xlsx 文件已损坏或不是有效的 Excel 工作簿") from None
    try:
        if not book.worksheets:
            raise FileRefused("xlsx 文件没有工作表")
        return _collect("xlsx", _xlsx_rows(book.worksheets[0]), max_rows)
    except FileRefused:
        raise
    except Exception:
        raise FileRefused("xlsx 文件已损坏或不是有效的 Excel 工作簿") from None
    finally:
        book.close()


def read_sheet(data: bytes, *, max_rows: int, max_bytes: int) -> Sheet:
    """Recognise and read ``data`` (see the module docstring). Raises FileRefused."""
    if len(data) > max_bytes:
        raise FileRefused(f"文件超过 {max_bytes // 1024} KiB，未导入任何任务")
    if not data:
        raise FileRefused("文件是空的")
    if data.startswith(_ZIP):
        return read_xlsx(data, max_rows=max_rows, max_inflated=max_bytes * INFLATE_FACTOR)
    if data.startswith(_OLE2):
        raise FileRefused("文件有密码保护或是旧版 .xls：请在 Excel 中去掉密码并另存为 .xlsx")
    return read_csv(data, max_rows=max_rows)
