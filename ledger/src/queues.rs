//! Queue campaigns (migrations/0019_queues.sql): what the waiting room keeps in the ledger
//! so a Redis loss cannot undo it. The queue itself is in Redis (`lua/queue_join.lua`); the
//! admission step is `campaign-ops/src/queue.rs`.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

/// A queue's durable marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marks {
    pub admitted: u64,
    pub pre: Option<u64>,
    pub next_hw: u64,
}

/// Makes the campaign `sku` a queue campaign (its row must exist). Idempotent.
pub async fn create(pool: &MySqlPool, sku: u64, t: Duration) -> Result<(), LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let n = bounded(
        "queue mode",
        t,
        sqlx::query("UPDATE campaigns SET mode = 'queue' WHERE sku = ?")
            .bind(sku)
            .execute(&mut *tx),
    )
    .await?
    .rows_affected();
    let exists: Option<u64> = bounded(
        "queue campaign",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns WHERE sku = ?")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    if n == 0 && exists.is_none() {
        return Err(LedgerError::Invalid(format!("sku {sku} has no campaign")));
    }
    bounded(
        "queue row",
        t,
        sqlx::query("INSERT IGNORE INTO queues (sku) VALUES (?)")
            .bind(sku)
            .execute(&mut *tx),
    )
    .await?;
    bounded("commit", t, tx.commit()).await
}

/// The queue campaigns not closing, with their marks.
pub async fn live(pool: &MySqlPool, t: Duration) -> Result<Vec<(u64, Marks)>, LedgerError> {
    let rows: Vec<(u64, u64, Option<u64>, u64)> = bounded(
        "live queues",
        t,
        sqlx::query_as(
            "SELECT q.sku, q.admitted, q.pre, q.next_hw FROM queues q \
             JOIN campaigns c ON c.sku = q.sku WHERE c.closing_ms IS NULL ORDER BY q.sku",
        )
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(sku, admitted, pre, next_hw)| {
            (
                sku,
                Marks {
                    admitted,
                    pre,
                    next_hw,
                },
            )
        })
        .collect())
}

/// Moves the marks forward only: the watermark and the high-water never go back, and the
/// pre-queue's length is written once.
pub async fn advance(
    pool: &MySqlPool,
    sku: u64,
    m: &Marks,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "queue marks",
        t,
        sqlx::query(
            "UPDATE queues SET admitted = GREATEST(admitted, ?), pre = COALESCE(pre, ?), \
             next_hw = GREATEST(next_hw, ?) WHERE sku = ?",
        )
        .bind(m.admitted)
        .bind(m.pre)
        .bind(m.next_hw)
        .bind(sku)
        .execute(pool),
    )
    .await
    .map(drop)
}
