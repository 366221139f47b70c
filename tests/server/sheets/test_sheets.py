"""server/sheets/: reading uploaded .xlsx/.csv within bounds, and writing exports safe to open.

The zip-bomb test runs the real ``cmbuyer-server task import`` in a child process and measures the child's
peak RSS (``ru_maxrss``) around the import."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from openpyxl import load_workbook

from cmbuyer.server.domain.task_import import FileRefused, Formula
from cmbuyer.server.sheets.read import read_sheet
from cmbuyer.server.sheets.write import neutralise, write_csv, write_xlsx

from .files import HEADER, OLE2_ENCRYPTED, csv_bytes, encrypted_zip_flag, good_row, lying_bomb, xlsx, zip_bomb

MiB = 1024 * 1024


def read(data: bytes, max_rows: int = 100) -> object:
    return read_sheet(data, max_rows=max_rows, max_bytes=5 * MiB)


def test_xlsx_cells_keep_their_types_and_formulas_are_seen_not_evaluated() -> None:
    sheet = read(xlsx([good_row(1), ["=1+1", "x", "y", None, 2, "=A2"]]))
    assert sheet.kind == "xlsx" and sheet.header == HEADER
    (line2, first), (line3, second) = sheet.rows
    assert (line2, line3) == (2, 3)
    assert first[4] == 2 and first[5] == 31  # numbers stay numbers
    assert second[0] == Formula("=1+1") and second[5] == Formula("=A2")


@pytest.mark.parametrize("bom", [False, True])
def test_csv_with_or_without_bom(bom: bool) -> None:
    sheet = read(csv_bytes([good_row(1)], bom=bom))
    assert sheet.kind == "csv" and sheet.header == HEADER and sheet.rows[0][1][0] == "导入任务 1"


def test_blank_rows_are_skipped_but_keep_line_numbers() -> None:
    sheet = read(csv_bytes([good_row(1), ["", "", ""], good_row(2)]))
    assert [line for line, _ in sheet.rows] == [2, 4]


BAD_FILES = [
    ("empty", b"", "文件是空的"),
    ("not a spreadsheet (binary)", b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "无法识别的文件"),
    ("latin-1 csv", "标题".encode("gb18030") + b",x\r\n", "无法识别的文件"),
    ("password-protected xlsx (OLE2)", OLE2_ENCRYPTED, "文件有密码保护"),
    ("zip-level encryption flag", encrypted_zip_flag(), "xlsx 文件有密码保护"),
    ("corrupt xlsx (truncated)", xlsx([good_row(1)])[:400], "xlsx 文件已损坏"),
    ("zip that is no workbook", b"PK\x03\x04" + b"\x00" * 100, "xlsx 文件已损坏"),
    ("header only", csv_bytes([]), "文件只有表头"),
    ("unclosed quote", b'title,x\r\n"abc,1\r\n', "CSV 格式错误"),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_files_are_refused_whole(name: str, data: bytes, message: str) -> None:
    with pytest.raises(FileRefused) as info:
        read(data)
    assert info.value.message.startswith(message), info.value.message


def test_row_limit_and_size_limit() -> None:
    with pytest.raises(FileRefused, match="超过 3 行数据"):
        read(csv_bytes([good_row(i) for i in range(4)]), max_rows=3)
    assert len(read(csv_bytes([good_row(i) for i in range(3)]), max_rows=3).rows) == 3
    with pytest.raises(FileRefused, match="文件超过 1 KiB"):
        read_sheet(b"x" * 1025, max_rows=10, max_bytes=1024)


@pytest.mark.serial  # peak RSS measured
def test_zip_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """A 50 MiB-uncompressed worksheet (≈ 50 KiB file) through the real CLI in a child process: refused as a
    bomb, and the child's peak RSS grows by far less than the inflated size."""
    bomb = zip_bomb(tmp_path / "bomb.xlsx")
    assert bomb.stat().st_size < 1 * MiB
    data_dir = tmp_path / "data"
    subprocess.run(
        [sys.executable, "-m", "cmbuyer.server.cli", "--data-dir", str(data_dir), "init"],
        check=True,
        capture_output=True,
    )
    probe = (
        "import resource, sys, openpyxl\n"
        "from cmbuyer.server import cli\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "code = cli.main(sys.argv[1:])\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print('RSS', before, after, code, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "--data-dir", str(data_dir), "task", "import", str(bomb), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = json.loads(done.stdout)
    assert "压缩炸弹" in out["refused"]
    before_kib, after_kib, code = (int(x) for x in done.stderr.split("RSS", 1)[1].split())
    assert code == 1
    grown = (after_kib - before_kib) * 1024
    print(f"zip bomb: peak RSS grew by {grown / MiB:.1f} MiB (inflated size 50 MiB)")
    assert grown < 16 * MiB


def test_a_member_that_lies_about_its_size_is_refused_without_inflating(tmp_path: Path) -> None:
    """The central directory says 1,000 bytes, the data inflates to 50 MiB: zipfile stops at the declared size
    and the CRC fails, so the file is refused as corrupt and nothing near 50 MiB is ever allocated."""
    import tracemalloc

    data = lying_bomb(tmp_path / "lying.xlsx").read_bytes()
    tracemalloc.start()
    try:
        with pytest.raises(FileRefused) as info:
            read(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.message.startswith("xlsx 文件已损坏"), info.value.message
    assert peak < 16 * MiB, peak


def test_neutralise_formula_starts() -> None:
    for text in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert neutralise(text) == "'" + text
    assert neutralise("纯棉 -1") == "纯棉 -1" and neutralise(5) == 5 and neutralise(None) is None


def test_exports_are_formula_safe_and_read_back() -> None:
    rows = [['=HYPERLINK("http://evil")', 2, None], ["普通", 3, "@x"]]
    book = load_workbook(io.BytesIO(write_xlsx(["a", "b", "c"], rows)))
    sheet = book.worksheets[0]
    values = [[c.value for c in r] for r in sheet.iter_rows()]
    assert values == [["a", "b", "c"], ['\'=HYPERLINK("http://evil")', 2, None], ["普通", 3, "'@x"]]
    assert all(c.data_type != "f" for r in sheet.iter_rows() for c in r)
    text = write_csv(["a", "b"], [["-2+3", 1]]).decode("utf-8")
    assert text.startswith("\ufeff") and "'-2+3,1\r\n" in text
