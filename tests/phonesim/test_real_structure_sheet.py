"""The simulator's order sheet against the real captures, node by node (issue 27 item 1).

The simulator renders the sheet for the same goods as each real-structure file
(tests/agent/fixtures/real_structures): same tile shape, option names, stock badges, selection and
promotion. The app windows are then compared node by node — class, resource-id, every boolean flag
(and uiautomator's NAF mark), the number and order of children; texts and coordinates are ignored (the
captures' texts were replaced; the simulator's screen geometry is its own). A changed flag or one
nesting level more or less anywhere in the simulator's sheet fails the comparison (shown below by
mutating the rendered view tree).
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


def scenario() -> Scenario:
    """The built-in order_sheet scenario with the two captured goods (no address: 手动添加地址)."""
    data = copy.deepcopy(load_scenario("order_sheet").data)
    data["catalogue"] = list(GOODS.values())
    data.pop("address", None)
    return load_scenario(data)


def open_sheet(name: str) -> Phone:
    """A phone (no adb: the structure is the view tree) with the sheet of ``name``'s goods open."""
    phone = Phone(scenario().for_phone("sim-structure"), 1, threading.Event())
    phone.app.launch()
    phone.app.open_url(f"pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={GOODS[name]['goods_id']}")
    assert phone.app._do_open_sheet("单独购买") == "open_order_sheet"
    return phone


def app_window(xml: str) -> ET.Element:
    (root,) = [w for w in ET.fromstring(xml) if w.get("package") == PDD]
    return root


def _shape(node: ET.Element) -> tuple[object, ...]:
    flags = tuple(node.get(key) for key in XML_FLAGS)
    return (node.get("class"), node.get("resource-id"), flags, node.get("NAF") == "true", len(node))


def structure_differences(real: ET.Element, sim: ET.Element, path: str = "app") -> list[str]:
    """Every place the two trees differ in class, resource-id, flags, NAF or children (in order);
    texts, descriptions, bounds, index and drawing order are not compared. Empty = same structure."""
    here = f"{path}/{sim.get('class', '?').rsplit('.', 1)[-1]}"
    if _shape(real) != _shape(sim):
        return [f"{here}: real {_shape(real)} vs simulator {_shape(sim)}"]
    out: list[str] = []
    for i, (r, s) in enumerate(zip(real, sim, strict=True)):
        out += structure_differences(r, s, f"{here}[{i}]")
    return out


@pytest.mark.parametrize("name", sorted(GOODS))
def test_the_simulators_sheet_has_the_structure_of_the_real_capture(name: str) -> None:
    real = app_window((REAL / name).read_text("utf-8"))
    sim = app_window(open_sheet(name).dump())
    assert structure_differences(real, sim) == []
    # same goods: the readings agree too (texts are the simulator's own, structure the capture's)
    assert sum(1 for _ in sim.iter("node")) == sum(1 for _ in real.iter("node"))


def _find(root: Node, test: Callable[[Node], bool]) -> Node:
    return next(n for n in root.walk() if test(n))


def _wrap(node: Node) -> None:
    """One more nesting level: the node's children move into a new plain ViewGroup."""
    node.children = [Node("android.view.ViewGroup", node.bounds, children=node.children)]


def _unwrap(node: Node) -> None:
    """One nesting level less: the node's only child is replaced by that child's children."""
    (child,) = node.children
    node.children = child.children


MUTATIONS: dict[str, tuple[str, Callable[[Node], None]]] = {
    # the text tile's selected flag moved from the name TextView to its wrapper
    "selected-on-the-wrapper": (
        "order_sheet_text_tile.xml",
        lambda app: [
            setattr(_find(app, lambda n: n.text == SCARF), "selected", False),
            setattr(_find(app, lambda n: any(c.text == SCARF for c in n.children)), "selected", True),
        ],
    ),
    # the payment row's TextView made clickable (what the old simulator drew)
    "clickable-payment-text": (
        "order_sheet_text_tile.xml",
        lambda app: setattr(_find(app, lambda n: "更换支付方式" in n.text), "clickable", True),
    ),
    "scrollable-tile-list": (
        "order_sheet_image_tiles.xml",
        lambda app: setattr(_find(app, lambda n: n.role == "option_list"), "scrollable", True),
    ),
    "no-naf-mark": (
        "order_sheet_image_tiles.xml",
        lambda app: setattr(_find(app, lambda n: n.naf), "naf", False),
    ),
    # the price one level deeper inside the goods card / the price TextView's LinearLayout removed
    "price-one-level-deeper": (
        "order_sheet_image_tiles.xml",
        lambda app: _wrap(_find(app, lambda n: any("¥" in c.text for c in n.children) and n.cls.endswith("Layout"))),
    ),
    "price-one-level-shallower": (
        "order_sheet_text_tile.xml",
        lambda app: _unwrap(
            _find(app, lambda n: n.cls.endswith("FrameLayout") and any("¥" in c.text for c in n.children[0].children))
        ),
    ),
    "submit-text-one-level-up": (
        "order_sheet_text_tile.xml",
        lambda app: _unwrap(_find(app, lambda n: n.role == "submit")),
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_one_changed_flag_or_nesting_level_fails_the_comparison(mutation: str) -> None:
    name, mutate = MUTATIONS[mutation]
    real = app_window((REAL / name).read_text("utf-8"))
    phone = open_sheet(name)
    windows = phone.windows()
    (app,) = [w for w in windows if w.package == PDD]
    assert structure_differences(real, app_window(render_xml(windows))) == []  # before: identical
    mutate(app)
    differences = structure_differences(real, app_window(render_xml(windows)))
    assert differences, mutation
    assert len(differences) <= 2  # one change shows at the one place it was made (two for a moved flag)


def test_comparison_ignores_texts_and_coordinates() -> None:
    real = app_window((REAL / "order_sheet_text_tile.xml").read_text("utf-8"))
    changed = copy.deepcopy(real)
    for node in changed.iter("node"):
        node.set("text", "x" if node.get("text") else "")
        node.set("bounds", "[1,2][3,4]")
        node.set("drawing-order", "9")
    assert structure_differences(real, changed) == []
