"""The hit test of the submit tap point (agent/screens/hit.py): the submit control (or a node
inside it) must be the topmost node at the point across all windows and in drawing order; another window
at the point, a node drawn over it, or an order the dump does not state means no tap."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cmbuyer.agent.screens import safety
from cmbuyer.agent.screens.dump import Dump, Node, parse_dump
from cmbuyer.agent.screens.hit import drawn_after, hit_test
from cmbuyer.phonesim import load_scenario
from cmbuyer.phonesim.phone import Phone

FIXTURES = Path(__file__).parents[1] / "fixtures"
PDD = "com.xunmeng.pinduoduo"
SUBMIT = "[540,2136][1056,2268]"


def _n(bounds: str, order: int | None, *children: str, package: str = PDD, **attrs: str) -> str:
    drawing = f' drawing-order="{order}"' if order is not None else ""
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    head = f'<node class="android.widget.FrameLayout" package="{package}" bounds="{bounds}"{drawing}{extra}'
    return f"{head}>{''.join(children)}</node>" if children else f"{head} />"


def _submit() -> str:
    return _n(SUBMIT, 1, _n("[600,2166][996,2238]", 1, text="提交订单 ¥25.76"), clickable="true")


def _app(*extra: str, content_order: int = 1) -> str:
    """The app window: a content frame (drawing-order ``content_order``) holding the bottom bar with the
    submit control, then ``extra`` siblings of the content frame."""
    content = _n("[0,96][1080,2280]", content_order, _n("[0,2100][1080,2280]", 1, _submit()))
    return _n("[0,0][1080,2400]", 0, content, *extra)


def _dump(*windows: str) -> Dump:
    return parse_dump(f'<hierarchy rotation="0">{"".join(windows)}</hierarchy>')


def _verdict(dump: Dump) -> tuple[bool, str]:
    (control,) = safety.submit_controls(dump)
    verdict = hit_test(dump, control, control.bounds.center)
    return verdict.clear, verdict.why


STATUS_BAR = _n(
    "[0,0][1080,95]", 0, _n("[0,0][1080,95]", 1, package="com.android.systemui"), package="com.android.systemui"
)
GESTURE_BAR = _n("[0,2328][1080,2400]", 0, package="com.miui.home")


def test_the_captured_confirm_page_and_a_clean_sheet_are_clear() -> None:
    real = parse_dump((FIXTURES / "real" / "confirm_order.xml").read_text("utf-8"))
    assert _verdict(real) == (True, "")
    # other windows elsewhere on the screen, in any order (a real dump's window order is not z-order)
    assert _verdict(_dump(GESTURE_BAR, STATUS_BAR, _app())) == (True, "")
    assert _verdict(_dump(_app(), GESTURE_BAR, STATUS_BAR)) == (True, "")


@pytest.mark.parametrize("first", [True, False], ids=["window-listed-first", "window-listed-last"])
@pytest.mark.parametrize("package", [PDD, "com.miui.touchassistant", "com.android.systemui"])
def test_another_window_at_the_point_is_an_obstruction_wherever_it_is_listed(first: bool, package: str) -> None:
    popup = _n(
        "[0,1900][1080,2280]", 0, _n("[300,2140][1040,2260]", 1, text="立即领取", clickable="true"), package=package
    )
    windows = (popup, _app()) if first else (_app(), popup)
    clear, why = _verdict(_dump(STATUS_BAR, *windows))
    assert not clear and why.startswith("another window")


def test_within_the_window_the_drawing_order_decides_not_the_document_order() -> None:
    cover = _n("[0,96][1080,2280]", 2, _n("[300,2140][1040,2260]", 1, text="立即领取", clickable="true"))
    assert _verdict(_dump(_app(cover))) == (False, "a node is drawn over the submit control")
    under = _n("[0,96][1080,2280]", 0)  # listed after the content, drawn before it
    assert _verdict(_dump(_app(under))) == (True, "")
    # listed first in the file but drawn last (a raised view): it covers
    raised = _n("[0,96][1080,2280]", 5)
    content = _n("[0,96][1080,2280]", 1, _n("[0,2100][1080,2280]", 1, _submit()))
    assert _verdict(_dump(_n("[0,0][1080,2400]", 0, raised, content)))[0] is False


@pytest.mark.parametrize("order", [None, 1], ids=["no-drawing-order", "same-drawing-order"])
def test_an_order_the_dump_does_not_state_is_an_obstruction(order: int | None) -> None:
    sibling = _n("[0,96][1080,2280]", order)
    assert _verdict(_dump(_app(sibling))) == (False, "drawing order at the tap point cannot be told")


def test_nodes_around_and_inside_the_control_and_away_from_the_point_do_not_count() -> None:
    # a later sibling that does not hold the point, the control's own label, the containers around it
    aside = _n("[0,96][1080,400]", 9, text="优惠")
    assert _verdict(_dump(_app(aside))) == (True, "")
    dump = _dump(_app())
    (control,) = safety.submit_controls(dump)
    assert not hit_test(dump, control, (10, 10)).clear  # a point outside the control is never its tap


def test_drawn_after_rules() -> None:
    dump = _dump(STATUS_BAR, _app(_n("[0,96][1080,2280]", 2)))
    app_root = next(n for n in dump.nodes if n.parent is None and n.package == PDD)
    content, overlay = app_root.children
    label: Node = next(n for n in dump.nodes if n.text.startswith("提交订单"))
    assert drawn_after(label, content) is True and drawn_after(content, label) is False  # children over parents
    assert drawn_after(overlay, label) is True and drawn_after(label, overlay) is False
    status = next(n for n in dump.nodes if n.package == "com.android.systemui")
    assert drawn_after(label, status) is None  # two windows: not in the dump


@pytest.mark.parametrize("name", ["order_sheet_image_tiles.xml", "order_sheet_text_tile.xml"])
def test_the_real_order_sheets_are_clear_and_a_popup_window_either_side_is_not(name: str) -> None:
    """The two structure-exact real captures (tests/agent/fixtures/real_structures: the app window, the
    status bar and MIUI's gesture bar, listed in different orders): the submit control is on top at its
    tap point; the same dump with a coupon window over that point, listed first or last, is not."""
    xml = (FIXTURES / "real_structures" / name).read_text("utf-8")
    assert _verdict(parse_dump(xml)) == (True, "")
    popup = _n("[0,1700][1080,2328]", 0, _n("[300,2213][1040,2354]", 1, text="立即领取", clickable="true"))
    head, tail = xml.split('<hierarchy rotation="0">', 1)
    for dump in (head + '<hierarchy rotation="0">' + popup + tail, xml.replace("</hierarchy>", popup + "</hierarchy>")):
        clear, why = _verdict(parse_dump(dump))
        assert not clear and why == f"another window ({PDD}) at the tap point"


@pytest.mark.parametrize("name", ["order_sheet_image_tiles.xml", "order_sheet_text_tile.xml"])
def test_the_gesture_strip_over_the_bottom_of_the_submit_control(name: str) -> None:
    """MIUI's launcher draws its gesture strip window ([0,2328][1080,2400], com.miui.home) over the bottom
    26 px of the real submit control ([334,2213][1080,2354]): a tap point inside the strip is obscured
    (another window there, order unknown), the control's centre — the tap point the agent uses — lies above
    the strip and is clear. Checked on both real captures and on the simulator's sheet drawn like them."""
    xml = (FIXTURES / "real_structures" / name).read_text("utf-8")
    for dump in (parse_dump(xml), _simulated_sheet()):
        (control,) = safety.submit_controls(dump)
        (strip,) = [n for n in dump.nodes if n.parent is None and n.package == "com.miui.home"]
        assert (control.bounds.top, control.bounds.bottom, strip.bounds.top) == (2213, 2354, 2328)
        x, y = control.bounds.center
        assert not strip.bounds.contains(x, y) and hit_test(dump, control, (x, y)).clear
        for point in ((x, 2328), (x, 2353), (control.bounds.left, 2340)):
            verdict = hit_test(dump, control, point)
            assert not verdict.clear and verdict.why == "another window (com.miui.home) at the tap point", point
            assert verdict.cover is strip


def _simulated_sheet() -> Dump:
    """The simulator's order sheet (built-in ``order_sheet`` scenario, first goods) as the agent parses it."""
    scenario = load_scenario("order_sheet")
    phone = Phone(scenario.for_phone("sim-hit"), 1, threading.Event())
    phone.app.launch()
    goods = scenario.data["catalogue"][0]["goods_id"]
    phone.app.open_url(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={goods}")
    assert phone.app.act(("open_sheet", "单独购买")) == "open_order_sheet"
    return parse_dump(phone.dump())
