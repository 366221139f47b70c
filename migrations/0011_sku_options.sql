-- 0011: SKU options by dimension name (issue 34; docs/api.md "SKU options").
--
-- * tasks.sku_color/sku_size and authorizations.sku_color/sku_size become one column sku_options: the ordered
--   list of one to three [dimension, value] pairs as canonical JSON (cmbuyer.schemas.sku.options_text), so
--   goods whose options are 规格/数量/口味 … can be named. Existing rows migrate to the colour/size special
--   case: [["颜色", sku_color]] or [["颜色", sku_color], ["尺码", sku_size]] (json_array writes the same
--   compact text as options_text, so a migrated snapshot still equals its migrated task).
-- * order_submissions.selected_color/selected_size become selected_options the same way.
-- * The keyword-search triggers index the option values (space-separated); existing search rows are kept.
--
-- The tables are rebuilt as in 0006 (new table, copy, drop, rename) with every index and trigger created
-- again under the same names; the runner applies this with foreign keys off and checks them before COMMIT.

CREATE TABLE tasks_new (
    id               TEXT PRIMARY KEY,
    create_key       TEXT NOT NULL UNIQUE,
    create_hash      TEXT NOT NULL,
    title            TEXT NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    product_url      TEXT NOT NULL,
    goods_id         TEXT NOT NULL CHECK (goods_id GLOB '[0-9]*' AND goods_id NOT GLOB '*[^0-9]*'),
    -- [[dimension, value], ...] in the task's order, canonical JSON (cmbuyer.schemas.sku.options_text)
    sku_options      TEXT NOT NULL
        CHECK (json_valid(sku_options) AND json_type(sku_options) = 'array' AND json_array_length(sku_options) BETWEEN 1 AND 3),
    quantity         INTEGER NOT NULL CHECK (quantity >= 1),
    max_total_price  TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('DRAFT', 'PENDING', 'CLAIMED', 'ORDERING', 'SUBMITTING',
                         'WAITING_PAYMENT', 'PAID', 'RECONCILIATION_REQUIRED', 'CLOSED_NOT_CREATED',
                         'FAILED', 'EXPIRED', 'CANCELLED', 'HELD')),
    version          INTEGER NOT NULL CHECK (version >= 1),
    state_reason     TEXT,
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
) STRICT;
INSERT INTO tasks_new (id, create_key, create_hash, title, product_url, goods_id, sku_options, quantity,
                       max_total_price, state, version, state_reason, created_by, created_at, updated_at)
    SELECT id, create_key, create_hash, title, product_url, goods_id,
           CASE WHEN sku_size IS NULL THEN json_array(json_array('颜色', sku_color))
                ELSE json_array(json_array('颜色', sku_color), json_array('尺码', sku_size)) END,
           quantity,
           max_total_price, state, version, state_reason, created_by, created_at, updated_at
    FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_new RENAME TO tasks;
CREATE INDEX tasks_created ON tasks(created_at DESC, id DESC);
CREATE INDEX tasks_state_created ON tasks(state, created_at DESC, id DESC);
CREATE INDEX tasks_goods ON tasks(goods_id);
-- The search rows of the existing tasks are unchanged (task_search is not rebuilt); new and edited rows
-- index their option values, space-separated, in the task's order.
CREATE TRIGGER tasks_search_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO task_search (title, sku, task_id)
    VALUES (new.title, 
            (SELECT group_concat(json_extract(o.value, '$[1]'), ' ') FROM json_each(new.sku_options) o), new.id);
END;
CREATE TRIGGER tasks_search_update AFTER UPDATE OF title, sku_options ON tasks
BEGIN
    DELETE FROM task_search WHERE task_id = old.id;
    INSERT INTO task_search (title, sku, task_id)
    VALUES (new.title, 
            (SELECT group_concat(json_extract(o.value, '$[1]'), ' ') FROM json_each(new.sku_options) o), new.id);
END;

