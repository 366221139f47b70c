"""The simulator's screens against the real captures, node by node.

The simulator renders the sheet for the same goods as each real-structure file
(tests/agent/fixtures/real_structures): same tile shape, option names, stock badges, selection and
promotion, and as many status-bar notification icons as the capture shows (the phone's state, like the
goods). The WHOLE hierarchies are then compared: the same windows (one per package: the launcher's
gesture strip ``com.miui.home``, the status bar ``com.android.systemui``, the app), listed in an order a
real capture lists them in, each window root at the captured bounds, and every node of every window
node by node — class, package, resource-id, every boolean flag (and uiautomator's NAF mark), the number
and order of children. Texts and the bounds inside a window are ignored (the captures' texts were
replaced; the clock's width follows its text). A changed flag or one nesting level more or less
anywhere — in the sheet, the status bar or the gesture strip — fails the comparison (shown below by
mutating the rendered view tree). Every other screen, in both layouts, shows the same system windows.
"""

from __future__ import annotations

import copy
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from cmbuyer.phonesim import load_scenario
from cmbuyer.phonesim.hierarchy import XML_FLAGS, render_xml
from cmbuyer.phonesim.nodes import PDD, Node
from cmbuyer.phonesim.phone import Phone
from cmbuyer.phonesim.scenario import Scenario
from cmbuyer.phonesim.system_ui import LAUNCHER, SYSUI

REAL = Path(__file__).parents[1] / "agent" / "fixtures" / "real_structures"
SHADES = ["雾霾蓝#M03+礼袋", "奶茶棕#M05 SOFT+礼袋", "樱桃红#R12+礼袋", "豆沙粉 PINK 07+礼袋", "焦糖橘#O2 限定+礼袋"]
SCARF = "【冬季限定】羊绒围巾CAMEL 180cm"
# the goods each capture shows: its tiles, stock badges (最后4件 …, none above ten), price, promotion row
GOODS = {
    "order_sheet_image_tiles.xml": {
        "goods_id": "720000000001",
        "title": "丝绒口红礼袋装",
        "promotion": "0",  # no promotion row on this capture
        "dimensions": [{"name": "色号", "tiles": "image", "options": SHADES}],
        "skus": [
            {"options": [name], "price": "45.9", "stock": stock}
            for name, stock in zip(SHADES, (4, 9, 2, 50, 50), strict=True)
        ],
    },
    "order_sheet_text_tile.xml": {
        "goods_id": "720000000002",
        "title": "羊绒围巾",
        "promotion": "3.20",
        "dimensions": [{"name": "款式", "options": [SCARF]}],
        "skus": [{"options": [SCARF], "price": "158", "stock": 2}],
    },
}


def real(name: str) -> ET.Element:
    """The ``<hierarchy>`` of a real-structure file."""
    return ET.fromstring((REAL / name).read_text("utf-8"))


def notification_count(hierarchy: ET.Element) -> int:
    """How many notification icons the status bar shows."""
    (icons,) = [n for n in hierarchy.iter("node") if n.get("resource-id") == f"{SYSUI}:id/notificationIcons"]
    return len(icons)


def scenario(notifications: int = 2, base: str = "order_sheet") -> Scenario:
    """A built-in scenario with the two captured goods added (no address: 手动添加地址) and
    ``notifications`` notification icons on the status bar (texts blanked as on the captures)."""
    data = copy.deepcopy(load_scenario(base).data)
    data["catalogue"] = [*(g for g in data["catalogue"] if base != "order_sheet"), *GOODS.values()]
    data.pop("address", None)
    data["notifications"] = ["应用通知：(已替换)"] * notifications
    return load_scenario(data)


