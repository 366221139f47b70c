"""The SKU option rows of the task forms (docs/admin.md "The task form"): three rows of
dimension + value, the dimension input offering the header names the shipped selector packs know
(their alias groups) while accepting any text the shop shows.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from cmbuyer.schemas.sku import MAX_OPTIONS, legacy_options, options_from_text


@cache
def known_dimensions() -> tuple[str, ...]:
    """Every header name in the shipped packs' alias table (``dimension_aliases``: groups of synonyms,
    agent/packs/*.json), each once, in pack order — the suggestions of the form's dimension inputs. Read
    once per process; a pack that cannot be read adds nothing (the inputs stay free text)."""
    names: list[str] = []
    for entry in sorted(resources.files("cmbuyer.agent.packs").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            groups = json.loads(entry.read_text(encoding="utf-8")).get("dimension_aliases", [])
        except (OSError, ValueError, AttributeError):
            continue
        for group in groups if isinstance(groups, list) else []:
            names.extend(n for n in group if isinstance(n, str) and n not in names)
    return tuple(names)


def form_rows(values: object) -> list[tuple[str, str]]:
    """:data:`MAX_OPTIONS` ``(dimension, value)`` rows to show: ``values["sku_options"]`` (stored text or
    the submitted pairs) or its ``sku_color``/``sku_size``, padded with empty rows. ``values`` is the
    create form's dict or a task row (its ``sku_options`` attribute)."""
    if not isinstance(values, dict):
        values = {"sku_options": getattr(values, "sku_options", None)}
    given = values.get("sku_options")
    rows: list[tuple[str, str]] = []
    if isinstance(given, str) and given:
        rows = list(options_from_text(given))
    elif isinstance(given, list):
        rows = [(str(p[0]), str(p[1])) for p in given if isinstance(p, list) and len(p) == 2]
    elif values.get("sku_color"):
        rows = list(legacy_options(str(values["sku_color"]), values.get("sku_size") or None))
    rows = rows[:MAX_OPTIONS]
    return rows + [("", "")] * (MAX_OPTIONS - len(rows))
