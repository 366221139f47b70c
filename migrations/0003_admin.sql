-- 0003: admin web support — login throttling and an index-backed keyword search over tasks.

-- Failed-login throttling (issue 5). One row per throttle key: 'user:<lowercased username>' or
-- 'ip:<client address>'. A window opens at the first failure; too many failures inside it lock the
-- key until locked_until (even a correct password is refused while locked). A success clears the
-- user key. Rows hold no passwords or hashes.
CREATE TABLE admin_login_throttle (
    throttle_key   TEXT PRIMARY KEY CHECK (length(throttle_key) BETWEEN 3 AND 200),
    failures       INTEGER NOT NULL CHECK (failures >= 0),
    window_start   TEXT NOT NULL,
    locked_until   TEXT
) STRICT;

-- Session clean-up and "sessions of this admin" both go through these.
CREATE INDEX admin_sessions_expires ON admin_sessions(expires_at);

-- Keyword search for GET /tasks without scanning the tasks table: an FTS5 trigram index over the
-- title and the two SKU values (substring match for keywords of 3+ characters, case-insensitive).
-- The task id is an UNINDEXED column rather than the rowid, because VACUUM may renumber the rowids
-- of a table without an INTEGER PRIMARY KEY (tasks.id is TEXT).
CREATE VIRTUAL TABLE task_search USING fts5(
    title, sku, task_id UNINDEXED, tokenize = 'trigram'
);

-- Tasks are never deleted and their fields are fixed after creation (reset/cancel only change
-- state), so an INSERT trigger keeps the index complete; the UPDATE trigger covers any future edit.
CREATE TRIGGER tasks_search_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO task_search (title, sku, task_id)
    VALUES (new.title, new.sku_color || ' ' || new.sku_size, new.id);
END;

CREATE TRIGGER tasks_search_update AFTER UPDATE OF title, sku_color, sku_size ON tasks
BEGIN
    DELETE FROM task_search WHERE task_id = old.id;
    INSERT INTO task_search (title, sku, task_id)
    VALUES (new.title, new.sku_color || ' ' || new.sku_size, new.id);
END;

INSERT INTO task_search (title, sku, task_id)
SELECT title, sku_color || ' ' || sku_size, id FROM tasks;
