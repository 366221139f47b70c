"""``POST /api/v1/tasks/{id}/events`` as one write-transaction job (spec 002 事件与证据, design §3).

Order: conditional "device still ACTIVE" UPDATE → idempotency lookup of ``batch_key`` (same batch →
the stored answer byte for byte, nothing appended twice) → the claim must be current: the OPEN attempt
of the URL's task held by this device with this generation and token, and a lease strictly later than
now — *except* once the attempt holds a submission (after the fence), when an OPEN attempt is enough
so the agent can still log ``SUBMIT_TAP``/``OBSERVE_RESULT`` before its result closes the attempt →
every summary passes :func:`check_summary` → consecutive per-attempt sequence numbers → the first
accepted batch of a CLAIMED task moves it to ORDERING (version + 1) → request record + audit row.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from datetime import datetime
from typing import Any

from cmbuyer.server.clock import to_wire
from cmbuyer.server.db import StorageError
from cmbuyer.server.domain import claim_token, lease
from cmbuyer.server.domain.errors import ValidationFailed
from cmbuyer.server.domain.states import TASK_TRANSITIONS, TaskState, transition
from cmbuyer.server.services import device_tx, idempotency
from cmbuyer.server.services.claim_check import claim_not_current, current_claim
from cmbuyer.server.services.idempotency import Stored
from cmbuyer.server.store import attempts as attempt_store
from cmbuyer.server.store import audit
from cmbuyer.server.store import events as event_store
from cmbuyer.server.store import submissions as submission_store
from cmbuyer.server.store import tasks as task_store

ENDPOINT = "events"
SUMMARY_MAX = 200

# What a "short non-sensitive summary" may not contain (spec 002: no XML, addresses, phone numbers,
# page text or tokens). Checked on the NFKC form, so full-width digits and letters count too.
# Character references count with or without the ";" (HTML decodes "&#60" and "&lt" without it).
_MARKUP = re.compile(r"[<>]|&#|&[a-z][a-z0-9]*;|&(?:lt|gt|amp|quot|apos|nbsp)(?![a-z])"
                     r"|(?<![a-z])hierarchy(?![a-z])|(?<![a-z])xmlns(?![a-z])", re.IGNORECASE)
_PHONE = re.compile(r"\d(?:[ \-]?\d){6,}")
_RUN = re.compile(r"[A-Za-z0-9+/_=\-]{16,}")
# "claim_token", "token2", "X-Bearer": an underscore or a digit does not end a word here.
_SECRET_WORDS = re.compile(r"(?<![a-z])(?:bearer|token|password|passwd|secret)(?![a-z])", re.IGNORECASE)


# Bidirectional overrides/isolates/marks reorder what a person sees on the admin page: refused.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _looks_like_token(norm: str) -> bool:
    """A run of 16+ hex digits with a digit in it, or 24+ base64/URL-safe characters mixing letters
    and digits (plain words and reason codes such as ``CONFIRM_AMOUNT_UNREADABLE`` pass)."""
    for m in _RUN.finditer(norm):
        run = m.group(0)
        has_digit = any(c.isdigit() for c in run)
        if has_digit and re.search(r"[0-9a-fA-F]{16,}", run) and re.search(r"[0-9][a-fA-F]|[a-fA-F][0-9]", run):
            return True
        if has_digit and len(run) >= 24 and any(c.isalpha() for c in run):
            return True
    return _SECRET_WORDS.search(norm) is not None


def check_summary(text: str) -> str:
    """Return ``text`` when it is an acceptable summary, else raise ValidationFailed (→ 400).

    Refused: longer than 200 characters; control characters and bidi controls; anything that looks like markup
    (``<``, ``>``, character entities, ``hierarchy``/``xmlns``); 7 or more digits in a row (separators
    one space or hyphen allowed between digits — phone numbers, order or tracking numbers); a run of 16+
    hex digits (with a digit) or
    24+ base64/URL-safe characters mixing letters and digits, or the words ``bearer``/``token``/
    ``password``/``passwd``/``secret`` (an underscore or digit next to them does not hide them). Other
    invisible format characters (zero-width space, joiners, soft hyphen, BOM) are ignored by the checks
    so they cannot split a number or a word; entities count with or without their ``;``.
    """
    if not isinstance(text, str) or len(text) > SUMMARY_MAX:
        raise ValidationFailed("summary", "summary too long")
    norm = unicodedata.normalize("NFKC", text)
    if any(unicodedata.category(ch) in ("Cc", "Cs") or ch in _BIDI_CONTROLS for ch in norm):
        raise ValidationFailed("summary", "control characters")
    # Other format characters (zero-width space/joiners, word joiner, BOM, soft hyphen …) survive NFKC
    # and would split a phone number, a token or a keyword so the checks below miss it: check the text
    # with them removed (emoji ZWJ sequences stay acceptable).
    norm = "".join(ch for ch in norm if unicodedata.category(ch) != "Cf")
    if _MARKUP.search(norm) or _PHONE.search(norm) or _looks_like_token(norm):
        raise ValidationFailed("summary", "summary looks sensitive")
    return text


def request_payload(task_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Idempotency comparison form: body + URL task id, token replaced by its SHA-256 hex."""
    return {**body, "task_id": task_id, "claim_token": claim_token.token_hash(body["claim_token"]).hex()}


