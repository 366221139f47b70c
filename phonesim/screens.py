"""Build the view tree of every window for the current app state (1080x2400 portrait).

Windows are returned topmost first (:func:`windows`); the system windows are the real captures'
(:mod:`.system_ui`). Texts, classes and structure follow the real app (docs/phonesim.md "Screens"): the
confirm-order page has no title text, its price+stock node reads ``最后3件 ¥269``, the
chosen SKU label ``已选: [..]..`` uses ASCII brackets (id ``tv_select_sku``), and the
submit text ``提交订单 ¥<total>`` is a non-clickable TextView in a clickable FrameLayout.
"""

from __future__ import annotations

from . import order_sheet, overlays, system_ui
from .app import AppModel
from .nodes import OBF_ID, PDD, Node, edit, frame, group, header, image, linear, option_tile, text, text_width
from .prices import fmt_yuan
from .system_ui import APP_BOTTOM, APP_BOUNDS, H, W


def sku_label(options: list[str]) -> str:
    """The confirm page's chosen-SKU label: the app prints ASCII brackets where tiles use 【】."""
    return "已选: " + " ".join(o.replace("【", "[").replace("】", "]") for o in options)


def _tiles(app: AppModel, dim: str, options: list[str], y: int) -> tuple[list[Node], int]:
    """Flow-laid option tiles starting at ``y`` (SKU sheet and the older confirm page; modelled, no
    real capture): each a clickable FrameLayout holding the non-clickable name TextView — the real
    app's convention of texts in non-clickable children of clickable containers —, ``selected`` and
    ``enabled`` on both. Returns (nodes, bottom y)."""
    goods = app.goods
    nodes: list[Node] = []
    x, h = 36, 96
    for opt in options:
        w = text_width(opt) + 64
        if x + w > W - 36 and x > 36:
            x, y = 36, y + h + 24
        ok = goods is not None and goods.option_available(app.selection, dim, opt)
        selected = app.selection.get(dim) == opt
        label = text((x + 20, y + 18, x + w - 20, y + h - 18), opt, enabled=ok, selected=selected)
        nodes.append(frame((x, y, x + w, y + h), label, enabled=ok, **option_tile(selected, ("select", dim, opt))))
        x += w + 24
    return nodes, y + h


def _stepper(app: AppModel, y: int) -> list[Node]:
    return [
        image((780, y, 852, y + 72), "减少数量", clickable=True, action=("qty", -1), role="qty_dec"),
        edit(
            (858, y, 942, y + 72),
            str(app.quantity),
            focused=app.focused == "qty",
            action=("focus", "qty"),
            role="qty_edit",
        ),
        image((948, y, 1020, y + 72), "增加数量", clickable=True, action=("qty", 1), role="qty_inc"),
    ]


def product_page(app: AppModel) -> list[Node]:
    goods = app.goods
    nodes = header()
    nodes.append(image((960, 114, 1056, 210), "分享", clickable=True, action=("noop",)))
    if goods is None or not goods.available:
        nodes.append(text((240, 900, 840, 980), "该商品已下架"))
        return nodes
    prices = goods.prices()
    nodes += [
        image((0, 228, W, 1188), "商品大图", clickable=True, action=("noop",)),
        linear(
            (0, 1188, W, 1308),
            text((36, 1206, 36 + text_width(fmt_yuan(prices[0]), 48, 30), 1290), fmt_yuan(prices[0])),
            text((600, 1222, 1044, 1276), "已拼10万+件"),
            style="pricebar",
        ),
        text((36, 1332, 1044, 1452), goods.title),
        text((36, 1476, 1044, 1530), "退货包运费 · 极速退款 · 7天无理由退货"),
    ]
    bar = linear((0, 2112, W, APP_BOTTOM), style="bottombar")
    for i, label in enumerate(["店铺", "收藏", "客服"]):
        bar.add(
            linear(
                (i * 150, 2124, i * 150 + 150, 2268),
                image((45 + i * 150, 2130, 105 + i * 150, 2190)),
                text((i * 150, 2196, i * 150 + 150, 2256), label),
                clickable=True,
                action=("noop",),
            )
        )
    buttons = goods.buy_buttons
    width = (W - 12 - 450) // len(buttons)
    for i, label in enumerate(buttons):
        left = 450 + i * width
        bar.add(
            linear(
                (left, 2124, left + width - 6, 2268),
                text((left, 2136, left + width - 6, 2196), fmt_yuan(prices[0])),
                text((left, 2196, left + width - 6, 2256), label),
                clickable=True,
                action=("open_sheet", label),
                role="buy",
                style="button",
            )
        )
    nodes.append(bar)
    if app.float_video:
        nodes.append(
            frame(
                (690, 1500, 1044, 1900),
                Node("android.view.View", (690, 1500, 1044, 1900), desc="视频", rid=OBF_ID),
                image(
                    (984, 1500, 1044, 1560),
                    "",
                    rid=f"{PDD}:id/iv_float_window_close",
                    clickable=True,
                    action=("close_float",),
                ),
                style="video",
            )
        )
    return nodes


