-- 0001: admins, admin sessions, devices, tasks, one-time authorizations, start requests, audit trail.
-- Times are canonical UTC text 'YYYY-MM-DDTHH:MM:SS.ffffffZ' (string order = time order).
-- Money is canonical decimal text ('12.88'); never REAL.

CREATE TABLE admins (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE CHECK (length(username) BETWEEN 1 AND 64),
    password_hash TEXT NOT NULL,
    disabled      INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
) STRICT;

-- Only the SHA-256 of the random session id is stored (a DB leak does not leak live sessions).
CREATE TABLE admin_sessions (
    id_hash       BLOB PRIMARY KEY CHECK (length(id_hash) = 32),
    admin_id      TEXT NOT NULL REFERENCES admins(id),
    created_at    TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL,
    expires_at    TEXT NOT NULL,
    revoked_at    TEXT
) STRICT;
CREATE INDEX admin_sessions_admin ON admin_sessions(admin_id);

CREATE TABLE devices (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    token_hash          BLOB NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    state               TEXT NOT NULL CHECK (state IN ('ACTIVE', 'REVOKED')),
    created_at          TEXT NOT NULL,
    revoked_at          TEXT,
    -- the latest heartbeat (spec 002 heartbeat body), NULL until the first one
    last_heartbeat_at   TEXT,
    client_version      TEXT,
    adb_serial          TEXT,
    android_release     TEXT,
    pdd_version         TEXT,
    pdd_version_code    INTEGER,
    reported_state      TEXT,
    app_version_allowed INTEGER CHECK (app_version_allowed IN (0, 1)),
    -- bumped by every authenticated write: the conditional "device still ACTIVE" statement that
    -- opens each device transaction (design §2.5) is an UPDATE of this column.
    write_seq           INTEGER NOT NULL DEFAULT 0,
    CHECK ((state = 'REVOKED') = (revoked_at IS NOT NULL))
) STRICT;

CREATE TABLE tasks (
    id               TEXT PRIMARY KEY,
    create_key       TEXT NOT NULL UNIQUE,
    create_hash      TEXT NOT NULL,
    title            TEXT NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    product_url      TEXT NOT NULL,
    goods_id         TEXT NOT NULL CHECK (goods_id GLOB '[0-9]*' AND goods_id NOT GLOB '*[^0-9]*'),
    sku_color        TEXT NOT NULL CHECK (length(sku_color) BETWEEN 1 AND 64),
    sku_size         TEXT NOT NULL CHECK (length(sku_size) BETWEEN 1 AND 64),
    quantity         INTEGER NOT NULL CHECK (quantity >= 1),
    max_total_price  TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('DRAFT', 'PENDING', 'CLAIMED', 'ORDERING', 'SUBMITTING',
                         'WAITING_PAYMENT', 'PAID', 'RECONCILIATION_REQUIRED', 'CLOSED_NOT_CREATED',
                         'FAILED', 'EXPIRED', 'CANCELLED')),
    version          INTEGER NOT NULL CHECK (version >= 1),
    state_reason     TEXT,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
) STRICT;
CREATE INDEX tasks_created ON tasks(created_at DESC, id DESC);
CREATE INDEX tasks_state_created ON tasks(state, created_at DESC, id DESC);
CREATE INDEX tasks_goods ON tasks(goods_id);

-- One-time authorization: a frozen snapshot of the task fields at start-purchases (spec 002).
CREATE TABLE authorizations (
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
    UNIQUE (id, task_id)
) STRICT;
-- At most one live authorization per task.
CREATE UNIQUE INDEX authorizations_one_live ON authorizations(task_id)
    WHERE state IN ('ACTIVE', 'CLAIMED', 'FENCED');
-- Candidate selection for claim-next: oldest ACTIVE first, stable tie-break on id.
CREATE INDEX authorizations_active ON authorizations(created_at, id) WHERE state = 'ACTIVE';
CREATE INDEX authorizations_task ON authorizations(task_id, created_at);

-- start_key idempotency (spec 002 start-purchases): same key + same set replays the stored body.
CREATE TABLE start_requests (
    start_key     TEXT PRIMARY KEY,
    admin_actor   TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    response_json TEXT NOT NULL,
    created_at    TEXT NOT NULL
) STRICT;

-- Append-only audit trail, written in the same transaction as each change (design §5).
CREATE TABLE audit_log (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            TEXT NOT NULL,
    actor_kind    TEXT NOT NULL CHECK (actor_kind IN ('admin', 'device', 'system', 'cli')),
    actor_id      TEXT NOT NULL,
    action        TEXT NOT NULL,
    subject_kind  TEXT NOT NULL,
    subject_id    TEXT NOT NULL,
    request_id    TEXT,
    generation    INTEGER,
    detail_json   TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE INDEX audit_subject ON audit_log(subject_kind, subject_id, id);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
