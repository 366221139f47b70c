-- 0007: operator packs and supervised first orders (issues 16 and 17).
--
-- * devices.pack_id: the selector pack the agent last reported in its heartbeat (issue 16 §6). NULL = never
--   reported (an older agent); 'NO_PACK' = the agent has no pack for the installed app version.
-- * devices.supervision_off: an administrator's audited per-device exemption from supervision (CLI
--   `device supervision`), e.g. the demo's second phone; the global CMBUYER_SUPERVISED_ORDERS=0 turns it off
--   for every device.
-- * attempts.pack_key / attempts.supervised: the device–pack pair an attempt ran under and whether it was
--   decided, at claim time, to need a person's approval before the fence (issue 17 §1). pack_key is the pack
--   id the agent named at claim-next, else the device's last heartbeat pack id, else 'app:<name>:<code>'.
--   NULL/0 on attempts claimed before this migration (they were never supervised).
-- * supervision_pairs: one row per device–pack pair that has been supervised: how many of its orders a
--   person confirmed as right, and whether a wrong one put the pair on hold (the phone claims nothing for
--   that pack until an admin puts the device back under supervision).
-- * approval_requests: what the phone read on the screen holding the submit control, with the gate-3
--   screenshot, waiting for a person. At most one WAITING or APPROVED request per attempt; a request with
--   other readings voids the earlier one. The fence of a supervised attempt needs an APPROVED request whose
--   readings_hash equals the hash of the fence body's readings.
-- * supervision_verdicts: a person's verdict on a supervised order (one per submission).
--
-- Only ADD COLUMN and new tables: no rebuild, existing rows keep their values.

ALTER TABLE devices ADD COLUMN pack_id TEXT CHECK (pack_id IS NULL OR length(pack_id) BETWEEN 1 AND 64);

ALTER TABLE devices ADD COLUMN supervision_off INTEGER NOT NULL DEFAULT 0 CHECK (supervision_off IN (0, 1));

ALTER TABLE attempts ADD COLUMN pack_key TEXT CHECK (pack_key IS NULL OR length(pack_key) BETWEEN 1 AND 80);
ALTER TABLE attempts ADD COLUMN supervised INTEGER NOT NULL DEFAULT 0 CHECK (supervised IN (0, 1));

CREATE TABLE supervision_pairs (
    device_id         TEXT NOT NULL REFERENCES devices(id),
    pack_key          TEXT NOT NULL CHECK (length(pack_key) BETWEEN 1 AND 80),
    confirmed_orders  INTEGER NOT NULL DEFAULT 0 CHECK (confirmed_orders >= 0),
    held              INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1)),
    held_reason       TEXT,
    updated_at        TEXT NOT NULL,
    PRIMARY KEY (device_id, pack_key),
    CHECK ((held = 1) = (held_reason IS NOT NULL))
) STRICT;

CREATE TABLE approval_requests (
    id                   TEXT PRIMARY KEY,
    attempt_id           TEXT NOT NULL,
    task_id              TEXT NOT NULL,
    device_id            TEXT NOT NULL REFERENCES devices(id),
    approval_key         TEXT NOT NULL UNIQUE,
    readings_json        TEXT NOT NULL,
    readings_hash        TEXT NOT NULL CHECK (length(readings_hash) = 64),
    screenshot_asset_id  TEXT NOT NULL REFERENCES evidence_assets(id),
    state                TEXT NOT NULL CHECK (state IN ('WAITING', 'APPROVED', 'REJECTED', 'VOID')),
    decided_by           TEXT,
    decided_at           TEXT,
    created_at           TEXT NOT NULL,
    FOREIGN KEY (task_id, attempt_id) REFERENCES attempts(task_id, id),
    -- a decided request keeps who decided when it is voided later
    CHECK (state NOT IN ('APPROVED', 'REJECTED') OR (decided_by IS NOT NULL AND decided_at IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX approval_requests_one_live_per_attempt ON approval_requests(attempt_id)
    WHERE state IN ('WAITING', 'APPROVED');
CREATE INDEX approval_requests_waiting ON approval_requests(state, created_at) WHERE state = 'WAITING';

CREATE TABLE supervision_verdicts (
    submission_id  TEXT PRIMARY KEY REFERENCES order_submissions(id),
    device_id      TEXT NOT NULL REFERENCES devices(id),
    pack_key       TEXT NOT NULL,
    verdict        TEXT NOT NULL CHECK (verdict IN ('RIGHT', 'WRONG')),
    admin_id       TEXT NOT NULL,
    note           TEXT CHECK (note IS NULL OR length(note) <= 500),
    at             TEXT NOT NULL
) STRICT;