def sku_sheet(app: AppModel) -> Node:
    goods = app.goods
    assert goods is not None
    price = app.unit_price()
    prices = goods.prices()
    price_text = (
        fmt_yuan(price)
        if price is not None
        else (fmt_yuan(prices[0]) if len(prices) == 1 else f"{fmt_yuan(prices[0])}-{fmt_yuan(prices[-1])[1:]}")
    )
    stock = app.stock()
    chosen = [app.selection[d.name] for d in goods.dimensions if d.name in app.selection]
    missing = [d.name for d in goods.dimensions if d.name not in app.selection]
    # the sheet itself is clickable so taps on its empty parts do not fall through to the scrim
    sheet = linear((0, 900, W, APP_BOTTOM), clickable=True, action=("noop",), style="sheet")
    sheet.add(
        image((36, 924, 256, 1144), "", rid=f"{PDD}:id/iv_goods_img"),
        text((300, 930, 300 + text_width(price_text, 48, 30), 1010), price_text, style="price"),
        text((300, 1016, 700, 1064), f"库存{stock}件" if stock is not None else "请选择规格"),
        text((300, 1068, 1040, 1116), ("已选: " + " ".join(chosen)) if not missing else "请选择 " + " ".join(missing)),
        image((984, 924, 1056, 996), "关闭", clickable=True, action=("close_sheet",)),
    )
    y = 1150
    for dim in goods.dimensions:
        sheet.add(text((36, y, 36 + text_width(dim.name), y + 60), dim.name))
        tiles, y = _tiles(app, dim.name, dim.options, y + 76)
        sheet.add(*tiles)
        y += 40
    sheet.add(text((36, y + 6, 300, y + 66), "购买数量"), *_stepper(app, y))
    sheet.add(
        frame(
            (36, 2136, W - 36, 2256),
            text((460, 2166, 620, 2226), "确定"),
            clickable=True,
            action=("confirm_sheet",),
            role="sku_confirm",
            style="button",
        )
    )
    return frame(APP_BOUNDS, sheet, clickable=True, action=("close_sheet",), style="scrim")


