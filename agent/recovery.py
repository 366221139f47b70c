"""Start-up recovery from the journal (design §7.2, spec 001 "recovery before dispatch").

- A submission past PERMIT_RECEIVED (or at it) without RESULT_REPORTED: re-send its stored result
  with its stored result_key, or report ``UNKNOWN`` if none was decided. Never tap again.
- A claim still ACTIVE (crash before the fence): report ``fail`` (INTERNAL_ERROR, "agent restarted
  before the fence"); if the server refuses, mark it ABANDONED and hold claims for a person.
"""

from __future__ import annotations

import logging

from cmbuyer.agent.errors import AgentError, ServerRejected
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.model import AttemptFailure, Claim, SubmissionResult
from cmbuyer.agent.ports import ResultSink

log = logging.getLogger(__name__)


def recover(journal: Journal, sink: ResultSink) -> list[str]:
    """Run recovery; returns short notes of what was done (for progress output)."""
    notes: list[str] = []
    for sub in journal.unreported_submissions():
        claim = journal.claim(sub.attempt_id)
        if claim is None:
            continue
        if sub.observation is None:
            key = journal.record_observation(sub.attempt_id, "UNKNOWN", None)
            observation, evidence = "UNKNOWN", None
        else:
            key = sub.result_key or journal.record_observation(sub.attempt_id, sub.observation,
                                                               sub.evidence_asset_id)
            observation, evidence = sub.observation, sub.evidence_asset_id
        try:
            sink.report_recovered_result(submission_id=sub.submission_id, attempt_id=sub.attempt_id,
                                         claim_token=claim.claim_token,
                                         result=SubmissionResult(observation, evidence), result_key=key)
        except AgentError as exc:
            notes.append(f"result for {sub.attempt_id} not accepted yet ({exc.reason_code})")
            if isinstance(exc, ServerRejected):
                journal.set_hold("recovered result refused by the server: a person must reconcile")
            continue
        journal.advance(sub.attempt_id, "RESULT_REPORTED")
        notes.append(f"reported {observation} for submission {sub.submission_id} (no new tap)")
    for row in journal.claims("ACTIVE"):
        claim = Claim(task_id=row.task_id, task_version=row.task_version,
                      authorization_id=row.authorization_id, attempt_id=row.attempt_id,
                      claim_generation=row.claim_generation, claim_token=row.claim_token,
                      session_id=row.session_id, lease_expires_at=row.lease_expires_at,
                      authorization_expires_at=row.authorization_expires_at)
        try:
            sink.fail_attempt(claim, AttemptFailure("INTERNAL_ERROR", "agent restarted before the fence"))
            journal.set_claim_state(row.attempt_id, "FAILED_REPORTED", "restart before fence")
            notes.append(f"failed attempt {row.attempt_id} left open by a restart")
        except ServerRejected as exc:
            journal.set_claim_state(row.attempt_id, "ABANDONED", f"fail refused: {exc.error}")
            journal.set_hold("an attempt left open by a restart could not be failed: a person must act")
            notes.append(f"attempt {row.attempt_id} needs a person ({exc.error})")
        except AgentError as exc:
            notes.append(f"attempt {row.attempt_id}: fail not sent yet ({exc.reason_code})")
    return notes
