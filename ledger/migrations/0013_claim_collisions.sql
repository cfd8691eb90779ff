-- A collision never voids an acknowledged claim. Two different claim ids on one
-- (sku, user_id, user_seq) happen when Redis lost a user's sequence (a restart without
-- persistence, a failover rollback) and handed the same seq out again: both claims were
-- acknowledged and took a unit each. The first row keeps `collides = ''`; a later one is
-- stored with `collides = <its claim id>`, so the key stays unique and both rows are kept
-- (the writer records a critical `collision` anomaly). A redelivery of the same claim id is
-- still a no-op through the primary key.
ALTER TABLE claims
    ADD COLUMN collides VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '',
    DROP INDEX claims_user_seq,
    ADD UNIQUE KEY claims_user_seq (sku, user_id, user_seq, collides);