def append_events(conn: sqlite3.Connection, *, device_id: str, task_id: str, body: dict[str, Any],
                  now: datetime) -> Stored:
    """Append one schema-valid batch; returns the 200 response to send.

    Raises DeviceNotActive (→ 401), ValidationFailed (→ 400), Conflict ``idempotency_conflict`` /
    ``claim_not_current`` (→ 409).
    """
    device_tx.begin(conn, device_id)
    key: str = body["batch_key"]
    payload = request_payload(task_id, body)
    stored = device_tx.replay_scoped(conn, device_id, key, ENDPOINT, payload)
    if stored is not None:
        return stored
    attempt = current_claim(conn, device_id=device_id, attempt_id=body["attempt_id"], token=body["claim_token"],
                            now=now, generation=body["claim_generation"], task_id=task_id, require_lease=False)
    fenced = submission_store.for_attempt(conn, attempt.id) is not None
    if not fenced and not lease.is_live(attempt.lease_expires_at, now):
        raise claim_not_current()
    batch = [event_store.NewEvent(e["step"], e["outcome"], e["reason_code"], check_summary(e["summary"]),
                                  e["occurred_at"]) for e in body["events"]]
    task = task_store.get(conn, task_id)
    if task is None:
        raise claim_not_current()
    at = to_wire(now)
    version = task.version
    if task.state == TaskState.CLAIMED:
        if task.version != attempt.claimed_task_version:
            raise claim_not_current()
        new_state = transition(TASK_TRANSITIONS, TaskState.CLAIMED, "first_event")
        if not task_store.set_state(conn, task.id, expected_version=task.version, expected_state=task.state,
                                    new_state=new_state, at=at):
            raise StorageError("task changed under the write lock")
        version = task.version + 1
        audit.append(conn, at=at, actor_kind="device", actor_id=device_id, action="task.ordering",
                     subject_kind="task", subject_id=task.id, request_id=key, generation=attempt.claim_generation,
                     detail={"attempt_id": attempt.id, "task_version": version})
    elif task.state not in (TaskState.ORDERING, TaskState.SUBMITTING):
        raise claim_not_current()
    first = attempt_store.take_event_seqs(conn, attempt.id, len(batch))
    event_store.append(conn, task_id=task.id, attempt_id=attempt.id, batch_key=key, first_seq=first,
                       events=batch, received_at=at)
    result = {"task_id": task.id, "attempt_id": attempt.id, "accepted": len(batch), "first_seq": first,
              "last_seq": first + len(batch) - 1, "task_version": version}
    audit.append(conn, at=at, actor_kind="device", actor_id=device_id, action="events.append",
                 subject_kind="attempt", subject_id=attempt.id, request_id=key, generation=attempt.claim_generation,
                 detail={"first_seq": first, "count": len(batch)})
    return idempotency.remember(conn, device_id, key, ENDPOINT, payload, status=200, body=result, at=at,
                                attempt_id=attempt.id)
