-- Draw campaigns: a verifiable raffle instead of first come, first served
-- (ledger/src/draws.rs). Applied once, recorded by sqlx in `_sqlx_migrations` like every
-- other migration, so plain ADD COLUMN (MySQL 8 has no ADD COLUMN IF NOT EXISTS).

-- How a campaign sells: `fcfs` (every campaign before this migration) or `draw`; a short
-- string rather than an ENUM so a later mode (`queue`) needs no ALTER of this table.
ALTER TABLE campaigns
    ADD COLUMN mode VARCHAR(8) NOT NULL DEFAULT 'fcfs';

-- One row per draw campaign. The seed stays secret until the draw; its SHA-256 (lowercase
-- hex of the raw bytes) is published at creation, so anyone can check afterwards that the
-- revealed seed is the one the priorities were computed from. `entrants` is the entry
-- count the draw was made from; ranks 1..granted_rank have been granted a claim or
-- skipped (the waitlist is served in rank order as units are released).
CREATE TABLE IF NOT EXISTS draws (
    sku           BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    draw_at_ms    BIGINT          NOT NULL,
    waitlist      INT UNSIGNED    NOT NULL,
    seed          VARBINARY(32)   NOT NULL,
    seed_sha256   CHAR(64)        NOT NULL,
    state         ENUM('open', 'drawn') NOT NULL DEFAULT 'open',
    drawn_at_ms   BIGINT          NULL,
    entrants      BIGINT UNSIGNED NULL,
    granted_rank  INT UNSIGNED    NOT NULL DEFAULT 0,
    created_at    TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at    TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    KEY draws_due (state, draw_at_ms)
) ENGINE = InnoDB;

-- Every entry Redis accepted, once per user: (sku, user_id) is the key, so an entry read
-- again from its stream (after a failover) is a no-op. User ids compare byte for byte as in
-- Redis and in `claims` (0002_binary_user_ids.sql). `priority` is the 52-bit number Redis
-- derived from HMAC-SHA1(seed, "<sku>:<user>"); the draw order is (priority, user_id),
-- which the second key serves for verification; the third pages one home shard's entrants
-- to restore them into a Redis that lost them.
CREATE TABLE IF NOT EXISTS draw_entries (
    sku         BIGINT UNSIGNED   NOT NULL,
    user_id     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    priority    BIGINT UNSIGNED   NOT NULL,
    entry_id    VARCHAR(64)       NOT NULL,
    shard       SMALLINT UNSIGNED NOT NULL,
    entered_ms  BIGINT            NOT NULL,
    created_at  TIMESTAMP(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (sku, user_id),
    KEY draw_entries_order (sku, priority, user_id),
    KEY draw_entries_shard (sku, shard, user_id)
) ENGINE = InnoDB;

-- The draw's result, written once in the transaction that marks the draw `drawn`: ranks
-- 1..stock win, the rest up to stock + waitlist are the waitlist. A user holds one rank.
CREATE TABLE IF NOT EXISTS draw_ranks (
    sku       BIGINT UNSIGNED NOT NULL,
    rnk       INT UNSIGNED    NOT NULL,
    user_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    priority  BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (sku, rnk),
    UNIQUE KEY draw_ranks_user (sku, user_id)
) ENGINE = InnoDB;
