"""The order sheet of newer Pinduoduo versions (layout ``order_sheet``, 8.22.0 / 82200 by default).

One bottom sheet over the product page holds everything the older layout spread over the SKU
sheet and the confirm page, top to bottom: address row, goods
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

from .app import AppModel, Order
from .nodes import OBF_ID, PDD, Bounds, Node, edit, frame, group, header, image, linear, option_tile, text, text_width
from .prices import fmt_yuan
from .scenario import Dimension, Goods
from .system_ui import APP_BOTTOM, STATUS_H, H, W

STEPPER_ID = f"{PDD}:id/gnl"  # the quantity container: one of the few distinctive ids of the real sheet
SKU_LABEL_ID = f"{PDD}:id/tv_select_sku"
GOODS_IMAGE_ID = f"{PDD}:id/iv_goods_img"
NAME_ID = f"{PDD}:id/tv_content"
# the real sheet's geometry (1080x2400 captures), px: option tiles, gaps, the left margin
TEXT_TILE_H, IMAGE_TILE_W, IMAGE_TILE_H, GAP, LEFT = 87, 317, 413, 29, 35
IMAGE_ROW = 3  # image tiles wrap into rows of three (the captures); longer lists scroll in one row
SOLD_OUT = "刚刚抢光"
BANNER = "#24小时发货#七天退换"
VG = "android.view.ViewGroup"
RECYCLER = "android.support.v7.widget.RecyclerView"  # the class the captures show
# rows at the bottom of the sheet, px: the payment row and the submit bar (its bottom 26 px lie under the
# launcher's gesture strip, as on the captures)
PAY_H, BAR_H = 95, 141

# payment_mode switch → the texts of the payment row(s)
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
    """The older confirm page's submit control: a button frame around its ``label`` text. The
    duplicate-submit fault draws a second one, equally real, at other ``bounds``."""
    return frame(
        bounds,
        text(label_bounds, label),
        clickable=True,
        action=("submit",),
        role="submit",
        style="button",
    )


def sheet_submit(bounds: Bounds, label: str) -> Node:
    """The order sheet's submit control as captured: a clickable FrameLayout ``> LinearLayout >
    TextView 提交订单 ¥…`` (neither inner node clickable nor carrying an id)."""
    left, top, right, bottom = bounds
    mid = (left + right) // 2
    w = text_width(label, 34, 20) // 2 + 12
    inner = linear((mid - w, top, mid + w, bottom), rid="")
    inner.add(text((mid - w + 12, top + 38, mid + w - 12, bottom - 38), label, rid=""))
    return frame(bounds, inner, clickable=True, focusable=True, action=("submit",), role="submit", style="button")


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
    """``雾霾蓝色款`` → ``雾霾蓝色... 刚刚抢光`` (an image tile's name text; its content-desc keeps the name)."""
    lead = name[: len(name) - len(name.lstrip())]
    core = name.strip()
    return f"{lead}{core[:4]}... {SOLD_OUT}" if len(core) > 4 else f"{lead}{core} {SOLD_OUT}"


def _nest(bounds: Bounds, depth: int, leaf: Node, cls: str = VG) -> Node:
    """``depth`` plain containers of ``cls`` around ``leaf`` (the real sheet wraps rows this deep)."""
    node = leaf
    for _ in range(depth):
        node = Node(cls, bounds, children=[node])
    return node


def _scrolls(dim: Dimension) -> bool:
    """Image tiles beyond two rows of three sit in ONE horizontally scrolling row (modelled)."""
    return dim.tiles == "image" and len(dim.options) > 2 * IMAGE_ROW


def list_extent(dim: Dimension) -> int:
    """Unscrolled right edge of the last tile of a scrolling row (px), for the scroll limit."""
    return LEFT + len(dim.options) * (IMAGE_TILE_W + GAP) - GAP


def max_offset(dim: Dimension) -> int:
    return max(0, list_extent(dim) + LEFT - W) if _scrolls(dim) else 0


def _badge(goods: Goods, app: AppModel, dim: Dimension, opt: str) -> str | None:
    """The stock badge a tile shows: ``最后N件`` at ten or fewer, ``刚刚抢光`` when sold out."""
    if not goods.option_available(app.selection, dim.name, opt):
        return SOLD_OUT
    stock = goods.option_stock(app.selection, dim.name, opt)
    return f"最后{stock}件" if stock <= 10 else None


def _image_tile(
    bounds: Bounds, name: str, shown: str, badge: str | None, selected: bool, action: tuple[str, ...], clipped: bool
) -> Node:
    """The captured image tile: a clickable ViewGroup (name in content-desc) holding a View, the
    picture (same desc), the stock badge, ``打开大图`` and ``LinearLayout > tv_content`` with the name;
    ``selected`` on the tile and every child."""
    left, top, right, bottom = bounds
    tile = group(bounds, desc=name, **option_tile(selected, action))
    if clipped:  # the RecyclerView has not laid out the children of a tile cut by the screen edge
        return tile
    tile.add(Node("android.view.View", bounds, rid=OBF_ID, selected=selected))
    tile.add(
        image(
            (left, top, right, bottom - 96),
            name,
            clickable=True,
            focusable=True,
            selected=selected,
            action=action,
            role="option",
        )
    )
    if badge:
        tile.add(text((left, top, left + text_width(badge, 40, 24), top + 53), badge, selected=selected))
    tile.add(
        image(
            (right - 109, top, right, top + 109),
            "打开大图",
            clickable=True,
            focusable=True,
            selected=selected,
            action=("noop",),
            role="open_image",
        )
    )
    name_box = (left, bottom - 107, right, bottom)
    tile.add(
        linear(
            name_box,
            text(
                name_box,
                shown,
                rid=NAME_ID,
                clickable=True,
                focusable=True,
                selected=selected,
                action=action,
                role="option",
            ),
            selected=selected,
        )
    )
    return tile


def _text_tile(bounds: Bounds, name: str, badge: str | None, selected: bool, action: tuple[str, ...]) -> Node:
    """The captured text tile: a clickable wrapper ViewGroup holding the clickable name TextView (the
    ONE node with ``selected``), a View and the stock badge TextView, all in the same bounds."""
    left, top, _right, _bottom = bounds
    wrapper = group(bounds, clickable=True, focusable=True, action=action, role="option", style="tile")
    wrapper.add(text(bounds, name, clickable=True, focusable=True, selected=selected, action=action, role="option"))
    wrapper.add(Node("android.view.View", bounds, rid=OBF_ID))
    if badge:
        wrapper.add(text((left, top, min(left + text_width(badge, 28, 16), bounds[2]), top + 22), badge))
    return wrapper


def option_group(app: AppModel, goods: Goods, dim: Dimension, y: int) -> tuple[Node, int]:
    """One dimension as the captures nest it (returns the group and its bottom): a LinearLayout holding
    the header row (``LinearLayout > TextView``; clickable above text tiles) and the tiles — text tiles
    in ``LinearLayout > ViewGroup`` rows, image tiles in ``LinearLayout > FrameLayout > RecyclerView``."""
    header_row = linear((0, y, W, y + 107), clickable=dim.tiles == "text", focusable=dim.tiles == "text")
    if dim.tiles == "text":
        header_row.bounds = (LEFT, y + 12, W - LEFT, y + 90)
    header_row.add(text((LEFT, y + 24, LEFT + text_width(dim.name, 43, 24), y + 82), dim.name))
    top = y + 107
    if dim.tiles == "text":
        tiles: list[Node] = []
        x, row_top = LEFT, top
        for opt in dim.options:
            w = text_width(opt, 34, 20) + 64
            if x + w > W - LEFT and x > LEFT:
                x, row_top = LEFT, row_top + TEXT_TILE_H + 24
            action = ("select", dim.name, opt)
            selected = app.selection.get(dim.name) == opt
            tiles.append(
                _text_tile(
                    (x, row_top, x + w, row_top + TEXT_TILE_H), opt, _badge(goods, app, dim, opt), selected, action
                )
            )
            x += w + 24
        bottom = row_top + TEXT_TILE_H
        rows = group((LEFT, top, W - LEFT, bottom), *tiles, rid=OBF_ID)
        body = linear((LEFT, top, W - LEFT, bottom), rows, rid="")
        grp = linear((0, y, W, bottom + 35), header_row, body, rid="")
        return grp, bottom + 35
    scrolls = _scrolls(dim)
    rows_n = 1 if scrolls else (len(dim.options) + IMAGE_ROW - 1) // IMAGE_ROW
    bottom = top + rows_n * (IMAGE_TILE_H + GAP) - GAP
    inner = Node(
        RECYCLER,
        (LEFT, top, W, bottom),
        rid=OBF_ID,
        focusable=True,
        scrollable=scrolls,
        action=("scroll", dim.name, max_offset(dim)) if scrolls else None,
        role="option_list",
    )
    offset = app.list_offset.get(dim.name, 0)
    for i, opt in enumerate(dim.options):
        col, row = (i, 0) if scrolls else (i % IMAGE_ROW, i // IMAGE_ROW)
        left = LEFT + col * (IMAGE_TILE_W + GAP) - offset
        right, t = left + IMAGE_TILE_W, top + row * (IMAGE_TILE_H + GAP)
        if right <= 0 or left >= W:
            continue  # recycled: off-screen tiles are not in the tree
        clipped = left < 0 or right > W
        available = goods.option_available(app.selection, dim.name, opt)
        shown = opt if available else sold_out_label(opt)
        badge = _badge(goods, app, dim, opt) if available else None
        selected = app.selection.get(dim.name) == opt
        b = (max(left, 0), t, min(right, W), t + IMAGE_TILE_H)
        inner.add(_image_tile(b, opt, shown, badge, selected, ("select", dim.name, opt), clipped))
    holder = linear((0, top, W, bottom + 6), frame((0, top, W, bottom), inner))
    grp = linear((0, y, W, bottom + 6), header_row, holder, rid="")
    return grp, bottom + 6


def _address_row(app: AppModel) -> Node:
    """``LinearLayout > LinearLayout > FrameLayout > ViewGroup > ViewGroup > clickable ViewGroup`` holding
    an icon, the address text (in a FrameLayout) and an arrow; then a spacer View."""
    label = app.cfg.address or "手动添加地址"
    row = group(
        (0, 332, W, 470),
        group((35, 372, 93, 430), image((49, 386, 78, 415), rid="")),
        frame((127, 375, 1026, 428), text((127, 375, 1026, 428), label, rid=""), rid=""),
        image((1026, 387, 1046, 416), rid=""),
        clickable=True,
        focusable=True,
        action=("noop",),
    )
    holder = frame((0, 332, W, 470), _nest((0, 332, W, 470), 2, row))
    return linear(
        (0, 332, W, 486),
        linear((0, 332, W, 470), holder),
        Node("android.view.View", (0, 470, W, 486), rid=OBF_ID),
    )


def _goods_card(app: AppModel, goods: Goods) -> Node:
    """``FrameLayout > RelativeLayout > ViewGroup`` holding a View, the ``商品主图`` image, the price
    (``FrameLayout > LinearLayout > TextView``), the ``已选:`` label, the stepper (``gnl > LinearLayout >
    −, EditText, +``) and a spacer: the price's nearest common ancestor with the image is the card."""
    price = price_text(goods, app.unit_price(), app.stock())
    label = "已选: " + " ".join(label_name(goods, app.selection.get(d.name, "")) for d in goods.dimensions)
    pw = 393 + text_width(price, 36, 22)
    stepper = linear(
        (393, 764, 633, 836),
        linear(
            (393, 764, 633, 836),
            image((393, 764, 468, 836), "减少数量", clickable=True, focusable=True, action=("qty", -1), role="qty_dec"),
            edit(
                (474, 764, 552, 836),
                str(app.quantity),
                focused=app.focused == "qty",
                action=("focus", "qty"),
                role="qty_edit",
            ),
            image((558, 764, 633, 836), "增加数量", clickable=True, focusable=True, action=("qty", 1), role="qty_inc"),
            rid="",
        ),
        rid=STEPPER_ID,
        focusable=True,
    )
    card = group(
        (0, 487, W, 871),
        Node("android.view.View", (35, 513, 358, 836)),
        image((35, 513, 358, 836), "商品主图", rid=GOODS_IMAGE_ID, clickable=True, focusable=True, action=("noop",)),
        frame((393, 510, 1054, 582), linear((393, 510, pw + 17, 582), text((393, 510, pw, 582), price))),
        text((393, 594, 1054, 653), label, rid=SKU_LABEL_ID),
        stepper,
        Node("android.view.View", (35, 836, 1054, 871), rid=OBF_ID),
        rid=OBF_ID,
    )
    return frame(
        (0, 487, W, 871),
        Node("android.widget.RelativeLayout", (0, 487, W, 871), rid=OBF_ID, focusable=True, children=[card]),
    )


def _promotion_row(goods: Goods, y: int) -> Node:
    """The promotion row as captured: ``LinearLayout > FrameLayout > 3×ViewGroup > clickable ViewGroup``
    holding ``优惠`` and ``用多多支付减…元`` each deep in its own ViewGroups (texts in non-clickable
    children of the clickable container)."""
    promo = f"用多多支付减{goods.promotion:f}元".replace(".00元", "元")
    b = (0, y, W, y + 130)
    left = _nest(
        (35, y, 124, y + 130),
        2,
        group(
            (35, y + 33, 121, y + 96),
            frame((35, y + 36, 121, y + 93), text((35, y + 36, 121, y + 93), "优惠", rid=""), rid=""),
        ),
    )
    right = group(
        (621, y, 1046, y + 130),
        group(
            (621, y, 1014, y + 130),
            group(
                (624, y + 33, 1014, y + 96),
                frame((641, y + 38, 996, y + 91), text((641, y + 38, 996, y + 91), promo, rid=""), rid=""),
            ),
        ),
        image((1026, y + 50, 1046, y + 79), rid=""),
    )
    row = group(
        b,
        left,
        group((35, y + 128, W, y + 129)),
        right,
        clickable=True,
        focusable=True,
        action=("payment", "promotion"),
        role="payment",
    )
    return linear(b, frame(b, _nest(b, 3, row)))


def payment_row(bounds: Bounds, row_text: str) -> Node:
    """The payment row as captured: a clickable ViewGroup WITHOUT text holding a divider View,
    ``LinearLayout > TextView`` with the mode (that TextView is not clickable) and an arrow."""
    left, top, right, bottom = bounds
    return group(
        bounds,
        Node("android.view.View", (left, top, right, top + 1), rid=OBF_ID),
        linear((206, top + 20, 819, bottom - 21), text((223, top + 20, 819, bottom - 21), row_text)),
        image((828, top + 33, 857, top + 62)),
        clickable=True,
        focusable=True,
        action=("payment", "method"),
        role="payment",
        rid=OBF_ID,
    )


def order_sheet(app: AppModel) -> Node:
    """The order sheet's window content, node for node as the real captures nest it
    (tests/agent/fixtures/real_structures; tests/phonesim/test_real_structure_sheet.py compares them):
    ``FrameLayout(pdd) > clickable LinearLayout`` holding the transparent top (a tap there closes the
    sheet), the service banner and the sheet body — address, goods card, promotion, the option list
    (a RecyclerView of dimension groups), then the payment row(s), ``添加`` and the submit control."""
    goods = app.goods
    assert goods is not None
    bottom = APP_BOTTOM
    top_area = group(
        (0, STATUS_H, W, 225),
        frame((0, STATUS_H, W, 225), _nest((0, STATUS_H, W, 225), 4, image((0, 119, W, 200), rid=""))),
    )
    root = linear(
        (0, STATUS_H, W, bottom), top_area, clickable=True, focusable=True, action=("close_sheet",), style="scrim"
    )
    if app.cfg.service_banner and not app.banner_closed:
        root.add(
            frame(
                (0, 225, W, 332),
                Node(
                    "android.widget.ViewSwitcher",
                    (0, 225, W, 332),
                    rid=OBF_ID,
                    clickable=True,
                    focusable=True,
                    action=("noop",),
                    children=[group((0, 225, W, 332), text((322, 245, 757, 311), BANNER))],
                ),
                Node(
                    "android.view.View",
                    (0, 225, W, 248),
                    rid=OBF_ID,
                    clickable=True,
                    focusable=True,
                    naf=True,
                    action=("noop",),
                ),
                image((979, 242, 1051, 314), "关闭", clickable=True, focusable=True, action=("close_banner",)),
                Node("android.view.View", (0, 331, W, 332), rid=OBF_ID),
            )
        )
    rows = payment_rows(app)
    pay_top = bottom - BAR_H - PAY_H * len(rows)
    head = linear(
        (0, 332, W, 872),
        _address_row(app),
        Node("android.view.View", (0, 486, W, 487), rid=OBF_ID),
        _goods_card(app, goods),
        Node("android.view.View", (35, 871, W, 872), rid=OBF_ID),
    )
    y = 872
    if goods.promotion:
        head.add(_promotion_row(goods, y))
        y += 130
        head.bounds = (0, 332, W, y)
    options = Node(RECYCLER, (0, y, W, pay_top), rid=OBF_ID, focusable=True)
    for dim in goods.dimensions:
        grp, y = option_group(app, goods, dim, y)
        options.add(grp)
    options.add(frame((0, y, W, y + 32), rid=""))
    body = linear((0, 332, W, pay_top), group((0, 332, W, pay_top), head, options))
    sheet = group(
        (0, 332, W, bottom), body, clickable=True, focusable=True, action=("noop",), rid=OBF_ID, style="sheet"
    )
    for row_text, _short in rows:
        sheet.add(payment_row((0, pay_top, W, pay_top + PAY_H), row_text))
        pay_top += PAY_H
    price = app.unit_price()
    total = fmt_yuan(price * app.quantity) if price is not None else "¥0"
    sheet.add(
        group(
            (0, bottom - BAR_H, 334, bottom),
            text((0, bottom - BAR_H, 334, bottom), "添加"),
            clickable=True,
            focusable=True,
            action=("noop",),
            role="add",
            rid=OBF_ID,
        )
    )
    label = f"{submit_prefix(app)} {total}"
    sheet.add(sheet_submit((334, bottom - BAR_H, W, bottom), label))
    if app.duplicate_submit:
        sheet.add(sheet_submit((0, bottom - 2 * BAR_H, 334, bottom - BAR_H), label))
    root.add(sheet)
    return frame((0, STATUS_H, W, bottom), root)


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
    win = frame((0, 0, W, H), style="page")
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
    bar = linear((0, 2112, W, APP_BOTTOM), style="bottombar")
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
        *header(),
        text((390, 300, 690, 380), "支付成功"),
        text((400, 420, 680, 520), fmt_yuan(order.total), style="price"),
        text((300, 560, 780, 620), "商家将尽快为您发货"),
        bar,
    ]


def _orders(app: AppModel) -> Iterable[Order]:
    return (o for o in reversed(app.orders) if o.status == "pending_payment")


def orders_page(app: AppModel) -> list[Node]:
    """``orders.html?type=1``: the pending-payment list, newest first."""
    nodes = [*header(), text((390, 126, 690, 198), "待付款")]
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
