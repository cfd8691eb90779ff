//! The data path's metric names (prefix `flashgate_`) and their help text; the process's
//! recorder that renders them on `/metrics` is campaign-ops' (`campaign-ops/src/metrics.rs`).

pub const BATCH_ROWS: &str = "flashgate_consumer_batch_rows";
pub const COMMIT_SECONDS: &str = "flashgate_consumer_commit_seconds";
pub const CLAIMS_COMMITTED: &str = "flashgate_consumer_claims_committed_total";
pub const REDELIVERED: &str = "flashgate_consumer_redelivered_total";
pub use ledger::anomalies::ANOMALIES;
pub const DB_ERRORS: &str = "flashgate_consumer_db_errors_total";
pub const STREAM_LAG: &str = "flashgate_consumer_stream_lag";
/// Gauge `{shard}`: age of the oldest entry past the committed place (0 when none).
pub const OLDEST_PENDING_SECONDS: &str = "flashgate_consumer_stream_oldest_pending_seconds";
/// Counter: reads of a stream again from its start because its master changed.
pub const NEW_MASTER_REREADS: &str = "flashgate_consumer_new_master_rereads_total";
/// Counter: batches whose stream place was refused (the lease went elsewhere).
pub const FENCED: &str = "flashgate_consumer_fenced_total";
/// Counter: committed entries trimmed from the streams.
pub const TRIMMED: &str = "flashgate_consumer_trimmed_total";
pub const REPLICA_UNCONFIRMED: &str = "flashgate_consumer_replica_unconfirmed_total";
/// Histogram: how long entries waited for a replica before they could be committed.
pub const REPLICA_WAIT_SECONDS: &str = "flashgate_consumer_replica_wait_seconds";
/// Counter: read batches dropped because the master changed before a replica confirmed.
pub const REPLICA_MASTER_CHANGED: &str = "flashgate_consumer_replica_master_changed_total";
/// Gauge: how long the longest-failing writer loop has gone without a commit (`stall.rs`).
pub const WRITER_STALLED_SECONDS: &str = "flashgate_consumer_writer_stalled_seconds";

/// Histograms (the rest are counters, `_total`, and gauges).
pub const HISTOGRAMS: &[&str] = &[BATCH_ROWS, COMMIT_SECONDS, REPLICA_WAIT_SECONDS];

/// Every data path series with its `# HELP` text (`campaign_ops::metrics::install`
/// describes them).
pub const DESCRIPTIONS: &[(&str, &str)] = &[
    (BATCH_ROWS, "Rows per committed ledger batch."),
    (COMMIT_SECONDS, "Time to commit one ledger batch (one MySQL transaction), in seconds."),
    (CLAIMS_COMMITTED, "Claim records newly written to the ledger."),
    (REDELIVERED, "Claim records the ledger already held (a stream read again after a new master, or a rebuild that committed them first), skipped."),
    (ANOMALIES, "Anomalies recorded in the ledger by kind (collision, poison, drift, ...)."),
    (DB_ERRORS, "Ledger batch attempts that failed on MySQL and will be retried."),
    (WRITER_STALLED_SECONDS, "Seconds the longest-stalled writer loop has gone without committing its batch (every attempt failed), 0 when every loop commits; /healthz is 503 past --writer-stall-ms."),
    (STREAM_LAG, "Records in a shard's claims stream (XLEN): not committed yet, or committed and not trimmed yet (trimmed about every second)."),
    (OLDEST_PENDING_SECONDS, "Age of the oldest record of a shard's stream past the place the ledger committed, in seconds (0 when none)."),
    (NEW_MASTER_REREADS, "Reads of a shard's stream again from its start because its master's replication id changed (failover or restart)."),
    (FENCED, "Batches whose stream place was refused because another consumer holds the shard's lease now; their reads are dropped and read again."),
    (TRIMMED, "Committed entries trimmed from the claims streams (XTRIM MINID to the committed place)."),
    (REPLICA_UNCONFIRMED, "Stream records held back from the ledger because no replica confirmed them yet (--replica-wait-ms)."),
    (REPLICA_WAIT_SECONDS, "How long read records waited for a replica to confirm them before they could be committed, in seconds."),
    (REPLICA_MASTER_CHANGED, "Read batches dropped (to be read again) because the shard's master changed before a replica confirmed them."),
];
