-- Queue campaigns: a waiting room in front of first come, first served (ledger/src/queues.rs,
-- campaign-ops/src/queue.rs). Redis holds the live queue; this row keeps what a Redis loss
-- must not undo: the admitted watermark (positions at or below it may claim; never lowered,
-- or clients told "your turn" would be sent back), the pre-queue's length fixed at the
-- start (the shuffle's scale: every pre-queue token's position depends on it), and a
-- high-water mark of the tickets handed out since (so tickets after a loss do not reuse
-- positions already admitted).
CREATE TABLE IF NOT EXISTS queues (
    sku          BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    admitted     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    pre          BIGINT UNSIGNED NULL,
    next_hw      BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at   TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
                                 ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;
