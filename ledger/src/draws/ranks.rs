//! A draw's result: its ranks, recorded once, read back, and how far they are granted.

use std::time::Duration;

use sqlx::{MySql, MySqlPool, QueryBuilder, Transaction};

use super::{Ranked, CHUNK};
use crate::error::LedgerError;
use crate::pool::bounded;

/// Records the draw's result once: false, with nothing written, when it is drawn already
/// (a second drawer lost the race; the first result stands). `ranks` must be 1..=n in order,
/// and computed from the ledger's entries when it held `entrants` of them: `Invalid`, with
/// nothing written, when it holds another count now (entries came in meanwhile; draw
/// again); `Invalid` too for ranks out of order, `NotFound` without a draws row. Entries
/// committed after the result are refused ([`commit_entries`](super::commit_entries)).
pub async fn record(
    pool: &MySqlPool,
    sku: u64,
    ranks: &[Ranked],
    entrants: u64,
    drawn_at_ms: i64,
    t: Duration,
) -> Result<bool, LedgerError> {
    in_order(sku, ranks)?;
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let state: Option<String> = bounded(
        "lock draw",
        t,
        sqlx::query_scalar("SELECT CAST(state AS CHAR) FROM draws WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    match state.as_deref() {
        None => return Err(LedgerError::NotFound(format!("draw of sku {sku}"))),
        Some("drawn") => {
            bounded("rollback", t, tx.rollback()).await?;
            return Ok(false);
        }
        Some(_) => {}
    }
    // The draw was computed from `entrants` entries; one committed since (the row lock
    // now keeps any more out) would be in the ledger without having been drawn.
    let now_entered: i64 = bounded(
        "count draw entries",
        t,
        sqlx::query_scalar("SELECT COUNT(*) FROM draw_entries WHERE sku = ?")
            .bind(sku)
            .fetch_one(&mut *tx),
    )
    .await?;
    if now_entered as u64 != entrants {
        bounded("rollback", t, tx.rollback()).await?;
        return Err(LedgerError::Invalid(format!(
            "draw of sku {sku} computed from {entrants} entries; the ledger holds {now_entered} now: draw again"
        )));
    }
    insert(&mut tx, sku, ranks, t).await?;
    bounded(
        "mark drawn",
        t,
        sqlx::query(
            "UPDATE draws SET state = 'drawn', drawn_at_ms = ?, entrants = ? WHERE sku = ?",
        )
        .bind(drawn_at_ms)
        .bind(entrants)
        .bind(sku)
        .execute(&mut *tx),
    )
    .await?;
    bounded("commit", t, tx.commit()).await?;
    Ok(true)
}

/// `Invalid` unless `ranks` are 1..=n in order.
fn in_order(sku: u64, ranks: &[Ranked]) -> Result<(), LedgerError> {
    if let Some((i, r)) = ranks
        .iter()
        .enumerate()
        .find(|(i, r)| r.rank as usize != i + 1)
    {
        return Err(LedgerError::Invalid(format!(
            "draw of sku {sku}: rank {} at position {}",
            r.rank,
            i + 1
        )));
    }
    Ok(())
}

/// Inserts the ranks of `sku`, `CHUNK` a statement.
async fn insert(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    ranks: &[Ranked],
    t: Duration,
) -> Result<(), LedgerError> {
    for chunk in ranks.chunks(CHUNK) {
        let mut q =
            QueryBuilder::<MySql>::new("INSERT INTO draw_ranks (sku, rnk, user_id, priority) ");
        q.push_values(chunk, |mut b, r| {
            b.push_bind(sku)
                .push_bind(r.rank)
                .push_bind(&r.user)
                .push_bind(r.priority);
        });
        // Once per draw: not worth a place in the statement cache.
        bounded(
            "insert draw ranks",
            t,
            q.build().persistent(false).execute(&mut **tx),
        )
        .await?;
    }
    Ok(())
}

/// Ranks after `after_rank`, in order, at most `limit`.
pub async fn ranks(
    pool: &MySqlPool,
    sku: u64,
    after_rank: u32,
    limit: u32,
    t: Duration,
) -> Result<Vec<Ranked>, LedgerError> {
    let rows: Vec<(u32, String, u64)> = bounded(
        "draw ranks",
        t,
        sqlx::query_as(
            "SELECT rnk, CAST(user_id AS CHAR), priority FROM draw_ranks WHERE sku = ? AND rnk > ? ORDER BY rnk LIMIT ?",
        )
        .bind(sku)
        .bind(after_rank)
        .bind(limit)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(rank, user, priority)| Ranked {
            rank,
            user,
            priority,
        })
        .collect())
}

/// `user`'s rank in the draw of `sku` (`None`: not ranked, or not drawn yet).
pub async fn rank_of(
    pool: &MySqlPool,
    sku: u64,
    user: &str,
    t: Duration,
) -> Result<Option<u32>, LedgerError> {
    bounded(
        "draw rank of user",
        t,
        sqlx::query_scalar("SELECT rnk FROM draw_ranks WHERE sku = ? AND user_id = ?")
            .bind(sku)
            .bind(user)
            .fetch_optional(pool),
    )
    .await
}

/// Moves `granted_rank` forward to `rank`, never back (two granters may finish out of order);
/// `NotFound` without a draws row.
pub async fn set_granted(
    pool: &MySqlPool,
    sku: u64,
    rank: u32,
    t: Duration,
) -> Result<(), LedgerError> {
    let n = bounded(
        "draw granted rank",
        t,
        sqlx::query("UPDATE draws SET granted_rank = GREATEST(granted_rank, ?) WHERE sku = ?")
            .bind(rank)
            .bind(sku)
            .execute(pool),
    )
    .await?
    .rows_affected();
    if n == 0 {
        return Err(LedgerError::NotFound(format!("draw of sku {sku}")));
    }
    Ok(())
}
