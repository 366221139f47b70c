"""`cmbuyer-agent dry-run` (agent/authoring/dryrun.py) end to end: the CLI against the phone simulator through the
REAL uiautomator2 + adbutils, on both layouts (demo/scenario.yaml: sim-1 runs 8.17.0 with the SKU sheet,
sim-2 runs 8.22.0 with the order sheet) and on an unsafe payment mode (phonesim order_sheet.yaml,
sim-paylater). No server runs; ``CMBUYER_SERVER_URL`` points at a loopback HTTP listener that counts
every request it gets (it must get none), and no device credentials are set."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cmbuyer.agent.authoring.dryrun import compare
from cmbuyer.agent.authoring.inspect import inspect_dump
from cmbuyer.agent.cli import main
from cmbuyer.agent.screens.dump import parse_dump
from cmbuyer.phonesim.journal import payment_taps, submit_taps
from cmbuyer.phonesim.testing import running_sim
from tests.agent.packtools import pack_for_version

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "demo" / "scenario.yaml"
ORDER_SHEET = ROOT / "phonesim" / "scenarios" / "order_sheet.yaml"
TSHIRT = ["--goods-id", "937122477375", "--color", "黑色CHA(纯棉)", "--size", "M(建议100-115)"]


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def _any(self) -> None:
        self.hits.append(f"{self.command} {self.path}")
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST = do_PUT = _any

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A would-be server that records any request; credentials absent."""
    _Counter.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("CMBUYER_SERVER_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.delenv("CMBUYER_DEVICE_ID", raising=False)
    monkeypatch.delenv("CMBUYER_DEVICE_TOKEN", raising=False)
    try:
        yield _Counter.hits
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], dict[str, Any]]:
    code = main(["dry-run", *argv])
    lines = capsys.readouterr().out.strip().splitlines()
    return code, lines[:-1], json.loads(lines[-1])


def _captures(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir())


def _assert_captures_match_inspect(out: Path, version: tuple[str, int]) -> None:
    """Every stored capture: scrubbed, and its proposed readings are what inspect reads on it."""
    pack = pack_for_version(*version)
    for capture in _captures(out):
        xml = (capture / "dump.xml").read_bytes()
        dump = parse_dump(xml)
        assert dump.packages() == {"com.xunmeng.pinduoduo"}, capture.name
        for word in ("王小明", "13812345678", "138****5678", "张**"):
            assert word.encode() not in xml, (capture.name, word)
        proposal = json.loads((capture / "expected.proposed.json").read_text(encoding="utf-8"))
        seen = inspect_dump(dump, [pack])
        assert proposal == {
            "expected_format": 1,
            "screen": seen["screen"],
            "readings": seen["readings"],
            "confirmed_by": None,
        }, capture.name
        assert capture.name.endswith(seen["screen"])
        meta = json.loads((capture / "meta.json").read_text(encoding="utf-8"))
        assert (meta["app_version_name"], meta["app_version_code"]) == version and meta["pack_id"] == pack.id


def _assert_session(out: Path) -> dict[str, Any]:
    session = json.loads((out / "session.json").read_text(encoding="utf-8"))
    names = {p.name for p in _captures(out)}
    assert session["session_format"] == 1 and session["start"] in names
    for step in session["steps"]:
        assert step["to"] in names and (step["from"] in names or step["from"] == "*"), step
        action = step["action"]
        if action["kind"] == "tap":
            left, top, right, bottom = action["node"]["bounds"]
            assert left <= action["x"] < right and top <= action["y"] < bottom
    return session


