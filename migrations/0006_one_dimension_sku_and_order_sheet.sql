-- 0006: the real order sheet (issue 15).
--
-- * tasks.sku_size and authorizations.sku_size may be NULL: goods with one SKU dimension (only a colour or
--   style) name no size. A documented deviation from spec 002 (docs/api.md, "One-dimension goods"). A size,
--   when present, keeps its 1..64 characters. The keyword-search triggers of 0003 concatenated the size
--   (NULL would blank the whole search text), so they are recreated with the size optional.
-- * evidence_assets.kind gains ORDER_CONFIRMATION (the pending-payment order page of the read-only
--   confirmation after the tap).
-- * order_submissions: selected_size may be NULL (as read; NULL only for a task without a size), and four new
--   columns: gate3_unit_price and payment_mode (read on the screen that holds the submit control, checked by
--   the fence; NULL only on rows fenced before this migration), order_sn and observation_reason (optional
--   parts of the result report).
--
-- SQLite cannot relax NOT NULL or change a CHECK in place, so the four tables are rebuilt (new table, copy,
-- drop, rename: https://sqlite.org/lang_altertable.html "otheralter"). The runner applies a migration with
-- foreign keys off and runs PRAGMA foreign_key_check before COMMIT, so a dangling reference refuses the
-- upgrade and nothing is applied. Every index and trigger of a rebuilt table is dropped with it and created
-- again below, with the same names.

CREATE TABLE tasks_new (
    id               TEXT PRIMARY KEY,
    create_key       TEXT NOT NULL UNIQUE,
    create_hash      TEXT NOT NULL,
    title            TEXT NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    product_url      TEXT NOT NULL,
    goods_id         TEXT NOT NULL CHECK (goods_id GLOB '[0-9]*' AND goods_id NOT GLOB '*[^0-9]*'),
    sku_color        TEXT NOT NULL CHECK (length(sku_color) BETWEEN 1 AND 64),
    -- NULL: one-dimension goods (no size named)
    sku_size         TEXT CHECK (sku_size IS NULL OR length(sku_size) BETWEEN 1 AND 64),
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
INSERT INTO tasks_new (id, create_key, create_hash, title, product_url, goods_id, sku_color, sku_size, quantity,
                       max_total_price, state, version, state_reason, created_by, created_at, updated_at)
    SELECT id, create_key, create_hash, title, product_url, goods_id, sku_color, sku_size, quantity,
           max_total_price, state, version, state_reason, created_by, created_at, updated_at
    FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_new RENAME TO tasks;
CREATE INDEX tasks_created ON tasks(created_at DESC, id DESC);
CREATE INDEX tasks_state_created ON tasks(state, created_at DESC, id DESC);
CREATE INDEX tasks_goods ON tasks(goods_id);
-- The search rows of the existing tasks are unchanged (task_search is not rebuilt); only new and edited
-- rows go through these triggers, which leave a missing size out instead of blanking the colour too.
CREATE TRIGGER tasks_search_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO task_search (title, sku, task_id)
    VALUES (new.title, new.sku_color || coalesce(' ' || new.sku_size, ''), new.id);
END;
CREATE TRIGGER tasks_search_update AFTER UPDATE OF title, sku_color, sku_size ON tasks
BEGIN
    DELETE FROM task_search WHERE task_id = old.id;
    INSERT INTO task_search (title, sku, task_id)
    VALUES (new.title, new.sku_color || coalesce(' ' || new.sku_size, ''), new.id);
END;

CREATE TABLE authorizations_new (
    id               TEXT PRIMARY KEY,
    task_id          TEXT NOT NULL REFERENCES tasks(id),
    task_version     INTEGER NOT NULL,
    title            TEXT NOT NULL,
    product_url      TEXT NOT NULL,
    goods_id         TEXT NOT NULL,
    sku_color        TEXT NOT NULL,
    -- the task's sku_size at start-purchases; NULL when the task names no size
    sku_size         TEXT,
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
CREATE UNIQUE INDEX authorizations_one_live ON authorizations(task_id) WHERE closed_at IS NULL;
CREATE INDEX authorizations_active ON authorizations(created_at, id) WHERE state = 'ACTIVE';
CREATE INDEX authorizations_task ON authorizations(task_id, created_at);

CREATE TABLE evidence_assets_new (
    id            TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL,
    attempt_id    TEXT NOT NULL,
    device_id     TEXT NOT NULL REFERENCES devices(id),
    upload_key    TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('SKU_PANEL_GATE_1', 'QUANTITY_GATE_2', 'CONFIRM_PAGE_GATE_3',
                                                'POST_SUBMIT_OBSERVATION', 'FAILURE', 'ORDER_CONFIRMATION')),
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
INSERT INTO evidence_assets_new (id, task_id, attempt_id, device_id, upload_key, kind, privacy_tier, sha256,
                                 byte_size, mime, width, height, captured_at, created_at)
    SELECT id, task_id, attempt_id, device_id, upload_key, kind, privacy_tier, sha256, byte_size, mime, width,
           height, captured_at, created_at
    FROM evidence_assets;
DROP TABLE evidence_assets;
ALTER TABLE evidence_assets_new RENAME TO evidence_assets;
CREATE INDEX evidence_task ON evidence_assets(task_id, created_at);
CREATE INDEX evidence_sha256 ON evidence_assets(sha256);

CREATE TABLE order_submissions_new (
    id                          TEXT PRIMARY KEY,
    task_id                     TEXT NOT NULL,
    authorization_id            TEXT NOT NULL UNIQUE,
    attempt_id                  TEXT NOT NULL UNIQUE,
    device_id                   TEXT NOT NULL REFERENCES devices(id),
    fence_key                   TEXT NOT NULL,
    state                       TEXT NOT NULL CHECK (state IN ('FENCED', 'SUBMITTED', 'RECONCILIATION_REQUIRED',
                                                              'CREATED', 'NOT_CREATED')),
    selected_color              TEXT NOT NULL,
    -- as read on the screen; NULL only for a task without a size (the fence refuses anything else)
    selected_size               TEXT,
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
    -- NULL only on rows fenced before 0006 (the fence requires both since)
    gate3_unit_price            TEXT,
    payment_mode                TEXT,
    -- optional parts of the result report
    order_sn                    TEXT CHECK (order_sn IS NULL OR length(order_sn) BETWEEN 6 AND 40),
    observation_reason          TEXT CHECK (observation_reason IN ('PAYMENT_SUSPECTED', 'NO_KNOWN_SCREEN',
                                                                   'SUBMIT_CONTROL_GONE', 'TAP_OUTCOME_UNKNOWN',
                                                                   'SECURITY_CHALLENGE_AFTER_TAP')),
    FOREIGN KEY (attempt_id, task_id) REFERENCES attempts(id, task_id),
    FOREIGN KEY (authorization_id, task_id) REFERENCES authorizations(id, task_id),
    FOREIGN KEY (evidence_asset_id, attempt_id) REFERENCES evidence_assets(id, attempt_id)
) STRICT;
INSERT INTO order_submissions_new (id, task_id, authorization_id, attempt_id, device_id, fence_key, state,
                                   selected_color, selected_size, gate1_unit_price, gate2_unit_price,
                                   quantity_read, confirm_page_amount, submit_control_match_count, observation,
                                   result_key, evidence_asset_id, reconciliation_reason, reconciled_by,
                                   reconciliation_note, created_at, result_at, reconciled_at)
    SELECT id, task_id, authorization_id, attempt_id, device_id, fence_key, state, selected_color, selected_size,
           gate1_unit_price, gate2_unit_price, quantity_read, confirm_page_amount, submit_control_match_count,
           observation, result_key, evidence_asset_id, reconciliation_reason, reconciled_by, reconciliation_note,
           created_at, result_at, reconciled_at
    FROM order_submissions;
DROP TABLE order_submissions;
ALTER TABLE order_submissions_new RENAME TO order_submissions;
CREATE INDEX order_submissions_task ON order_submissions(task_id);
-- A fence, once written, is never deleted (the guarantee of design §2.1 lives in this row).
CREATE TRIGGER order_submissions_no_delete BEFORE DELETE ON order_submissions
BEGIN
    SELECT RAISE(ABORT, 'order_submissions rows are permanent');
END;
