-- Campaign lifecycle (waves, close-out) and the figures reconciliation adds.

-- Stock waves: units released after the start. A wave row is written before any slice is
-- touched (reconciliation trusts a wave id in Redis only when its row exists), gets its
-- place in the release order (`start_unit`: units released before it, so each shard's share
-- matches the even split of the new total), and is `applied` once every slice has it; the
-- campaign's stock grows in the same transaction.
CREATE TABLE IF NOT EXISTS campaign_waves (
    sku         BIGINT UNSIGNED NOT NULL,
    wave_id     VARCHAR(64)     NOT NULL,
    units       BIGINT UNSIGNED NOT NULL,
    due_ms      BIGINT          NOT NULL,
    start_unit  BIGINT          NULL,
    applied_ms  BIGINT          NULL,
    created_at  TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (sku, wave_id),
    KEY waves_due (applied_ms, due_ms)
) ENGINE = InnoDB;

-- Close-out: `closing_ms` is set when it starts (no more waves or preheats), `closed_ms`
-- once the closing report is stored and Redis is clean.
ALTER TABLE campaigns
    ADD COLUMN closing_ms     BIGINT NULL,
    ADD COLUMN closed_ms      BIGINT NULL,
    ADD COLUMN closing_report TEXT   NULL;

ALTER TABLE reconcile_runs
    ADD COLUMN missing_slices INT    NOT NULL DEFAULT 0,
    ADD COLUMN excess_removed BIGINT NOT NULL DEFAULT 0;
