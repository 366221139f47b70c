"""Spreadsheet files for the import tests, built with openpyxl and zipfile (no checked-in binaries): a
template-filled workbook, and the bad files docs/admin.md "Import" names (corrupt, password-protected, zip bomb …)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openpyxl import Workbook, load_workbook

HEADER = ("title", "product_url", "sku_color", "sku_size", "quantity", "max_total_price")
URL = "https://mobile.yangkeduo.com/goods.html?goods_id={}"


def good_row(i: int, **over: Any) -> list[Any]:
    """Row ``i`` of a valid file: its own goods id, so every row is a different purchase."""
    row: dict[str, Any] = {
        "title": f"导入任务 {i}",
        "product_url": URL.format(900000000 + i),
        "sku_color": "黑色",
        "sku_size": "M",
        "quantity": 1 + i % 3,
        "max_total_price": 30 + i % 7,  # a number cell, as Excel money columns are
    }
    row.update(over)
    return [row[h] for h in HEADER]


def xlsx(rows: Sequence[Sequence[Any]], header: Sequence[Any] = HEADER) -> bytes:
    """An .xlsx whose first sheet holds ``header`` then ``rows`` (a str starting with ``=`` is a formula)."""
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(list(header))
    for row in rows:
        sheet.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def fill_template(template: bytes, rows: Sequence[Sequence[Any]], header: Sequence[str] = HEADER) -> bytes:
    """The downloaded template with its example row replaced by ``rows`` (what a purchaser does): each
    row's values (in ``header`` order) go under the template's columns of the same names, the template's
    other columns stay empty. AssertionError when the template lacks one of ``header``."""
    book = load_workbook(io.BytesIO(template))
    sheet = book.worksheets[0]
    columns = [cell.value for cell in sheet[1]]
    assert set(header) <= set(columns), (header, columns)
    sheet.delete_rows(2, sheet.max_row)
    for row in rows:
        values = dict(zip(header, row, strict=True))
        sheet.append([values.get(str(name)) for name in columns])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def csv_bytes(rows: Sequence[Sequence[Any]], header: Sequence[Any] = HEADER, *, bom: bool = False) -> bytes:
    """A UTF-8 CSV (optionally with BOM) of ``header`` and ``rows``."""
    import csv

    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    return (b"\xef\xbb\xbf" if bom else b"") + out.getvalue().encode("utf-8")


def zip_bomb(path: Path, inflated: int = 50 * 1024 * 1024) -> Path:
    """A valid-looking xlsx whose worksheet XML inflates to ``inflated`` bytes (written in chunks, so the
    test itself never holds it); the file is ~50 KiB."""
    base = xlsx([good_row(1)])
    with zipfile.ZipFile(io.BytesIO(base)) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename == "xl/worksheets/sheet1.xml":
                with dst.open(info.filename, "w", force_zip64=True) as out:
                    out.write(
                        b'<?xml version="1.0"?><worksheet xmlns="http://schemas.openxmlformats.org/'
                        b'spreadsheetml/2006/main"><sheetData>'
                    )
                    chunk = b" " * (1024 * 1024)
                    for _ in range(inflated // len(chunk)):
                        out.write(chunk)
                    out.write(b"</sheetData></worksheet>")
            else:
                dst.writestr(info, src.read(info.filename))
    return path


def encrypted_zip_flag() -> bytes:
    """An xlsx whose zip entries carry the 'encrypted' flag (what a zip-level password looks like)."""
    data = bytearray(xlsx([good_row(1)]))
    # general-purpose flag bit 0 in every local header (PK\x03\x04, flags at +6) and central header (PK\x01\x02, +8)
    for sig, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (at := data.find(sig, start)) >= 0:
            data[at + offset] |= 0x01
            start = at + 4
    return bytes(data)


# An Excel file protected with a password is an OLE2 compound file holding the encrypted package.
OLE2_ENCRYPTED = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504 + b"EncryptedPackage" + b"\x00" * 64


def lying_bomb(path: Path) -> Path:
    """:func:`zip_bomb` whose central directory declares the big worksheet as 1,000 bytes uncompressed (a
    header that lies to get past a size check)."""
    data = bytearray(zip_bomb(path, inflated=50 * 1024 * 1024).read_bytes())
    name = b"xl/worksheets/sheet1.xml"
    at = -1
    start = 0
    while (found := data.find(b"PK\x01\x02", start)) >= 0:
        name_len = int.from_bytes(data[found + 28 : found + 30], "little")
        if data[found + 46 : found + 46 + name_len] == name:
            at = found
            break
        start = found + 4
    assert at >= 0
    data[at + 24 : at + 28] = (1000).to_bytes(4, "little")  # uncompressed size
    path.write_bytes(bytes(data))
    return path
