"""``cmbuyer-agent pack test`` / ``pack accept`` through the real CLI (``main()``; one
subprocess run checks that bad input never prints a traceback) on capture folders built from the
simulator captures in tests/agent/fixtures/sim822 — their dumps, the metadata recorded when they were
captured (captures.json), and as expectations the readings the real ``cmbuyer-agent inspect`` prints
for them, spot-checked against values a person reads on those screens."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.authoring.packtest import READING_KINDS
from cmbuyer.agent.authoring.readings import READINGS
from cmbuyer.agent.cli import main
from cmbuyer.agent.screens.dump import parse_dump

FX = Path(__file__).parents[1] / "fixtures" / "sim822"
PACKS = Path(__file__).parents[3] / "agent" / "packs"
PACK = PACKS / "pdd-8.22.0-82200.json"
OLD_PACK = PACKS / "pdd-8.17.0-81700.json"
CAPTURES = ("product", "sheet_tshirt", "sheet_mug", "sheet_paylater", "sku_sheet_old", "sku_sheet_old_confirm")
# What a person reads on the simulator's screens (render_sim_order_sheet.py), independent of the readers.
SEEN = {
    "02-sheet_tshirt": {
        "screen": "confirm_order",
        "unit_price": "29.90",
        "quantity": 1,
        "confirm_amount": "29.90",
        "selected": {"颜色": "黑色", "尺码": "M"},
    },
    "03-sheet_mug": {"screen": "confirm_order", "unit_price": "59.00", "selected": {"款式": "奶白色+礼盒"}},
    "04-sheet_paylater": {"screen": "confirm_order", "payment_mode": "使用#先用后付,更换支付方式"},
    "01-product": {"screen": "product"},
}


def _inspect_cli(dump: Path) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", "--dump", str(dump)]) == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A captures directory: one folder per simulator capture with its dump, its recorded meta and a
    confirmed expected.json holding every reading inspect prints for it (built once per module)."""
    recorded = _read(FX / "captures.json")
    root = tmp_path_factory.mktemp("template") / "captures"
    for i, name in enumerate(CAPTURES, start=1):
        cap = root / f"{i:02d}-{name}"
        cap.mkdir(parents=True)
        (cap / "dump.xml").write_bytes((FX / f"{name}.xml").read_bytes())
        _write(cap / "meta.json", {"capture_format": 1, "label": name, "device": "phonesim", **recorded[name]})
        out = _inspect_cli(cap / "dump.xml")
        assert out["pack"] == "pdd-8.22.0-82200"  # chosen from meta.json's version
        _write(
            cap / "expected.json",
            {"expected_format": 1, "screen": out["screen"], "readings": out["readings"], "confirmed_by": "tester"},
        )
    for cap_name, seen in SEEN.items():  # the expectations agree with what a person sees
        expected = _read(root / cap_name / "expected.json")
        assert expected["screen"] == seen["screen"]
        assert {k: expected["readings"][k] for k in seen if k != "screen"} == {
            k: v for k, v in seen.items() if k != "screen"
        }
    return root


