"""Rehearsal on recorded screens: the REAL agent (runner + PhoneAdapter + real
uiautomator2/adbutils + HttpDeviceApi) against the REAL server, first on the simulated 8.22.0
order-sheet phone recording its session (``record_session``), then against the recorded session
played back as a phone (``session``, docs/phonesim.md "Sessions") with a fresh server and a new task
for the same goods and options.

- the replay completes the order: every action the agent sends follows a recorded step, the submit
  tap lands on the recorded transition to the WeChat cashier, the result is reported as in the
  recording;
- with one step removed (the tap on the wanted colour tile) the rehearsal stops there: the report
  names the capture and the node under the point, the attempt fails before the fence, and the
  playback journal shows every tap either following a step or refused without changing the screen.

The recording runs once per module (one full order); each replay is one short agent run.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.phone.adapter import PhoneAdapter
from cmbuyer.agent.waits import FlowWaits
from cmbuyer.phonesim.journal import payment_taps
from cmbuyer.phonesim.session import REPORT_FILE, SESSION_FILE, SessionPhone
from cmbuyer.phonesim.testing import adbutils_leaks_ignored, running_sim

from .realserver import RealServer
from .test_real_server import Agent, fast_phone  # noqa: F401  (fixture)

ENV_822 = {"CMBUYER_ALLOWED_APP_VERSIONS": "8.17.0,8.22.0"}  # `init` allows 8.17.0 only
TASK = {
    "goods_id": "710000000001",
    "color": "白色",
    "size": "L",
    "quantity": 2,
    "max_total_price": "60.00",
    "title": "纯棉短袖T恤男夏季宽松圆领半袖",
}  # default selection is 黑色 M: two tile taps and one "+"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One full order on the simulator's order-sheet layout, recorded: the session directory and what
    the server and the simulator saw."""
    root = tmp_path_factory.mktemp("record")
    session = root / "session"
    with (
        RealServer(root, ENV_822) as srv,
        adbutils_leaks_ignored(),
        running_sim("order_sheet", record_session=session) as sim,
    ):
        creds = srv.add_device()
        task = srv.add_task(**TASK)
        agent = Agent(root, srv, creds, PhoneAdapter.connect("sim-1"))
        assert agent.run_once() == 0
        sim.journal("sim-1").assert_single_submit_tap(goods_id=TASK["goods_id"])
        sim.journal("sim-1").assert_no_payment_taps()
        detail = srv.detail(task.id)
        recorder = sim.phone("sim-1").recorder
        assert recorder is not None and recorder.conflicts == []
    assert detail["submission"]["observation"] == "EXTERNAL_PAYMENT_HANDOFF", detail["submission"]
    return {"dir": session, "state": detail["task"]["state"], "order_sn": detail["submission"]["order_sn"]}


def _replay(root: Path, session: Path, waits: FlowWaits) -> tuple[dict[str, Any], list[dict[str, Any]], SessionPhone]:
    with RealServer(root, ENV_822) as srv, adbutils_leaks_ignored(), running_sim(session=session) as sim:
        creds = srv.add_device()
        task = srv.add_task(**TASK)
        agent = Agent(root, srv, creds, PhoneAdapter.connect("sim-1"), waits=waits)
        assert agent.run_once() == 0
        phone = sim.phone("sim-1")
        assert isinstance(phone, SessionPhone)
        return srv.detail(task.id), phone.journal.entries(), phone