@pytest.mark.parametrize(
    ("serial", "version", "layout", "gates"),
    [
        ("sim-1", ("8.17.0", 81700), "sku_sheet", ["GATE_1", "GATE_2", "PAYMENT_MODE", "GATE_3"]),
        (
            "sim-2",
            ("8.22.0", 82200),
            "order_sheet",
            ["PAYMENT_MODE_AT_OPEN", "GATE_1", "GATE_2", "PAYMENT_MODE", "GATE_3"],
        ),
    ],
)
def test_dry_run_passes_every_gate_and_stops_before_the_fence(
    tmp_path: Path,
    tripwire: list[str],
    capsys: pytest.CaptureFixture[str],
    serial: str,
    version: tuple[str, int],
    layout: str,
    gates: list[str],
) -> None:
    out = tmp_path / "run"
    with running_sim(DEMO, serials=("sim-1", "sim-2")) as sim:
        code, lines, summary = _dry_run(
            capsys, "--device", serial, *TSHIRT, "--quantity", "2", "--max-total", "30", "--out", str(out)
        )
        entries = sim.journal(serial).entries()
    assert code == 0, summary
    assert [line.split()[0] for line in lines] == gates and all(" PASS" in line for line in lines)
    assert summary["result"] == "PASSED" and summary["layout"] == layout and summary["fence_requested"] is False
    assert summary["proof"]["confirm_page_amount"] == "25.76" and summary["proof"]["quantity_read"] == 2
    assert summary["disagreements"] == [] and summary["backed_out"] is True
    assert submit_taps(entries) == [] and payment_taps(entries) == []
    assert [e for e in entries if e["kind"] == "order"] == []
    assert tripwire == []
    _assert_captures_match_inspect(out, version)
    session = _assert_session(out)
    # every tap/back/deep link the phone received is in the session, in order
    sent = [e["kind"] for e in entries if e["kind"] in ("tap", "key", "deep_link", "swipe")]
    recorded = [
        {"tap": "tap", "back": "key", "open_url": "deep_link", "swipe": "swipe"}[s["action"]["kind"]]
        for s in session["steps"]
    ]
    assert recorded == sent
    # it backed out like a failed flow: the last capture is the product page, after a BACK
    assert _captures(out)[-1].name.endswith("-product") and session["steps"][-1]["action"]["kind"] == "back"
    assert json.loads((out / "dryrun.json").read_text(encoding="utf-8")) == summary
    # the capture at gate 3 proposes exactly what the gate judged
    assert set(summary["gate_captures"]) == {"SKU_PANEL_GATE_1", "QUANTITY_GATE_2", "CONFIRM_PAGE_GATE_3", "END"}
    gate3 = json.loads(
        (out / summary["gate_captures"]["CONFIRM_PAGE_GATE_3"] / "expected.proposed.json").read_text(encoding="utf-8")
    )
    assert gate3["screen"] == "confirm_order"
    assert {k: gate3["readings"][k] for k in ("unit_price", "quantity", "confirm_amount", "submit_controls")} == {
        "unit_price": "12.88",
        "quantity": 2,
        "confirm_amount": "25.76",
        "submit_controls": 1,
    }
    assert sorted(gate3["readings"]["selected"].values()) == ["M(建议100-115)", "黑色CHA(纯棉)"]
    _assert_pack_test_passes_once_accepted(capsys, out, version)


def _assert_pack_test_passes_once_accepted(
    capsys: pytest.CaptureFixture[str], out: Path, version: tuple[str, int]
) -> None:
    """The dry run's folder is ready for ``pack test``: refused while the expectations are
    only proposed, passed once a person accepted them — with the pack the dry run used."""
    import cmbuyer.agent.packs

    pack_file = str(Path(cmbuyer.agent.packs.__file__).parent / f"pdd-{version[0]}-{version[1]}.json")
    capsys.readouterr()
    assert main(["pack", "test", pack_file, str(out)]) == 1
    assert "UNCONFIRMED" in capsys.readouterr().out
    assert main(["pack", "accept", str(out), "--by", "张三"]) == 0
    capsys.readouterr()
    assert main(["pack", "test", pack_file, str(out)]) == 0, capsys.readouterr().out
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("PASS ") for line in lines[:-1]), lines


