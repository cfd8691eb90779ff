//! `anomalies`: what the books disagree on, one row per `(kind, reference)`, for an
//! operator to read (collisions, stock guards, drift, oversold units, poison entries, ...).

use std::time::Duration;

use sqlx::MySql;

use crate::error::LedgerError;
use crate::pool::bounded;

/// The counter of anomalies recorded, by kind.
pub const ANOMALIES: &str = "flashgate_consumer_anomalies_total";

/// Records an anomaly once per `(kind, reference)`.
pub async fn anomaly<'c, E>(
    exec: E,
    kind: &str,
    reference: &str,
    sku: Option<u64>,
    detail: &str,
    timeout: Duration,
) -> Result<(), LedgerError>
where
    E: sqlx::Executor<'c, Database = MySql>,
{
    metrics::counter!(ANOMALIES, "kind" => kind.to_owned()).increment(1);
    bounded(
        "insert anomaly",
        timeout,
        sqlx::query("INSERT IGNORE INTO anomalies (kind, ref, sku, detail) VALUES (?, ?, ?, ?)")
            .bind(kind)
            .bind(reference)
            .bind(sku)
            .bind(detail)
            .execute(exec),
    )
    .await
    .map(drop)
}
