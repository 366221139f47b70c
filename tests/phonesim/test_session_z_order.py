"""What a tap hits in a recorded-session rehearsal (phonesim/session.py): the topmost node at
the point — by ``drawing-order`` within a window, by the capture's ``window_z_order`` across windows — not
the first window or the first node in the file. Two windows at the point without a z-order in meta.json:
the tap is refused (the rehearsal ends), never guessed. The recorder writes the z-order it knows."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from cmbuyer.phonesim.session import SESSION_FILE, SessionError, SessionPhone, load_session
from cmbuyer.phonesim.testing import running_sim

PDD = "com.xunmeng.pinduoduo"
SUBMIT_AT = (798, 2202)


def _node(bounds: str, order: int, *children: str, **attrs: str) -> str:
    extra = "".join(f' {k}="{v}"' for k, v in attrs.items())
    head = f'<node class="android.widget.FrameLayout" package="{PDD}" bounds="{bounds}" drawing-order="{order}"{extra}'
    return f"{head}>{''.join(children)}</node>" if children else f"{head} />"


def _submit() -> str:
    return _node("[540,2136][1056,2268]", 1, _node("[600,2166][996,2238]", 1, text="提交订单 ¥25.76"), clickable="true")


def _coupon(order: int) -> str:
    return _node("[0,1700][1080,2280]", order, _node("[300,2140][1040,2260]", 1, text="立即领取"), clickable="true")


def _write(root: Path, windows: list[str], z_order: list[int] | None) -> Path:
    """A session of two captures: ``sheet`` (these windows) and ``after``; one tap step at the submit point."""
    for name, wins in (("sheet", windows), ("after", [_node("[0,0][1080,2400]", 0, _node("[0,0][1080,200]", 1))])):
        cap = root / name
        cap.mkdir(parents=True)
        (cap / "dump.xml").write_text(f'<hierarchy rotation="0">{"".join(wins)}</hierarchy>', "utf-8")
        png = io.BytesIO()
        Image.new("RGB", (108, 240)).save(png, format="PNG")
        (cap / "screenshot.png").write_bytes(png.getvalue())
        meta: dict[str, Any] = {"capture_format": 1, "activity": f"{PDD}/.activity.NewPageActivity"}
        if name == "sheet" and z_order is not None:
            meta["window_z_order"] = z_order
        (cap / "meta.json").write_text(json.dumps(meta), "utf-8")
    step = {
        "from": "sheet",
        "action": {"kind": "tap", "x": SUBMIT_AT[0], "y": SUBMIT_AT[1], "node": {"bounds": [540, 2136, 1056, 2268]}},
        "to": "after",
    }
    app = {"package": PDD, "version_name": "8.22.0", "version_code": 82200}
    (root / SESSION_FILE).write_text(
        json.dumps({"session_format": 1, "app": app, "start": "sheet", "steps": [step]}), "utf-8"
    )
    return root


def _tap(root: Path) -> dict[str, Any]:
    phone = SessionPhone(load_session(root), "sim-1", 1, threading.Event())
    entry = phone.tap(*SUBMIT_AT, "input_tap")
    return {"entry": entry, "ended": phone.ended}


SHEET = _node("[0,0][1080,2400]", 0, _node("[0,96][1080,2280]", 1, _submit()))


@pytest.mark.parametrize(
    "windows,z_order,hit",
    [
        ([SHEET, _node("[0,0][1080,2400]", 0, _coupon(1))], [1, 0], "立即领取"),  # listed last, on top
        ([_node("[0,0][1080,2400]", 0, _coupon(1)), SHEET], [1, 0], "提交订单 ¥25.76"),  # listed first, under
        ([SHEET], None, "提交订单 ¥25.76"),
    ],
    ids=["coupon-window-on-top", "coupon-window-underneath", "one-window"],
)
def test_across_windows_the_capture_z_order_decides(
    tmp_path: Path, windows: list[str], z_order: list[int] | None, hit: str
) -> None:
    out = _tap(_write(tmp_path / "s", windows, z_order))
    assert out["entry"]["node"]["text"] == hit and out["ended"] is None


def test_overlapping_windows_without_a_z_order_end_the_rehearsal(tmp_path: Path) -> None:
    out = _tap(_write(tmp_path / "s", [SHEET, _node("[0,0][1080,2400]", 0, _coupon(1))], None))
    assert out["entry"]["refused"] and out["entry"]["node"] is None
    assert "does not say which is on top" in out["ended"]["reason"]


@pytest.mark.parametrize("coupon_order,hit", [(2, "立即领取"), (0, "提交订单 ¥25.76")])
def test_within_a_window_the_drawing_order_decides_not_the_document_order(
    tmp_path: Path, coupon_order: int, hit: str
) -> None:
    # the coupon is listed FIRST in the window; its drawing-order says whether it is drawn over the sheet
    window = _node("[0,0][1080,2400]", 0, _coupon(coupon_order), _node("[0,96][1080,2280]", 1, _submit()))
    assert _tap(_write(tmp_path / "s", [window], None))["entry"]["node"]["text"] == hit


def test_a_bad_z_order_is_refused_at_load(tmp_path: Path) -> None:
    root = _write(tmp_path / "s", [SHEET, _node("[0,0][1080,2400]", 0, _coupon(1))], [0, 0])
    with pytest.raises(SessionError, match="window_z_order"):
        load_session(root)


def test_the_recorder_writes_the_window_z_order(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    with running_sim("order_sheet", record_session=root) as sim:
        phone = sim.phone("sim-1")
        phone.deep_link("pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id=710000000004")
        phone.inject("overlay", window="coupon")
        phone.dump()  # the overlay fault fires on the next device call
        phone.key("4", "input_keyevent")  # an action: the screen after it is captured
    metas = [json.loads(p.read_text("utf-8")) for p in sorted(root.glob("*/meta.json"))]
    assert [m["window_z_order"] for m in metas][-1] == [0, 1]  # coupon window over the app window
    assert all(sorted(m["window_z_order"]) == list(range(len(m["window_z_order"]))) for m in metas)
