//! A claim's payment and release in `claims` (`pending → confirmed`, `pending|confirmed →
//! releasing → released`), and its units back to `sku_stock` as the release starts. The
//! Redis step between `releasing` and `released`, and why the steps are ordered so, are the
//! campaign operations' (`campaign-ops/src/release.rs`).

use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

mod scan;

pub use scan::due;

/// Why a claim is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Cancelled,
    PaymentTimeout,
}

impl Reason {
    /// As stored in `claims.release_reason` (and the release metric's label).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Cancelled => "cancelled",
            Reason::PaymentTimeout => "timeout",
        }
    }
}

/// A claim's `(sku, user, qty, shard, home, status)`.
pub type Row = (u64, String, u32, u16, u16, String);

/// The claim `claim_id` (`NotFound` when the ledger has none).
pub async fn row(pool: &MySqlPool, claim_id: &str, t: Duration) -> Result<Row, LedgerError> {
    bounded(
        "read claim",
        t,
        // user_id has a binary collation (byte-exact users); sqlx decodes only text as String.
        sqlx::query_as("SELECT sku, CAST(user_id AS CHAR), qty, shard, home, CAST(status AS CHAR) FROM claims WHERE claim_id = ?")
            .bind(claim_id)
            .fetch_optional(pool),
    )
    .await?
    .ok_or_else(|| LedgerError::NotFound(format!("claim {claim_id}")))
}

/// `pending → confirmed`; true when this call moved it.
pub async fn mark_confirmed(
    pool: &MySqlPool,
    claim_id: &str,
    t: Duration,
) -> Result<bool, LedgerError> {
    let done = bounded(
        "confirm",
        t,
        sqlx::query(
            "UPDATE claims SET status = 'confirmed' WHERE claim_id = ? AND status = 'pending'",
        )
        .bind(claim_id)
        .execute(pool),
    )
    .await?
    .rows_affected();
    Ok(done == 1)
}

/// Step 1 of a release: `→ releasing` with its reason, from `pending` or `confirmed` for a
/// cancel, from `pending` only for a payment timeout (a claim in any other status is left
/// as it is; read it back with [`row`]), and its units back to `sku_stock`, in one
/// transaction, once. Back before the Redis step returns them to a slice: once there they
/// can be sold again, and that claim's batch may commit before the release's last step,
/// so a later give-back would leave the batch's guarded UPDATE short (a false
/// `stock_guard`, `claims.rs`). A `releasing` claim never becomes active again.
pub async fn mark_releasing(
    pool: &MySqlPool,
    claim_id: &str,
    reason: Reason,
    t: Duration,
) -> Result<(), LedgerError> {
    let from = match reason {
        Reason::Cancelled => "status IN ('pending', 'confirmed')",
        Reason::PaymentTimeout => "status = 'pending'",
    };
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let moved = bounded(
        "mark releasing",
        t,
        sqlx::query(&format!(
            "UPDATE claims SET status = 'releasing', release_reason = ? WHERE claim_id = ? AND {from}"
        ))
        .bind(reason.as_str())
        .bind(claim_id)
        .execute(&mut *tx),
    )
    .await?
    .rows_affected();
    if moved == 1 {
        bounded(
            "stock back",
            t,
            sqlx::query(
                "UPDATE sku_stock s JOIN claims c ON c.sku = s.sku \
                 SET s.available = s.available + c.qty WHERE c.claim_id = ?",
            )
            .bind(claim_id)
            .execute(&mut *tx),
        )
        .await?;
    }
    bounded("commit", t, tx.commit()).await?;
    Ok(())
}

/// Step 3 of a release: `releasing → released` (its units went back at step 1). True when
/// this call moved it.
pub async fn mark_released(
    pool: &MySqlPool,
    claim_id: &str,
    t: Duration,
) -> Result<bool, LedgerError> {
    let moved = bounded(
        "mark released",
        t,
        sqlx::query(
            "UPDATE claims SET status = 'released' WHERE claim_id = ? AND status = 'releasing'",
        )
        .bind(claim_id)
        .execute(pool),
    )
    .await?
    .rows_affected();
    Ok(moved == 1)
}
