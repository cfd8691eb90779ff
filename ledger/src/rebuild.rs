//! The rebuild's statements (the steps and their ordering argument: `campaign-ops/src/rebuild.rs`):
//! `campaigns.rebuild_gen` (the campaign row locked for the read, the generation bumped, read
//! by the watch), the applied `campaign_waves`, and its reads of `claims` (the SKU's claims
//! by pages, each shard stream's highest claim id, whether the SKU has any claim). The
//! statements inside the rebuild's transaction take it as `tx`: it holds the campaign row
//! `FOR UPDATE` from [`lock_campaign`] to its commit, which stays with the caller, as do
//! the Redis reads in between.

use std::time::Duration;

use sqlx::{MySql, MySqlPool, Transaction};

use crate::error::LedgerError;
use crate::pool::bounded;
use crate::rows::{Claim, COLUMNS};

/// Begins the rebuild's transaction (its begin and commit stay with the caller, around the
/// Redis reads it makes under the campaign row).
pub async fn begin(
    pool: &MySqlPool,
    t: Duration,
) -> Result<Transaction<'static, MySql>, LedgerError> {
    bounded("begin", t, pool.begin()).await
}

/// Commits the rebuild's transaction, releasing the campaign row.
pub async fn commit(tx: Transaction<'_, MySql>, t: Duration) -> Result<(), LedgerError> {
    bounded("commit", t, tx.commit()).await
}

/// The campaign row as the rebuild locks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    /// `campaigns.rebuild_gen` before this rebuild bumps it.
    pub rebuild_gen: u64,
    /// The campaign's stock, its applied waves included.
    pub stock: u64,
}

/// Locks the campaign row of `sku` (`FOR UPDATE`, until `tx` ends): batches of the SKU take
/// it shared first (`claims.rs`), so they wait from here to the rebuild's commit.
/// [`LedgerError::NotFound`] when there is no such campaign.
pub async fn lock_campaign(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    t: Duration,
) -> Result<Locked, LedgerError> {
    let locked: Option<(u64, u64)> = bounded(
        "lock campaign",
        t,
        sqlx::query_as("SELECT rebuild_gen, stock FROM campaigns WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut **tx),
    )
    .await?;
    let (rebuild_gen, stock) =
        locked.ok_or_else(|| LedgerError::NotFound(format!("campaign {sku}")))?;
    Ok(Locked { rebuild_gen, stock })
}

/// Stock waves of `sku` already inside the campaign's stock (`applied_ms` set).
pub async fn applied_waves(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    t: Duration,
) -> Result<Vec<String>, LedgerError> {
    bounded(
        "applied waves",
        t,
        sqlx::query_scalar(
            "SELECT wave_id FROM campaign_waves WHERE sku = ? AND applied_ms IS NOT NULL",
        )
        .bind(sku)
        .fetch_all(&mut **tx),
    )
    .await
}

/// Sets the campaign's rebuild generation to `gen`, in the rebuild's transaction.
pub async fn bump_gen(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    gen: u64,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "bump rebuild generation",
        t,
        sqlx::query("UPDATE campaigns SET rebuild_gen = ? WHERE sku = ?")
            .bind(gen)
            .bind(sku)
            .execute(&mut **tx),
    )
    .await
    .map(drop)
}

/// A ledger claim with its status, as [`claims_page`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Standing {
    #[sqlx(flatten)]
    pub claim: Claim,
    /// `pending`, `confirmed`, `releasing` or `released`.
    pub status: String,
}

impl Standing {
    /// Pending or confirmed: its units are sold and not coming back.
    pub fn active(&self) -> bool {
        self.status == "pending" || self.status == "confirmed"
    }
}

