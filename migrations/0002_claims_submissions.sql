-- 0002: attempts with their claim and lease, device request records (idempotency), step events,
-- evidence assets and order submissions (the one-time fence).

-- One attempt per authorization; the attempt carries its claim (device, session, generation, token
-- hash, lease). Only the random nonce and SHA-256(token) are stored; the token is re-derived by HMAC.
CREATE TABLE attempts (
    id                    TEXT PRIMARY KEY,
    task_id               TEXT NOT NULL,
    authorization_id      TEXT NOT NULL UNIQUE,
    device_id             TEXT NOT NULL REFERENCES devices(id),
    session_id            TEXT NOT NULL,
    claim_generation      INTEGER NOT NULL CHECK (claim_generation >= 1),
    nonce                 BLOB NOT NULL CHECK (length(nonce) = 32),
    token_hash            BLOB NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    claimed_task_version  INTEGER NOT NULL,
    lease_expires_at      TEXT NOT NULL,
    state                 TEXT NOT NULL CHECK (state IN ('OPEN', 'CLOSED')),
    close_reason          TEXT CHECK (close_reason IN ('REPORTED', 'FAILED', 'RESET', 'CANCELLED', 'RECONCILED',
                                                       'LEASE_EXPIRED_AFTER_FENCE')),
    -- the claim-next 200 body without the token (spec 002: replays never drift)
    response_json         TEXT NOT NULL,
    next_event_seq        INTEGER NOT NULL DEFAULT 1,
    created_at            TEXT NOT NULL,
    closed_at             TEXT,
    UNIQUE (id, task_id),
    FOREIGN KEY (authorization_id, task_id) REFERENCES authorizations(id, task_id),
    CHECK ((state = 'CLOSED') = (closed_at IS NOT NULL AND close_reason IS NOT NULL))
) STRICT;
-- A device holds at most one open claim.
CREATE UNIQUE INDEX attempts_one_open_per_device ON attempts(device_id) WHERE state = 'OPEN';
CREATE INDEX attempts_task ON attempts(task_id);

-- Idempotency records of every device write, scoped to (device, key); the endpoint is stored so the
-- same key on another endpoint is a conflict (design §4). status 204 has no body.
CREATE TABLE device_requests (
    device_id     TEXT NOT NULL REFERENCES devices(id),
    request_key   TEXT NOT NULL,
    endpoint      TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    status        INTEGER NOT NULL CHECK (status BETWEEN 200 AND 299),
    attempt_id    TEXT REFERENCES attempts(id),
    response_json TEXT,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (device_id, request_key)
) STRICT;
-- The same key used by another device is also a conflict (design §4): looked up by key alone.
CREATE INDEX device_requests_key ON device_requests(request_key);

CREATE TABLE events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       TEXT NOT NULL,
    attempt_id    TEXT NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    batch_key     TEXT NOT NULL,
    step          TEXT NOT NULL,
    outcome       TEXT NOT NULL,
    reason_code   TEXT,
    summary       TEXT NOT NULL,
    occurred_at   TEXT NOT NULL,
    received_at   TEXT NOT NULL,
    UNIQUE (attempt_id, seq),
    FOREIGN KEY (attempt_id, task_id) REFERENCES attempts(id, task_id)
) STRICT;
CREATE INDEX events_task ON events(task_id, id);

CREATE TABLE evidence_assets (
    id            TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL,
    attempt_id    TEXT NOT NULL,
    device_id     TEXT NOT NULL REFERENCES devices(id),
    upload_key    TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('SKU_PANEL_GATE_1', 'QUANTITY_GATE_2', 'CONFIRM_PAGE_GATE_3',
                                                'POST_SUBMIT_OBSERVATION', 'FAILURE')),
    privacy_tier  TEXT NOT NULL CHECK (privacy_tier = 'INTERNAL_RAW'),
    sha256        TEXT NOT NULL CHECK (length(sha256) = 64),
    byte_size     INTEGER NOT NULL CHECK (byte_size >= 1),
    mime          TEXT NOT NULL CHECK (mime = 'image/png'),
    width         INTEGER NOT NULL CHECK (width >= 1),
    height        INTEGER NOT NULL CHECK (height >= 1),
    captured_at   TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    UNIQUE (device_id, upload_key),
    UNIQUE (id, attempt_id),
    FOREIGN KEY (attempt_id, task_id) REFERENCES attempts(id, task_id)
) STRICT;
CREATE INDEX evidence_task ON evidence_assets(task_id, created_at);

-- The one-time submission fence: unique per authorization and per attempt (design §3).
CREATE TABLE order_submissions (
    id                          TEXT PRIMARY KEY,
    task_id                     TEXT NOT NULL,
    authorization_id            TEXT NOT NULL UNIQUE,
    attempt_id                  TEXT NOT NULL UNIQUE,
    device_id                   TEXT NOT NULL REFERENCES devices(id),
    fence_key                   TEXT NOT NULL,
    state                       TEXT NOT NULL CHECK (state IN ('FENCED', 'SUBMITTED', 'RECONCILIATION_REQUIRED',
                                                              'CREATED', 'NOT_CREATED')),
    selected_color              TEXT NOT NULL,
    selected_size               TEXT NOT NULL,
    gate1_unit_price            TEXT NOT NULL,
    gate2_unit_price            TEXT NOT NULL,
    quantity_read               INTEGER NOT NULL,
    confirm_page_amount         TEXT NOT NULL,
    submit_control_match_count  INTEGER NOT NULL CHECK (submit_control_match_count = 1),
    observation                 TEXT CHECK (observation IN ('SUBMITTED', 'EXTERNAL_PAYMENT_HANDOFF',
                                                            'SECURITY_CHALLENGE', 'UNKNOWN')),
    result_key                  TEXT,
    evidence_asset_id           TEXT,
    reconciliation_reason       TEXT,
    reconciled_by               TEXT,
    reconciliation_note         TEXT,
    created_at                  TEXT NOT NULL,
    result_at                   TEXT,
    reconciled_at               TEXT,
    FOREIGN KEY (attempt_id, task_id) REFERENCES attempts(id, task_id),
    FOREIGN KEY (authorization_id, task_id) REFERENCES authorizations(id, task_id),
    FOREIGN KEY (evidence_asset_id, attempt_id) REFERENCES evidence_assets(id, attempt_id)
) STRICT;
CREATE INDEX order_submissions_task ON order_submissions(task_id);
-- A fence, once written, is never deleted (the guarantee of design §2.1 lives in this row).
CREATE TRIGGER order_submissions_no_delete BEFORE DELETE ON order_submissions
BEGIN
    SELECT RAISE(ABORT, 'order_submissions rows are permanent');
END;
