"""Plain-uiautomator2 walk used by several tests (what an agent would do, minus the gates)."""

from __future__ import annotations

import re
from typing import Any

from lxml import etree

PRODUCT_URL = "pinduoduo://com.xunmeng.pinduoduo/goods.html?goods_id={}"
PDD = "com.xunmeng.pinduoduo"


def nodes(xml: str) -> list[Any]:
    return etree.fromstring(xml.encode("utf-8")).iter("node")


def center(node: Any) -> tuple[int, int]:
    l, t, r, b = map(int, re.findall(r"\d+", node.get("bounds")))  # noqa: E741
    return (l + r) // 2, (t + b) // 2


def find(xml: str, **attrs: str) -> list[Any]:
    """Nodes of the Pinduoduo package whose attributes equal ``attrs`` (``content_desc`` → content-desc)."""
    want = {k.replace("_", "-"): v for k, v in attrs.items()}
    return [n for n in nodes(xml) if n.get("package") == PDD and all(n.get(k) == v for k, v in want.items())]


def tap_text(d: Any, text: str) -> None:
    (node,) = find(d.dump_hierarchy(), text=text)
    d.click(*center(node))


def walk_to_confirm(d: Any, goods_id: str, options: list[str], quantity: int = 1, buy: str = "发起拼单") -> str:
    """Deep link → buy button → options → stepper → 确定; returns the confirm-page dump."""
    d.shell(["am", "start", "-a", "android.intent.action.VIEW", "-d", PRODUCT_URL.format(goods_id)])
    tap_text(d, buy)
    for opt in options:
        tap_text(d, opt)
    for _ in range(quantity - 1):
        (inc,) = find(d.dump_hierarchy(), content_desc="增加数量")
        d.click(*center(inc))
    tap_text(d, "确定")
    return d.dump_hierarchy()


def submit_node(xml: str) -> Any:
    (text_node,) = [n for n in find(xml) if (n.get("text") or "").startswith("提交订单")]
    return text_node


def _box(node: Any) -> tuple[int, ...]:
    return tuple(map(int, re.findall(r"-?\d+", node.get("bounds"))))


def assert_bounds_consistent(xml: str) -> None:
    """Every node inside the 1080x2400 screen and inside its parent."""
    root = etree.fromstring(xml.encode("utf-8"))
    for parent in root.iter("node"):
        pl, pt, pr, pb = _box(parent)
        assert 0 <= pl <= pr <= 1080 and 0 <= pt <= pb <= 2400, parent.attrib
        for child in parent.findall("node"):
            cl, ct, cr, cb = _box(child)
            assert pl <= cl and pt <= ct and cr <= pr and cb <= pb, (dict(parent.attrib), dict(child.attrib))
