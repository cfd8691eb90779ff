//! `consumers` and `flush_requests`: each consumer process's heartbeat row and the flush
//! request counter of the rebuild's flush handshake (the consumer's half:
//! `consumer/src/flush.rs`; the rebuild's: `campaign-ops/src/rebuild/handshake.rs`, which
//! holds the argument). Also what a consumer's pending-entry recovery asks of `claims`:
//! whether a stream entry gone while pending is in the ledger.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

/// Raises a flush request: the new value of the counter. [`LedgerError::Invalid`] when the
/// counter's row is missing.
pub async fn raise_flush_request(pool: &MySqlPool, t: Duration) -> Result<u64, LedgerError> {
    // LAST_INSERT_ID(expr) hands the new value back in the statement's own result.
    let request = bounded(
        "raise flush request",
        t,
        sqlx::query("UPDATE flush_requests SET seq = LAST_INSERT_ID(seq + 1) WHERE id = 1")
            .execute(pool),
    )
    .await?
    .last_insert_id();
    if request == 0 {
        return Err(LedgerError::Invalid(
            "flush_requests has no row (migration 0016 not applied?)".into(),
        ));
    }
    Ok(request)
}

/// The latest flush request (0: none, or no counter row).
pub async fn flush_request(pool: &MySqlPool, t: Duration) -> Result<u64, LedgerError> {
    let seq: Option<u64> = bounded(
        "flush request",
        t,
        sqlx::query_scalar("SELECT seq FROM flush_requests WHERE id = 1").fetch_optional(pool),
    )
    .await?;
    Ok(seq.unwrap_or(0))
}

/// `(instance, name, flushed)` of every consumer whose heartbeat (by MySQL's clock) is
/// younger than `stale_after`.
pub async fn live(
    pool: &MySqlPool,
    stale_after: Duration,
    t: Duration,
) -> Result<Vec<(String, String, u64)>, LedgerError> {
    bounded(
        "live consumers",
        t,
        sqlx::query_as(
            "SELECT instance, name, flushed FROM consumers \
             WHERE beat_at >= CURRENT_TIMESTAMP(3) - INTERVAL ? MICROSECOND",
        )
        .bind(stale_after.as_micros() as u64)
        .fetch_all(pool),
    )
    .await
}

/// `(instance, flushed)` of every consumer row: the flush request each one honoured.
pub async fn answers(pool: &MySqlPool, t: Duration) -> Result<Vec<(String, u64)>, LedgerError> {
    bounded(
        "flush answers",
        t,
        sqlx::query_as("SELECT instance, flushed FROM consumers").fetch_all(pool),
    )
    .await
}

/// `(name, flushed)` of every consumer whose heartbeat is younger than `within`.
pub async fn recent(
    pool: &MySqlPool,
    within: Duration,
    t: Duration,
) -> Result<Vec<(String, u64)>, LedgerError> {
    bounded(
        "recent consumers",
        t,
        sqlx::query_as(
            "SELECT name, flushed FROM consumers \
             WHERE beat_at >= CURRENT_TIMESTAMP(3) - INTERVAL ? MICROSECOND",
        )
        .bind(within.as_micros() as u64)
        .fetch_all(pool),
    )
    .await
}

/// The instances of consumers silent for longer than `after` (whole seconds).
pub async fn silent(
    pool: &MySqlPool,
    after: Duration,
    t: Duration,
) -> Result<Vec<String>, LedgerError> {
    bounded(
        "silent consumers",
        t,
        sqlx::query_scalar(
            "SELECT instance FROM consumers \
             WHERE beat_at < CURRENT_TIMESTAMP(3) - INTERVAL ? SECOND",
        )
        .bind(after.as_secs())
        .fetch_all(pool),
    )
    .await
}

/// Deletes `instance`'s row by primary key if it is still silent for longer than `after`
/// (a DELETE ranging over `beat_at`, which has no index, would lock every row it scans and
/// hold up live consumers' heartbeats).
pub async fn forget(
    pool: &MySqlPool,
    instance: &str,
    after: Duration,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "forget silent consumer",
        t,
        sqlx::query(
            "DELETE FROM consumers WHERE instance = ? \
             AND beat_at < CURRENT_TIMESTAMP(3) - INTERVAL ? SECOND",
        )
        .bind(instance)
        .bind(after.as_secs())
        .execute(pool),
    )
    .await
    .map(drop)
}

/// Writes `instance`'s heartbeat: the beat at MySQL's clock, and `flushed` (never lowered).
pub async fn beat(
    pool: &MySqlPool,
    instance: &str,
    name: &str,
    flushed: u64,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "consumer heartbeat",
        t,
        sqlx::query(
            "INSERT INTO consumers (instance, name, beat_at, flushed) \
             VALUES (?, ?, CURRENT_TIMESTAMP(3), ?) ON DUPLICATE KEY UPDATE \
             beat_at = CURRENT_TIMESTAMP(3), flushed = GREATEST(flushed, VALUES(flushed))",
        )
        .bind(instance)
        .bind(name)
        .bind(flushed)
        .execute(pool),
    )
    .await
    .map(|_| ())
}

/// Deletes `instance`'s row (a clean stop).
pub async fn deregister(pool: &MySqlPool, instance: &str, t: Duration) -> Result<(), LedgerError> {
    bounded(
        "deregister consumer",
        t,
        sqlx::query("DELETE FROM consumers WHERE instance = ?")
            .bind(instance)
            .execute(pool),
    )
    .await
    .map(drop)
}

/// True when `claims` holds `claim_id` (recovery: an entry XAUTOCLAIM reports deleted from
/// its stream while pending should be committed).
pub async fn claim_stored(
    pool: &MySqlPool,
    claim_id: &str,
    t: Duration,
) -> Result<bool, LedgerError> {
    let found: Option<String> = bounded(
        "find claim",
        t,
        sqlx::query_scalar("SELECT claim_id FROM claims WHERE claim_id = ?")
            .bind(claim_id)
            .fetch_optional(pool),
    )
    .await?;
    Ok(found.is_some())
}
