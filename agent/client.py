"""HttpDeviceApi: the only module that speaks HTTP (TaskSource + ResultSink over the device API, docs/api.md
"Device API I" and "Device API II").

- Auth headers: ``Authorization: Bearer <token>`` + ``X-CMBuyer-Device-ID``; the token is never
  logged and never in ``repr``.
- Every request body is validated against ``shared/schemas/<msg>.request.json`` before sending and
  every 2xx body against ``<msg>.response.json``; error bodies against ``device_error.response``.
- Idempotency keys come from the journal (:class:`~cmbuyer.agent.ports.KeyStore`), persisted before
  the request; transport errors and 5xx are retried a bounded number of times with the SAME key and
  body; 4xx are final (:class:`ServerRejected`; 409 claim_requires_manual → ClaimRequiresManual).
- Strict JSON: duplicate keys, NaN/Infinity and floats are refused (docs/api.md "Conventions").
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import math
import re
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmbuyer.agent import __version__
from cmbuyer.agent.errors import (
    ApprovalRequired,
    AppVersionNotAllowed,
    ClaimRequiresManual,
    FenceReplayed,
    NotSupervised,
    ServerError,
    ServerRejected,
    ServerUnreachable,
    Unauthorized,
    by_server_code,
)
from cmbuyer.agent.model import (
    ApprovalStatus,
    AssetRef,
    AttemptFailure,
    Claim,
    ClaimedPurchase,
    Lease,
    ScreenshotAsset,
    Session,
    SubmissionProof,
    SubmissionResult,
    Task,
    TaskEvent,
)
from cmbuyer.agent.permit import PermitRefused, SubmissionPermit, _from_fence_response
from cmbuyer.agent.ports import KeyStore
from cmbuyer.agent.screens.text import money_str
from cmbuyer.agent.tls import check_server_url, client_context, verification_failure
from cmbuyer.schemas import SchemaError, validate
from cmbuyer.schemas.strictjson import loads_strict
from cmbuyer.schemas.summary import summary_problem

log = logging.getLogger(__name__)
MAX_RESPONSE_BYTES = 1024 * 1024
# the heartbeat answer fields this agent understands: the server sends no other extension
FEATURES = ("pause", "hold_release", "screenshot")
# 4xx codes that have their own error class (the rest are plain ServerRejected); codes of the schema's enum
_TYPED_REJECTIONS: dict[str, type[ServerRejected]] = by_server_code(
    {
        "claim_requires_manual": ClaimRequiresManual,
        "app_version_not_allowed": AppVersionNotAllowed,
        "approval_required": ApprovalRequired,
        "not_supervised": NotSupervised,
    }
)


@dataclass(frozen=True)
class Credentials:
    device_id: str
    token: str = field(repr=False)


def parse_json_strict(raw: bytes) -> Any:
    """Decode a server response body under the shared strict rules (``cmbuyer.schemas.strictjson``);
    raises ``ValueError`` (StrictJSONError) on anything else."""
    return loads_strict(raw)


_ERROR_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}", re.ASCII)


def _error_code(parsed: Any) -> str | None:
    """The flat device error code of a 4xx body. A body that matches ``device_error.response`` gives
    its code; a flat ``{"error": "<snake_case>"}`` with a code the schema does not list yet is still
    kept (a newer server must not turn a clear refusal into "unknown"); anything else → None."""
    try:
        validate("device_error.response", parsed)
        return str(parsed["error"])
    except SchemaError:
        pass
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str) and _ERROR_CODE.fullmatch(parsed["error"]):
        return str(parsed["error"])
    return None


def wire_summary(text: str, fallback: str) -> str:
    """``text`` if it is a plainly safe short summary, else ``fallback`` (a fixed phrase)."""
    # The server's own rule (cmbuyer.schemas.summary): a refused *wording* must never lose a fail or an
    # event, so anything it would refuse is replaced by the fixed phrase (the reason code carries the meaning).
    if not text or summary_problem(text) is not None:
        return fallback
    return text


def _whole(data: bytes, headers: Any) -> bytes:
    """``data`` if it is the whole declared body (or more than we read anyway); an answer cut off
    before its Content-Length raises http.client.IncompleteRead — "no answer", retried by _post."""
    declared = headers.get("Content-Length", "") if headers is not None else ""
    if declared.isdigit() and len(data) < min(int(declared), MAX_RESPONSE_BYTES + 1):
        raise http.client.IncompleteRead(data, int(declared) - len(data))
    return data


def _body_scope(attempt_id: str, body: Any) -> str:
    """The key-store scope of a request whose key must follow its body: ``"<attempt_id>:<16 hex>"``,
    the hex being a SHA-256 prefix of ``body`` as sorted-key JSON (``body`` must be JSON-serializable,
    else TypeError). A retry of the same body finds the same journaled key and the server replays its
    answer; another body gets another key, never a 409 ``idempotency_conflict`` (docs/api.md).
    """
    digest = hashlib.sha256(json.dumps(body, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]
    return f"{attempt_id}:{digest}"


def approval_readings(proof: SubmissionProof) -> dict[str, Any]:
    """The ``readings`` object of an approval request: the same 8 values, in the same wire types, as the
    fence body carries (the server compares them with the fence's; the submit-control count is not
    part of it)."""
    return {
        "selected_options": [list(o) for o in proof.selected_options],
        "gate1_unit_price": money_str(proof.gate1_unit_price),
        "gate2_unit_price": money_str(proof.gate2_unit_price),
        "gate3_unit_price": money_str(proof.gate3_unit_price),
        "quantity_read": proof.quantity_read,
        "confirm_page_amount": money_str(proof.confirm_page_amount),
        "payment_mode": proof.payment_mode,
    }


def submission_result_request(
    *, result_key: str, attempt_id: str, claim_token: str, result: SubmissionResult
) -> dict[str, Any]:
    """The ``submission_result.request`` body; ``order_sn`` and ``observation_reason`` (optional on the
    wire) only when set."""
    payload: dict[str, Any] = {
        "result_key": result_key,
        "attempt_id": attempt_id,
        "claim_token": claim_token,
        "observation": result.observation,
        "evidence_asset_id": result.evidence_asset_id,
    }
    if result.order_sn is not None:
        payload["order_sn"] = result.order_sn
    if result.observation_reason is not None:
        payload["observation_reason"] = result.observation_reason
    return payload


def _approval_status(body: dict[str, Any]) -> ApprovalStatus:
    return ApprovalStatus(
        approval_id=body["approval_id"],
        state=body["state"],
        decided_at=body["decided_at"],
        server_now=body["server_now"],
    )


def _png_form(fields: dict[str, str], png: bytes) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body of the text ``fields`` then ``file`` (one PNG); returns (body, Content-Type)."""
    boundary = "cmbuyer-" + uuid.uuid4().hex
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f'filename="screenshot.png"\r\nContent-Type: image/png\r\n\r\n'.encode()
        + png
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _why(exc: Exception | None) -> str:
    """A short, token-free cause of a failed request: the 5xx status, the OS error text (e.g. "Connection
    refused"), or the exception's class name."""
    if isinstance(exc, ServerError):
        return exc.summary
    reason = getattr(exc, "reason", None)  # URLError wraps the OSError
    inner = reason if isinstance(reason, OSError) else exc
    text = getattr(inner, "strerror", None) or (str(reason) if isinstance(reason, str) else None)
    return f"{type(inner).__name__}: {text}" if text else type(exc).__name__


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the Bearer token must not follow it anywhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(server_ca: Path | None) -> urllib.request.OpenerDirector:
    """No proxies from the environment (the token goes only to the server named), no redirects, and HTTPS
    verified against the system's CAs or only ``server_ca`` (:mod:`cmbuyer.agent.tls`)."""
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _NoRedirect(), urllib.request.HTTPSHandler(context=client_context(server_ca))
    )


