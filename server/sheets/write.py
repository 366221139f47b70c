"""Write rows as ``.csv`` or ``.xlsx`` for people to open in a spreadsheet program (docs/admin.md "Export").

Formula injection (OWASP "CSV injection"): a text cell that starts with ``=``, ``+``, ``-``, ``@``, a
tab or a carriage return would be run as a formula by Excel/LibreOffice; such a text gets a leading
``'`` (:func:`neutralise`). Texts are stored as typed (a title may start with ``-``); only the exported
copy is changed. Numbers (``int``) are written as numbers. Characters XML cannot hold are replaced by
U+FFFD in the xlsx.

CSV: UTF-8 with a BOM (so Excel recognises Chinese), CRLF line ends, every field quoted as needed
(RFC 4180).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence

_DANGEROUS_START = ("=", "+", "-", "@", "\t", "\r")
_XML_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
Value = str | int | None


def neutralise(value: Value) -> Value:
    """``value`` safe to open in a spreadsheet: a text starting with ``= + - @``, tab or CR is prefixed with
    ``'``; other values unchanged."""
    if isinstance(value, str) and value.startswith(_DANGEROUS_START):
        return "'" + value
    return value


def write_csv(header: Sequence[str], rows: Iterable[Sequence[Value]]) -> bytes:
    """The CSV bytes of ``header`` and ``rows`` (None → empty field), every cell neutralised."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([neutralise(h) for h in header])
    for row in rows:
        writer.writerow(["" if v is None else neutralise(v) for v in row])
    return b"\xef\xbb\xbf" + out.getvalue().encode("utf-8")


def write_xlsx(header: Sequence[str], rows: Iterable[Sequence[Value]], *, title: str = "tasks") -> bytes:
    """The xlsx bytes of one worksheet ``title`` with ``header`` and ``rows``; every text cell is written
    as a string cell (never a formula) and neutralised as in CSV."""
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet(title)
    sheet.append([_xml_safe(neutralise(h)) for h in header])
    for row in rows:
        sheet.append([_xml_safe(neutralise(v)) for v in row])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _xml_safe(value: Value) -> Value:
    return _XML_ILLEGAL.sub("\ufffd", value) if isinstance(value, str) else value