def confirm_page(app: AppModel) -> list[Node]:
    goods = app.goods
    assert goods is not None
    page = app.page
    price = app.unit_price()
    stock = app.stock() or 0
    unit = fmt_yuan(price) if price is not None else "¥0"
    total = fmt_yuan(price * app.quantity) if price is not None else "¥0"
    options = [app.selection.get(d.name, "") for d in goods.dimensions]
    # the header is an image in the real app: no "确认订单" text anywhere
    nodes = [*header(), image((390, 120, 690, 204), "")]
    if app.cfg.address:
        addr = linear(
            (0, 228, W, 420),
            image((36, 288, 96, 348), ""),
            text((120, 252, 1000, 312), app.cfg.address.rsplit("  ", 1)[0]),
            text((120, 324, 1000, 396), app.cfg.address.rsplit("  ", 1)[-1]),
            clickable=True,
            action=("noop",),
        )
    else:
        addr = linear((0, 228, W, 420), text((120, 294, 600, 354), "手动添加地址"), clickable=True, action=("noop",))
    nodes.append(addr)
    price_stock = f"最后{stock}件 {unit}" if stock <= 10 else unit
    card = linear(
        (0, 444, W, 820),
        image((36, 468, 276, 708), "商品主图", rid=f"{PDD}:id/iv_goods_img"),
        text((300, 468, 1044, 560), goods.title, rid=f"{PDD}:id/tv_title"),
        text((300, 580, 300 + text_width(price_stock, 36, 24), 640), price_stock),
        text((300, 650, 1044, 700), sku_label(options), rid=f"{PDD}:id/tv_select_sku"),
        *_stepper(app, 720),
        style="card",
    )
    nodes.append(card)
    # every dimension inline (gate 3 needs each selected option readable on the submit screen)
    y = 840
    for dim in goods.dimensions:
        tiles, bottom = _tiles(app, dim.name, dim.options, y + 76)
        nodes.append(
            linear((0, y, W, bottom + 24), text((36, y + 8, 36 + text_width(dim.name), y + 60), dim.name), *tiles)
        )
        y = bottom + 48
    promo = f"用多多支付减{goods.promotion:f}元".replace(".00元", "元")
    nodes.append(
        linear(
            (0, y, W, y + 96),
            text((36, y + 18, 160, y + 78), "优惠"),
            text((600, y + 18, 1044, y + 78), promo),
            clickable=True,
            action=("payment", "promotion"),
            role="payment",
        )
    )
    y += 120
    for row_text, short in order_sheet.payment_rows(app):
        # the row carries the mode in its text (and, in this older layout, in its content-desc too)
        nodes.append(
            linear(
                (0, y, W, y + 120),
                image((36, y + 30, 96, y + 90), ""),
                *([text((120, y + 30, 400, y + 90), short)] if short else []),
                text=row_text,
                desc=row_text,
                clickable=True,
                action=("payment", "method"),
                role="payment",
            )
        )
        y += 130
    label = f"{order_sheet.submit_prefix(app)} {total}"
    bar = [order_sheet.submit_button((540, 2136, 1056, 2268), (600, 2166, 996, 2238), label)]
    if app.duplicate_submit:  # fault: a second, equally real submit control in the bottom bar
        bar.insert(0, order_sheet.submit_button((24, 2136, 530, 2268), (60, 2166, 480, 2238), label))
    nodes.append(linear((0, 2112, W, APP_BOTTOM), *bar, style="bottombar"))
    if app.payment_sheet and page is not None and page.order is not None:
        nodes.append(payment_sheet(app, page.order.total))
    return nodes


def payment_sheet(app: AppModel, amount: object) -> Node:
    sheet = linear((0, 1300, W, APP_BOTTOM), style="sheet")
    sheet.add(
        image((36, 1324, 108, 1396), "关闭", clickable=True, action=("back",)),
        text((380, 1324, 700, 1396), "选择支付方式"),
        text((400, 1420, 680, 1520), fmt_yuan(amount), style="price"),  # type: ignore[arg-type]
    )
    for i, (label, sel) in enumerate([("微信支付", True), ("多多支付", False), ("支付宝", False)]):
        top = 1560 + i * 130
        sheet.add(
            linear(
                (0, top, W, top + 120),
                text((120, top + 30, 500, top + 90), label),
                Node(
                    "android.widget.CheckBox", (960, top + 30, 1020, top + 90), rid=OBF_ID, checkable=True, checked=sel
                ),
                clickable=True,
                action=("payment", "choose"),
                role="payment",
            )
        )
    sheet.add(
        frame(
            (36, 2136, W - 36, 2256),
            text((440, 2166, 640, 2226), "立即支付"),
            clickable=True,
            action=("payment", "pay_now"),
            role="payment",
            style="button",
        )
    )
    return frame(APP_BOUNDS, sheet, style="scrim")


def order_page(app: AppModel) -> list[Node]:
    page = app.page
    assert page is not None and page.order is not None
    order = page.order
    goods = app.cfg.catalogue.get(order.goods_id)
    status = "待付款" if order.status == "pending_payment" else "已取消"
    nodes = [
        *header("订单详情"),
        linear(
            (0, 228, W, 420),
            text((60, 252, 600, 324), status),
            text((60, 336, 1020, 396), "订单已提交，请在23小时59分内完成支付"),
            style="banner",
        ),
        linear(
            (0, 444, W, 780),
            image((36, 468, 276, 708), "商品主图"),
            text((300, 468, 1044, 560), goods.title if goods else ""),
            text((300, 580, 1044, 640), sku_label(list(order.options.values()))),
            text((900, 650, 1044, 700), f"x{order.quantity}"),
        ),
        linear(
            (0, 800, W, 880), text((36, 812, 300, 868), "实付款"), text((800, 812, 1044, 868), fmt_yuan(order.total))
        ),
        text((36, 900, 1044, 950), f"订单编号：{order.order_sn}"),
    ]
    bar = linear((0, 2112, W, APP_BOTTOM), style="bottombar")
    bar.add(
        frame(
            (480, 2136, 740, 2256), text((520, 2166, 700, 2226), "取消订单"), clickable=True, action=("cancel_order",)
        )
    )
    bar.add(
        frame(
            (760, 2136, 1056, 2256),
            text((800, 2166, 1016, 2226), "继续支付"),
            clickable=True,
            action=("payment", "continue_pay"),
            role="payment",
            style="button",
        )
    )
    nodes.append(bar)
    return nodes


