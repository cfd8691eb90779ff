-- The rebuild's flush handshake (docs/DESIGN.md, "Rebuild from the ledger";
-- consumer/src/flush.rs, consumer/src/rebuild/handshake.rs).
--
-- One row per running consumer process, written by its heartbeat (every few hundred ms,
-- by MySQL's clock, so no process's clock matters) and deleted when it stops cleanly.
-- `flushed` is the highest flush request it has honoured: everything it read from any
-- stream before it saw that request is committed to the ledger (or dropped, never to be
-- committed by it).
CREATE TABLE IF NOT EXISTS consumers (
    instance    VARCHAR(191)    NOT NULL PRIMARY KEY,
    name        VARCHAR(128)    NOT NULL,
    beat_at     TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    flushed     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    started_at  TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;

-- The flush request counter: one row, bumped by every rebuild after its fence.
CREATE TABLE IF NOT EXISTS flush_requests (
    id   TINYINT UNSIGNED NOT NULL PRIMARY KEY,
    seq  BIGINT UNSIGNED  NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO flush_requests (id, seq) VALUES (1, 0);