@pytest.fixture
def captures(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the template captures directory for one test to change."""
    return Path(shutil.copytree(template, tmp_path / "captures"))


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    rc = main(["pack", "test", *args])
    return rc, capsys.readouterr().out.splitlines()


def _edit(path: Path, **changes: Any) -> None:
    data = _read(path)
    for key, value in changes.items():
        if key in ("screen", "confirmed_by"):
            data[key] = value
        else:
            data["readings"][key] = value
    _write(path, data)


def test_reading_types_cover_exactly_what_inspect_prints() -> None:
    out = inspect_dump(parse_dump((FX / "sheet_tshirt.xml").read_bytes()), [])
    assert set(READINGS) == set(out["readings"])
    assert set(READINGS.values()) == set(READING_KINDS)


def test_simulator_captures_pass(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 0, lines
    assert lines[:-1] == [f"PASS {i:02d}-{name}" for i, name in enumerate(CAPTURES, start=1)]
    assert (
        lines[-1]
        == f"通过 (OK)：用识别包 pdd-8.22.0-82200 测试了 {len(CAPTURES)} 份采集样本：通过 {len(CAPTURES)} 份 (PASS)"
    )


def test_one_capture_dir_itself(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _run(capsys, str(PACK), str(captures / "03-sheet_mug"))
    assert (rc, lines[0]) == (0, "PASS 03-sheet_mug")


@pytest.mark.parametrize(
    ("capture", "key", "value", "line"),
    [
        ("02-sheet_tshirt", "unit_price", "59.00", "FAIL 02-sheet_tshirt unit_price: expected 59.00, read 29.90"),
        (
            "03-sheet_mug",
            "selected",
            {"款式": "经典白"},
            'FAIL 03-sheet_mug selected: expected {"款式":"经典白"}, read {"款式":"奶白色+礼盒"}',
        ),
        (
            "04-sheet_paylater",
            "payment_problems",
            [],
            'FAIL 04-sheet_paylater payment_problems: expected [], read ["payment mode does not hand off',
        ),
        (
            "04-sheet_paylater",
            "payment_mode",
            "使用#微信支付,更换支付方式",
            "FAIL 04-sheet_paylater payment_mode: expected 使用#微信支付,更换支付方式, read 使用#先用后付,更换支付方式",
        ),
        (
            "06-sku_sheet_old_confirm",
            "payment_controls",
            ["用多多支付减7.53元"],
            'FAIL 06-sku_sheet_old_confirm payment_controls: expected ["用多多支付减7.53元"],'
            ' read ["用多多支付减7.53元",',
        ),
        ("01-product", "screen", "confirm_order", "FAIL 01-product screen: expected confirm_order, read product"),
        ("05-sku_sheet_old", "quantity", 2, "FAIL 05-sku_sheet_old quantity: expected 2, read 1"),
    ],
)
def test_one_changed_expectation_fails_naming_capture_and_reading(
    captures: Path, capsys: pytest.CaptureFixture[str], capture: str, key: str, value: Any, line: str
) -> None:
    _edit(captures / capture / "expected.json", **{key: value})
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 1
    failed = [ln for ln in lines if ln.startswith("FAIL ")]
    assert len(failed) == 1 and failed[0].startswith(line), failed
    assert sum(ln.startswith("PASS") for ln in lines) == len(CAPTURES) - 1
    assert lines[-1].startswith("失败 (FAILED)：") and "失败 1 份 (FAIL)" in lines[-1]
    # --allow-unconfirmed never relaxes a mismatch
    assert _run(capsys, str(PACK), str(captures), "--allow-unconfirmed")[0] == 1


def test_unlisted_readings_are_not_compared(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = captures / "02-sheet_tshirt" / "expected.json"
    data = _read(path)
    data["readings"] = {"unit_price": "29.90"}
    _write(path, data)
    assert _run(capsys, str(PACK), str(captures))[0] == 0


def test_tampered_dump_fails(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One changed character the readers do not look at (the service banner): only the hash catches it."""
    dump = captures / "02-sheet_tshirt" / "dump.xml"
    raw = dump.read_bytes()
    banner = 'text="#24小时发货#七天退换"'.encode()
    assert raw.count(banner) == 1
    dump.write_bytes(raw.replace(banner, 'text="#24小时发货#七天退货"'.encode()))
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 1
    line = next(ln for ln in lines if ln.startswith("FAIL "))
    assert line.startswith("FAIL 02-sheet_tshirt dump_sha256: expected ")
    assert "the dump was changed after capture" in line
    # a capture without a recorded hash is not checked for it (the contract makes it optional)
    meta = _read(captures / "02-sheet_tshirt" / "meta.json")
    del meta["dump_sha256"]
    _write(captures / "02-sheet_tshirt" / "meta.json", meta)
    assert _run(capsys, str(PACK), str(captures))[0] == 0


def test_other_app_version_fails(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta_path = captures / "03-sheet_mug" / "meta.json"
    meta = _read(meta_path)
    meta["app_version_code"] = 82201
    _write(meta_path, meta)
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 1
    assert [ln for ln in lines if ln.startswith("FAIL ")] == [
        "FAIL 03-sheet_mug app_version: expected 8.22.0 (82200) as in the pack, read 8.22.0 (82201) in meta.json"
    ]
    # the 8.17.0 pack on 8.22.0 captures: every capture fails on the version, whatever it reads
    rc, lines = _run(capsys, str(OLD_PACK), str(captures))
    assert rc == 1
    fails = [ln for ln in lines if ln.startswith("FAIL ")]
    assert len(fails) == len(CAPTURES)
    assert all("app_version: expected 8.17.0 (81700) as in the pack" in ln for ln in fails)


def test_unconfirmed_captures_fail_unless_allowed(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mug = captures / "03-sheet_mug"
    (mug / "expected.json").rename(mug / "expected.proposed.json")
    (captures / "01-product" / "expected.json").unlink()
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 1
    assert "UNCONFIRMED 03-sheet_mug (expected.proposed.json only)" in lines
    assert "NO_EXPECTATION 01-product" in lines
    assert lines[-1] == (
        "失败 (FAILED)：用识别包 pdd-8.22.0-82200 测试了 6 份采集样本："
        "通过 4 份 (PASS)，未确认 1 份 (UNCONFIRMED)，没有预期 1 份 (NO_EXPECTATION)"
    )
    rc, lines = _run(capsys, str(PACK), str(captures), "--allow-unconfirmed")
    assert rc == 0 and lines[-1].startswith("通过 (OK)：")


def test_json_output(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(captures / "02-sheet_tshirt" / "expected.json", unit_price="59.00", quantity=3)
    rc, lines = _run(capsys, str(PACK), str(captures), "--json")
    report = json.loads("\n".join(lines))
    assert rc == 1 and report["ok"] is False and report["pack"] == "pdd-8.22.0-82200"
    assert report["summary"] == {"PASS": 5, "FAIL": 1, "UNCONFIRMED": 0, "NO_EXPECTATION": 0, "ERROR": 0}
    tshirt = next(r for r in report["results"] if r["capture"] == "02-sheet_tshirt")
    assert tshirt["status"] == "FAIL" and tshirt["screen"] == "confirm_order"
    assert tshirt["mismatches"] == [
        {"key": "unit_price", "expected": "59.00", "read": "29.90"},
        {"key": "quantity", "expected": 3, "read": 1},
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "02-sheet_tshirt/expected.json: not valid strict JSON"),
        (
            b'{"expected_format": 1, "screen": "confirm_order", "readings": {"unit_price": 29.9}}',
            "not valid strict JSON",
        ),  # a float: money is a string
        (
            b'{"expected_format": 1, "screen": "confirm_order", "readings": {"unit_price": "29.9"}}',
            'readings.unit_price must be a money string such as "59.00", or null',
        ),
        (
            b'{"expected_format": 1, "screen": "confirm_order", "readings": {"price": "29.90"}}',
            "readings.price is not a reading inspect prints",
        ),
        (b'{"expected_format": 1, "screen": "cart", "readings": {}}', "screen must be one of"),
        (b'{"expected_format": 2, "screen": "confirm_order", "readings": {}}', "expected_format must be 1"),
        (b'{"expected_format": 1, "screen": "confirm_order", "readings": {}, "note": "x"}', "unknown key 'note'"),
        (
            b'{"expected_format": 1, "screen": "confirm_order", "readings": {"selected": ["x"]}}',
            "readings.selected must be an object",
        ),
        (
            b'{"expected_format": 1, "screen": "confirm_order", "readings": {}, "confirmed_by": "a\\nb"}',
            "confirmed_by must be null or a printable name",
        ),
    ],
)
def test_invalid_expected_json_is_an_input_error(
    captures: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    (captures / "02-sheet_tshirt" / "expected.json").write_bytes(content)
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 2
    error = next(ln for ln in lines if ln.startswith("ERROR"))
    assert error.startswith("ERROR 02-sheet_tshirt: ") and message in error, error
    assert lines[-1].startswith("输入有误 (INPUT ERROR)：")


def test_unreadable_dump_and_missing_meta_are_input_errors(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (captures / "03-sheet_mug" / "dump.xml").write_bytes(b"<hierarchy><node")
    meta = _read(captures / "03-sheet_mug" / "meta.json")
    meta["dump_sha256"] = hashlib.sha256(b"<hierarchy><node").hexdigest()
    _write(captures / "03-sheet_mug" / "meta.json", meta)
    (captures / "05-sku_sheet_old" / "meta.json").unlink()
    (captures / "06-sku_sheet_old_confirm" / "dump.xml").unlink()
    with (captures / "02-sheet_tshirt" / "dump.xml").open("r+b") as fh:  # sparse: 9 MB without writing them
        fh.truncate(9 * 1024 * 1024)
    rc, lines = _run(capsys, str(PACK), str(captures))
    assert rc == 2
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    assert len(errors) == 4
    assert errors.pop(0).endswith("02-sheet_tshirt/dump.xml: larger than 8388608 bytes")
    assert re.fullmatch(r"ERROR 03-sheet_mug: .*03-sheet_mug/dump\.xml: unreadable dump \(.+\)", errors[0])
    assert re.fullmatch(r"ERROR 05-sku_sheet_old: .*05-sku_sheet_old/meta\.json: cannot read \(.+\)", errors[1])
    assert re.fullmatch(r"ERROR 06-sku_sheet_old_confirm: .*/dump\.xml: cannot read \(.+\)", errors[2])


def test_bad_arguments_give_one_line_and_exit_2(
    tmp_path: Path, captures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, str(PACK), str(tmp_path / "nope")) == (2, [f"错误：{tmp_path / 'nope'}: not a directory"])
    (tmp_path / "empty").mkdir()
    rc, lines = _run(capsys, str(PACK), str(tmp_path / "empty"))
    assert rc == 2 and len(lines) == 1 and "no capture" in lines[0]
    bad_pack = tmp_path / "bad.json"
    bad_pack.write_text('{"pack_format": 2}', encoding="utf-8")
    rc, lines = _run(capsys, str(bad_pack), str(captures))
    assert rc == 2 and len(lines) == 1
    assert lines[0].startswith(f"错误：{bad_pack.name}: $: 'id' is a required property")
    rc, lines = _run(capsys, str(tmp_path / "missing.json"), str(captures), "--json")
    assert rc == 2
    assert json.loads(lines[0]) == {"error": "missing.json: $: cannot read the file (No such file or directory)"}


def test_bad_input_never_prints_a_traceback(captures: Path) -> None:
    (captures / "02-sheet_tshirt" / "expected.json").write_bytes(b"\xff\xfe garbage")
    (captures / "03-sheet_mug" / "dump.xml").write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "cmbuyer.agent.cli", "pack", "test", str(PACK), str(captures)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "ERROR 02-sheet_tshirt:" in proc.stdout and "ERROR 03-sheet_mug:" in proc.stdout


# --- pack accept ---------------------------------------------------------------------------------------


def _propose(cap: Path) -> dict[str, Any]:
    data = _read(cap / "expected.json")
    data["confirmed_by"] = None
    (cap / "expected.json").unlink()
    _write(cap / "expected.proposed.json", data)
    return data


def test_accept_turns_proposals_into_confirmed_expectations(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proposals = {name: _propose(captures / name) for name in ("02-sheet_tshirt", "03-sheet_mug")}
    assert _run(capsys, str(PACK), str(captures))[0] == 1  # unconfirmed
    assert main(["pack", "accept", str(captures), "--by", "张三"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("确认 02-sheet_tshirt：screen=confirm_order goods_id=null unit_price=29.90 ")
    assert lines[1].startswith("确认 03-sheet_mug：screen=confirm_order ") and "（confirmed_by 张三）" in lines[1]
    assert lines[-1] == "已确认 2 份采集样本"
    for name, proposal in proposals.items():
        assert not (captures / name / "expected.proposed.json").exists()
        assert _read(captures / name / "expected.json") == {**proposal, "confirmed_by": "张三"}
    assert _run(capsys, str(PACK), str(captures))[0] == 0


def test_accept_refuses_to_overwrite_without_force(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mug = captures / "03-sheet_mug"
    confirmed = (mug / "expected.json").read_bytes()
    proposal = _read(mug / "expected.json")
    proposal["readings"]["unit_price"] = "49.00"
    _write(mug / "expected.proposed.json", proposal)
    tshirt_proposal = _propose(captures / "02-sheet_tshirt")
    assert main(["pack", "accept", str(captures)]) == 2
    out = capsys.readouterr().out
    assert out == f"错误：{mug / 'expected.json'} exists; pass --force to replace it with the proposal\n"
    # nothing changed anywhere, not even in the capture that could have been accepted
    assert (mug / "expected.json").read_bytes() == confirmed
    assert not (captures / "02-sheet_tshirt" / "expected.json").exists()
    assert main(["pack", "accept", str(mug), "--force", "--by", "lead"]) == 0
    assert "确认 03-sheet_mug：" in capsys.readouterr().out
    assert _read(mug / "expected.json")["readings"]["unit_price"] == "49.00"
    assert _read(mug / "expected.json")["confirmed_by"] == "lead"
    assert _read(captures / "02-sheet_tshirt" / "expected.proposed.json") == tshirt_proposal


def test_accept_checks_every_proposal_before_writing(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _propose(captures / "02-sheet_tshirt")
    bad = _propose(captures / "03-sheet_mug")
    bad["readings"]["colour"] = "red"
    _write(captures / "03-sheet_mug" / "expected.proposed.json", bad)
    assert main(["pack", "accept", str(captures)]) == 2
    assert "readings.colour is not a reading inspect prints" in capsys.readouterr().out
    assert not (captures / "02-sheet_tshirt" / "expected.json").exists()
    assert main(["pack", "accept", str(captures / "01-product")]) == 2
    assert "no expected.proposed.json to accept" in capsys.readouterr().out
    assert main(["pack", "accept", str(captures / "02-sheet_tshirt"), "--by", ""]) == 2
    assert "--by must be a printable name" in capsys.readouterr().out
