"""Start-up recovery from the journal (recovery before dispatch: docs/agent.md "The run loop").

Run at start and, by the runner, before every claim while anything is still owed:

- A submission past PERMIT_RECEIVED (or at it, or a ``NO_PERMIT`` fence replay) without
  RESULT_REPORTED: re-send its stored result (with its journaled ``observation_reason`` and the
  read-only confirmation's ``order_sn`` if that finished) with its stored result_key, or report
  ``UNKNOWN`` (``TAP_OUTCOME_UNKNOWN`` after the tap intent) if none was decided. A crash in the
  middle of the confirmation is reported the same way; the confirmation is not resumed. Never tap
  again — nothing here can reach the phone. A stored phone-level reason (:mod:`cmbuyer.agent.holds`:
  ``PAYMENT_SUSPECTED``, ``NOT_TAPPED_*`` — phase ``NOT_TAPPED``, reported as decided — …) sets the hold.
- A claim in FAIL_PENDING (a ``fail`` decided but not delivered, e.g. the server was down): re-send
  exactly the stored fail under the same journaled ``fail_key``.
- A claim still ACTIVE (crash before the fence): decide ``fail`` (INTERNAL_ERROR, "agent restarted
  before the fence"), journal it, send it.
- A fail or result the server *refuses* (4xx) marks the claim ABANDONED and sets a hold: a person
  must act. A transport failure leaves everything as it is, to be retried with the same keys.
"""

from __future__ import annotations

import logging

from cmbuyer.agent import holds
from cmbuyer.agent.errors import AgentError, ServerRejected
from cmbuyer.agent.journal import Journal, JournalError
from cmbuyer.agent.journal_states import ClaimState, Phase
from cmbuyer.agent.model import AttemptFailure, Claim, SubmissionResult
from cmbuyer.agent.ports import ResultSink

log = logging.getLogger(__name__)
RESTART_SUMMARY = "代理在提交围栏之前重启"


def recover(journal: Journal, sink: ResultSink) -> list[str]:
    """Run recovery; returns short notes of what was done (for progress output)."""
    notes: list[str] = []
    for sub in journal.unreported_submissions():
        claim = journal.claim(sub.attempt_id)
        if claim is None:
            continue
        if sub.observation is None:
            # a crash after the tap intent: whether the tap landed is unknown
            reason = "TAP_OUTCOME_UNKNOWN" if sub.phase in ("TAP_INTENT_RECORDED", "TAPPED") else None
            key = journal.record_observation(sub.attempt_id, "UNKNOWN", None, reason=reason)
            observation, evidence, order_sn = "UNKNOWN", None, None
        else:
            key = sub.result_key or journal.record_observation(sub.attempt_id, sub.observation, sub.evidence_asset_id)
            observation, evidence = sub.observation, sub.evidence_asset_id
            reason, order_sn = sub.observation_reason, sub.order_sn
        if reason == "PAYMENT_SUSPECTED":
            # phone-level (agent/holds.py); the flow that saw it may have died before the runner held
            journal.set_hold("PAYMENT_SUSPECTED: 提交点击后看到了已付款的状态；需要有人检查手机")
        elif holds.scope_of(reason) is holds.Scope.PHONE:
            # any other phone-level reason (e.g. NOT_TAPPED_OBSCURED): the flow journaled it and died
            # before the runner's hold policy saw it
            # "CODE: …" like agent/holds.py, so the heartbeat's hold names the code
            journal.set_hold(f"{reason}: 重启前已记入本地日志；需要有人检查手机")
        try:
            sink.report_recovered_result(
                submission_id=sub.submission_id,
                attempt_id=sub.attempt_id,
                claim_token=claim.claim_token,
                result=SubmissionResult(observation, evidence, observation_reason=reason, order_sn=order_sn),
                result_key=key,
            )
        except AgentError as exc:
            notes.append(f"尝试 {sub.attempt_id} 的结果还未被接受（{exc.reason_code}）")
            if isinstance(exc, ServerRejected):
                journal.advance(sub.attempt_id, Phase.RESULT_REPORTED)  # nothing more we can say
                journal.set_claim_state(sub.attempt_id, ClaimState.ABANDONED, f"result refused: {exc.error}")
                journal.set_hold("服务器拒绝了恢复时补报的结果：需要有人人工核对")
            continue
        journal.advance(sub.attempt_id, Phase.RESULT_REPORTED)
        notes.append(f"已为提交记录 {sub.submission_id} 补报 {observation}（没有再次点击）")
    for row in [*journal.claims(ClaimState.FAIL_PENDING), *journal.claims(ClaimState.ACTIVE)]:
        held = Claim(
            task_id=row.task_id,
            task_version=row.task_version,
            authorization_id=row.authorization_id,
            attempt_id=row.attempt_id,
            claim_generation=row.claim_generation,
            claim_token=row.claim_token,
            session_id=row.session_id,
            lease_expires_at=row.lease_expires_at,
            authorization_expires_at=row.authorization_expires_at,
        )
        notes.append(send_fail(journal, sink, held, AttemptFailure("INTERNAL_ERROR", RESTART_SUMMARY)))
    return notes


def send_fail(journal: Journal, sink: ResultSink, claim: Claim, failure: AttemptFailure) -> str:
    """Journal the fail (unless one is already decided for this attempt: that one is re-sent
    unchanged), send it with the journaled key, and record the outcome. Returns a short note.

    Delivered → FAILED_REPORTED. Refused (4xx) → ABANDONED + hold. Transport failure → stays
    FAIL_PENDING (recovery re-sends it; the runner claims nothing meanwhile)."""
    reason, summary, evidence = journal.record_fail_intent(
        claim.attempt_id, failure.reason_code, failure.summary, failure.evidence_asset_id
    )
    try:
        sink.fail_attempt(claim, AttemptFailure(reason, summary, evidence))
    except ServerRejected as exc:
        journal.set_claim_state(claim.attempt_id, ClaimState.ABANDONED, f"{reason}; fail refused: {exc.error}")
        journal.set_hold(f"服务器拒绝了尝试 {claim.attempt_id} 的失败上报（{exc.error}）：需要有人处理")
        return f"尝试 {claim.attempt_id}：失败上报被拒绝（{exc.error}）；需要有人处理"
    except AgentError as exc:
        return f"尝试 {claim.attempt_id}：失败上报还未送达（{exc.reason_code}）；稍后重发"
    try:
        journal.set_claim_state(claim.attempt_id, ClaimState.FAILED_REPORTED, reason)
    except JournalError:
        log.exception("fail delivered but not journaled; recovery will re-send it (same key)")
        raise
    return f"尝试 {claim.attempt_id}：已上报失败 {reason}"
