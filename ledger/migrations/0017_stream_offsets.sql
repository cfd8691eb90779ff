-- The consumer keeps its place in each claims stream here, in the same transaction as the
-- rows it read (docs/DESIGN.md "Consumer: offsets in the ledger"; ledger/src/offsets.rs).
--
-- One row per shard stream key. `last_id` is the newest entry whose record is committed
-- (or kept in stream_poison); `repl_id` the replication id of the Redis master the entries
-- were read under: a read under another id reads the stream again from its start. The
-- lease: one consumer owns a stream at a time (`owner`, until `lease_until` by MySQL's
-- clock); `epoch` is raised by every acquisition, and a batch commits only under the epoch
-- and the offset it read from, so a consumer that lost its lease commits nothing.
CREATE TABLE IF NOT EXISTS stream_offsets (
    stream       VARCHAR(191)    NOT NULL PRIMARY KEY,
    last_id      VARCHAR(41)     NOT NULL DEFAULT '0-0',
    repl_id      VARCHAR(64)     NOT NULL DEFAULT '',
    epoch        BIGINT UNSIGNED NOT NULL DEFAULT 0,
    owner        VARCHAR(191)    NULL,
    lease_until  TIMESTAMP(3)    NULL,
    updated_at   TIMESTAMP(3)    NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
                                 ON UPDATE CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;

-- Stream entries that are not claim records (they do not decode), or whose row MySQL
-- refused on its own: kept with their fields, committed with the batch that passed them,
-- for an operator (`consumer poison`). Each is also a critical anomaly.
CREATE TABLE IF NOT EXISTS stream_poison (
    stream      VARCHAR(191)  NOT NULL,
    entry_id    VARCHAR(41)   NOT NULL,
    reason      VARCHAR(512)  NOT NULL,
    fields      MEDIUMTEXT    NOT NULL,
    found_at    TIMESTAMP(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (stream, entry_id)
) ENGINE = InnoDB;
