"""The order sheet of newer Pinduoduo versions (layout ``order_sheet``, 8.22.0 / 82200 by default).

One bottom sheet over the product page holds everything the older layout spread over the SKU
sheet and the confirm page (phone-facts "The order sheet"), top to bottom: address row, goods
image (desc ``商品主图``), ONE price+stock TextView (``最后5件 ¥59``, ``即将卖完 ¥128``, ``¥12.88``),
the ``tv_select_sku`` label ``已选: …``, an optional service banner with a ``关闭`` icon, the
quantity stepper (container id obfuscated), the promotion row, the inline option list (a
RecyclerView: per dimension a non-clickable header TextView and a horizontally scrolling inner
RecyclerView of tiles), then the payment row (mode in ``text``), ``添加`` and the submit
FrameLayout holding the non-clickable ``提交订单 ¥<total>`` TextView.

Also here: the payment-row texts shared with the older confirm page, the external cashier
windows (foreign packages), the ``支付成功`` page and the pending-payment order list.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from . import screens as base
from .app import AppModel, Order
from .nodes import OBF_ID, PDD, Bounds, Node, edit, frame, group, image, linear, option_tile, text
from .prices import fmt_yuan
from .scenario import Dimension, Goods

STEPPER_ID = f"{PDD}:id/aqj"  # a short obfuscated id, as real releases use for such containers
TEXT_TILE_H, IMAGE_TILE_H, IMAGE_TILE_W, GAP, LEFT = 96, 260, 240, 24, 36
SOLD_OUT = "刚刚抢光"
BANNER = "#24小时发货#七天退换"

# payment_mode switch → the texts of the payment row(s) (phone-facts "The order sheet")
PAYMENT_ROWS: dict[str, tuple[tuple[str, str], ...]] = {
    "wechat": (("使用#微信支付，更换支付方式", "微信支付"),),
    "alipay": (("使用#支付宝，更换支付方式", "支付宝"),),
    "duoduo_balance": (("使用多多支付余额¥5.05，更换支付方式", "多多支付"),),
    "pay_later": (("使用#先用后付，更换支付方式", "先用后付"),),
    "password_free": (("使用#多多支付(免密支付)，更换支付方式", "免密支付"),),
    "unreadable": (("", ""),),
    "two_rows": (("使用#微信支付，更换支付方式", "微信支付"), ("使用#支付宝，更换支付方式", "支付宝")),
}

CASHIER_ACTIVITY_TEXTS = {
    "com.eg.android.AlipayGphone": ("支付宝", "确认付款", "余额宝"),
    "com.tencent.mm": ("微信支付", "确认支付", "零钱"),
}


def submit_prefix(app: AppModel) -> str:
    """The submit label before the amount: ``提交订单`` unless a switch says otherwise."""
    if app.cfg.submit_text:
        return app.cfg.submit_text
    return "0元下单" if app.cfg.payment_mode == "pay_later" else "提交订单"


def submit_button(bounds: Bounds, label_bounds: Bounds, label: str) -> Node:
    """The real submit control of the bottom bar: a button frame around its ``label`` text. The
    duplicate-submit fault draws a second one, equally real, at other ``bounds``."""
    return frame(
        bounds,
        text(label_bounds, label),
        clickable=True,
        action=("submit",),
        role="submit",
        style="button",
    )


def payment_rows(app: AppModel) -> tuple[tuple[str, str], ...]:
    """``((row text, short mode name), …)`` for the phone's ``payment_mode``."""
    return PAYMENT_ROWS[app.cfg.payment_mode]


def label_name(goods: Goods, name: str) -> str:
    """An option as the ``已选:`` label prints it: trimmed, 【】 as ASCII [], ``#`` when configured."""
    shown = name.strip().replace("【", "[").replace("】", "]")
    return "#" + shown if goods.label_decoration == "hash" else shown


def price_text(goods: Goods, price: Decimal | None, stock: int | None) -> str:
    """The one price+stock node: ``最后5件 ¥59``, ``即将卖完 ¥128`` or ``¥12.88``."""
    unit = fmt_yuan(price) if price is not None else "¥0"
    if goods.price_label == "selling_out":
        return f"即将卖完 {unit}"
    if goods.price_label == "auto" and stock is not None and stock <= 10:
        return f"最后{stock}件 {unit}"
    return unit


