//! Metric names (prefix `flashgate_`) and the Prometheus recorder behind `/metrics`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const BATCH_ROWS: &str = "flashgate_consumer_batch_rows";
pub const COMMIT_SECONDS: &str = "flashgate_consumer_commit_seconds";
pub const CLAIMS_COMMITTED: &str = "flashgate_consumer_claims_committed_total";
pub const REDELIVERED: &str = "flashgate_consumer_redelivered_total";
pub const ANOMALIES: &str = "flashgate_consumer_anomalies_total";
pub const DB_ERRORS: &str = "flashgate_consumer_db_errors_total";
pub const STREAM_LAG: &str = "flashgate_consumer_stream_lag";
pub const STREAM_PENDING: &str = "flashgate_consumer_stream_pending";
/// Gauge `{shard}`: age of the oldest delivered-but-unacknowledged entry (0 when none).
pub const OLDEST_PENDING_SECONDS: &str = "flashgate_consumer_stream_oldest_pending_seconds";
pub const RECOVERED: &str = "flashgate_consumer_recovered_total";
pub const DEAD_LETTERED: &str = "flashgate_consumer_dead_lettered_total";
pub const RELEASED: &str = "flashgate_consumer_released_total";
pub const RECONCILE_DRIFT: &str = "flashgate_reconcile_drift";
/// Gauge `{sku}`: shards whose slice is missing at the SKU's last reconciliation.
pub const RECONCILE_MISSING: &str = "flashgate_reconcile_missing_slices";
/// Gauge `{shard}`: the shard master's `used_memory` and `maxmemory` (0 = no limit), bytes.
pub const REDIS_USED_MEMORY: &str = "flashgate_redis_used_memory_bytes";
pub const REDIS_MAX_MEMORY: &str = "flashgate_redis_maxmemory_bytes";
pub const STALE_HOLDS: &str = "flashgate_consumer_stale_holds_resolved_total";
/// Rebuilds of a SKU's Redis state from the ledger (`rebuild.rs`).
pub const REBUILDS: &str = "flashgate_consumer_rebuilds_total";
pub const REPLICA_UNCONFIRMED: &str = "flashgate_consumer_replica_unconfirmed_total";

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the global recorder once per process (tests start several services in one
/// process) and returns the handle that renders `/metrics`; `None` when another recorder
/// was installed first.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                ])
                .ok()?
                // Rows per batch, not seconds: a batch holds up to 1 000 rows.
                .set_buckets_for_metric(
                    Matcher::Full(BATCH_ROWS.into()),
                    &[1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2000.0],
                )
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .clone()
}
