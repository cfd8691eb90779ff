-- The ledger. MySQL is the source of truth for campaigns and for every claim Redis
-- acknowledged; Redis holds only what the hot path needs.

-- One campaign per SKU: stock, placement width, per-user limit, sale window (ms since the
-- epoch, gateway clock) and how long a claim may stay unpaid before it is released.
CREATE TABLE IF NOT EXISTS campaigns (
    sku                 BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    name                VARCHAR(200)    NOT NULL DEFAULT '',
    stock               BIGINT UNSIGNED NOT NULL,
    width               SMALLINT UNSIGNED NOT NULL,
    per_user_limit      INT UNSIGNED    NOT NULL,
    start_ms            BIGINT          NOT NULL,
    end_ms              BIGINT          NOT NULL,
    payment_timeout_s   INT UNSIGNED    NOT NULL,
    created_at          TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at          TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    CONSTRAINT campaign_window CHECK (end_ms > start_ms),
    CONSTRAINT campaign_width CHECK (width >= 1),
    CONSTRAINT campaign_limit CHECK (per_user_limit >= 1)
) ENGINE = InnoDB;

-- Units of a SKU not held by an active claim. Every batch moves it with a guarded UPDATE
-- (`... WHERE available >= ?`), and the CHECK is the second fence: it never goes negative.
CREATE TABLE IF NOT EXISTS sku_stock (
    sku        BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    available  BIGINT          NOT NULL,
    updated_at TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    CONSTRAINT stock_never_negative CHECK (available >= 0)
) ENGINE = InnoDB;

-- Every acknowledged claim exactly once. claim_id (`<shard>-<stream entry id>`) makes a
-- redelivered entry a no-op; UNIQUE (sku, user_id, user_seq) rejects a second record of the
-- same user claim under another id (the last guard against duplicates).
-- `releasing` marks a release whose Redis half may not have run yet; a sweep finishes it.
CREATE TABLE IF NOT EXISTS claims (
    claim_id     VARCHAR(64)       NOT NULL PRIMARY KEY,
    sku          BIGINT UNSIGNED   NOT NULL,
    user_id      VARCHAR(64)       NOT NULL,
    user_seq     BIGINT UNSIGNED   NOT NULL,
    qty          INT UNSIGNED      NOT NULL,
    shard        SMALLINT UNSIGNED NOT NULL,
    home         SMALLINT UNSIGNED NOT NULL,
    request_id   VARCHAR(64)       NULL,
    claimed_ms   BIGINT            NOT NULL,
    status       ENUM('pending', 'confirmed', 'releasing', 'released') NOT NULL DEFAULT 'pending',
    -- Which batch wrote the row: tells a batch which of its rows it inserted itself.
    batch_id     BIGINT UNSIGNED   NOT NULL,
    release_reason VARCHAR(16)     NULL,
    created_at   TIMESTAMP(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at   TIMESTAMP(3)      NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    UNIQUE KEY claims_user_seq (sku, user_id, user_seq),
    KEY claims_status (status, sku, claimed_ms),
    CONSTRAINT claim_qty CHECK (qty >= 1)
) ENGINE = InnoDB;

-- Anything the books disagree on: duplicates rejected, dead letters, drift, guard trips.
-- (kind, ref) is unique so a redelivered anomaly is recorded once.
CREATE TABLE IF NOT EXISTS anomalies (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind       VARCHAR(32)     NOT NULL,
    ref        VARCHAR(128)    NOT NULL,
    sku        BIGINT UNSIGNED NULL,
    detail     TEXT            NOT NULL,
    created_at TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY anomalies_ref (kind, ref),
    KEY anomalies_sku (sku, created_at)
) ENGINE = InnoDB;

-- One row per reconciliation of a SKU: the terms of invariant 4 and the drift.
CREATE TABLE IF NOT EXISTS reconcile_runs (
    id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    sku           BIGINT UNSIGNED NOT NULL,
    stock         BIGINT          NOT NULL,
    slices        BIGINT          NOT NULL,
    in_flight     BIGINT          NOT NULL,
    active_ledger BIGINT          NOT NULL,
    drift         BIGINT          NOT NULL,
    stale_holds   INT             NOT NULL DEFAULT 0,
    detail        TEXT            NOT NULL,
    created_at    TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    KEY reconcile_sku (sku, created_at)
) ENGINE = InnoDB;
