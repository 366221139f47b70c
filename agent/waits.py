"""How long the purchase flow waits for the phone: one frozen value passed from the runner (or the dry run)
down to every step that waits, so a caller — a test with a fast simulator — sets them in one place.

Only deadlines live here (how long before a step gives up); the pauses between polls stay beside the loop
that polls, and the per-call phone deadlines are :class:`cmbuyer.agent.phone.adapter.Deadlines`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FlowWaits:
    """Deadlines of the flow's waits, in seconds (finite, > 0); the defaults are production's.

    ``screen``: a screen must be recognized (two equal dumps) within this after a deep link or a tap that
    changes screens, else SCREEN_UNRECOGNIZED. ``tap_effect``: how long a tap may take to show (tile selected,
    quantity moved) before the reading is judged as it is. ``observe``: after the submit tap, the first
    outcome seen twice in a row ends the observation; at this deadline it is UNKNOWN + NO_KNOWN_SCREEN.
    ``confirm``: the whole read-only order confirmation (the result report waits for it). ``order_list``:
    after the confirmation's deep link the order list shows within this, or the confirmation stops.

    Raises ValueError for a value that is not a finite number > 0."""

    screen: float = 8.0
    tap_effect: float = 2.0
    observe: float = 10.0
    confirm: float = 30.0
    order_list: float = 8.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"FlowWaits.{f.name} must be a finite number of seconds > 0, not {value!r}")
