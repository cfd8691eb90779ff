//! A draw's grants: the claim that granted each rank, and the claims a draw campaign holds.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

/// How a draw's claims stand in the ledger: the users who hold a grant (a claim under the
/// grant's request id `draw`, any status), and the claims made any other way, which a
/// draw campaign must never have (a sale first come, first served).
pub async fn claims_of_draw(
    pool: &MySqlPool,
    sku: u64,
    grant_request: &str,
    t: Duration,
) -> Result<(Vec<String>, u64), LedgerError> {
    let granted: Vec<String> = bounded(
        "draw grants",
        t,
        sqlx::query_scalar(
            "SELECT CAST(user_id AS CHAR) FROM claims WHERE sku = ? AND request_id = ? \
             ORDER BY user_id",
        )
        .bind(sku)
        .bind(grant_request)
        .fetch_all(pool),
    )
    .await?;
    let other: i64 = bounded(
        "draw other claims",
        t,
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM claims WHERE sku = ? \
             AND (request_id IS NULL OR request_id <> ?)",
        )
        .bind(sku)
        .bind(grant_request)
        .fetch_one(pool),
    )
    .await?;
    Ok((granted, other as u64))
}

/// Records the claim that granted `rank` (on its row), before `granted_rank` moves past it:
/// the win is in the ledger from then on, whether or not the claim's stream record has
/// reached the claims table.
pub async fn record_win(
    pool: &MySqlPool,
    sku: u64,
    rank: u32,
    claim_id: &str,
    claim_shard: u16,
    t: Duration,
) -> Result<(), LedgerError> {
    let n = bounded(
        "draw win",
        t,
        sqlx::query(
            "UPDATE draw_ranks SET claim_id = ?, claim_shard = ? WHERE sku = ? AND rnk = ?",
        )
        .bind(claim_id)
        .bind(claim_shard)
        .bind(sku)
        .bind(rank)
        .execute(pool),
    )
    .await?
    .rows_affected();
    if n == 0 {
        return Err(LedgerError::NotFound(format!(
            "rank {rank} of the draw of sku {sku}"
        )));
    }
    Ok(())
}

/// Every win of a draw: `(user, claim id, shard the unit came from)`, as the draw loop
/// recorded them and as the claims table holds them (grants made before migration 0020
/// are only there), for the marks and the restore (`campaign-ops/src/draw/run.rs`).
pub async fn wins(
    pool: &MySqlPool,
    sku: u64,
    grant_request: &str,
    t: Duration,
) -> Result<Vec<(String, String, u16)>, LedgerError> {
    bounded(
        "draw wins",
        t,
        sqlx::query_as(
            "SELECT CAST(user_id AS CHAR), claim_id, claim_shard FROM draw_ranks              WHERE sku = ? AND claim_id IS NOT NULL              UNION              SELECT CAST(user_id AS CHAR), claim_id, shard FROM claims              WHERE sku = ? AND request_id = ?",
        )
        .bind(sku)
        .bind(sku)
        .bind(grant_request)
        .fetch_all(pool),
    )
    .await
}

/// Every grant of a draw in the claims table: `(user, claim id, shard the unit came
/// from)`.
pub async fn grants(
    pool: &MySqlPool,
    sku: u64,
    grant_request: &str,
    t: Duration,
) -> Result<Vec<(String, String, u16)>, LedgerError> {
    bounded(
        "draw grants with claims",
        t,
        sqlx::query_as(
            "SELECT CAST(user_id AS CHAR), claim_id, shard FROM claims \
             WHERE sku = ? AND request_id = ? ORDER BY user_id",
        )
        .bind(sku)
        .bind(grant_request)
        .fetch_all(pool),
    )
    .await
}