def test_a_dry_runs_folder_replays_as_a_session(
    tmp_path: Path, tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The dry run's captures + session.json are a rehearsal: a second dry run of the
    same order against ``--session`` playback of the first follows every recorded step and passes every
    gate; the playback phone refused nothing."""
    first = tmp_path / "first"
    with running_sim(DEMO, serials=("sim-2",)):
        code, _, summary = _dry_run(
            capsys, "--device", "sim-2", *TSHIRT, "--quantity", "2", "--max-total", "30", "--out", str(first)
        )
    assert code == 0, summary
    with running_sim(session=first) as sim:
        code, lines, again = _dry_run(
            capsys,
            "--device",
            "sim-1",
            *TSHIRT,
            "--quantity",
            "2",
            "--max-total",
            "30",
            "--out",
            str(tmp_path / "replay"),
        )
        entries = sim.phone("sim-1").journal.entries()
    assert code == 0 and again["result"] == "PASSED", (lines, again)
    assert again["proof"] == summary["proof"]
    assert [e for e in entries if e.get("refused")] == [] and submit_taps(entries) == []
    assert tripwire == []


def test_unsafe_payment_mode_stops_with_exit_1_and_backs_out(
    tmp_path: Path, tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with running_sim(ORDER_SHEET, serials=("sim-paylater",)) as sim:
        code, lines, summary = _dry_run(
            capsys,
            "--device",
            "sim-paylater",
            "--goods-id",
            "710000000001",
            "--color",
            "黑色",
            "--size",
            "M",
            "--quantity",
            "1",
            "--max-total",
            "100",
            "--out",
            str(out),
        )
        entries = sim.journal("sim-paylater").entries()
    assert code == 1
    assert lines[0].startswith("PAYMENT_MODE_AT_OPEN STOP PAYMENT_MODE_UNSAFE")
    assert [line.split()[:2] for line in lines[1:]] == [
        ["GATE_1", "NOT_RUN"],
        ["GATE_2", "NOT_RUN"],
        ["PAYMENT_MODE", "NOT_RUN"],
        ["GATE_3", "NOT_RUN"],
    ]
    assert summary["result"] == "STOPPED" and summary["reason_code"] == "PAYMENT_MODE_UNSAFE"
    assert summary["stopped_at"] == "CHECK_PAYMENT_MODE" and summary["proof"] is None
    assert submit_taps(entries) == [] and payment_taps(entries) == [] and tripwire == []
    assert [e["kind"] for e in entries if e["kind"] in ("tap", "key", "deep_link")][-1] == "key"  # BACK
    names = [p.name for p in _captures(out)]
    assert names[-1].endswith("-product") and any(n.endswith("-confirm_order") for n in names)
    _assert_session(out)


def test_usage_and_output_errors_exit_2_and_touch_nothing(
    tmp_path: Path, tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--device", "sim-1", *TSHIRT, "--quantity", "1"]
    for argv in (
        [*base, "--max-total", "abc"],
        [*base, "--max-total", "0"],
        ["--device", "sim-1", "--goods-id", "12a", "--color", "x", "--quantity", "1", "--max-total", "5"],
        ["--device", "sim-1", "--goods-id", "1", "--color", " ", "--quantity", "1", "--max-total", "5"],
        ["--device", "sim-1", "--goods-id", "1", "--option", "规格", "--quantity", "1", "--max-total", "5"],
        ["--device", "sim-1", "--goods-id", "1", "--quantity", "1", "--max-total", "5"],  # no option at all
        [*base[:2], "--goods-id", "1", "--option", "a=1", "--color", "x", "--quantity", "1", "--max-total", "5"],
    ):
        assert main(["dry-run", *argv, "--out", str(tmp_path / "x")]) == 2
        assert json.loads(capsys.readouterr().out)["error"] == "USAGE"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x", encoding="utf-8")
    for extra in ([], ["--force"]):
        assert main(["dry-run", *base, "--max-total", "20", "--out", str(busy), *extra]) == 2
        assert json.loads(capsys.readouterr().out)["error"] == "CAPTURE_EXISTS"
    assert [p.name for p in busy.iterdir()] == ["keep.txt"] and not (tmp_path / "x").exists()
    # no phone on that serial: a phone error, exit 2
    with running_sim(DEMO, serials=("sim-1",)):
        assert (
            main(
                [
                    "dry-run",
                    "--device",
                    "sim-9",
                    *TSHIRT,
                    "--quantity",
                    "1",
                    "--max-total",
                    "20",
                    "--out",
                    str(tmp_path / "y"),
                ]
            )
            == 2
        )
    assert json.loads(capsys.readouterr().out)["error"] == "ADB_ERROR" and tripwire == []


def test_gate_values_that_inspect_reads_differently_are_disagreements() -> None:
    """The comparison behind READINGS_DISAGREE: money as inspect prints it, selected per task dimension
    (inspect's headers matched through the alias table: the task's 颜色 is the sheet's 颜色分类)."""
    pack = pack_for_version("8.22.0", 82200)
    read = {
        "selected": {"颜色": "黑色", "尺码": "M"},
        "unit_price": Decimal("29.9"),
        "quantity": 2,
        "confirm_amount": Decimal("59.80"),
        "submit_controls": 1,
        "payment_mode": "微信支付",
    }
    same = {
        "selected": {"颜色分类": "黑色", "尺码": "M"},
        "unit_price": "29.90",
        "quantity": 2,
        "confirm_amount": "59.80",
        "submit_controls": 1,
        "payment_problems": [],
    }
    assert compare(read, same, pack) == []
    other = dict(
        same,
        selected={"颜色": "黑色", "尺码": "L"},
        confirm_amount=None,
        quantity=1,
        payment_problems=["two payment rows"],
    )
    found = compare(read, other, pack)
    assert [d.split(":")[0] for d in found] == ["confirm_amount", "quantity", "selected 尺码", "payment"]
