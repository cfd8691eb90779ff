//! The ledger's side of a reconciliation (`campaign-ops/src/reconcile/mod.rs`, whose doc
//! holds the ordering argument): one read before the Redis snapshots, one after, per shard
//! the releases and late claims its snapshot is compared with, and the claim a stale hold
//! was taken for.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

/// Read before the snapshots, in one transaction (one consistent InnoDB read view).
#[derive(Debug, Clone, Default)]
pub struct Before {
    /// Units released so far: the campaign's stock (its applied waves included).
    pub stock: i64,
    pub width: u16,
    /// `sku_stock.available`, and the units of active rows (pending / confirmed: a release
    /// gives its units back to `sku_stock` as it starts).
    pub available: i64,
    pub held_rows: i64,
    /// Waves applied (ledger side) and claims `released`, both as of this read.
    pub applied_waves: HashSet<String>,
    pub released: HashSet<String>,
}

/// One claim row as read after the snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub claim_id: String,
    pub qty: i64,
    pub shard: u16,
    pub status: String,
}

impl Row {
    /// Pending or confirmed: the ledger counts its units as sold and not coming back.
    pub fn active(&self) -> bool {
        self.status == "pending" || self.status == "confirmed"
    }
}

/// Read after the snapshots.
#[derive(Debug, Clone, Default)]
pub struct After {
    pub rows: Vec<Row>,
    /// Every wave id the ledger knows for the SKU, applied or not.
    pub waves: HashSet<String>,
    /// Every late claim of the SKU (`late_claims`): claim id → the generation it was judged
    /// against (`consumer/src/late.rs`).
    pub late: HashMap<String, u64>,
}

pub async fn before(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Before, LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let (stock, width): (u64, u16) = bounded(
        "read campaign",
        t,
        sqlx::query_as("SELECT stock, width FROM campaigns WHERE sku = ?")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?
    .ok_or_else(|| LedgerError::NotFound(format!("campaign for sku {sku}")))?;
    let available: Option<i64> = bounded(
        "read stock",
        t,
        sqlx::query_scalar("SELECT available FROM sku_stock WHERE sku = ?")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    let held_rows: Option<i64> = bounded(
        "held units",
        t,
        sqlx::query_scalar(
            "SELECT CAST(SUM(qty) AS SIGNED) FROM claims WHERE sku = ? \
             AND status IN ('pending', 'confirmed')",
        )
        .bind(sku)
        .fetch_one(&mut *tx),
    )
    .await?;
    let applied_waves: Vec<String> = bounded(
        "applied waves",
        t,
        sqlx::query_scalar(
            "SELECT wave_id FROM campaign_waves WHERE sku = ? AND applied_ms IS NOT NULL",
        )
        .bind(sku)
        .fetch_all(&mut *tx),
    )
    .await?;
    let released: Vec<String> = bounded(
        "released claims",
        t,
        sqlx::query_scalar("SELECT claim_id FROM claims WHERE sku = ? AND status = 'released'")
            .bind(sku)
            .fetch_all(&mut *tx),
    )
    .await?;
    bounded("end read", t, tx.rollback()).await?;
    Ok(Before {
        stock: stock as i64,
        width,
        available: available.unwrap_or(0),
        held_rows: held_rows.unwrap_or(0),
        applied_waves: applied_waves.into_iter().collect(),
        released: released.into_iter().collect(),
    })
}

pub async fn after(pool: &MySqlPool, sku: u64, t: Duration) -> Result<After, LedgerError> {
    let rows: Vec<(String, u32, u16, String)> = bounded(
        "claim rows",
        t,
        sqlx::query_as(
            "SELECT claim_id, qty, shard, CAST(status AS CHAR) FROM claims WHERE sku = ?",
        )
        .bind(sku)
        .fetch_all(pool),
    )
    .await?;
    let waves: Vec<String> = bounded(
        "waves",
        t,
        sqlx::query_scalar("SELECT wave_id FROM campaign_waves WHERE sku = ?")
            .bind(sku)
            .fetch_all(pool),
    )
    .await?;
    let late: Vec<(String, u64)> = bounded(
        "late claims",
        t,
        sqlx::query_as("SELECT claim_id, gen FROM late_claims WHERE sku = ?")
            .bind(sku)
            .fetch_all(pool),
    )
    .await?;
    Ok(After {
        late: late.into_iter().collect(),
        rows: rows
            .into_iter()
            .map(|(claim_id, qty, shard, status)| Row {
                claim_id,
                qty: i64::from(qty),
                shard,
                status,
            })
            .collect(),
        waves: waves.into_iter().collect(),
    })
}

/// Claim ids of `shard` whose release started (`releasing`, or `released`), with `true` for
/// `releasing`: the only claims a release can have added to the shard's release set (the
/// ledger says `releasing` before the release script runs). Read between the release-set
/// scan and the anchor of a snapshot (see `snapshot.rs`).
pub async fn releases(
    pool: &MySqlPool,
    sku: u64,
    shard: u16,
    t: Duration,
) -> Result<Vec<(String, bool)>, LedgerError> {
    let rows: Vec<(String, String)> = bounded(
        "releases of a shard",
        t,
        sqlx::query_as(
            "SELECT claim_id, CAST(status AS CHAR) FROM claims WHERE sku = ? AND shard = ? \
             AND status IN ('releasing', 'released')",
        )
        .bind(sku)
        .bind(shard)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, status)| (id, status == "releasing"))
        .collect())
}