def sold_out_label(name: str) -> str:
    """``雾霾蓝色款`` → ``雾霾蓝色... 刚刚抢光`` (the tile text; its content-desc keeps the full name)."""
    lead = name[: len(name) - len(name.lstrip())]
    core = name.strip()
    return f"{lead}{core[:4]}... {SOLD_OUT}" if len(core) > 4 else f"{lead}{core} {SOLD_OUT}"


def _tile_width(dim: Dimension, name: str) -> int:
    return IMAGE_TILE_W if dim.tiles == "image" else base.text_width(name) + 64


def list_extent(dim: Dimension) -> int:
    """Unscrolled right edge of the last tile (px), for the scroll limit."""
    x = LEFT
    for opt in dim.options:
        x += _tile_width(dim, opt) + GAP
    return x - GAP


def max_offset(dim: Dimension) -> int:
    return max(0, list_extent(dim) + LEFT - base.W)


def _image_tile(
    bounds: tuple[int, int, int, int],
    name: str,
    shown: str,
    badge: str | None,
    selected: bool,
    action: tuple[str, ...],
    clipped: bool,
) -> Node:
    left, top, right, bottom = bounds
    tile = group(bounds, desc=name, rid=OBF_ID, **option_tile(selected, action))
    if clipped:  # the RecyclerView has not laid out the children of a tile cut by the screen edge
        return tile
    tile.add(image((left + 10, top + 10, right - 10, top + 190), name, selected=selected))
    tile.add(
        image(
            (right - 60, top + 10, right - 10, top + 60),
            "打开大图",
            clickable=True,
            selected=selected,
            action=("noop",),
            role="open_image",
        )
    )
    if badge:
        tile.add(text((left + 10, top + 150, left + 130, top + 188), badge, selected=selected))
    tile.add(
        text(
            (left + 10, top + 196, right - 10, bottom - 10),
            shown,
            rid=f"{PDD}:id/tv_content",
            clickable=True,
            selected=selected,
            action=action,
            role="option",
        )
    )
    return tile


def option_group(app: AppModel, goods: Goods, dim: Dimension, y: int) -> tuple[list[Node], int]:
    """Header + horizontally scrolling inner RecyclerView for one dimension; returns (nodes, bottom)."""
    header = text((LEFT, y, LEFT + base.text_width(dim.name) + 8, y + 56), dim.name)
    tile_h = IMAGE_TILE_H if dim.tiles == "image" else TEXT_TILE_H
    top = y + 68
    inner = Node(
        "androidx.recyclerview.widget.RecyclerView",
        (0, top, base.W, top + tile_h),
        rid=OBF_ID,
        scrollable=True,
        focusable=True,
        action=("scroll", dim.name, max_offset(dim)),
        role="option_list",
    )
    x = LEFT - app.list_offset.get(dim.name, 0)
    for opt in dim.options:
        w = _tile_width(dim, opt)
        left, right = x, x + w
        x += w + GAP
        if right <= 0 or left >= base.W:
            continue  # recycled: off-screen tiles are not in the tree
        clipped = left < 0 or right > base.W
        bounds = (max(left, 0), top, min(right, base.W), top + tile_h)
        available = goods.option_available(app.selection, dim.name, opt)
        selected = app.selection.get(dim.name) == opt
        action = ("select", dim.name, opt)
        shown = opt if available else sold_out_label(opt)
        if dim.tiles == "image":
            stock = goods.option_stock(app.selection, dim.name, opt)
            badge = f"最后{stock}件" if available and stock <= 10 else None
            inner.add(_image_tile(bounds, opt, shown, badge, selected, action, clipped))
        else:
            inner.add(text(bounds, shown, desc="" if available else opt, **option_tile(selected, action)))
    return [header, inner], top + tile_h


def payment_row(bounds: tuple[int, int, int, int], row_text: str) -> Node:
    """The clickable payment-method row: the mode lives in the ViewGroup's own ``text``."""
    left, top, right, _bottom = bounds
    return group(
        bounds,
        image((left + 36, top + 22, left + 96, top + 82), ""),
        image((right - 72, top + 34, right - 36, top + 70), ""),
        text=row_text,
        clickable=True,
        focusable=True,
        action=("payment", "method"),
        role="payment",
        rid=OBF_ID,
    )


