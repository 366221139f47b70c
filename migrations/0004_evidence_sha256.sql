-- 0004: find evidence rows by content hash. `cmbuyer-server evidence gc` asks, under the write lock, which
-- stored files some asset row still refers to; without this index each such question read every row.
CREATE INDEX evidence_sha256 ON evidence_assets(sha256);
