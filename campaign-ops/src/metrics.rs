//! The operations' metric names (prefix `flashgate_`) and the process's Prometheus recorder
//! behind `/metrics`, which describes these and the data path's (`consumer::metrics`).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Log lines of any kind dropped because stderr could not keep up (`telemetry`).
pub const LOG_LINES_DROPPED: &str = "flashgate_log_lines_dropped_total";
/// Gauge: entries kept in `stream_poison` (not claim records, or rows MySQL refused).
pub const POISON_ENTRIES: &str = "flashgate_consumer_poison_entries";
pub const RELEASED: &str = "flashgate_consumer_released_total";
pub const RECONCILE_DRIFT: &str = "flashgate_reconcile_drift";
/// Gauge `{sku}`: shards whose slice is missing at the SKU's last reconciliation.
pub const RECONCILE_MISSING: &str = "flashgate_reconcile_missing_slices";
/// Gauge `{shard}`: the shard master's `used_memory` and `maxmemory` (0 = no limit), bytes.
pub const REDIS_USED_MEMORY: &str = "flashgate_redis_used_memory_bytes";
pub const REDIS_MAX_MEMORY: &str = "flashgate_redis_maxmemory_bytes";
pub const STALE_HOLDS: &str = "flashgate_consumer_stale_holds_resolved_total";
/// Gauge: this process's clock minus Redis's (`clock.rs`).
pub const CLOCK_SKEW_SECONDS: &str = "flashgate_consumer_clock_skew_seconds";
/// Rebuilds of a SKU's Redis state from the ledger (`rebuild.rs`).
pub const REBUILDS: &str = "flashgate_consumer_rebuilds_total";
/// Counter: consumers that did not confirm a rebuild's flush request within its bound
/// (`rebuild/handshake.rs`).
pub const REBUILD_FLUSH_UNANSWERED: &str = "flashgate_consumer_rebuild_flush_unanswered_total";
/// Gauge: shards whose Redis process the ledger has not vouched for at the last check
/// (`lua/guard.lua`: they sell nothing until rebuilt and vouched).
pub const UNVOUCHED_SHARDS: &str = "flashgate_consumer_unvouched_shards";
/// Gauge: 1 while MySQL answered the last health probe (what `/healthz` reports).
pub const DB_UP: &str = "flashgate_consumer_db_up";
/// Gauge: 1 while Redis answered the last health probe.
pub const REDIS_UP: &str = "flashgate_consumer_redis_up";

/// Every operations series with its `# HELP` text: [`install`] describes them and the data
/// path's, and the tests check that `/metrics` has a HELP line for each series it shows.
pub const DESCRIPTIONS: &[(&str, &str)] = &[
    (LOG_LINES_DROPPED, "Log lines dropped because stderr was not read fast enough (the log never blocks the consumer)."),
    (POISON_ENTRIES, "Stream entries kept in the ledger's stream_poison table instead of a claim row (not a claim record, or refused by MySQL); `consumer poison` lists them."),
    (RELEASED, "Claims released by reason (payment timeout, cancelled): units back to Redis."),
    (RECONCILE_DRIFT, "Units by which a SKU's last reconciliation missed stock = slices + in-flight + active ledger units − debts; 0 when it closes."),
    (RECONCILE_MISSING, "Shards whose stock slice was missing in Redis at the SKU's last reconciliation (claims there answer unknown_sku)."),
    (REDIS_USED_MEMORY, "used_memory of the Redis master holding the shard, in bytes."),
    (REDIS_MAX_MEMORY, "maxmemory of the Redis master holding the shard, in bytes (0 = no limit)."),
    (STALE_HOLDS, "Holds left by crashed gateways that the consumer resolved against the ledger."),
    (DB_UP, "1 while MySQL answered the last health probe (SELECT 1 within 2 s), else 0; /healthz is 503 while 0."),
    (REDIS_UP, "1 while Redis answered the last health probe (PING within 2 s), else 0; /healthz is 503 while 0."),
    (CLOCK_SKEW_SECONDS, "This consumer's clock minus Redis's TIME in seconds; holds and payment timeouts are decided by Redis's clock."),
    (REBUILDS, "Rebuilds of a SKU's Redis state from the ledger (after Redis lost data, or by preheat/rebuild)."),
    (UNVOUCHED_SHARDS, "Shards whose Redis process (a restart, a promoted replica) the ledger has not vouched for at the last check: they answer 503 restoring until their live SKUs are rebuilt from the ledger."),
    (REBUILD_FLUSH_UNANSWERED, "Consumers that did not confirm a rebuild's flush request: waited for up to the bound (dead, partitioned, stuck), or named without a wait (a heartbeat stale within the last minute, a stream reader with no heartbeat row); the rebuild then pauses, and what they commit later is a late claim, counted after the rebuild."),
];

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
                    Matcher::Full(consumer::metrics::BATCH_ROWS.into()),
                    &[1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2000.0],
                )
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            Some(handle)
        })
        .clone()
}

/// Gives every series its HELP text (the recorder keeps it for the process's life).
fn describe() {
    for (name, help) in consumer::metrics::DESCRIPTIONS.iter().chain(DESCRIPTIONS) {
        if consumer::metrics::HISTOGRAMS.contains(name) {
            metrics::describe_histogram!(*name, *help);
        } else if name.ends_with("_total") {
            metrics::describe_counter!(*name, *help);
        } else {
            metrics::describe_gauge!(*name, *help);
        }
    }
}
