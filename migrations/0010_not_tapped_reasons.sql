-- 0010: two more observation reasons (issue 27): the agent's last look before the submit tap refused it, so
-- no tap was sent — NOT_TAPPED_SCREEN_CHANGED (the screen no longer gave the readings the fence request
-- carried: an option, the unit price, the quantity, the total, the payment mode or the one submit control)
-- and NOT_TAPPED_OBSCURED (something was on top of the submit control at the tap point: a popup, a toast
-- window, another app's window). The result still says UNKNOWN (docs/api.md "observation_reason").
--
-- SQLite cannot change a CHECK in place, so order_submissions is rebuilt as 0006 did (new table, copy, drop,
-- rename: https://sqlite.org/lang_altertable.html "otheralter"), with every column, constraint, index and
-- trigger as before and the same column order. The runner applies a migration with foreign keys off and
-- runs PRAGMA foreign_key_check before COMMIT; supervision_verdicts keeps referencing order_submissions(id)
-- by name.

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
                                                                   'SECURITY_CHALLENGE_AFTER_TAP',
                                                                   'NOT_TAPPED_SCREEN_CHANGED',
                                                                   'NOT_TAPPED_OBSCURED')),
    FOREIGN KEY (attempt_id, task_id) REFERENCES attempts(id, task_id),
    FOREIGN KEY (authorization_id, task_id) REFERENCES authorizations(id, task_id),
    FOREIGN KEY (evidence_asset_id, attempt_id) REFERENCES evidence_assets(id, attempt_id)
) STRICT;
INSERT INTO order_submissions_new SELECT * FROM order_submissions;
DROP TABLE order_submissions;
ALTER TABLE order_submissions_new RENAME TO order_submissions;
CREATE INDEX order_submissions_task ON order_submissions(task_id);
-- 0008's order-number search index
CREATE INDEX order_submissions_order_sn ON order_submissions(order_sn) WHERE order_sn IS NOT NULL;
-- A fence, once written, is never deleted (the guarantee of design §2.1 lives in this row).
CREATE TRIGGER order_submissions_no_delete BEFORE DELETE ON order_submissions
BEGIN
    SELECT RAISE(ABORT, 'order_submissions rows are permanent');
END;
