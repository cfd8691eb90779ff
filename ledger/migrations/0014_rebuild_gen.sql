-- Rebuild generations (docs/DESIGN.md, "Rebuild from the ledger").
--
-- `rebuild_gen` is bumped by every rebuild of the SKU, in the transaction that holds the
-- campaign row and reads the ledger; the rebuild writes it into every shard meta, and the
-- claim scripts copy the meta's value into each claim record. A batch that inserts a
-- record whose generation is older than the campaign's was produced before the last
-- rebuild and was not counted by it (the rebuild inserted everything it counted in that
-- same transaction): such a "late" claim is listed in `late_claims` and applied to Redis
-- after the commit (`consumer/src/rebuild/late.rs`).
ALTER TABLE campaigns
    ADD COLUMN rebuild_gen BIGINT UNSIGNED NOT NULL DEFAULT 0;

-- One row per late claim. `gen` is the campaign generation it was judged against: Redis
-- takes it only from shards written by that very rebuild. `applied_ms` is set once Redis
-- counts it (or a newer rebuild counted it from the ledger).
CREATE TABLE IF NOT EXISTS late_claims (
    claim_id    VARCHAR(64)     NOT NULL PRIMARY KEY,
    sku         BIGINT UNSIGNED NOT NULL,
    gen         BIGINT UNSIGNED NOT NULL,
    applied_ms  BIGINT          NULL,
    created_at  TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY late_pending (applied_ms, sku)
) ENGINE = InnoDB;

-- The rebuild pages a SKU's claims by claim id (keyset pagination).
ALTER TABLE claims ADD KEY claims_sku_id (sku, claim_id);
