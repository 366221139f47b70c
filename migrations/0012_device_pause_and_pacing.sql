-- 0011: taking one phone out of rotation and slowing a phone down (issue 32 §1 and §6).
--
-- * devices.paused_at / paused_by: an administrator paused the device (NULL = not paused). A paused device
--   stays ACTIVE (its token still works, its open claim runs to its end) but claim-next answers 204 and the
--   heartbeat answer says "paused": true. A flag beside the ACTIVE/REVOKED state rather than a third state,
--   so authentication and the device-ACTIVE opening of every write stay one rule.
-- * devices.min_claim_interval_seconds / max_claims_per_day: per-device pacing (NULL = off, the default).
--   Pinduoduo's risk control on a shopping account rises with rapid orders, so a team may space one phone's
--   claims out and cap how many it makes per calendar day (Beijing time, UTC+8).
-- * devices.last_claim_at / claims_day / claims_on_day: what pacing counts, written by every new claim of the
--   device (a resume is not a new claim): the time of the last one and how many were made on claims_day
--   (a Beijing-time YYYY-MM-DD). Kept on the device row so claim-next needs no scan of attempts.
-- * devices.hold_*: the agent's local hold as its heartbeat reports it (issue 32 §7; NULL = not held): the
--   reason code, the one-line reason, the attempt it failed on, and when the server first saw this hold.
--   hold_release_*: an administrator's 释放 with the required note, pending until a heartbeat no longer
--   reports the hold (then every hold_* column is cleared). It releases only a hold seen at or before it.
-- * devices.screen_request_id / screen_requested_at: an administrator's 查看当前屏幕, pending until the
--   agent answers it; device_screens: the answers — one fresh screenshot of the phone (its file in the
--   evidence store by SHA-256, like task evidence) or, when another app was in front, only that package.
--
-- * approval_requests.wait_until: when the phone gives up waiting for a person (issue 32 §8; the request's
--   timeout_seconds, else the agent's default 600 s): the task table counts down to it. NULL on requests
--   made before this migration.
--
-- Only ADD COLUMN and one new table: no rebuild, existing rows keep their values (not paused, not paced,
-- no claim counted, not held).

ALTER TABLE devices ADD COLUMN paused_at TEXT;
ALTER TABLE devices ADD COLUMN paused_by TEXT CHECK (paused_by IS NULL OR length(paused_by) BETWEEN 1 AND 100);
ALTER TABLE devices ADD COLUMN min_claim_interval_seconds INTEGER
    CHECK (min_claim_interval_seconds IS NULL OR min_claim_interval_seconds BETWEEN 1 AND 86400);
ALTER TABLE devices ADD COLUMN max_claims_per_day INTEGER
    CHECK (max_claims_per_day IS NULL OR max_claims_per_day BETWEEN 1 AND 10000);
ALTER TABLE devices ADD COLUMN last_claim_at TEXT;
ALTER TABLE devices ADD COLUMN claims_day TEXT CHECK (claims_day IS NULL OR length(claims_day) = 10);
ALTER TABLE devices ADD COLUMN claims_on_day INTEGER NOT NULL DEFAULT 0 CHECK (claims_on_day >= 0);
ALTER TABLE devices ADD COLUMN hold_code TEXT CHECK (hold_code IS NULL OR length(hold_code) BETWEEN 1 AND 64);
ALTER TABLE devices ADD COLUMN hold_reason TEXT CHECK (hold_reason IS NULL OR length(hold_reason) <= 200);
ALTER TABLE devices ADD COLUMN hold_attempt_id TEXT;
ALTER TABLE devices ADD COLUMN hold_seen_at TEXT;
ALTER TABLE devices ADD COLUMN hold_release_at TEXT;
ALTER TABLE devices ADD COLUMN hold_release_by TEXT;
ALTER TABLE devices ADD COLUMN hold_release_note TEXT
    CHECK (hold_release_note IS NULL OR length(hold_release_note) BETWEEN 1 AND 500);
ALTER TABLE devices ADD COLUMN screen_request_id TEXT;
ALTER TABLE devices ADD COLUMN screen_requested_at TEXT;

CREATE TABLE device_screens (
    id                  TEXT PRIMARY KEY,
    device_id           TEXT NOT NULL REFERENCES devices(id),
    request_id          TEXT NOT NULL UNIQUE,
    sha256              TEXT CHECK (sha256 IS NULL OR length(sha256) = 64),
    byte_size           INTEGER CHECK (byte_size IS NULL OR byte_size >= 1),
    width               INTEGER CHECK (width IS NULL OR width >= 1),
    height              INTEGER CHECK (height IS NULL OR height >= 1),
    -- set instead of an image when another app (a cashier, a chat) was in front: no screenshot was taken
    foreground_package  TEXT CHECK (foreground_package IS NULL OR length(foreground_package) BETWEEN 1 AND 200),
    created_at          TEXT NOT NULL,
    CHECK ((sha256 IS NULL) = (foreground_package IS NOT NULL)),
    CHECK ((sha256 IS NULL) = (byte_size IS NULL) AND (sha256 IS NULL) = (width IS NULL))
) STRICT;
CREATE INDEX device_screens_device ON device_screens(device_id, created_at);

ALTER TABLE approval_requests ADD COLUMN wait_until TEXT;