class HttpDeviceApi:
    """TaskSource + ResultSink over HTTP. Synchronous (the agent is one thread per phone plus the
    lease keeper; calls are short). ``retries`` counts extra attempts after a transport error."""

    def __init__(
        self,
        base_url: str,
        credentials: Credentials,
        keys: KeyStore,
        *,
        timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.5,
        approval_timeout: float | None = None,
        server_ca: Path | None = None,
    ) -> None:
        check_server_url(base_url, server_ca)  # ServerTlsError: http:// off loopback, or a CA with http://
        self._opener = _opener(server_ca)
        self.base_url = base_url.rstrip("/")
        # how long the flow waits for a person's approval (ApprovalSettings): sent with each approval request
        # so the task table can count down to it; None = not sent (the server assumes 600 s)
        self.approval_timeout = approval_timeout
        self._creds = credentials
        self._keys = keys
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._claims: dict[str, Claim] = {}
        # attempt id -> the task version the server last reported (events answers carry it: the
        # first accepted event moves CLAIMED -> ORDERING, version + 1; the fence expects the current one)
        self._task_versions: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"HttpDeviceApi({self.base_url!r}, device_id={self._creds.device_id!r})"

    # --- transport ----------------------------------------------------------------------------
    def _send(self, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        req = urllib.request.Request(  # noqa: S310 - scheme checked in _post
            self.base_url + path,
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {self._creds.token}",
                "X-CMBuyer-Device-ID": self._creds.device_id,
                "Content-Type": content_type,
                "Accept": "application/json",
                "User-Agent": f"cmbuyer-agent/{__version__}",
            },
        )
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return resp.status, _whole(resp.read(MAX_RESPONSE_BYTES + 1), resp.headers)
        except urllib.error.HTTPError as exc:
            data = exc.read(MAX_RESPONSE_BYTES + 1)
            exc.close()
            return exc.code, _whole(data, exc.headers)

    def _post(
        self, path: str, body: bytes, content_type: str, what: str, *, retries: int | None = None
    ) -> tuple[int, Any]:
        """POST with bounded retries (``retries``, default the client's) on transport errors / 5xx (same bytes →
        same key). Returns (status, parsed JSON or None for empty bodies); raises ServerRejected for 4xx."""
        if not self.base_url.startswith(("http://", "https://")):
            raise ServerError("server URL must be http(s)")
        last: Exception | None = None
        for attempt in range((self.retries if retries is None else retries) + 1):
            if attempt:
                time.sleep(self.backoff * (2 ** (attempt - 1)))
            try:
                status, raw = self._send(path, body, content_type)
            except (OSError, urllib.error.URLError, http.client.HTTPException) as exc:
                tls_failure = verification_failure(exc)
                if tls_failure is not None:
                    raise tls_failure from None  # final: an untrusted server is never retried nor downgraded
                # No (complete) answer: refused, reset during the upload (the server closes after
                # answering a refusal early, docs/api.md), or cut off mid-answer. The request may or
                # may not have happened, so it is sent again with the same bytes — the same key.
                last = exc
                log.info("server request %s failed (%s), retry %d", what, type(exc).__name__, attempt + 1)
                continue
            if status >= 500:
                last = ServerError(f"{what}: HTTP {status}", status=status)
                continue
            if len(raw) > MAX_RESPONSE_BYTES:
                raise ServerError(f"{what}: response too large", status=status)
            parsed: Any = None
            if raw:
                try:
                    parsed = parse_json_strict(raw)
                except ValueError as exc:
                    raise ServerError(f"{what}: response is not strict JSON", status=status) from exc
            if status == 401:  # device authentication failed: the answer is empty by design (docs/api.md)
                raise Unauthorized()
            if 400 <= status < 500:
                error = _error_code(parsed)
                raise _TYPED_REJECTIONS.get(error or "", ServerRejected)(status, error)
            return status, parsed
        cause = f"无法连接服务器 {self.base_url}（{_why(last)}）"
        raise ServerUnreachable(f"{what}：{cause}", cause=cause)

    def _post_json(
        self,
        path: str,
        schema: str,
        payload: dict[str, Any],
        what: str,
        *,
        response_schema: str | None = None,
        retries: int | None = None,
    ) -> tuple[int, Any]:
        validate(f"{schema}.request", payload)
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        status, parsed = self._post(path, body, "application/json", what, retries=retries)
        if status in (200, 201):
            try:
                validate(f"{response_schema or schema}.response", parsed)
            except SchemaError as exc:
                raise ServerError(f"{what}: response does not match its schema ({exc.path})") from exc
        return status, parsed

    # --- heartbeat ----------------------------------------------------------------------------
    def heartbeat(
        self,
        *,
        adb_serial: str,
        android_release: str,
        pdd_version: str | None,
        pdd_version_code: int | None,
        state: str,
        pack_id: str | None = None,
        hold: dict[str, Any] | None = None,
        screen: dict[str, str] | None = None,
        retries: int | None = None,
    ) -> dict[str, Any]:
        """POST the heartbeat; returns the response body (``app_version_allowed``, ``server_now``, …).
        ``retries``: transport retries, default the client's; the runner passes 0 because it backs off itself
        and must say at once that the server cannot be reached.

        ``pack_id`` is the selector pack in use for the installed app version, ``"NO_PACK"`` when there is
        none, or None when the app version is unknown — then the field is left out and the server shows
        the pack as unknown (docs/api.md). ``hold`` is the local hold (``code``, ``reason``, ``attempt_id``)
        and ``screen`` the answer to a screenshot request the agent refused (``request_id``,
        ``foreground_package``), each left out when None. Every heartbeat names the answer fields this
        agent understands (:data:`FEATURES`). Raises what every request raises (ServerRejected, …).
        """
        payload: dict[str, Any] = {
            "device_id": self._creds.device_id,
            "client_version": __version__,
            "adb_serial": adb_serial,
            "android_release": android_release,
            "pdd_version": pdd_version,
            "pdd_version_code": pdd_version_code,
            "state": state,
            "features": list(FEATURES),
        }
        if pack_id is not None:
            payload["pack_id"] = pack_id
        if hold is not None:
            payload["hold"] = hold
        if screen is not None:
            payload["screen"] = screen
        _, body = self._post_json("/api/v1/devices/heartbeat", "heartbeat", payload, "heartbeat", retries=retries)
        return dict(body)

    def check_credentials(self) -> None:
        """Whether the server accepts this device id and token, changing nothing: the read-only, authenticated
        ``approval/status`` call (shared/schemas approval_status.request.json; the device API has no other
        status call besides the heartbeat, which writes the device's state) for a random attempt id that cannot exist.
        Authentication comes before anything else on the server (docs/api.md), so a 401 is raised as
        Unauthorized and the ``404 not_found`` of the unknown attempt proves the credentials were accepted.
        One attempt, no retries. Raises Unauthorized, ServerUnreachable, or ServerRejected/ServerError for any
        other answer (then nothing is proved)."""
        payload = {"approval_id": str(uuid.uuid4()), "claim_generation": 1, "claim_token": "0" * 64}
        try:
            self._post_json(
                f"/api/v1/purchase-attempts/{uuid.uuid4()}/approval/status",
                "approval_status",
                payload,
                "credentials check",
                response_schema="approval",
                retries=0,
            )
        except ServerRejected as exc:
            if isinstance(exc, Unauthorized) or (exc.status, exc.error) != (404, "not_found"):
                raise
            return
        raise ServerError("凭据检查：服务器对一个不存在的尝试回答了成功（服务器版本不对？）")

    # --- TaskSource ---------------------------------------------------------------------------
    def claim_next(self, session: Session, *, pack_id: str | None = None) -> ClaimedPurchase | None:
        """POST claim-next with the journaled claim_request_id and, when given, the id of the selector
        pack in use (the server keys supervision on the device–pack pair); 204 → None."""
        key = self._keys.key("claim_request", session.session_id)
        payload = {"session_id": session.session_id, "claim_request_id": key}
        if pack_id is not None:
            payload["pack_id"] = pack_id
        try:
            status, body = self._post_json("/api/v1/tasks/claim-next", "claim_next", payload, "claim-next")
        except ServerRejected:
            self._keys.drop_key("claim_request", session.session_id)
            raise
        if status == 204:
            self._keys.drop_key("claim_request", session.session_id)
            return None
        if status != 200:
            raise ServerError(f"claim-next: unexpected HTTP {status}", status=status)
        task = Task.from_wire(body["task"])
        claim = Claim.from_claim_next(body, session.session_id)
        self._claims[claim.attempt_id] = claim
        # The key is dropped by the caller once the claim is journaled (record first, then forget).
        return ClaimedPurchase(task=task, claim=claim, server_now=body["server_now"])

    def forget_claim_request(self, session: Session) -> None:
        self._keys.drop_key("claim_request", session.session_id)

    def renew_lease(self, claim: Claim) -> Lease:
        scope = f"{claim.attempt_id}:{claim.lease_expires_at}"
        payload = {
            "renew_request_id": self._keys.key("renew", scope),
            "session_id": claim.session_id,
            "attempt_id": claim.attempt_id,
            "claim_generation": claim.claim_generation,
            "claim_token": claim.claim_token,
            "expected_lease_expires_at": claim.lease_expires_at,
        }
        _, body = self._post_json(f"/api/v1/tasks/{claim.task_id}/lease/renew", "lease_renew", payload, "lease renew")
        self._keys.drop_key("renew", scope)
        return Lease(lease_expires_at=body["lease_expires_at"], server_now=body["server_now"])

    # --- ResultSink ---------------------------------------------------------------------------
    def append_events(self, claim: Claim, events: list[TaskEvent]) -> None:
        for start in range(0, len(events), 20):  # schema: at most 20 per batch
            chunk = events[start : start + 20]
            scope = _body_scope(claim.attempt_id, [e.__dict__ for e in chunk])
            payload = {
                "batch_key": self._keys.key("events", scope),
                "attempt_id": claim.attempt_id,
                "claim_generation": claim.claim_generation,
                "claim_token": claim.claim_token,
                "events": [
                    {
                        "step": e.step,
                        "outcome": e.outcome,
                        "reason_code": e.reason_code,
                        "summary": wire_summary(e.summary, e.step.lower().replace("_", " ")),
                        "occurred_at": e.occurred_at,
                    }
                    for e in chunk
                ],
            }
            _, body = self._post_json(f"/api/v1/tasks/{claim.task_id}/events", "events", payload, "events")
            self._keys.drop_key("events", scope)
            if body["attempt_id"] == claim.attempt_id:
                self._task_versions[claim.attempt_id] = body["task_version"]

    def upload_screenshot(self, claim: Claim, asset: ScreenshotAsset) -> AssetRef:
        sha = hashlib.sha256(asset.png).hexdigest()
        scope = f"{claim.attempt_id}:{asset.kind}:{sha}"
        fields = {
            "upload_key": self._keys.key("upload", scope),
            "attempt_id": claim.attempt_id,
            "kind": asset.kind,
            "privacy_tier": "INTERNAL_RAW",
            "sha256": sha,
            "captured_at": asset.captured_at,
        }
        data, content_type = _png_form(fields, asset.png)
        _, body = self._post(f"/api/v1/tasks/{claim.task_id}/evidence", data, content_type, "evidence")
        try:
            validate("evidence.response", body)
        except SchemaError as exc:
            raise ServerError(f"evidence: response does not match its schema ({exc.path})") from exc
        if body["sha256"] != sha:
            raise ServerError("evidence: server stored a different hash")
        self._keys.drop_key("upload", scope)
        return AssetRef(asset_id=body["asset_id"], sha256=sha)

    def upload_device_screen(self, request_id: str, png: bytes) -> str:
        """Answer an administrator's 查看当前屏幕 (the heartbeat answer's ``screenshot_request``) with one
        fresh screenshot; returns the server's screen id. No journaled key: the request id itself makes a
        retry the same answer. Raises what every request raises."""
        fields = {"request_id": request_id, "sha256": hashlib.sha256(png).hexdigest()}
        data, content_type = _png_form(fields, png)
        _, body = self._post("/api/v1/devices/screen", data, content_type, "screen")
        if not isinstance(body, dict) or not isinstance(body.get("screen_id"), str):
            raise ServerError("screen: unexpected answer")
        return str(body["screen_id"])

    def fail_attempt(self, claim: Claim, failure: AttemptFailure) -> None:
        payload = {
            "fail_key": self._keys.key("fail", claim.attempt_id),
            "claim_generation": claim.claim_generation,
            "claim_token": claim.claim_token,
            "reason_code": failure.reason_code,
            "summary": wire_summary(failure.summary, "stopped before the fence"),
            "evidence_asset_id": failure.evidence_asset_id,
        }
        self._post_json(f"/api/v1/purchase-attempts/{claim.attempt_id}/fail", "attempt_fail", payload, "fail")

    def create_submission_fence(self, claim: Claim, proof: SubmissionProof) -> SubmissionPermit:
        """First grant → SubmissionPermit; a replay → FenceReplayed (never a permit)."""
        payload = {
            "fence_key": self._keys.key("fence", claim.attempt_id),
            "task_id": claim.task_id,
            "expected_task_version": self.task_version(claim),
            "authorization_id": claim.authorization_id,
            "claim_generation": claim.claim_generation,
            "claim_token": claim.claim_token,
            **approval_readings(proof),
            "submit_control_match_count": proof.submit_control_match_count,
        }
        status, body = self._post_json(
            f"/api/v1/purchase-attempts/{claim.attempt_id}/submission-fence", "submission_fence", payload, "fence"
        )
        if status not in (200, 201):
            raise ServerError(f"fence: unexpected HTTP {status}", status=status)
        try:
            return _from_fence_response(body, attempt_id=claim.attempt_id, task_id=claim.task_id, proof=proof)
        except PermitRefused as exc:
            raise FenceReplayed(body["submission_id"]) from exc

    # --- supervision (docs/api.md "Supervised attempts") ---------------------------------
    def request_approval(self, claim: Claim, proof: SubmissionProof, screenshot_asset_id: str) -> ApprovalStatus:
        """Ask a person to approve what the phone read (``proof``: the fence body's readings) with the
        gate-3 screenshot. The ``approval_key`` is journaled before the request and re-sent unchanged
        on a retry (the server replays its stored answer); it is scoped to the attempt and the body,
        so other readings get another key. Raises NotSupervised, ServerRejected (4xx), ServerError."""
        readings = approval_readings(proof)
        scope = _body_scope(claim.attempt_id, [readings, screenshot_asset_id])
        payload = {
            "approval_key": self._keys.key("approval", scope),
            "task_id": claim.task_id,
            "authorization_id": claim.authorization_id,
            "claim_generation": claim.claim_generation,
            "claim_token": claim.claim_token,
            "screenshot_asset_id": screenshot_asset_id,
            "readings": readings,
        }
        if self.approval_timeout is not None:
            payload["timeout_seconds"] = max(1, min(86400, math.ceil(self.approval_timeout)))
        _, body = self._post_json(
            f"/api/v1/purchase-attempts/{claim.attempt_id}/approval", "approval", payload, "approval"
        )
        self._keys.drop_key("approval", scope)
        return _approval_status(body)

    def approval_status(self, claim: Claim, approval_id: str) -> ApprovalStatus:
        """Read an approval's state (read-only on the server: no idempotency key). Raises like
        :meth:`request_approval`."""
        payload = {
            "approval_id": approval_id,
            "claim_generation": claim.claim_generation,
            "claim_token": claim.claim_token,
        }
        _, body = self._post_json(
            f"/api/v1/purchase-attempts/{claim.attempt_id}/approval/status",
            "approval_status",
            payload,
            "approval status",
            response_schema="approval",
        )
        return _approval_status(body)

    def task_version(self, claim: Claim) -> int:
        """The task version the fence must name: the claim's, or the one the server reported after
        the first accepted event (CLAIMED → ORDERING bumps it by one)."""
        return self._task_versions.get(claim.attempt_id, claim.task_version)

    def report_submission_result(self, permit: SubmissionPermit, result: SubmissionResult) -> None:
        claim = self._claims[permit.attempt_id]
        self.report_recovered_result(
            submission_id=permit.submission_id,
            attempt_id=permit.attempt_id,
            claim_token=claim.claim_token,
            result=result,
            result_key=self._keys.key("result", permit.attempt_id),
        )

    def report_recovered_result(
        self, *, submission_id: str, attempt_id: str, claim_token: str, result: SubmissionResult, result_key: str
    ) -> None:
        payload = submission_result_request(
            result_key=result_key, attempt_id=attempt_id, claim_token=claim_token, result=result
        )
        self._post_json(f"/api/v1/order-submissions/{submission_id}/result", "submission_result", payload, "result")

    def remember_claim(self, claim: Claim) -> None:
        self._claims[claim.attempt_id] = claim