def retention_dialog(app: AppModel) -> Node:
    page = app.page
    total = page.order.total if page and page.order else None
    amount = fmt_yuan(total) if total is not None else "¥0"
    box = linear((120, 800, 960, 1500), style="dialog")
    box.add(
        image((876, 820, 936, 880), "", clickable=True, action=("close_dialog",)),  # unlabeled close icon
        text((300, 900, 780, 980), "确定放弃吗?"),
        text((180, 1000, 900, 1060), "订单已为您保留，超时将自动取消"),
        linear(
            (180, 1150, 900, 1270),
            text((300, 1180, 540, 1240), "继续支付"),
            text((540, 1180, 780, 1240), f"，仅{amount}"),
            clickable=True,
            action=("payment", "continue_pay"),
            role="payment",
            style="button",
        ),
        frame(
            (180, 1300, 900, 1420), text((440, 1330, 640, 1390), "先去逛逛"), clickable=True, action=("leave_order",)
        ),
    )
    return frame(APP_BOUNDS, box, style="scrim")


def simple_dialog(title: str, body: str, buttons: list[tuple[str, tuple[str, ...]]], close: bool = False) -> Node:
    box = linear((120, 800, 960, 1400), style="dialog")
    box.add(text((180, 860, 900, 940), title), text((180, 960, 900, 1100), body))
    for i, (label, action) in enumerate(buttons):
        width = 720 // len(buttons)
        left = 180 + i * width
        box.add(
            frame(
                (left, 1240, left + width - 12, 1360),
                text((left + 20, 1270, left + width - 32, 1330), label),
                clickable=True,
                action=action,
                style="button" if i == len(buttons) - 1 else "",
            )
        )
    if close:
        box.add(image((876, 820, 936, 880), "", clickable=True, action=("dismiss_popup",)))
    return frame(APP_BOUNDS, box, style="scrim")


def popup(kind: str, custom: str | None) -> Node:
    if kind == "update":
        return simple_dialog(
            "发现新版本",
            "新版本更快更稳定，建议立即升级",
            [("以后再说", ("dismiss_popup",)), ("立即升级", ("dismiss_popup",))],
        )
    if kind == "coupon":
        return simple_dialog(
            "恭喜获得平台红包", custom or "¥5 无门槛红包已到账", [("立即使用", ("dismiss_popup",))], close=True
        )
    if kind == "order_success":
        return simple_dialog(custom or "恭喜你，下单成功", "商家将尽快为您发货", [("我知道了", ("dismiss_popup",))])
    if kind == "splash":
        return frame(
            APP_BOUNDS,
            image(APP_BOUNDS, "开屏广告"),
            text((860, 130, 1040, 200), "跳过 3", clickable=True, action=("dismiss_popup",)),
            style="page",
        )
    if kind in WALL_TEXTS:
        title, body, button = WALL_TEXTS[kind]
        # a button that leads nowhere: only a person can get past these walls
        return frame(
            APP_BOUNDS,
            text((240, 600, 840, 680), title),
            text((120, 720, 960, 860), custom or body),
            image((240, 900, 840, 1400), "验证图片" if kind == "face_check" else ""),
            frame(
                (180, 1500, 900, 1620),
                text((400, 1530, 680, 1590), button),
                clickable=True,
                action=("noop",),
                role="wall",
                style="button",
            ),
            style="page",
        )
    # risk wall: full page, no way out by tapping (never solve: stop and report)
    label = custom or "拖动滑块"
    return frame(
        APP_BOUNDS,
        text((300, 600, 780, 680), "安全验证"),
        text((120, 720, 960, 800), f"请{label}完成验证" if label == "拖动滑块" else label),
        image((120, 900, 960, 1400), "验证图片"),
        style="page",
    )


# newer walls seen in public captures: title, body, button
WALL_TEXTS = {
    "face_check": ("刷脸验证", "请将正脸置于框内", "开始验证"),
    "account_risk": ("温馨提示", "检测到账户存在风险，已限制部分操作", "联系客服"),
    "real_name": ("提交实名信息", "根据相关规定，请完成实名后继续下单", "上传身份证"),
    "too_busy": ("活动太火爆", "活动太火爆，请稍后再试", "我知道了"),
}


