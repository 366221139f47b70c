"""The readings ``inspect`` prints: their keys, in the order printed, and the kind of JSON value each
holds — one table for ``inspect`` (which prints them), ``capture`` (expected.json keys) and ``pack test``
(which checks stored expectations against the kinds). A module of its own so that ``pack test``'s
argument parser, which every ``cmbuyer-agent`` command builds, does not load ``inspect``."""

from __future__ import annotations

# The ``readings`` object inspect prints, in the order printed (capture's expected.json uses these
# keys), each with the kind of JSON value it holds there — the one table ``pack test`` checks stored
# expectations against: ``string``, ``money`` (the canonical string, e.g. "59.00") and ``quantity``
# (an integer >= 1) are each that or null; ``count`` is an integer >= 0, ``strings`` a list of strings,
# ``selected`` an object {header: name or null}, ``options`` an object {header: [name or null, ...]}.
READINGS: dict[str, str] = {
    "goods_id": "string",
    "unit_price": "money",
    "quantity": "quantity",
    "confirm_amount": "money",
    "selected": "selected",
    "options": "options",
    "sold_out": "options",
    "submit_controls": "count",
    "payment_controls": "strings",
    "risk_walls": "strings",
    "payment_mode": "string",
    "payment_problems": "strings",
}
READING_KEYS = tuple(READINGS)
