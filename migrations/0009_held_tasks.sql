-- 0009: tasks may be HELD (issue 31). A database restored from its Litestream replica is behind reality:
-- a task ordered on a phone after the last replicated write comes back PENDING or CLAIMED. `cmbuyer-server
-- restore` therefore moves every unsettled task (PENDING, CLAIMED, ORDERING, SUBMITTING) to HELD, which no
-- device route accepts, until a person checks it against the phones' journals and releases it
-- (docs/state-machines.md, docs/operations.md "Restore drill").
--
-- SQLite cannot change a CHECK in place, so tasks is rebuilt as in 0006 (new table, copy, drop, rename; the
-- runner applies a migration with foreign keys off and runs PRAGMA foreign_key_check before COMMIT), with its
-- indexes and keyword-search triggers created again under the same names. Only the state list changes.

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
                         'FAILED', 'EXPIRED', 'CANCELLED', 'HELD')),
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
