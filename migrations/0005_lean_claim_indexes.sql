-- 0005: fewer index writes per claim. Every claim-next writes rows into authorizations, attempts and
-- device_requests; each index on them is one more b-tree change, and because the keys are random UUIDv4s,
-- one more page written to the WAL and later checkpointed. Three of those index writes guarded nothing
-- that another constraint does not already guard (docs/performance.md, "Fifth pass"):
--
-- * authorizations_one_live was a partial index on `state IN ('ACTIVE','CLAIMED','FENCED')`, so the claim's
--   ACTIVE -> CLAIMED move (and the fence's CLAIMED -> FENCED) deleted and re-inserted the same entry.
--   "Live" is now stated as `closed_at IS NULL`, which only terminal moves touch, and a CHECK makes the two
--   forms the same fact on every row.
-- * attempts had UNIQUE(token_hash) (a 256-bit HMAC is never looked up by hash and cannot collide by
--   accident) and both UNIQUE(id, task_id) and an index on task_id: one UNIQUE(task_id, id) serves the
--   composite foreign keys and the lookups by task.
-- * device_requests had PRIMARY KEY(device_id, request_key) plus an index on request_key. A key reused by
--   another device is refused with 409 idempotency_conflict before anything is stored (design §4), so a
--   key is already unique on its own; it is now the primary key.
--
-- The tables are rebuilt (SQLite cannot drop a constraint in place) with the standard procedure: new table,
-- copy, drop, rename. The runner applies every migration with foreign keys off and runs
-- PRAGMA foreign_key_check before committing, so a dangling reference refuses the upgrade (nothing is
-- applied). A row breaking a new constraint (a terminal authorization without closed_at, a request key
-- stored for two devices) also refuses it.

CREATE TABLE authorizations_new (
    id               TEXT PRIMARY KEY,
    task_id          TEXT NOT NULL REFERENCES tasks(id),
    task_version     INTEGER NOT NULL,
    title            TEXT NOT NULL,
    product_url      TEXT NOT NULL,
    goods_id         TEXT NOT NULL,
    sku_color        TEXT NOT NULL,
    sku_size         TEXT NOT NULL,
    quantity         INTEGER NOT NULL CHECK (quantity >= 1),
    max_total_price  TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('ACTIVE', 'CLAIMED', 'FENCED', 'CONSUMED', 'CLOSED', 'EXPIRED')),
    start_key        TEXT NOT NULL,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    expires_at       TEXT NOT NULL CHECK (expires_at > created_at),
    closed_at        TEXT,
    close_reason     TEXT,
    UNIQUE (id, task_id),
    -- live (ACTIVE, CLAIMED, FENCED) exactly while not closed: authorizations_one_live relies on it
    CHECK ((closed_at IS NULL) = (state IN ('ACTIVE', 'CLAIMED', 'FENCED')))
) STRICT;
INSERT INTO authorizations_new (id, task_id, task_version, title, product_url, goods_id, sku_color, sku_size,
                                quantity, max_total_price, state, start_key, created_by, created_at, expires_at,
                                closed_at, close_reason)
    SELECT id, task_id, task_version, title, product_url, goods_id, sku_color, sku_size, quantity,
           max_total_price, state, start_key, created_by, created_at, expires_at, closed_at, close_reason
    FROM authorizations;
DROP TABLE authorizations;
ALTER TABLE authorizations_new RENAME TO authorizations;
-- At most one live authorization per task.
CREATE UNIQUE INDEX authorizations_one_live ON authorizations(task_id) WHERE closed_at IS NULL;
-- Candidate selection for claim-next: oldest ACTIVE first, stable tie-break on id.
CREATE INDEX authorizations_active ON authorizations(created_at, id) WHERE state = 'ACTIVE';
CREATE INDEX authorizations_task ON authorizations(task_id, created_at);

CREATE TABLE attempts_new (
    id                    TEXT PRIMARY KEY,
    task_id               TEXT NOT NULL,
    authorization_id      TEXT NOT NULL UNIQUE,
    device_id             TEXT NOT NULL REFERENCES devices(id),
    session_id            TEXT NOT NULL,
    claim_generation      INTEGER NOT NULL CHECK (claim_generation >= 1),
    nonce                 BLOB NOT NULL CHECK (length(nonce) = 32),
    token_hash            BLOB NOT NULL CHECK (length(token_hash) = 32),
    claimed_task_version  INTEGER NOT NULL,
    lease_expires_at      TEXT NOT NULL,
    state                 TEXT NOT NULL CHECK (state IN ('OPEN', 'CLOSED')),
    close_reason          TEXT CHECK (close_reason IN ('REPORTED', 'FAILED', 'RESET', 'CANCELLED', 'RECONCILED',
                                                       'LEASE_EXPIRED_AFTER_FENCE')),
    response_json         TEXT NOT NULL,
    next_event_seq        INTEGER NOT NULL DEFAULT 1,
    created_at            TEXT NOT NULL,
    closed_at             TEXT,
    -- parent key of the (attempt_id, task_id) foreign keys, and the index for lookups by task
    UNIQUE (task_id, id),
    FOREIGN KEY (authorization_id, task_id) REFERENCES authorizations(id, task_id),
    CHECK ((state = 'CLOSED') = (closed_at IS NOT NULL AND close_reason IS NOT NULL))
) STRICT;
INSERT INTO attempts_new (id, task_id, authorization_id, device_id, session_id, claim_generation, nonce, token_hash,
                          claimed_task_version, lease_expires_at, state, close_reason, response_json, next_event_seq,
                          created_at, closed_at)
    SELECT id, task_id, authorization_id, device_id, session_id, claim_generation, nonce, token_hash,
           claimed_task_version, lease_expires_at, state, close_reason, response_json, next_event_seq,
           created_at, closed_at
    FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
-- A device holds at most one open claim.
CREATE UNIQUE INDEX attempts_one_open_per_device ON attempts(device_id) WHERE state = 'OPEN';

CREATE TABLE device_requests_new (
    device_id     TEXT NOT NULL REFERENCES devices(id),
    -- unique across devices: the same key from another device is a conflict and never stored (design §4)
    request_key   TEXT NOT NULL PRIMARY KEY,
    endpoint      TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    status        INTEGER NOT NULL CHECK (status BETWEEN 200 AND 299),
    attempt_id    TEXT REFERENCES attempts(id),
    response_json TEXT,
    created_at    TEXT NOT NULL
) STRICT;
INSERT INTO device_requests_new (device_id, request_key, endpoint, request_hash, status, attempt_id, response_json,
                                 created_at)
    SELECT device_id, request_key, endpoint, request_hash, status, attempt_id, response_json, created_at
    FROM device_requests;
DROP TABLE device_requests;
ALTER TABLE device_requests_new RENAME TO device_requests;
