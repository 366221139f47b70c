"""The agent's side of the supervision wire: HttpDeviceApi's approval routes and claim-next
fields over REAL HTTP, and the runner's word for a held device–pack pair.

Server: a small stdlib HTTP server in a thread that plays the contract's rules for the two approval
routes, claim-next and the fence's ``approval_required`` — a fake because the real routes are being
built on another branch at the same time (the lead adds the real-server end-to-end test at merge). It
validates every body against the shared schemas (as the real server does), replays a stored answer for
the same ``approval_key`` + body, refuses the same key with another body (409 idempotency_conflict), and
can fail the next request with a 503 to show the retry re-sends the same key.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cmbuyer.agent.client import Credentials, HttpDeviceApi
from cmbuyer.agent.errors import ApprovalRequired, NotSupervised, ServerRejected, ServerUnreachable
from cmbuyer.agent.journal import Journal
from cmbuyer.agent.model import Claim, Session, SubmissionProof
from cmbuyer.schemas import SchemaError, validate

from .fake_approval import supervised_purchase
from .fakes import FakeApi, make_purchase, read_proof
from .test_runner import make_runner

NOW = "2099-01-01T00:00:00Z"
TOKEN = "cd" * 32


class _Contract:
    """The server's state and rules for the routes under test."""

    def __init__(self) -> None:
        self.supervised: bool | None = True  # None: claim-next answers without the field (an older server)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.keys: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # approval_key -> (body, answer)
        self.approval_id = str(uuid.uuid4())
        self.state = "WAITING"
        self.fail_next = 0  # answer the next N requests with 503

    def handle(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        self.requests.append((path, body))
        if self.fail_next:
            self.fail_next -= 1
            return 503, None
        try:
            if path == "/api/v1/tasks/claim-next":
                validate("claim_next.request", body)
                return 200, self._claim()
            if path.endswith("/approval"):
                validate("approval.request", body)
                return self._approval(body)
            if path.endswith("/approval/status"):
                validate("approval_status.request", body)
                return 200, self._answer()
            if path.endswith("/submission-fence"):
                validate("submission_fence.request", body)
                return 409, {"error": "approval_required"}
        except SchemaError:
            return 400, {"error": "invalid_request"}
        return 404, {"error": "not_found"}

    def _answer(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "state": self.state,
            "decided_at": None if self.state == "WAITING" else NOW,
            "server_now": NOW,
        }

    def _approval(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.supervised:
            return 409, {"error": "not_supervised"}
        key = body["approval_key"]
        if key in self.keys:
            stored_body, answer = self.keys[key]
            return (200, answer) if stored_body == body else (409, {"error": "idempotency_conflict"})
        answer = self._answer()
        self.keys[key] = (body, answer)
        return 200, answer

    def _claim(self) -> dict[str, Any]:
        attempt = {
            "id": str(uuid.uuid4()),
            "claim_token": TOKEN,
            "claim_generation": 1,
            "lease_expires_at": "2099-01-01T00:02:00Z",
        }
        if self.supervised is not None:
            attempt["supervised"] = self.supervised
        return {
            "task": {
                "id": str(uuid.uuid4()),
                "version": 2,
                "title": "t",
                "product_url": "https://mobile.yangkeduo.com/goods.html?goods_id=1",
                "goods_id": "1",
                "sku_options": [["颜色", "黑色"]],
                "sku_color": "黑色",
                "sku_size": None,
                "quantity": 1,
                "max_total_price": "30.00",
            },
            "authorization": {"id": str(uuid.uuid4()), "task_version": 2, "expires_at": "2099-01-01T01:00:00Z"},
            "attempt": attempt,
            "server_now": NOW,
        }


@pytest.fixture
def server() -> Iterator[tuple[_Contract, str]]:
    contract = _Contract()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            assert self.headers["Authorization"] == "Bearer " + "ef" * 32
            status, answer = contract.handle(self.path, json.loads(raw))
            data = b"" if answer is None else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield contract, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _api(url: str, tmp_path: Path) -> tuple[HttpDeviceApi, Journal]:
    journal = Journal(tmp_path / "j.sqlite3")
    return HttpDeviceApi(url, Credentials(str(uuid.uuid4()), "ef" * 32), journal, backoff=0.01), journal


def _claimed(server: tuple[_Contract, str], tmp_path: Path) -> tuple[_Contract, HttpDeviceApi, Journal, Claim]:
    """The contract server, a client with its journal, and the claim of one claim-next."""
    contract, url = server
    api, journal = _api(url, tmp_path)
    claim = api.claim_next(Session(str(uuid.uuid4())))
    assert claim is not None
    return contract, api, journal, claim.claim


# what the phone reads for the contract's task (黑色, no size, one piece), with a discounted total
PROOF = read_proof(
    make_purchase(sku_color="黑色", sku_size=None, quantity=1).task,
    Decimal("12.88"),
    confirm_page_amount=Decimal("12.35"),
)
ASSET = "0b6e7a53-3c1f-4d47-9a59-0f2f0c4f7c11"


def test_claim_next_sends_the_pack_and_reads_supervised(server: tuple[_Contract, str], tmp_path: Path) -> None:
    contract, url = server
    api, journal = _api(url, tmp_path)
    session = Session(str(uuid.uuid4()))
    purchase = api.claim_next(session, pack_id="pdd-8.22.0-82200")
    assert purchase is not None and purchase.claim.supervised is True
    assert contract.requests[-1][1]["pack_id"] == "pdd-8.22.0-82200"
    contract.supervised = None  # a server that does not send the field: not supervised
    purchase = api.claim_next(Session(str(uuid.uuid4())))
    assert purchase is not None and purchase.claim.supervised is False
    assert "pack_id" not in contract.requests[-1][1]
    journal.close()


def test_approval_request_and_status(server: tuple[_Contract, str], tmp_path: Path) -> None:
    contract, api, journal, c = _claimed(server, tmp_path)
    contract.fail_next = 1  # the first answer is a 503: the retry must carry the same key and body
    status = api.request_approval(c, PROOF, ASSET)
    assert (status.state, status.approval_id, status.decided_at) == ("WAITING", contract.approval_id, None)
    (first, body1), (second, body2) = contract.requests[-2:]
    assert first == second == f"/api/v1/purchase-attempts/{c.attempt_id}/approval" and body1 == body2
    assert body1["readings"] == {
        "selected_options": [["颜色", "黑色"]],
        "gate1_unit_price": "12.88",
        "gate2_unit_price": "12.88",
        "gate3_unit_price": "12.88",
        "quantity_read": 1,
        "confirm_page_amount": "12.35",
        "payment_mode": "微信支付",
    }
    assert body1["screenshot_asset_id"] == ASSET and body1["claim_token"] == c.claim_token
    assert journal.key_scopes("approval") == []  # forgotten after the answer
    contract.state = "APPROVED"
    status = api.approval_status(c, status.approval_id)
    assert (status.state, status.decided_at) == ("APPROVED", NOW)
    path, body = contract.requests[-1]
    assert path.endswith(f"/{c.attempt_id}/approval/status") and "approval_key" not in body
    # the fence of a supervised attempt without a matching approval: a typed refusal, never a permit
    with pytest.raises(ApprovalRequired) as info:
        api.create_submission_fence(c, PROOF)
    assert info.value.reason_code == "FENCE_REFUSED"
    journal.close()


def test_a_journaled_key_survives_no_answer_and_is_sent_again(server: tuple[_Contract, str], tmp_path: Path) -> None:
    contract, api, journal, c = _claimed(server, tmp_path)
    contract.fail_next = api.retries + 1  # no answer at all
    with pytest.raises(ServerUnreachable):
        api.request_approval(c, PROOF, ASSET)
    sent = {body["approval_key"] for path, body in contract.requests if path.endswith("/approval")}
    assert len(sent) == 1 and len(journal.key_scopes("approval")) == 1  # one key, kept in the journal
    status = api.request_approval(c, PROOF, ASSET)  # asked again: the same key, answered
    assert status.state == "WAITING" and contract.requests[-1][1]["approval_key"] in sent
    assert journal.key_scopes("approval") == []
    other = SubmissionProof(**{**PROOF.__dict__, "confirm_page_amount": Decimal("12.00")})
    api.request_approval(c, other, ASSET)
    assert contract.requests[-1][1]["approval_key"] not in sent  # other readings → another key
    journal.close()


def test_refusals_are_typed(server: tuple[_Contract, str], tmp_path: Path) -> None:
    contract, url = server
    api, journal = _api(url, tmp_path)
    claim = api.claim_next(Session(str(uuid.uuid4())))
    assert claim is not None
    contract.supervised = False
    with pytest.raises(NotSupervised) as info:
        api.request_approval(claim.claim, PROOF, ASSET)
    assert info.value.reason_code == "INTERNAL_ERROR"
    contract.supervised = True
    with pytest.raises(ServerRejected) as conflict:  # the server refuses a reused key with another body
        body = {"approval_key": str(uuid.uuid4())}
        contract.keys[body["approval_key"]] = (body, {})
        api._keys = _PinnedKeys(body["approval_key"])  # type: ignore[assignment]
        api.request_approval(claim.claim, PROOF, ASSET)
    assert (conflict.value.status, conflict.value.error) == (409, "idempotency_conflict")
    journal.close()


class _PinnedKeys:
    """A key store that hands out one fixed key (to replay a key the server already holds)."""

    def __init__(self, key: str) -> None:
        self._key = key

    def key(self, purpose: str, scope: str = "") -> str:
        return self._key

    def drop_key(self, purpose: str, scope: str = "") -> None:
        pass


# --- the runner says why it claims nothing ------------------------------------------------------
class _HeldApi(FakeApi):
    def heartbeat(self, **kwargs: Any) -> dict[str, Any]:
        answer = super().heartbeat(**kwargs)
        answer["supervision_hold"] = True
        validate("heartbeat.response", answer)
        return answer


def test_runner_names_a_supervision_hold(tmp_path: Path) -> None:
    api = _HeldApi([supervised_purchase()])
    runner, _, _ = make_runner(tmp_path, api)
    status = runner._status()
    runner._heartbeat(status, "READY")
    runner._heartbeat(status, "READY")
    lines = [line for line in runner.lines if "重新人工监督" in line]  # type: ignore[attr-defined]
    assert len(lines) == 1 and runner.supervision_hold