def challenge_page() -> list[Node]:
    return [
        *header(),
        text((390, 300, 690, 380), "安全验证"),
        text((180, 420, 900, 480), "拖动滑块完成拼图"),
        image((120, 560, 960, 1100), "验证图片"),
        Node("android.widget.SeekBar", (120, 1200, 960, 1300), rid=OBF_ID, focusable=True, desc="向右滑动"),
    ]


def home_page() -> list[Node]:
    nodes = [
        text((36, 130, 1044, 214), "搜索", clickable=True, action=("noop",), style="tile"),
        text((36, 250, 300, 320), "首页"),
    ]
    bar = linear((0, 2112, W, APP_BOTTOM), style="bottombar")
    for i, label in enumerate(["首页", "多多视频", "聊天", "个人中心"]):
        bar.add(text((i * 270, 2124, i * 270 + 270, 2268), label, clickable=True, action=("noop",)))
    nodes.append(bar)
    return nodes


def app_window(app: AppModel) -> Node | None:
    """The app's window, or None when no Pinduoduo page is in front. Every page sits in the captures'
    window scheme: a full-screen FrameLayout ``[0,0][1080,2400]`` > LinearLayout > FrameLayout
    ``android:id/content`` from under the status bar down to :data:`APP_BOTTOM`."""
    page = app.page
    if page is None:
        return None
    root = frame((0, 0, W, H), rid="", style="page")
    # drawing-order 2 as on the captures (the decor draws a hidden child first)
    content = frame(APP_BOUNDS, rid="android:id/content", drawing_order=2)
    root.add(linear((0, 0, W, APP_BOTTOM), content, rid=""))
    sheet_open = page.name == "product" and app.sheet_open and app.goods is not None and app.goods.available
    if sheet_open and app.layout == "order_sheet":
        # the real order sheet is a window of its own (its captures hold no product page)
        content.add(order_sheet.order_sheet(app))
        if app.payment_sheet and page.order is not None:  # the app's own cashier over the order sheet
            content.add(payment_sheet(app, page.order.total))
    elif page.name == "home":
        content.add(*home_page())
    elif page.name == "product":
        content.add(*product_page(app))
        if sheet_open:
            content.add(sku_sheet(app))
        if app.payment_sheet and page.order is not None:  # the app's own cashier over the order sheet
            content.add(payment_sheet(app, page.order.total))
    elif page.name == "paid":
        content.add(*order_sheet.paid_page(app))
    elif page.name == "orders":
        content.add(*order_sheet.orders_page(app))
    elif page.name == "confirm":
        content.add(*confirm_page(app))
    elif page.name == "order":
        content.add(*order_page(app))
    elif page.name == "challenge":
        content.add(*challenge_page())
    else:  # blank: the app's window with nothing readable in it
        content.add(group(APP_BOUNDS, rid=OBF_ID))
    if app.dialog == "retention":
        content.add(retention_dialog(app))
    elif app.dialog == "stock_short":
        content.add(simple_dialog("库存不足", "商品库存不足，请修改购买数量", [("我知道了", ("close_dialog",))]))
    for pop in app.popups:
        content.add(popup(pop["kind"], pop.get("text")))
    return root


def windows(app: AppModel) -> list[Node]:
    """All window roots on screen, topmost first, in the captures' scheme (:mod:`.system_ui`; no
    navigation bar): while an app is in front the launcher's gesture strip, the status bar, the overlay
    windows (:mod:`.overlays`) and the app's window — the order the image-tiles capture lists them in
    (the strip and the status bar never overlap, so either may come first); with no app in front the
    status bar over the full-screen launcher. A window fully covered by another app's is not on screen,
    so it is not in a real dump either (the launcher behind the app shows only its gesture strip)."""
    status = system_ui.status_bar(app.cfg.notifications)
    if app.page is not None and app.foreign:
        # an external cashier app covers Pinduoduo: its window, and no Pinduoduo node at all
        return [system_ui.gesture_strip(), status, order_sheet.cashier_window(app.foreign, app.page.order)]
    win = app_window(app)
    if win is None:
        return [status, system_ui.home_screen()]
    return [system_ui.gesture_strip(), status, *overlays.windows(app, win), win]