/// One late claim taking from a shard, as the ledger lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Late {
    pub claim_id: String,
    /// The rebuild generation it was judged against.
    pub gen: u64,
    /// `applied_ms` set: Redis counted it (or a newer rebuild did, from the ledger).
    pub applied: bool,
}

/// Every late claim of `sku` whose units come from `shard`. Read just before and just after
/// a snapshot's anchor (see `snapshot.rs`); a SKU has late claims only after a rebuild found
/// a consumer holding claims Redis lost, so the list is what consumers held in memory then.
pub async fn late_of_shard(
    pool: &MySqlPool,
    sku: u64,
    shard: u16,
    t: Duration,
) -> Result<Vec<Late>, LedgerError> {
    let rows: Vec<(String, u64, i64)> = bounded(
        "late claims of a shard",
        t,
        sqlx::query_as(
            "SELECT l.claim_id, l.gen, l.applied_ms IS NOT NULL FROM late_claims l \
             JOIN claims c ON c.claim_id = l.claim_id WHERE l.sku = ? AND c.shard = ?",
        )
        .bind(sku)
        .bind(shard)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(claim_id, gen, applied)| Late {
            claim_id,
            gen,
            applied: applied != 0,
        })
        .collect())
}

/// The claim `(sku, user, user_seq)` a stale hold was taken for, when the ledger has it:
/// `(claim id, shard, qty, 1 when it is a late claim not applied yet else 0)`. Read by the
/// stale-hold resolution before each measurement (`campaign-ops/src/reconcile/holds.rs`).
pub async fn held_claim(
    pool: &MySqlPool,
    sku: u64,
    user: &str,
    user_seq: u64,
    t: Duration,
) -> Result<Option<(String, u16, u32, i64)>, LedgerError> {
    bounded(
        "find held claim",
        t,
        sqlx::query_as(
            "SELECT c.claim_id, c.shard, c.qty, \
             CAST(l.claim_id IS NOT NULL AND l.applied_ms IS NULL AS SIGNED) \
             FROM claims c LEFT JOIN late_claims l ON l.claim_id = c.claim_id \
             WHERE c.sku = ? AND c.user_id = ? AND c.user_seq = ?",
        )
        .bind(sku)
        .bind(user)
        .bind(user_seq)
        .fetch_optional(pool),
    )
    .await
}