def _steps(session: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((session / SESSION_FILE).read_text("utf-8"))
    return data


def _tapped_text(session: Path, step: dict[str, Any]) -> str:
    """The text of the node whose bounds the tap step's node has, in the step's ``from`` capture: on the
    real text tile a View is drawn over the name (same bounds), so the innermost node has no text."""
    node = step["action"]["node"]
    if node["text"]:
        return str(node["text"])
    left, top, right, bottom = node["bounds"]
    dump = (session / step["from"] / "dump.xml").read_text("utf-8")
    texts = re.findall(rf'text="([^"]+)"[^>]*bounds="\[{left},{top}\]\[{right},{bottom}\]"', dump)
    return texts[0] if len(texts) == 1 else ""


def _capture_package(session: Path, name: str) -> str:
    meta = json.loads((session / name / "meta.json").read_text("utf-8"))
    return str(meta["activity"]).split("/")[0]


@pytest.fixture
def session_copy(recorded: dict[str, Any], tmp_path: Path) -> Iterator[Path]:
    dst = tmp_path / "session"
    shutil.copytree(recorded["dir"], dst)
    yield dst


def test_replay_of_a_recorded_order_completes(
    session_copy: Path,
    recorded: dict[str, Any],
    tmp_path: Path,
    fast_phone: FlowWaits,  # noqa: F811
) -> None:
    detail, entries, phone = _replay(tmp_path, session_copy, fast_phone)
    assert detail["task"]["state"] == recorded["state"]
    sub = detail["submission"]
    assert sub["observation"] == "EXTERNAL_PAYMENT_HANDOFF"
    assert json.loads(sub["selected_options"]) == [["颜色", "白色"], ["尺码", "L"]]
    assert str(sub["confirm_page_amount"]) == "59.80"
    # the read-only confirmation read the recorded order list
    assert sub["order_sn"] == recorded["order_sn"]
    actions = [e for e in entries if e["kind"] in ("tap", "swipe", "key", "deep_link")]
    assert actions and all(e["session_step"] is not None and not e["refused"] for e in actions), [
        e for e in actions if e["refused"]
    ]
    submit = [
        e
        for e in entries
        if e["kind"] == "tap" and any(t.startswith("提交订单") for t in (e["target"] or {}).get("texts", []))
    ]
    assert len(submit) == 1
    assert _capture_package(session_copy, submit[0]["to"]) == "com.tencent.mm"  # the recorded transition
    assert payment_taps(entries) == []
    report = json.loads((session_copy / REPORT_FILE).read_text("utf-8"))
    assert report["status"] == "running" and report["ended"] is None
    assert report["steps_followed"] == len(actions) == phone.followed


def test_missing_step_ends_the_rehearsal_with_a_report(
    session_copy: Path,
    tmp_path: Path,
    fast_phone: FlowWaits,  # noqa: F811
) -> None:
    data = _steps(session_copy)
    (white,) = [s for s in data["steps"] if s["action"]["kind"] == "tap" and _tapped_text(session_copy, s) == "白色"]
    data["steps"].remove(white)
    (session_copy / SESSION_FILE).write_text(json.dumps(data, ensure_ascii=False), "utf-8")

    detail, entries, phone = _replay(tmp_path, session_copy, fast_phone)
    assert detail["submission"] is None  # stopped before the fence: gate 1 saw the default colour
    report = json.loads((session_copy / REPORT_FILE).read_text("utf-8"))
    assert report["status"] == "ended"
    ended = report["ended"]
    assert ended["capture"] == white["from"]
    assert ended["action"] == {"kind": "tap", "x": white["action"]["x"], "y": white["action"]["y"]}
    assert ended["node"]["bounds"] == white["action"]["node"]["bounds"]
    assert _tapped_text(session_copy, {"action": {"node": ended["node"]}, "from": white["from"]}) == "白色"
    # the journal: every tap before the end followed a step; the unknown one is refused and changed
    # nothing; from then on the phone is frozen (every later action refused on the same capture)
    actions = [e for e in entries if e["kind"] in ("tap", "swipe", "key", "deep_link")]
    before = [e for e in actions if e["seq"] < ended["journal_seq"]]
    (unknown,) = [e for e in actions if e["seq"] == ended["journal_seq"]]
    later = [e for e in actions if e["seq"] > ended["journal_seq"]]
    assert before and all(e["session_step"] is not None and not e["refused"] for e in before)
    assert unknown["kind"] == "tap" and unknown["refused"] and unknown["to"] == unknown["screen"] == white["from"]
    assert "no tap step" in unknown["reason"]
    assert later and all(
        e["refused"] and e["to"] == white["from"] and e["reason"] == "the rehearsal already ended" for e in later
    )
    assert [e["capture"] for e in entries if e["kind"] == "rehearsal_end"] == [white["from"]]
    taps = [e for e in actions if e["kind"] == "tap"]
    assert not any(t.startswith("提交订单") for e in taps for t in (e["target"] or {}).get("texts", []))
    assert payment_taps(entries) == []
    assert phone.capture == white["from"]
    # the agent stopped itself (gate 1 saw the default colour) and backed out with BACK only
    assert (detail["task"]["state"], detail["task"]["state_reason"]) == ("FAILED", "SKU_NOT_SELECTED")
    assert detail["attempts"][0]["close_reason"] == "FAILED"
    assert [e["step"] for e in detail["events"]][-2:] == ["GATE_1", "BACK_OUT"]
