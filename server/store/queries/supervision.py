"""Read models of the admin side of supervised first orders (migration 0007): the approval
request a person decides in the task drawer, the verdict on a supervised order, the device–pack pairs
shown on the devices page (:func:`device_states`), the task drawer's facts (:func:`task_panel`) and the
"等待人工确认" badges. The writes behind them live in ``store/supervision.py``; the drawer's comparison
table is display (``web/admin/supervision_view.py``).

Reads return plain dicts of stored columns; never claim tokens or hashes of secrets.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from cmbuyer.server.domain import supervision as rules
from cmbuyer.server.domain.states import SubmissionState
from cmbuyer.server.store import authorizations as auth_store
from cmbuyer.server.store._sql import marks, one_dict
from cmbuyer.server.store.supervision import APPROVAL_FIELDS

# every approval_requests column (r) and what the admin decisions need of its attempt (a)
_APPROVAL_WITH_ATTEMPT = (
    "SELECT "
    + ", ".join(f"r.{f}" for f in APPROVAL_FIELDS)
    + ", a.state AS attempt_state, a.authorization_id, a.pack_key, a.supervised"
)


def approval(conn: sqlite3.Connection, approval_id: str) -> dict[str, Any] | None:
    """One approval request with its attempt's ``attempt_state``, ``authorization_id``, ``pack_key`` and
    ``supervised``; None when unknown."""
    return one_dict(
        conn,
        _APPROVAL_WITH_ATTEMPT + " FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id WHERE r.id = ?",
        (approval_id,),
    )


def live_approval_of_open_attempt(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """The WAITING or APPROVED request of the task's OPEN attempt (at most one: migration 0007's partial
    unique index and at most one OPEN attempt per task), joined like :func:`approval`; None otherwise."""
    return one_dict(
        conn,
        _APPROVAL_WITH_ATTEMPT + " FROM attempts a JOIN approval_requests r ON r.attempt_id = a.id"
        " WHERE a.task_id = ? AND a.state = 'OPEN' AND r.state IN ('WAITING', 'APPROVED')",
        (task_id,),
    )


# when the phone gives up waiting (approval_requests.wait_until, migration 0011); a request made before it: the
# agent's default, 600 s after it was made
_WAIT_UNTIL = (
    "COALESCE(r.wait_until, strftime('%Y-%m-%dT%H:%M:%S.000000Z', r.created_at, '+600 seconds')) AS wait_until"
)
_WAITING = (
    " FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id WHERE r.state = 'WAITING' AND a.state = 'OPEN'"
)


def waiting_task_ids(conn: sqlite3.Connection, task_ids: list[str]) -> dict[str, str]:
    """Those of ``task_ids`` whose OPEN attempt has a WAITING approval request (the list badge), each with the
    time the phone gives up waiting (wire time: the badge's countdown)."""
    if not task_ids:
        return {}
    rows = conn.execute(f"SELECT r.task_id, {_WAIT_UNTIL}{_WAITING} AND r.task_id IN ({marks(task_ids)})", task_ids)
    return {r[0]: r[1] for r in rows}


def waiting_summary(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """How many orders wait for a person's approval now, and the earliest time one of them gives up
    (index ``approval_requests_waiting``)."""
    row = conn.execute(f"SELECT COUNT(*), MIN(wait_until) FROM (SELECT {_WAIT_UNTIL}{_WAITING})").fetchone()
    return int(row[0]), row[1]


def waiting_device_ids(conn: sqlite3.Connection) -> set[str]:
    """Devices whose OPEN attempt has a WAITING approval request (index ``approval_requests_waiting``)."""
    return {
        r[0]
        for r in conn.execute(
            "SELECT r.device_id FROM approval_requests r JOIN attempts a ON a.id = r.attempt_id"
            " WHERE r.state = 'WAITING' AND a.state = 'OPEN'"
        )
    }


def submission_for_verdict(conn: sqlite3.Connection, submission_id: str) -> dict[str, Any] | None:
    """The submission's ``id, task_id, attempt_id, device_id, state`` with its attempt's ``supervised`` and
    ``pack_key``; None when unknown."""
    return one_dict(
        conn,
        "SELECT s.id, s.task_id, s.attempt_id, s.device_id, s.state, a.supervised, a.pack_key"
        " FROM order_submissions s JOIN attempts a ON a.id = s.attempt_id WHERE s.id = ?",
        (submission_id,),
    )


def verdict(conn: sqlite3.Connection, submission_id: str) -> dict[str, Any] | None:
    """The verdict recorded on a submission, or None."""
    return one_dict(conn, "SELECT * FROM supervision_verdicts WHERE submission_id = ?", (submission_id,))


def pair(conn: sqlite3.Connection, device_id: str, pack_key: str) -> dict[str, Any] | None:
    """One supervision pair row, or None."""
    return one_dict(
        conn,
        "SELECT * FROM supervision_pairs WHERE device_id = ? AND pack_key = ?",
        (device_id, pack_key),
    )


def device_exists(conn: sqlite3.Connection, device_id: str) -> bool:
    """True for a known device id (revoked ones included)."""
    return conn.execute("SELECT 1 FROM devices WHERE id = ?", (device_id,)).fetchone() is not None


def devices_for_supervision(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every device's ``id, pack_id, pdd_version, pdd_version_code`` (what the pair key is built from) and its
    ``supervision_off`` exemption."""
    return [
        dict(r) for r in conn.execute("SELECT id, pack_id, pdd_version, pdd_version_code, supervision_off FROM devices")
    ]


def all_pairs(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every supervision pair row, by device then pack key."""
    return [dict(r) for r in conn.execute("SELECT * FROM supervision_pairs ORDER BY device_id, pack_key")]


def latest_submission_for_task(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    """The task's newest order submission (``id, state``) with its attempt's ``supervised``, or None."""
    return one_dict(
        conn,
        "SELECT s.id, s.state, a.supervised FROM order_submissions s JOIN attempts a ON a.id = s.attempt_id"
        " WHERE s.task_id = ? ORDER BY s.created_at DESC, s.id DESC LIMIT 1",
        (task_id,),
    )


# the live request's columns the drawer shows
_PANEL_APPROVAL = (
    "id",
    "state",
    "created_at",
    "attempt_id",
    "device_id",
    "pack_key",
    "screenshot_asset_id",
    "decided_by",
    "decided_at",
)


def task_panel(conn: sqlite3.Connection, task_id: str) -> dict[str, Any]:
    """What the task page/drawer knows about supervision:

    ``{"live": None | the live request of the OPEN attempt (:func:`live_approval_of_open_attempt`),
    "authorization": its Authorization or None, "approval": None | the columns of it the drawer shows,
    "verdict_submission_id": sid | None`` (a verdict can be given now), ``"verdict_right_allowed": bool``,
    ``"verdict": None | row``, ``"supervised_submission": bool``, ``"stamp": str`` (changes whenever any of
    these does, for the live view)}. Which verdict a submission state allows is
    :data:`~cmbuyer.server.domain.supervision.RIGHT_STATES` / ``WRONG_STATES``.
    """
    live = live_approval_of_open_attempt(conn, task_id)
    panel: dict[str, Any] = {
        "live": live,
        "authorization": None if live is None else auth_store.get(conn, live["authorization_id"]),
        "approval": None if live is None else {k: live[k] for k in _PANEL_APPROVAL},
        "verdict_submission_id": None,
        "verdict_right_allowed": False,
        "verdict": None,
        "supervised_submission": False,
    }
    latest = latest_submission_for_task(conn, task_id)
    if latest is not None and latest["supervised"]:
        panel["supervised_submission"] = True
        panel["verdict"] = verdict(conn, latest["id"])
        if panel["verdict"] is None and SubmissionState(latest["state"]) in rules.WRONG_STATES:
            panel["verdict_submission_id"] = latest["id"]
            panel["verdict_right_allowed"] = SubmissionState(latest["state"]) in rules.RIGHT_STATES
    # the decision, a new request or a verdict changes the drawer (REJECTED/VOID leave the live slot empty)
    slot = f"{live['id']}:{live['state']}" if live else "-"
    panel["stamp"] = f"{slot}|{(panel['verdict'] or {}).get('verdict', '')}"
    return panel


def device_states(conn: sqlite3.Connection, required: int) -> dict[str, dict[str, Any]]:
    """Per device id: ``{"required": N, "off": N == 0, "exempt": the device's audited exemption
    (``devices.supervision_off``, CLI ``cmbuyer-server device supervision DEVICE off``), "pack_key": current
    key or None (no heartbeat yet), "confirmed": x for the current key, "done": x >= N, "held": [pairs on
    hold, any key], "pairs": count, "waiting": bool (its OPEN attempt waits for a person)}``. ``required`` is
    ``CMBUYER_SUPERVISED_ORDERS`` (N, an int ≥ 0; 0 = no device is supervised). The current key follows the
    claim-time rule (:func:`rules.pack_key_for` with no claim pack id: the heartbeat's pack id, else the app
    version)."""
    pairs: dict[str, list[dict[str, Any]]] = {}
    for p in all_pairs(conn):
        pairs.setdefault(p["device_id"], []).append(p)
    waiting = waiting_device_ids(conn)
    out: dict[str, dict[str, Any]] = {}
    for d in devices_for_supervision(conn):
        try:
            key: str | None = rules.pack_key_for(None, d["pack_id"], d["pdd_version"], d["pdd_version_code"])
        except ValueError:
            key = None
        mine = pairs.get(d["id"], [])
        current = next((p for p in mine if p["pack_key"] == key), None)
        confirmed = int(current["confirmed_orders"]) if current else 0
        out[d["id"]] = {
            "required": required,
            "off": required == 0,
            "exempt": bool(d["supervision_off"]),
            "pack_key": key,
            "confirmed": confirmed,
            "done": confirmed >= required,
            "held": [p for p in mine if p["held"]],
            "pairs": len(mine),
            "waiting": d["id"] in waiting,
        }
    return out