def open_sheet(name: str) -> Phone:
    """A phone (no adb: the structure is the view tree) with the sheet of ``name``'s goods open and the
    capture's number of notification icons."""
    phone = Phone(scenario(notification_count(real(name))).for_phone("sim-structure"), 1, threading.Event())
    phone.app.launch()
    phone.app.open_url(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={GOODS[name]['goods_id']}")
    assert phone.app._do_open_sheet("单独购买") == "open_order_sheet"
    return phone


def _shape(node: ET.Element) -> tuple[object, ...]:
    flags = tuple(node.get(key) for key in XML_FLAGS)
    return (
        node.get("class"),
        node.get("package"),
        node.get("resource-id"),
        flags,
        node.get("NAF") == "true",
        len(node),
    )


def structure_differences(real: ET.Element, sim: ET.Element, path: str = "app") -> list[str]:
    """Every place the two trees differ in class, package, resource-id, flags, NAF or children (in
    order); texts, descriptions, bounds, index and drawing order are not compared. Empty = same
    structure."""
    here = f"{path}/{sim.get('class', '?').rsplit('.', 1)[-1]}"
    if _shape(real) != _shape(sim):
        return [f"{here}: real {_shape(real)} vs simulator {_shape(sim)}"]
    out: list[str] = []
    for i, (r, s) in enumerate(zip(real, sim, strict=True)):
        out += structure_differences(r, s, f"{here}[{i}]")
    return out


def window_packages(hierarchy: ET.Element) -> list[str]:
    return [w.get("package", "") for w in hierarchy]


# uiautomator lists window roots in no stable order (agent/screens/hit.py): the two captures list the
# same three windows in two orders. The simulator must list them in one of those.
CAPTURED_ORDERS = [window_packages(real(name)) for name in sorted(GOODS)]


def hierarchy_differences(real_h: ET.Element, sim_h: ET.Element) -> list[str]:
    """Every difference between two whole dumps: the windows (one per package, the same packages), their
    order (one a capture shows), each window root's bounds (the system windows' bounds scheme: status bar
    ``[0,0][1080,95]``, gesture strip ``[0,2328][1080,2400]``, app ``[0,0][1080,2400]``) and every window's
    nodes (:func:`structure_differences`). Empty = the same hierarchy but for texts and inner bounds."""
    packages, sim_packages = window_packages(real_h), window_packages(sim_h)
    if sorted(packages) != sorted(sim_packages) or len(set(sim_packages)) != len(sim_packages):
        return [f"windows: real {packages} vs simulator {sim_packages}"]
    out = []
    if sim_packages not in CAPTURED_ORDERS:
        out.append(f"window order: simulator {sim_packages}, captures {CAPTURED_ORDERS}")
    sim_windows = {w.get("package"): w for w in sim_h}
    for window in real_h:
        package = window.get("package", "")
        mine = sim_windows[package]
        if window.get("bounds") != mine.get("bounds"):
            out.append(f"{package}: window bounds real {window.get('bounds')} vs simulator {mine.get('bounds')}")
        out += structure_differences(window, mine, package)
    return out


@pytest.mark.parametrize("name", sorted(GOODS))
def test_the_simulators_sheet_has_the_structure_of_the_real_capture(name: str) -> None:
    captured, sim = real(name), ET.fromstring(open_sheet(name).dump())
    assert hierarchy_differences(captured, sim) == []
    assert window_packages(sim) == [LAUNCHER, SYSUI, PDD]  # no navigation bar; the image-tiles capture's order
    # same goods: the readings agree too (texts are the simulator's own, structure the capture's)
    assert sum(1 for _ in sim.iter("node")) == sum(1 for _ in captured.iter("node"))


def _find(root: Node, test: Callable[[Node], bool]) -> Node:
    return next(n for n in root.walk() if test(n))


def _wrap(node: Node) -> None:
    """One more nesting level: the node's children move into a new plain ViewGroup."""
    node.children = [Node("android.view.ViewGroup", node.bounds, children=node.children)]


def _unwrap(node: Node) -> None:
    """One nesting level less: the node's only child is replaced by that child's children."""
    (child,) = node.children
    node.children = child.children


def _window(windows: list[Node], package: str) -> Node:
    (window,) = [w for w in windows if w.package == package]
    return window


def _sysui(rid: str) -> Callable[[Node], bool]:
    return lambda n: n.rid == f"{SYSUI}:id/{rid}"


def _on(package: str, mutate: Callable[[Node], object]) -> Callable[[list[Node]], None]:
    """A mutation of the one window of ``package``."""

    def run(windows: list[Node]) -> None:
        mutate(_window(windows, package))

    return run


def _on_app(mutate: Callable[[Node], object]) -> Callable[[list[Node]], None]:
    return _on(PDD, mutate)


def _on_status_bar(mutate: Callable[[Node], object]) -> Callable[[list[Node]], None]:
    return _on(SYSUI, mutate)


def _on_strip(mutate: Callable[[Node], object]) -> Callable[[list[Node]], None]:
    return _on(LAUNCHER, mutate)


def _swap_first_two(windows: list[Node]) -> None:
    windows[0], windows[1] = windows[1], windows[0]


def _add_navigation_bar(windows: list[Node]) -> None:
    """What the simulator drew before: a navigation bar window at the bottom."""
    bar = Node("android.widget.FrameLayout", (0, 2280, 1080, 2400), package=SYSUI)
    bar.rid = f"{SYSUI}:id/navigation_bar_frame"
    windows.insert(2, bar)


MUTATIONS: dict[str, tuple[str, Callable[[list[Node]], None]]] = {
    # --- the app window (the order sheet)
    # the text tile's selected flag moved from the name TextView to its wrapper
    "selected-on-the-wrapper": (
        "order_sheet_text_tile.xml",
        _on_app(
            lambda app: [
                setattr(_find(app, lambda n: n.text == SCARF), "selected", False),
                setattr(_find(app, lambda n: any(c.text == SCARF for c in n.children)), "selected", True),
            ]
        ),
    ),
    # the payment row's TextView made clickable (what the old simulator drew)
    "clickable-payment-text": (
        "order_sheet_text_tile.xml",
        _on_app(lambda app: setattr(_find(app, lambda n: "更换支付方式" in n.text), "clickable", True)),
    ),
    "scrollable-tile-list": (
        "order_sheet_image_tiles.xml",
        _on_app(lambda app: setattr(_find(app, lambda n: n.role == "option_list"), "scrollable", True)),
    ),
    "no-naf-mark": (
        "order_sheet_image_tiles.xml",
        _on_app(lambda app: setattr(_find(app, lambda n: n.naf), "naf", False)),
    ),
    # the price one level deeper inside the goods card / the price TextView's LinearLayout removed
    "price-one-level-deeper": (
        "order_sheet_image_tiles.xml",
        _on_app(
            lambda app: _wrap(_find(app, lambda n: any("¥" in c.text for c in n.children) and n.cls.endswith("Layout")))
        ),
    ),
    "price-one-level-shallower": (
        "order_sheet_text_tile.xml",
        _on_app(
            lambda app: _unwrap(
                _find(
                    app, lambda n: n.cls.endswith("FrameLayout") and any("¥" in c.text for c in n.children[0].children)
                )
            )
        ),
    ),
    "submit-text-one-level-up": (
        "order_sheet_text_tile.xml",
        _on_app(lambda app: _unwrap(_find(app, lambda n: n.role == "submit"))),
    ),
    # --- the status bar window
    "status-bar-clock-clickable": (
        "order_sheet_text_tile.xml",
        _on_status_bar(lambda bar: setattr(_find(bar, _sysui("clock")), "clickable", True)),
    ),
    "status-bar-container-one-level-less": (
        "order_sheet_image_tiles.xml",
        _on_status_bar(lambda bar: _unwrap(_find(bar, _sysui("status_bar_container")))),
    ),
    "status-bar-battery-one-level-deeper": (
        "order_sheet_text_tile.xml",
        _on_status_bar(lambda bar: _wrap(_find(bar, _sysui("battery_icon_container")))),
    ),
    "status-bar-96px": (  # the old simulator's height
        "order_sheet_image_tiles.xml",
        _on_status_bar(lambda bar: setattr(bar, "bounds", (0, 0, 1080, 96))),
    ),
    "status-bar-one-notification-more": (
        "order_sheet_text_tile.xml",
        _on_status_bar(
            lambda bar: _find(bar, _sysui("notificationIcons")).add(
                Node("android.widget.ImageView", (0, 0, 1, 1), package=SYSUI)
            )
        ),
    ),
    # --- the launcher's gesture strip window
    "gesture-strip-clickable": (
        "order_sheet_text_tile.xml",
        _on_strip(lambda strip: setattr(strip, "clickable", True)),
    ),
    "gesture-strip-one-level-deeper": (
        "order_sheet_image_tiles.xml",
        _on_strip(lambda strip: strip.add(Node("android.widget.FrameLayout", strip.bounds, package=LAUNCHER))),
    ),
    "gesture-strip-taller": (
        "order_sheet_text_tile.xml",
        _on_strip(lambda strip: setattr(strip, "bounds", (0, 2280, 1080, 2400))),
    ),
    "gesture-strip-other-launcher": (
        "order_sheet_image_tiles.xml",
        _on_strip(lambda strip: setattr(strip, "package", "com.android.launcher3")),
    ),
    # --- the windows
    "navigation-bar-window": ("order_sheet_text_tile.xml", _add_navigation_bar),
    "window-order-no-capture-shows": ("order_sheet_image_tiles.xml", _swap_first_two),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_one_changed_flag_or_nesting_level_fails_the_comparison(mutation: str) -> None:
    name, mutate = MUTATIONS[mutation]
    captured = real(name)
    windows = open_sheet(name).windows()
    assert hierarchy_differences(captured, ET.fromstring(render_xml(windows))) == []  # before: identical
    mutate(windows)
    differences = hierarchy_differences(captured, ET.fromstring(render_xml(windows)))
    assert differences, mutation
    assert len(differences) <= 2  # one change shows at the one place it was made (two for a moved flag)


def test_comparison_ignores_texts_and_inner_coordinates_not_window_bounds() -> None:
    captured = real("order_sheet_text_tile.xml")
    changed = copy.deepcopy(captured)
    for window in changed:
        for node in window.iter("node"):
            node.set("text", "x" if node.get("text") else "")
            node.set("content-desc", "")
            node.set("drawing-order", "9")
            if node is not window:
                node.set("bounds", "[1,2][3,4]")
    assert hierarchy_differences(captured, changed) == []
    # the windows in the other capture's order: both orders are real
    changed[:] = sorted(
        changed, key=lambda w: window_packages(real("order_sheet_image_tiles.xml")).index(w.get("package"))
    )
    assert hierarchy_differences(captured, changed) == []
    changed[1].set("bounds", "[0,0][1080,96]")
    assert hierarchy_differences(captured, changed) == [
        "com.android.systemui: window bounds real [0,0][1080,95] vs simulator [0,0][1080,96]"
    ]


def _screens(base: str, outcome: str) -> list[tuple[str, ET.Element]]:
    """Every screen one buy on ``base``'s first goods passes through (driven on the app model, no
    adb): the home screen, the app's home page, the product page, the SKU sheet and confirm page or
    the order sheet, a popup, and what ``outcome`` shows after the submit; then the order list."""
    data = copy.deepcopy(scenario(16, base).data)
    data["address"] = "张**  138****5678  北京市朝阳区建国路88号"
    data["outcome"] = outcome
    phone = Phone(load_scenario(data).for_phone("sim-every-screen"), 1, threading.Event())
    app = phone.app
    goods = data["catalogue"][0]
    seen = [(phone.screen, ET.fromstring(phone.dump()))]

    def look() -> None:
        seen.append((phone.screen, ET.fromstring(phone.dump())))

    app.launch()
    look()
    app.open_url(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={goods['goods_id']}")
    look()
    app.show_popup("coupon")
    look()
    app.popups.clear()
    app.act(("open_sheet", goods.get("buy_buttons", ["单独购买"])[0]))
    for dim, option in zip(goods["dimensions"], goods["skus"][0]["options"], strict=True):
        app.act(("select", dim["name"], option))
    look()
    if app.layout == "sku_sheet":
        app.act(("confirm_sheet",))
        look()
    app.act(("submit",))
    look()
    app.open_url("pinduoduo://com.xunmeng.pinduoduo/orders.html?type=1")
    look()
    return seen


@pytest.mark.parametrize(
    ("base", "outcome"),
    [
        ("default", "ORDER_CREATED"),
        ("default", "SECURITY_CHALLENGE"),
        ("order_sheet", "EXTERNAL_CASHIER_WECHAT"),
        ("order_sheet", "PAID"),
        ("order_sheet", "PAYMENT_HANDOFF"),
    ],
)
def test_every_screen_of_both_layouts_shows_the_captured_system_windows(base: str, outcome: str) -> None:
    """The status bar and the gesture strip of every screen are the captures' node for node (status bar
    with the capture's 16 notification icons), no navigation bar anywhere, and the window in front spans
    the screen as the captured app window does; the home screen (modelled) shows the status bar over the
    full-screen launcher."""
    captured = real("order_sheet_text_tile.xml")
    system = {w.get("package"): w for w in captured if w.get("package") != PDD}
    seen = _screens(base, outcome)
    names = [name for name, _ in seen]
    layout_screens = {"sku", "confirm"} if base == "default" else {"order_sheet"}
    assert {"launcher", "home", "product", "popup:coupon", "orders"} | layout_screens <= set(names), names
    for name, hierarchy in seen:
        packages = window_packages(hierarchy)
        front = packages[-1]
        if name == "launcher":
            assert packages == [SYSUI, LAUNCHER], name
        else:
            assert packages == [LAUNCHER, SYSUI, front] and front not in (SYSUI, LAUNCHER), (name, packages)
        (front_window,) = [w for w in hierarchy if w.get("package") == front]
        assert front_window.get("bounds") == "[0,0][1080,2400]", name
        for window in hierarchy:
            package = window.get("package", "")
            if package in system and window is not front_window:
                assert window.get("bounds") == system[package].get("bounds"), (name, package)
                assert structure_differences(system[package], window, package) == [], (name, package)
        assert "navigation_bar" not in ET.tostring(hierarchy, encoding="unicode"), name
    if outcome == "EXTERNAL_CASHIER_WECHAT":
        assert "cashier_wechat" in names