/// Up to `page` claims of `sku` with a claim id above `after`, in claim id order (keyset
/// pagination: one bounded statement per page however large the ledger).
pub async fn claims_page(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    after: &str,
    page: usize,
    t: Duration,
) -> Result<Vec<Standing>, LedgerError> {
    bounded(
        "rebuild claims",
        t,
        sqlx::query_as(&format!(
            "SELECT {COLUMNS}, CAST(c.status AS CHAR) AS status FROM claims c \
             WHERE c.sku = ? AND c.claim_id > ? ORDER BY c.claim_id LIMIT ?"
        ))
        .bind(sku)
        .bind(after)
        .bind(page as u64)
        .fetch_all(&mut **tx),
    )
    .await
}

/// The greatest claim id of `shard`'s stream as text (`<shard>-<ms>-<seq>`), over every
/// SKU: one read on the primary key.
pub async fn stream_top(
    tx: &mut Transaction<'_, MySql>,
    shard: u16,
    t: Duration,
) -> Result<Option<String>, LedgerError> {
    bounded(
        "stream floor",
        t,
        sqlx::query_scalar(
            "SELECT claim_id FROM claims WHERE claim_id LIKE ? ORDER BY claim_id DESC LIMIT 1",
        )
        .bind(format!("{shard}-%"))
        .fetch_optional(&mut **tx),
    )
    .await
}

/// Every claim id of `shard`'s stream whose entry id has the millisecond part `ms`.
pub async fn stream_same_ms(
    tx: &mut Transaction<'_, MySql>,
    shard: u16,
    ms: u64,
    t: Duration,
) -> Result<Vec<String>, LedgerError> {
    bounded(
        "stream floor seqs",
        t,
        sqlx::query_scalar("SELECT claim_id FROM claims WHERE claim_id LIKE ?")
            .bind(format!("{shard}-{ms}-%"))
            .fetch_all(&mut **tx),
    )
    .await
}

/// True when the ledger holds any claim of `sku`, or a rebuild of it already ran
/// (`rebuild_gen > 0`).
pub async fn claims_or_rebuilt(
    pool: &MySqlPool,
    sku: u64,
    t: Duration,
) -> Result<bool, LedgerError> {
    let any: Option<i64> = bounded(
        "any claim",
        t,
        sqlx::query_scalar(
            "SELECT 1 FROM claims WHERE sku = ? \
             UNION ALL SELECT 1 FROM campaigns WHERE sku = ? AND rebuild_gen > 0 LIMIT 1",
        )
        .bind(sku)
        .bind(sku)
        .fetch_optional(pool),
    )
    .await?;
    Ok(any.is_some())
}

/// True when the ledger holds any claim of `sku`.
pub async fn any_claim(pool: &MySqlPool, sku: u64, t: Duration) -> Result<bool, LedgerError> {
    let any: Option<i64> = bounded(
        "any claim",
        t,
        sqlx::query_scalar("SELECT 1 FROM claims WHERE sku = ? LIMIT 1")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await?;
    Ok(any.is_some())
}

/// Campaigns not closing whose window is open at `now` (ms), or that still have claims
/// pending or releasing: the ones the watch looks at, filtered in SQL so the cost does not
/// grow with history.
pub async fn candidates(pool: &MySqlPool, now: i64, t: Duration) -> Result<Vec<u64>, LedgerError> {
    bounded(
        "rebuild candidates",
        t,
        sqlx::query_scalar(
            "SELECT c.sku FROM campaigns c WHERE c.closing_ms IS NULL AND (c.end_ms > ? OR EXISTS \
             (SELECT 1 FROM claims k WHERE k.sku = c.sku AND k.status IN ('pending', 'releasing')))",
        )
        .bind(now)
        .fetch_all(pool),
    )
    .await
}

/// The campaign's rebuild generation (`campaigns.rebuild_gen`; a missing campaign is a
/// `Db` error, as the row is expected).
pub async fn rebuild_gen(pool: &MySqlPool, sku: u64, t: Duration) -> Result<u64, LedgerError> {
    bounded(
        "rebuild gen",
        t,
        sqlx::query_scalar("SELECT rebuild_gen FROM campaigns WHERE sku = ?")
            .bind(sku)
            .fetch_one(pool),
    )
    .await
}
