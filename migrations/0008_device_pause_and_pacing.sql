-- 0008: taking one phone out of rotation and slowing a phone down (issue 32 §1 and §6).
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
--
-- Only ADD COLUMN: no rebuild, existing rows keep their values (not paused, not paced, no claim counted).

ALTER TABLE devices ADD COLUMN paused_at TEXT;
ALTER TABLE devices ADD COLUMN paused_by TEXT CHECK (paused_by IS NULL OR length(paused_by) BETWEEN 1 AND 100);
ALTER TABLE devices ADD COLUMN min_claim_interval_seconds INTEGER
    CHECK (min_claim_interval_seconds IS NULL OR min_claim_interval_seconds BETWEEN 1 AND 86400);
ALTER TABLE devices ADD COLUMN max_claims_per_day INTEGER
    CHECK (max_claims_per_day IS NULL OR max_claims_per_day BETWEEN 1 AND 10000);
ALTER TABLE devices ADD COLUMN last_claim_at TEXT;
ALTER TABLE devices ADD COLUMN claims_day TEXT CHECK (claims_day IS NULL OR length(claims_day) = 10);
ALTER TABLE devices ADD COLUMN claims_on_day INTEGER NOT NULL DEFAULT 0 CHECK (claims_on_day >= 0);
