"""docs/state-machines.md is checked against server/domain/states.py: the generated tables between the
markers must equal the file's text, and every use-case must name the request that causes it.

Regenerate after changing states.py:
``CMBUYER_REGEN_DOCS=1 pytest tests/server/domain/test_state_machines_doc.py``.
"""

from __future__ import annotations

from cmbuyer.server.domain.states import (
    ATTEMPT_TRANSITIONS,
    AUTHORIZATION_TRANSITIONS,
    DEVICE_TRANSITIONS,
    SUBMISSION_TRANSITIONS,
    TASK_TRANSITIONS,
)
from cmbuyer.server.domain.supervision import APPROVAL_TRANSITIONS
from tests.state_tables import assert_doc_block, render, used_use_cases

BEGIN, END = "<!-- generated-transitions:begin -->", "<!-- generated-transitions:end -->"

# use-case → the request (or actor) that causes it. A new use-case in states.py fails the test until
# it is described here and the doc regenerated.
CAUSES: dict[str, str] = {
    "start_purchase": "`POST /tasks/start-purchases` (admin; `cmbuyer-server task start`)",
    "claim": "`POST /api/v1/tasks/claim-next` (device)",
    "first_event": "first accepted `POST /api/v1/tasks/{id}/events` batch of the claim (device)",
    "fence": "`POST /api/v1/purchase-attempts/{aid}/submission-fence`, first success (device)",
    "result_submitted": "`POST /api/v1/order-submissions/{sid}/result` with `SUBMITTED` (device)",
    "result_needs_reconciliation": "`POST /api/v1/order-submissions/{sid}/result` with `EXTERNAL_PAYMENT_HANDOFF`, "
    "`SECURITY_CHALLENGE` or `UNKNOWN` (device)",
    "result": "`POST /api/v1/order-submissions/{sid}/result`, any observation (device)",
    "lease_expired_after_fence": "sweeper / start-up recovery: fenced, lease ended (≤ now), no result (system)",
    "reconcile_created": "`POST /order-submissions/{sid}/reconcile` — order was created (admin)",
    "reconcile_not_created": "`POST /order-submissions/{sid}/reconcile` — not created / cannot complete (admin)",
    "reconcile": "`POST /order-submissions/{sid}/reconcile` while the fence is still FENCED (admin)",
    "mark_paid": "`POST /tasks/{id}/mark-paid` (admin)",
    "device_fail": "`POST /api/v1/purchase-attempts/{aid}/fail` (device; before the fence only)",
    "authorization_expired": "sweeper / start-up recovery: the ACTIVE authorization expired (system)",
    "expire": "sweeper / start-up recovery: expiry ≤ now while still ACTIVE (system)",
    "close": "device fail, admin reset-to-draft or cancel (closes the claim/authorization)",
    "reset_to_draft": "`POST /tasks/{id}/reset-to-draft` (admin; refused once a submission exists)",
    "cancel": "`POST /tasks/{id}/cancel` (admin; refused once a submission exists)",
    "restore_hold": "`cmbuyer-server restore`: every unsettled task of the restored database (system)",
    "release": "放行 on 恢复后待核对 (`POST /held/release`), no fence replicated: claim and authorization "
    "closed (admin)",
    "release_fenced": "放行 on 恢复后待核对 (`POST /held/release`), a fence was replicated: reconciliation "
    "follows (admin)",
    "approve": "批准 in the task drawer: `POST /approvals/{approval_id}/approve` (admin)",
    "reject": "驳回 in the task drawer: `POST /approvals/{approval_id}/reject` (admin)",
    "revoke": "`POST /devices/{id}/revoke` (admin; `cmbuyer-server device revoke`)",
    "void": "its attempt closed (fail, reset, cancel, result, reconcile, sweeper), or the phone asked again with "
    "other readings (`POST /api/v1/purchase-attempts/{aid}/approval`)",
}

MACHINES = [
    ("Task", TASK_TRANSITIONS),
    ("Authorization", AUTHORIZATION_TRANSITIONS),
    ("Order submission", SUBMISSION_TRANSITIONS),
    ("Attempt (claim)", ATTEMPT_TRANSITIONS),
    ("Approval request (`server/domain/supervision.py`)", APPROVAL_TRANSITIONS),
    ("Device", DEVICE_TRANSITIONS),
]


def test_every_use_case_has_a_cause() -> None:
    used = used_use_cases(MACHINES)
    assert used <= set(CAUSES), f"describe these use-cases in CAUSES: {sorted(used - set(CAUSES))}"


def test_doc_matches_states_py() -> None:
    rendered = render(BEGIN, END, MACHINES, CAUSES)
    assert_doc_block(BEGIN, END, rendered, "see the module docstring")