CREATE TABLE authorizations_new (
    id               TEXT PRIMARY KEY,
    task_id          TEXT NOT NULL REFERENCES tasks(id),
    task_version     INTEGER NOT NULL,
    title            TEXT NOT NULL,
    product_url      TEXT NOT NULL,
    goods_id         TEXT NOT NULL,
    -- the task's sku_options at start-purchases
    sku_options      TEXT NOT NULL,
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
INSERT INTO authorizations_new (id, task_id, task_version, title, product_url, goods_id, sku_options,
                                quantity, max_total_price, state, start_key, created_by, created_at, expires_at,
                                closed_at, close_reason)
    SELECT id, task_id, task_version, title, product_url, goods_id,
           CASE WHEN sku_size IS NULL THEN json_array(json_array('颜色', sku_color))
                ELSE json_array(json_array('颜色', sku_color), json_array('尺码', sku_size)) END,
           quantity,
           max_total_price, state, start_key, created_by, created_at, expires_at, closed_at, close_reason
    FROM authorizations;
DROP TABLE authorizations;
ALTER TABLE authorizations_new RENAME TO authorizations;
CREATE UNIQUE INDEX authorizations_one_live ON authorizations(task_id) WHERE closed_at IS NULL;
CREATE INDEX authorizations_active ON authorizations(created_at, id) WHERE state = 'ACTIVE';
CREATE INDEX authorizations_task ON authorizations(task_id, created_at);

CREATE TABLE order_submissions_new (
    id                          TEXT PRIMARY KEY,
    task_id                     TEXT NOT NULL,
    authorization_id            TEXT NOT NULL UNIQUE,
    attempt_id                  TEXT NOT NULL UNIQUE,
    device_id                   TEXT NOT NULL REFERENCES devices(id),
    fence_key                   TEXT NOT NULL,
    state                       TEXT NOT NULL CHECK (state IN ('FENCED', 'SUBMITTED', 'RECONCILIATION_REQUIRED',
                                                              'CREATED', 'NOT_CREATED')),
    -- [[dimension, value], ...] as read on the screen, named by the task's dimensions (canonical JSON)
    selected_options            TEXT NOT NULL
        CHECK (json_valid(selected_options) AND json_type(selected_options) = 'array' AND json_array_length(selected_options) BETWEEN 1 AND 3),
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
                                                                   'SECURITY_CHALLENGE_AFTER_TAP',
                                                                   'NOT_TAPPED_SCREEN_CHANGED',
                                                                   'NOT_TAPPED_OBSCURED')),
    FOREIGN KEY (attempt_id, task_id) REFERENCES attempts(id, task_id),
    FOREIGN KEY (authorization_id, task_id) REFERENCES authorizations(id, task_id),
    FOREIGN KEY (evidence_asset_id, attempt_id) REFERENCES evidence_assets(id, attempt_id)
) STRICT;
INSERT INTO order_submissions_new (id, task_id, authorization_id, attempt_id, device_id, fence_key, state,
                                   selected_options, gate1_unit_price, gate2_unit_price,
                                   quantity_read, confirm_page_amount, submit_control_match_count, observation,
                                   result_key, evidence_asset_id, reconciliation_reason, reconciled_by,
                                   reconciliation_note, created_at, result_at, reconciled_at,
                                   gate3_unit_price, payment_mode,
                                   order_sn, observation_reason)
    SELECT id, task_id, authorization_id, attempt_id, device_id, fence_key, state,
           CASE WHEN selected_size IS NULL THEN json_array(json_array('颜色', selected_color))
                ELSE json_array(json_array('颜色', selected_color), json_array('尺码', selected_size)) END,
           gate1_unit_price, gate2_unit_price, quantity_read, confirm_page_amount, submit_control_match_count,
           observation, result_key, evidence_asset_id, reconciliation_reason, reconciled_by, reconciliation_note,
           created_at, result_at, reconciled_at, gate3_unit_price, payment_mode, order_sn, observation_reason
    FROM order_submissions;
DROP TABLE order_submissions;
ALTER TABLE order_submissions_new RENAME TO order_submissions;
CREATE INDEX order_submissions_task ON order_submissions(task_id);
CREATE INDEX order_submissions_order_sn ON order_submissions(order_sn) WHERE order_sn IS NOT NULL;
-- A fence, once written, is never deleted (the guarantee of design §2.1 lives in this row).
CREATE TRIGGER order_submissions_no_delete BEFORE DELETE ON order_submissions
BEGIN
    SELECT RAISE(ABORT, 'order_submissions rows are permanent');
END;