def order_sheet(app: AppModel) -> Node:
    """The sheet (under a clickable scrim that closes it) for the current goods and selection."""
    goods = app.goods
    assert goods is not None
    W = base.W
    price = app.unit_price()
    sheet = linear((0, 440, W, base.NAV_TOP), clickable=True, action=("noop",), style="sheet")
    if app.cfg.address:
        who, where = app.cfg.address.rsplit("  ", 1)[0], app.cfg.address.rsplit("  ", 1)[-1]
        sheet.add(
            linear(
                (0, 464, W, 584),
                image((36, 494, 96, 554), ""),
                text((120, 470, 1000, 524), who),
                text((120, 528, 1000, 578), where),
                clickable=True,
                action=("noop",),
            )
        )
    else:
        sheet.add(
            linear((0, 464, W, 584), text((120, 494, 600, 554), "手动添加地址"), clickable=True, action=("noop",))
        )
    label = "已选: " + " ".join(label_name(goods, app.selection.get(d.name, "")) for d in goods.dimensions)
    price_node = price_text(goods, price, app.stock())
    sheet.add(
        linear(
            (0, 600, W, 860),
            image((36, 612, 256, 832), "商品主图", rid=f"{PDD}:id/iv_goods_img"),
            text((280, 620, 280 + base.text_width(price_node, 40, 28), 690), price_node),
            text((280, 700, 1044, 760), label, rid=f"{PDD}:id/tv_select_sku"),
        )
    )
    y = 872
    if app.cfg.service_banner and not app.banner_closed:
        sheet.add(
            linear(
                (0, y, W, y + 72),
                text((LEFT, y + 10, 800, y + 62), BANNER),
                image((984, y + 10, 1044, y + 62), "关闭", clickable=True, action=("close_banner",)),
            )
        )
        y += 84
    sheet.add(
        linear(
            (0, y, W, y + 96),
            text((LEFT, y + 18, 300, y + 78), "购买数量"),
            image((780, y + 12, 852, y + 84), "减少数量", clickable=True, action=("qty", -1), role="qty_dec"),
            edit(
                (858, y + 12, 942, y + 84),
                str(app.quantity),
                focused=app.focused == "qty",
                action=("focus", "qty"),
                role="qty_edit",
            ),
            image((948, y + 12, 1020, y + 84), "增加数量", clickable=True, action=("qty", 1), role="qty_inc"),
            rid=STEPPER_ID,
        )
    )
    y += 108
    promo = f"用多多支付减{goods.promotion:f}元".replace(".00元", "元")
    sheet.add(
        linear(
            (0, y, W, y + 80),
            text((LEFT, y + 10, 160, y + 70), "优惠"),
            text((600, y + 10, 1044, y + 70), promo),
            clickable=True,
            action=("payment", "promotion"),
            role="payment",
        )
    )
    y += 92
    options = Node("androidx.recyclerview.widget.RecyclerView", (0, y, W, y), rid=OBF_ID, focusable=True)
    for dim in goods.dimensions:
        nodes, bottom = option_group(app, goods, dim, y + 12)
        options.add(*nodes)
        y = bottom + 8
    options.bounds = (0, options.bounds[1], W, y)
    sheet.add(options)
    rows = payment_rows(app)
    y = 2108 - 108 * len(rows)
    for row_text, _short in rows:
        sheet.add(payment_row((0, y, W, y + 100), row_text))
        y += 108
    total = fmt_yuan(price * app.quantity) if price is not None else "¥0"
    bar = linear((0, 2112, W, base.NAV_TOP), style="bottombar")
    bar.add(
        group(
            (24, 2136, 300, 2256),
            text((100, 2166, 220, 2226), "添加"),
            clickable=True,
            action=("noop",),
            role="add",
            rid=OBF_ID,
        )
    )
    label = f"{submit_prefix(app)} {total}"
    bar.add(submit_button((540, 2136, 1056, 2268), (600, 2166, 996, 2238), label))
    if app.duplicate_submit:
        bar.add(submit_button((310, 2136, 530, 2268), (320, 2166, 520, 2238), label))
    sheet.add(bar)
    return frame(base.APP_BOUNDS, sheet, clickable=True, action=("close_sheet",), style="scrim")


