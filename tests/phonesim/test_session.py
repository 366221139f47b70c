"""Session recorder and playback (phonesim/recorder.py, phonesim/session.py) through the REAL
uiautomator2 + adbutils: what the recorder writes (the contract's capture folder and session.json),
how playback follows steps (taps by bounds, swipes by start ±24 px and direction, BACK, deep links by
URL) and how it ends on an unknown action (report, journal, frozen screen), plus session load errors
and the CLI."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uiautomator2 as u2
from PIL import Image

from cmbuyer.phonesim.cli import main as cli_main
from cmbuyer.phonesim.recorder import RecorderError
from cmbuyer.phonesim.session import REPORT_FILE, SESSION_FILE, SessionError, SessionPhone, load_session
from cmbuyer.phonesim.testing import adb_env, running_sim

from .helpers import PRODUCT_URL, center, find

LIPSTICK = "710000000004"  # 14 tiles in one scrolling row (docs/phonesim.md, order_sheet scenario)


def _open(d: Any, goods_id: str = LIPSTICK) -> None:
    d.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", PRODUCT_URL.format(goods_id)])


def _list_row(xml: str) -> tuple[int, int, int, int]:
    (row,) = [n for n in find(xml, scrollable="true")]
    l, t, r, b = (int(v) for v in row.get("bounds").replace("][", ",").strip("[]").split(","))  # noqa: E741
    return l, t, r, b


def _walk(d: Any) -> dict[str, Any]:
    """Deep link → buy → a tap on the header (changes nothing) → swipe the 色号 row → tap a tile that
    came into view → BACK. Returns the points used."""
    _open(d)
    (buy,) = find(d.dump_hierarchy(), text="单独购买")
    d.shell(["input", "tap", *map(str, center(buy.getparent()))])
    xml = d.dump_hierarchy()
    (header,) = find(xml, text="色号")
    header_at = center(header)
    d.shell(["input", "tap", *map(str, header_at)])
    left, top, right, bottom = _list_row(xml)
    y = (top + bottom) // 2
    swipe = (right - 100, y, left + 100, y)
    d.shell(["input", "swipe", *map(str, swipe), "300"])
    (tile,) = find(d.dump_hierarchy(), text="番茄红#707")  # its name text (tv_content), in view after the swipe
    tile_at = center(tile)
    d.shell(["input", "tap", *map(str, tile_at)])
    d.shell(["input", "keyevent", "4"])
    return {"header": header_at, "swipe": swipe, "tile": tile_at}


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("rec") / "session"
    with running_sim("order_sheet", record_session=root) as sim:
        points = _walk(u2.connect("sim-1"))
        state = sim.phone("sim-1").state()
    return {"dir": root, "points": points, "state": state}


@pytest.fixture
def session_dir(recording: dict[str, Any], tmp_path: Path) -> Path:
    dst = tmp_path / "session"
    shutil.copytree(recording["dir"], dst)
    (dst / REPORT_FILE).unlink(missing_ok=True)
    return dst


@contextlib.contextmanager
def _playing(session: Path, **kw: Any) -> Iterator[tuple[SessionPhone, Any, list[str]]]:
    lines: list[str] = []
    with running_sim(session=session, announce=lines.append, **kw) as sim:
        phone = sim.phone("sim-1")
        assert isinstance(phone, SessionPhone)
        yield phone, u2.connect("sim-1"), lines


# --- the recorder --------------------------------------------------------------------------------
def test_recorder_writes_the_contract_format(recording: dict[str, Any]) -> None:
    root: Path = recording["dir"]
    data = json.loads((root / SESSION_FILE).read_text("utf-8"))
    assert data["session_format"] == 1
    assert data["app"] == {"package": "com.xunmeng.pinduoduo", "version_name": "8.22.0", "version_code": 82200}
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert data["start"] == names[0] == "00-launcher"
    assert [s["action"]["kind"] for s in data["steps"]] == ["open_url", "tap", "tap", "swipe", "tap", "back"]
    assert data["steps"][0]["from"] == "*"
    for name in names:
        meta = json.loads((root / name / "meta.json").read_text("utf-8"))
        dump = (root / name / "dump.xml").read_bytes()
        png = (root / name / "screenshot.png").read_bytes()
        assert meta["capture_format"] == 1 and meta["pack_id"] is None and meta["device"] == "sim-1"
        assert meta["dump_sha256"] == hashlib.sha256(dump).hexdigest()
        assert meta["screenshot_sha256"] == hashlib.sha256(png).hexdigest()
        assert (meta["app_version_name"], meta["app_version_code"]) == ("8.22.0", 82200)
        assert Image.open(io.BytesIO(png)).size == (1080, 2400)
        assert meta["captured_at"].endswith("Z") and set(meta["scrubbed"]) == {
            "dropped_packages",
            "dropped_nodes",
            "blanked_rows",
            "blacked_out",
        }
        package = meta["activity"].split("/")[0]
        # only the window in front is kept: no status bar, no launcher (its gesture strip) behind the app
        assert {n.get("package") for n in _nodes(dump)} == {package}
        if package == "com.xunmeng.pinduoduo":
            assert "com.android.systemui" in meta["scrubbed"]["dropped_packages"]
    # the header tap changed nothing: the step leads back to the same capture (no duplicate capture)
    header_step = data["steps"][2]
    assert header_step["from"] == header_step["to"] == data["steps"][1]["to"]
    assert header_step["action"]["node"]["text"] == "色号"
    swipe = data["steps"][3]["action"]
    assert [swipe[k] for k in ("x1", "y1", "x2", "y2")] == list(recording["points"]["swipe"])
    assert data["steps"][4]["action"]["node"]["text"] == "番茄红#707"
    assert len(names) == 6  # launcher, product, sheet, sheet scrolled, tile selected, product


def _nodes(dump: bytes) -> list[Any]:
    from lxml import etree

    return list(etree.fromstring(dump).iter("node"))


def test_recorder_refuses_a_used_directory(recording: dict[str, Any]) -> None:
    with pytest.raises(RecorderError, match="already holds"), running_sim(record_session=recording["dir"]):
        pass


# --- playback ------------------------------------------------------------------------------------
def test_playback_follows_the_recorded_steps(session_dir: Path, recording: dict[str, Any]) -> None:
    points = recording["points"]
    data = json.loads((session_dir / SESSION_FILE).read_text("utf-8"))
    with _playing(session_dir) as (phone, d, lines):
        assert d.app_current()["package"] == "com.miui.home"
        assert d.shell(["pidof", "com.xunmeng.pinduoduo"]).exit_code == 1
        out = d.shell(["dumpsys", "package", "com.xunmeng.pinduoduo"]).output
        assert "versionName=8.22.0" in out and "versionCode=82200" in out
        _open(d)
        assert phone.capture == "01-product"
        assert d.dump_hierarchy() == (session_dir / "01-product" / "dump.xml").read_bytes().decode("utf-8")
        png = (session_dir / "01-product" / "screenshot.png").read_bytes()
        assert d.adb_device.shell("screencap -p", encoding=None) == png
        assert d.screenshot().size == (1080, 2400)  # JPEG through the JSON-RPC
        top = d.shell(["dumpsys", "activity", "top"]).output
        assert f"goods_id={LIPSTICK}" in top  # the goods id the agent checks after the deep link
        assert d.app_current()["package"] == "com.xunmeng.pinduoduo"
        assert d.shell(["pidof", "com.xunmeng.pinduoduo"]).exit_code == 0
        d(text="单独购买").click()  # a JSON-RPC click on a selector: the same tap matching
        sheet = data["steps"][1]["to"]
        assert phone.capture == sheet
        d.shell(["input", "tap", *map(str, points["header"])])
        assert phone.capture == sheet
        x1, y, x2, _ = points["swipe"]
        d.shell(["input", "swipe", str(x1 + 20), str(y - 20), str(x2 + 300), str(y), "200"])  # within ±24 px
        scrolled = data["steps"][3]["to"]
        assert phone.capture == scrolled
        d.shell(["input", "tap", *map(str, points["tile"])])
        d.shell(["input", "keyevent", "4"])
        assert phone.capture == data["steps"][5]["to"]
        assert phone.ended is None and lines == []
    report = json.loads((session_dir / REPORT_FILE).read_text("utf-8"))
    assert (report["status"], report["steps_followed"], report["actions_refused"]) == ("running", 6, 0)


@pytest.mark.parametrize("action", ["tap", "swipe_direction", "swipe_start", "url", "home"])
def test_an_unknown_action_ends_the_rehearsal(session_dir: Path, recording: dict[str, Any], action: str) -> None:
    points = recording["points"]
    data = json.loads((session_dir / SESSION_FILE).read_text("utf-8"))
    sheet = data["steps"][1]["to"]
    with _playing(session_dir) as (phone, d, lines):
        _open(d)
        d(text="单独购买").click()
        assert phone.capture == sheet
        x1, y, x2, _ = points["swipe"]
        expect_node = None
        if action == "tap":
            (node,) = find(d.dump_hierarchy(), text="豆沙色#520")
            d.shell(["input", "tap", *map(str, center(node))])
            expect_node = "豆沙色#520"
        elif action == "swipe_direction":
            d.shell(["input", "swipe", str(x1), str(y), str(x1 + 300), str(y), "200"])  # right, not left
        elif action == "swipe_start":
            d.shell(["input", "swipe", str(x1 - 25), str(y), str(x2), str(y), "200"])  # 25 px off
        elif action == "url":
            _open(d, "710000000001")
        else:
            d.press("home")
        assert phone.capture == sheet and phone.ended is not None
        # frozen: a recorded action is refused too once the rehearsal ended
        d.shell(["input", "tap", *map(str, points["header"])])
        assert phone.capture == sheet
        assert d.dump_hierarchy() == (session_dir / sheet / "dump.xml").read_bytes().decode("utf-8")
        entries = phone.journal.entries()
    (end,) = [e for e in entries if e["kind"] == "rehearsal_end"]
    refused = [e for e in entries if e.get("refused")]
    assert len(refused) == 2 and refused[0]["seq"] == end["journal_seq"]
    assert all(e["screen"] == e["to"] == sheet for e in refused)
    assert refused[1]["reason"] == "the rehearsal already ended"
    report = json.loads((session_dir / REPORT_FILE).read_text("utf-8"))
    assert report["status"] == "ended" and report["ended"]["capture"] == sheet
    assert report["actions_refused"] == 2
    kind = {"tap": "tap", "url": "open_url", "home": "home"}.get(action, "swipe")
    assert report["ended"]["action"]["kind"] == kind
    assert len(lines) == 1 and lines[0].startswith(f"REHEARSAL ENDED on sim-1 at capture {sheet}: {kind}")
    if expect_node:
        assert report["ended"]["node"]["text"] == expect_node
        assert f'node text="{expect_node}"' in lines[0]
        assert report["ended"]["target"]["text"] == expect_node  # the tile itself is clickable


def test_the_report_path_can_be_moved(session_dir: Path, tmp_path: Path) -> None:
    report = tmp_path / "elsewhere.json"
    with _playing(session_dir, report_path=report) as (_phone, d, _):
        d.shell(["input", "keyevent", "4"])  # no BACK step from the start capture
    assert json.loads(report.read_text("utf-8"))["ended"]["action"] == {"kind": "back"}
    assert not (session_dir / REPORT_FILE).exists()


def test_tap_matching_takes_the_smallest_bounds_and_prefers_the_capture(session_dir: Path) -> None:
    data = json.loads((session_dir / SESSION_FILE).read_text("utf-8"))
    names = sorted(p.name for p in session_dir.iterdir() if p.is_dir())
    tile = data["steps"][4]
    big = {
        "from": "*",
        "action": {"kind": "tap", "x": 5, "y": 5, "node": {"bounds": [0, 0, 1080, 2400]}},
        "to": names[0],
    }
    data["steps"].append(big)
    (session_dir / SESSION_FILE).write_text(json.dumps(data), "utf-8")
    session = load_session(session_dir)
    at = {"kind": "tap", "x": tile["action"]["x"], "y": tile["action"]["y"]}
    step, _ = session.match(tile["from"], at)
    assert step is not None and step.to == tile["to"]  # the tile's bounds are smaller than the screen's
    step, _ = session.match(tile["from"], {"kind": "tap", "x": 5, "y": 5})
    assert step is not None and step.index == len(data["steps"]) - 1  # only the "*" step holds that point


# --- load errors -------------------------------------------------------------------------------
def _edit(session: Path, change: Any) -> None:
    data = json.loads((session / SESSION_FILE).read_text("utf-8"))
    change(data)
    (session / SESSION_FILE).write_text(json.dumps(data), "utf-8")


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d.update(session_format=2), "session_format"),
        (lambda d: d.update(start="99-nothing"), "start"),
        (lambda d: d.update(start=["00-launcher"]), "start"),
        (lambda d: d["steps"][1].update({"from": ["x"]}), r"steps\[1\]\.from"),
        (lambda d: d["steps"].append("tap"), r"steps\[6\]: must be an object"),
        (lambda d: d["steps"][1]["action"].update(x="601"), r"steps\[1\]\.action\.x"),
        (lambda d: d["steps"][1].update(to="99-nothing"), r"steps\[1\]\.to"),
        (lambda d: d["steps"][1].update({"from": "nope"}), r"steps\[1\]\.from"),
        (lambda d: d["steps"][1]["action"].update(kind="pinch"), r"steps\[1\]\.action\.kind"),
        (lambda d: d["steps"][1]["action"]["node"].update(bounds=[0, 0, 1, 1]), "outside node.bounds"),
        (lambda d: d["steps"][3]["action"].pop("x2"), r"steps\[3\]\.action\.x2"),
        (lambda d: d["app"].pop("version_code"), "app"),
        (lambda d: d["steps"].append({**d["steps"][1], "to": d["start"]}), "leads to"),
    ],
)
def test_bad_sessions_are_refused_with_one_line(session_dir: Path, change: Any, message: str) -> None:
    _edit(session_dir, change)
    with pytest.raises(SessionError, match=message) as err:
        load_session(session_dir)
    assert "\n" not in str(err.value)


def test_a_changed_capture_file_is_refused(session_dir: Path) -> None:
    dump = session_dir / "01-product" / "dump.xml"
    dump.write_bytes(dump.read_bytes().replace("单独购买".encode(), "立即购买".encode()))
    with pytest.raises(SessionError, match="01-product: dump_sha256"):
        load_session(session_dir)


def test_missing_session_file(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="cannot read"):
        load_session(tmp_path)


# --- CLI ---------------------------------------------------------------------------------------
def test_cli_validates_a_session(session_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["--session", str(session_dir), "--validate"]) == 0
    assert capsys.readouterr().out.startswith("valid: 6 captures, 6 steps")
    _edit(session_dir, lambda d: d.update(start="nope"))
    assert cli_main(["--session", str(session_dir), "--port", "0"]) == 2
    assert "start" in capsys.readouterr().err
    assert cli_main(["--session", str(session_dir), "--scenario", "order_sheet"]) == 2


def test_cli_serves_a_session_and_prints_the_end(session_dir: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "cmbuyer.phonesim.cli", "--port", "0", "--session", str(session_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        while not lines or lines[-1] != "ready":
            lines.append(p.stdout.readline().strip())  # type: ignore[union-attr]
        port = int(lines[0].rsplit(":", 1)[1])
        assert lines[1] == "serial sim-1 device"
        assert lines[2].startswith(f"session {session_dir}: 6 captures, 6 steps, start 00-launcher, app 8.22.0")
        assert lines[3] == f"report {session_dir / REPORT_FILE}"
        assert lines[4].startswith(f"connect: ANDROID_ADB_SERVER_HOST=127.0.0.1 ANDROID_ADB_SERVER_PORT={port}")
        with adb_env(port):
            u2.connect("sim-1").shell(["input", "keyevent", "4"])
        assert p.stdout.readline().startswith("REHEARSAL ENDED on sim-1 at capture 00-launcher: back")  # type: ignore[union-attr]
        p.terminate()
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()
    assert json.loads((session_dir / REPORT_FILE).read_text("utf-8"))["status"] == "ended"


def test_the_recorded_phone_behaves_as_without_recorder(recording: dict[str, Any]) -> None:
    """The recorder only watches: the same walk on a phone without it ends in the same state."""
    with running_sim("order_sheet") as sim:
        _walk(u2.connect("sim-1"))
        plain = sim.phone("sim-1").state()
    keys = ("screen", "goods_id", "selection", "quantity", "list_offset", "counters")
    assert {k: recording["state"][k] for k in keys} == {k: plain[k] for k in keys}
    assert plain["selection"] == {"色号": "番茄红#707"}


# --- hostile session directories (never a hang, a traceback or a guess) ----------------
def _validate_in_child(session: Path) -> subprocess.CompletedProcess[str]:
    """``cmbuyer-phonesim --session DIR --validate`` in a child with a timeout: a FIFO must not hang
    the test run."""
    code = "import sys; from cmbuyer.phonesim.cli import main; sys.exit(main(sys.argv[1:]))"
    try:
        return subprocess.run(
            [sys.executable, "-c", code, "--session", str(session), "--validate"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("loading the session hung (a FIFO was opened for reading)")


@pytest.mark.parametrize(
    "member", ["01-product/dump.xml", "01-product/screenshot.png", "01-product/meta.json", SESSION_FILE]
)
def test_a_fifo_in_the_session_is_refused_without_hanging(session_dir: Path, member: str) -> None:
    (session_dir / member).unlink()
    os.mkfifo(session_dir / member)
    done = _validate_in_child(session_dir)
    assert done.returncode == 2, done
    assert done.stderr.startswith("invalid: ") and done.stderr.count("\n") == 1, done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_a_decompression_bomb_screenshot_is_refused(session_dir: Path) -> None:
    """A PNG whose header claims 40000x40000 pixels: Pillow's bomb guard is not an OSError."""
    buf = io.BytesIO()
    Image.new("1", (40000, 40000)).save(buf, "PNG")
    (session_dir / "01-product" / "screenshot.png").write_bytes(buf.getvalue())
    meta_path = session_dir / "01-product" / "meta.json"
    meta = json.loads(meta_path.read_text("utf-8"))
    meta["screenshot_sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    meta_path.write_text(json.dumps(meta), "utf-8")
    with pytest.raises(SessionError, match=r"01-product: screenshot\.png"):
        load_session(session_dir)


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"session_format": 1, "session_format": 2}', "not strict JSON"),
        ('{"session_format": 1.0}', "not strict JSON"),
        ('{"session_format": true}', "session_format"),
    ],
)
def test_an_ambiguous_session_file_is_refused(session_dir: Path, text: str, message: str) -> None:
    data = json.loads((session_dir / SESSION_FILE).read_text("utf-8"))
    body = json.dumps({k: v for k, v in data.items() if k != "session_format"})
    (session_dir / SESSION_FILE).write_text(text[:-1] + ", " + body[1:], "utf-8")
    with pytest.raises(SessionError, match=message):
        load_session(session_dir)


@pytest.mark.serial  # "linear time": an upper bound on wall time
def test_a_huge_session_loads_in_linear_time(session_dir: Path) -> None:
    """20 000 steps (a generated file): the conflict check must not compare every pair (2·10^8)."""
    import time

    _edit(
        session_dir,
        lambda d: d["steps"].extend(
            {"from": "*", "action": {"kind": "open_url", "url": f"pinduoduo://x?{i}"}, "to": d["start"]}
            for i in range(20000)
        ),
    )
    started = time.monotonic()
    session = load_session(session_dir)
    assert len(session.steps) == 20006
    assert time.monotonic() - started < 5
