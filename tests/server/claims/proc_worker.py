"""Worker for test_multiprocess.py: one OS process, its own sync connection, the same claim job the server
runs (``claim_next`` via ``run_in_transaction``). Usage:
``python proc_worker.py DB SECRET_HEX NOW GO_FILE DEVICE_ID...`` — prints one JSON line per request."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from cmbuyer.server.clock import from_wire
from cmbuyer.server.db import StorageError, connect_sync, run_in_transaction
from cmbuyer.server.domain.claims import ClaimPolicy
from cmbuyer.server.domain.errors import DomainError
from cmbuyer.server.services import claim_next as claim_service
from cmbuyer.server.tx.common import new_id


def main(argv: list[str]) -> int:
    db, secret_hex, now_text, go_file, *devices = argv
    policy = ClaimPolicy(bytes.fromhex(secret_hex), 120, ("8.17.0",), 10, 3)
    now = from_wire(now_text)
    conn = connect_sync(Path(db))
    deadline = time.monotonic() + 30
    while not Path(go_file).exists():  # start together
        if time.monotonic() > deadline:
            return 2
        time.sleep(0.001)
    sessions = {d: new_id() for d in devices}
    for _round in range(2):
        for device_id in devices:
            while True:
                try:
                    stored = run_in_transaction(
                        conn,
                        lambda c, d=device_id: claim_service.claim_next(
                            c, device_id=d, session_id=sessions[d], claim_request_id=new_id(), now=now, policy=policy
                        ),
                    )
                except StorageError:
                    continue  # busy beyond busy_timeout: retry with a new key (nothing was written)
                except DomainError as exc:
                    print(json.dumps({"device": device_id, "status": exc.status, "code": exc.code}), flush=True)
                    break
                task = json.loads(stored.body)["task"]["id"] if stored.body else None
                print(json.dumps({"device": device_id, "status": stored.status, "task": task}), flush=True)
                break
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
