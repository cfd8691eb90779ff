//! A campaign's close-out in `campaigns` (`closing_ms`, `closing_report`, `closed_ms`), and
//! the reads its checks make. The steps, their order and the Redis side are the campaign
//! operations' (`campaign-ops/src/closeout.rs`); the lifecycle as read back is
//! [`crate::campaigns::lifecycle`].

use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

/// Claims of `sku` still pending or releasing: a campaign closes only without any.
pub async fn open_claims(pool: &MySqlPool, sku: u64, t: Duration) -> Result<i64, LedgerError> {
    bounded(
        "open claims",
        t,
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM claims WHERE sku = ? AND status IN ('pending', 'releasing')",
        )
        .bind(sku)
        .fetch_one(pool),
    )
    .await
}

/// Campaigns closed at or before `before_ms`, in SKU order.
pub async fn closed_before(
    pool: &MySqlPool,
    before_ms: i64,
    t: Duration,
) -> Result<Vec<u64>, LedgerError> {
    bounded(
        "closed campaigns past their answers",
        t,
        sqlx::query_scalar(
            "SELECT sku FROM campaigns WHERE closed_ms IS NOT NULL AND closed_ms <= ? ORDER BY sku",
        )
        .bind(before_ms)
        .fetch_all(pool),
    )
    .await
}

/// Sets `closing_ms` (once).
pub async fn mark_closing(
    pool: &MySqlPool,
    sku: u64,
    now_ms: i64,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "mark closing",
        t,
        sqlx::query("UPDATE campaigns SET closing_ms = ? WHERE sku = ? AND closing_ms IS NULL")
            .bind(now_ms)
            .bind(sku)
            .execute(pool),
    )
    .await?;
    Ok(())
}

/// Stores `report` (JSON text) as the closing report, unless one is stored already.
pub async fn store_report(
    pool: &MySqlPool,
    sku: u64,
    report: &str,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "store closing report",
        t,
        sqlx::query(
            "UPDATE campaigns SET closing_report = ? WHERE sku = ? AND closing_report IS NULL",
        )
        .bind(report)
        .bind(sku)
        .execute(pool),
    )
    .await?;
    Ok(())
}

/// Sets `closed_ms` (once).
pub async fn mark_closed(
    pool: &MySqlPool,
    sku: u64,
    now_ms: i64,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "mark closed",
        t,
        sqlx::query("UPDATE campaigns SET closed_ms = ? WHERE sku = ? AND closed_ms IS NULL")
            .bind(now_ms)
            .bind(sku)
            .execute(pool),
    )
    .await?;
    Ok(())
}
