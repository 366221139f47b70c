"""Fence storm client, run as its own OS process: ``python storm_client.py PLAN OUT``.

PLAN (JSON): {"port", "threads", "seconds", "start_at" (epoch seconds; all processes start together),
"requests": [{"path", "headers", "body", "fresh_key"}]} — each thread cycles through the requests in
its own order; ``fresh_key`` requests get a new fence_key every time (else the plan's key is replayed).
Every answer is appended to OUT as one JSON line *as soon as it arrives* (so whatever the client saw
before a SIGKILL of the server is on disk). Stops after ``seconds`` or after 20 consecutive transport
errors (the server is gone).
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import threading
import time
import uuid
from typing import Any


def worker(plan: dict[str, Any], out: Any, lock: threading.Lock, seed: int) -> None:
    rnd = random.Random(seed)
    reqs = list(plan["requests"])
    deadline = plan["start_at"] + plan["seconds"]
    errors = 0
    conn: http.client.HTTPConnection | None = None
    while time.time() < deadline and errors < 20:
        req = rnd.choice(reqs)
        body = dict(req["body"])
        if req["fresh_key"]:
            body["fence_key"] = str(uuid.uuid4())
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", plan["port"], timeout=10)
            conn.request("POST", req["path"], body=json.dumps(body), headers=req["headers"])
            resp = conn.getresponse()
            raw = resp.read()
            errors = 0
            line = {
                "path": req["path"],
                "status": resp.status,
                "body": raw.decode("utf-8", "replace"),
                "fence_key": body["fence_key"],
            }
        except (OSError, http.client.HTTPException) as exc:
            errors += 1
            line = {"path": req["path"], "error": type(exc).__name__}
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.02)
        with lock:
            out.write(json.dumps(line) + "\n")
            out.flush()
        if plan.get("once"):
            break


def main() -> int:
    plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
    lock = threading.Lock()
    with open(sys.argv[2], "a", encoding="utf-8") as out:
        while time.time() < plan["start_at"]:
            time.sleep(0.001)
        threads = [
            threading.Thread(target=worker, args=(plan, out, lock, i + plan.get("seed", 0) * 1000))
            for i in range(plan["threads"])
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