def _retag(node: Node, package: str) -> Node:
    for n in node.walk():
        n.package = package
        if n.rid == OBF_ID:
            n.rid = ""
    return node


def cashier_window(package: str, order: Order | None) -> Node:
    """The external cashier app in front: its own package, no Pinduoduo node anywhere."""
    title, pay, funding = CASHIER_ACTIVITY_TEXTS[package]
    amount = fmt_yuan(order.total) if order is not None else "¥0"
    W = base.W
    win = frame((0, 0, W, base.H), style="page")
    win.add(
        image((36, 130, 108, 202), "关闭", clickable=True, action=("back",)),
        text((380, 130, 700, 202), title),
        text((360, 420, 720, 540), amount, style="price"),
        linear(
            (0, 600, W, 700),
            text((36, 620, 300, 680), "收款方"),
            text((500, 620, 1044, 680), "上海寻梦信息技术有限公司"),
        ),
        linear(
            (0, 710, W, 810),
            text((36, 730, 300, 790), "付款方式"),
            text((700, 730, 1044, 790), funding),
            clickable=True,
            action=("payment", "cashier_method"),
            role="payment",
        ),
        frame(
            (36, 1900, W - 36, 2020),
            text((420, 1930, 660, 1990), pay),
            clickable=True,
            action=("payment", "cashier_pay"),
            role="payment",
            style="button",
        ),
    )
    return _retag(win, package)


def paid_page(app: AppModel) -> list[Node]:
    page = app.page
    assert page is not None and page.order is not None
    order = page.order
    bar = linear((0, 2112, base.W, base.NAV_TOP), style="bottombar")
    bar.add(
        frame(
            (60, 2136, 520, 2256),
            text((220, 2166, 400, 2226), "查看订单"),
            clickable=True,
            action=("open_order", order.order_sn),
        )
    )
    bar.add(frame((560, 2136, 1020, 2256), text((740, 2166, 860, 2226), "完成"), clickable=True, action=("back",)))
    return [
        *base._header(),
        text((390, 300, 690, 380), "支付成功"),
        text((400, 420, 680, 520), fmt_yuan(order.total), style="price"),
        text((300, 560, 780, 620), "商家将尽快为您发货"),
        bar,
    ]


def _orders(app: AppModel) -> Iterable[Order]:
    return (o for o in reversed(app.orders) if o.status == "pending_payment")


def orders_page(app: AppModel) -> list[Node]:
    """``orders.html?type=1``: the pending-payment list, newest first."""
    W = base.W
    nodes = [*base._header(), text((390, 126, 690, 198), "待付款")]
    y = 240
    pending = list(_orders(app))
    if not pending:
        nodes.append(text((300, 600, 780, 680), "暂无相关订单"))
        return nodes
    for order in pending[:5]:  # five cards fill the screen; older ones are below the fold
        goods = app.cfg.catalogue.get(order.goods_id)
        title = goods.title if goods else ""
        card = linear(
            (0, y, W, y + 360), clickable=True, action=("open_order", order.order_sn), role="order_card", style="card"
        )
        card.add(
            text((36, y + 16, 700, y + 70), "拼多多自营旗舰店"),
            text((860, y + 16, 1044, y + 70), "待付款"),
            image((36, y + 84, 196, y + 244), "商品图片"),
            text((220, y + 84, 1044, y + 150), title),
            text((220, y + 156, 1044, y + 204), " ".join(o.strip() for o in order.options.values())),
            text((220, y + 210, 600, y + 250), f"x{order.quantity}"),
            text((600, y + 210, 780, y + 250), "实付款"),
            text((800, y + 210, 1044, y + 250), fmt_yuan(order.total)),
            text((36, y + 262, 700, y + 300), f"订单编号：{order.order_sn}"),
            frame(
                (820, y + 296, 1044, y + 352),
                text((850, y + 302, 1014, y + 346), "去支付"),
                clickable=True,
                action=("payment", "list_pay"),
                role="payment",
                style="button",
            ),
        )
        nodes.append(card)
        y += 380
    return nodes
