//! Campaign administration: MySQL is the source of truth for a campaign; preheat copies it
//! into Redis and never overwrites a live slice.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shard_router::{PreheatOutcome, SkuMeta, StockClient};
use sqlx::{MySqlPool, Row};

use consumer::db::bounded;
use consumer::replica::ReplicaWait;
use consumer::ConsumerError;

/// A campaign as stored in `campaigns` and accepted by the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Campaign {
    pub sku: u64,
    #[serde(default)]
    pub name: String,
    pub stock: u64,
    pub width: u16,
    pub limit: u32,
    pub start_ms: i64,
    pub end_ms: i64,
    /// Seconds a claim may stay pending (unpaid) before it is released.
    pub payment_timeout_s: u32,
}

impl Campaign {
    pub fn validate(&self, shards: u16) -> Result<(), ConsumerError> {
        let bad = |m: String| Err(ConsumerError::Invalid(m));
        if self.width == 0 || self.width > shards {
            return bad(format!("width {} must be in 1..={shards}", self.width));
        }
        if self.limit == 0 {
            return bad("limit must be at least 1".into());
        }
        if self.end_ms <= self.start_ms {
            return bad("end_ms must be after start_ms".into());
        }
        if self.stock > i64::MAX as u64 {
            return bad("stock too large".into());
        }
        if self.payment_timeout_s == 0 {
            return bad("payment_timeout_s must be at least 1".into());
        }
        if self.name.len() > 200 {
            return bad("name longer than 200 bytes".into());
        }
        Ok(())
    }

    pub fn meta(&self) -> SkuMeta {
        SkuMeta {
            sku: self.sku,
            stock: self.stock,
            width: self.width,
            limit: self.limit,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
        }
    }
}

/// Creates or updates a campaign. A stock change moves the ledger's available count by the
/// same delta (refused when that would go negative: more already sold than the new stock).
/// Width cannot change once created: claims already name their shards.
pub async fn put(
    pool: &MySqlPool,
    c: &Campaign,
    shards: u16,
    t: Duration,
) -> Result<(), ConsumerError> {
    c.validate(shards)?;
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let old: Option<(u64, u16)> = bounded(
        "read campaign",
        t,
        sqlx::query_as("SELECT stock, width FROM campaigns WHERE sku = ? FOR UPDATE")
            .bind(c.sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    if let Some((_, width)) = old {
        if width != c.width {
            return Err(ConsumerError::Invalid(format!(
                "width of sku {} is {width} and cannot change",
                c.sku
            )));
        }
    }
    bounded(
        "upsert campaign",
        t,
        sqlx::query(
            "INSERT INTO campaigns (sku, name, stock, width, per_user_limit, start_ms, end_ms, payment_timeout_s) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE name = VALUES(name), stock = VALUES(stock), \
             per_user_limit = VALUES(per_user_limit), start_ms = VALUES(start_ms), end_ms = VALUES(end_ms), \
             payment_timeout_s = VALUES(payment_timeout_s)",
        )
        .bind(c.sku)
        .bind(&c.name)
        .bind(c.stock)
        .bind(c.width)
        .bind(c.limit)
        .bind(c.start_ms)
        .bind(c.end_ms)
        .bind(c.payment_timeout_s)
        .execute(&mut *tx),
    )
    .await?;
    let delta = c.stock as i64 - old.map(|(s, _)| s as i64).unwrap_or(0);
    let available: Option<i64> = bounded(
        "read stock",
        t,
        sqlx::query_scalar("SELECT available FROM sku_stock WHERE sku = ? FOR UPDATE")
            .bind(c.sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    let next = available.unwrap_or(0) + delta;
    if next < 0 {
        return Err(ConsumerError::Invalid(format!(
            "stock {} is below what sku {} already holds in active claims",
            c.stock, c.sku
        )));
    }
    bounded(
        "stock row",
        t,
        sqlx::query(
            "INSERT INTO sku_stock (sku, available) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE available = VALUES(available)",
        )
        .bind(c.sku)
        .bind(next)
        .execute(&mut *tx),
    )
    .await?;
    bounded("commit", t, tx.commit()).await?;
    Ok(())
}

/// [`put`] for operators (CLI and admin API): refuses a stock change once the SKU is
/// preheated. Preheat never overwrites a live slice, so a new stock would reach the ledger
/// but not Redis, and Redis would keep selling the old one.
pub async fn put_checked(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    shards: u16,
    t: Duration,
) -> Result<(), ConsumerError> {
    match get(pool, c.sku, t).await {
        Ok(old) if old.stock != c.stock => {
            let live = client
                .slices(c.sku, old.width)
                .await?
                .iter()
                .any(|(_, slice)| slice.is_some());
            if live {
                return Err(ConsumerError::Invalid(format!(
                    "sku {} is preheated: its stock {} cannot change to {} (live slices are never overwritten)",
                    c.sku, old.stock, c.stock
                )));
            }
        }
        Ok(_) | Err(ConsumerError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    put(pool, c, shards, t).await
}

pub async fn get(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Campaign, ConsumerError> {
    let row = bounded(
        "read campaign",
        t,
        sqlx::query(
            "SELECT sku, name, stock, width, per_user_limit, start_ms, end_ms, payment_timeout_s \
             FROM campaigns WHERE sku = ?",
        )
        .bind(sku)
        .fetch_optional(pool),
    )
    .await?
    .ok_or_else(|| ConsumerError::NotFound(format!("campaign for sku {sku}")))?;
    Ok(Campaign {
        sku: row.get(0),
        name: row.get(1),
        stock: row.get(2),
        width: row.get(3),
        limit: row.get(4),
        start_ms: row.get(5),
        end_ms: row.get(6),
        payment_timeout_s: row.get(7),
    })
}

pub async fn list(pool: &MySqlPool, t: Duration) -> Result<Vec<u64>, ConsumerError> {
    bounded(
        "list campaigns",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns ORDER BY sku").fetch_all(pool),
    )
    .await
}

/// Preheats Redis from the stored campaign; live slices are left as they are. Once the
/// ledger holds claims of the SKU, or a slice is missing (a first preheat, or a loss), the
/// full split could refill sold stock: then this is the rebuild from the ledger
/// (`rebuild.rs`) instead. Only when every slice is live and the ledger holds no claim is
/// it the plain preheat (limit and window updated, nothing created).
///
/// A slice missing with an empty ledger and generation 0 is either a first preheat or a
/// loss while a consumer still holds the campaign's first batch in memory; nothing tells
/// the two apart. The rebuild path writes the split fenced, under the campaign row, with
/// generation 1, so records claimed before it (generation 0) that commit later are counted
/// as late claims. No flush handshake and no quiesce then: with generation 0 no preheat
/// of this version ran before, so no consumer holds records (a campaign preheated by an
/// older version aside, whose records are still caught as late).
pub async fn preheat(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
) -> Result<Vec<(u16, PreheatOutcome)>, ConsumerError> {
    preheat_with(pool, client, sku, ReplicaWait::default(), t).await
}

/// [`preheat`] whose rebuild waits for replicas under `replicas` (`--replica-wait`: the
/// rebuild confirms its write, `rebuild.rs` step 5); `ConsumerError::Unconfirmed` when none
/// did: written, retryable (a preheat again finds the slices live, or rebuilds again).
pub async fn preheat_with(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<Vec<(u16, PreheatOutcome)>, ConsumerError> {
    let c = get(pool, sku, t).await?;
    let all_live = client
        .slices(sku, c.width)
        .await?
        .iter()
        .all(|(_, v)| v.is_some());
    if all_live && !crate::rebuild::any_claim(pool, sku, t).await? {
        let out = client.preheat(&c.meta()).await?;
        if !out
            .iter()
            .any(|(_, o)| matches!(o, PreheatOutcome::Rebuilding))
        {
            return Ok(out);
        }
    }
    let mut opts = crate::rebuild::Options::new(t);
    opts.replica_wait = replicas;
    let first = !crate::rebuild::ledger_has_claims(pool, sku, t).await?;
    if first {
        opts.quiesce = Duration::ZERO;
        opts.flush_wait = Duration::ZERO;
    }
    let r = crate::rebuild::rebuild(pool, client, sku, &opts).await?;
    Ok(r.slices
        .into_iter()
        .map(|(shard, slice)| {
            let o = if first {
                PreheatOutcome::Preheated { slice }
            } else {
                PreheatOutcome::Rebuilt { slice }
            };
            (shard, o)
        })
        .collect())
}

/// A campaign's state across the ledger and Redis.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub campaign: Campaign,
    /// Units the ledger counts as not held by an active claim.
    pub available: i64,
    pub pending: i64,
    pub confirmed: i64,
    pub releasing: i64,
    pub released: i64,
    /// Each shard's slice; `None` where it is not preheated.
    pub slices: Vec<(u16, Option<i64>)>,
}

pub async fn status(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
) -> Result<Status, ConsumerError> {
    let campaign = get(pool, sku, t).await?;
    let available: Option<i64> = bounded(
        "read stock",
        t,
        sqlx::query_scalar("SELECT available FROM sku_stock WHERE sku = ?")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await?;
    let rows: Vec<(String, i64)> = bounded(
        "count claims",
        t,
        sqlx::query_as("SELECT CAST(status AS CHAR), CAST(SUM(qty) AS SIGNED) FROM claims WHERE sku = ? GROUP BY status")
            .bind(sku)
            .fetch_all(pool),
    )
    .await?;
    let units = |s: &str| {
        rows.iter()
            .find(|(k, _)| k == s)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    };
    let slices = client.slices(sku, campaign.width).await?;
    Ok(Status {
        available: available.unwrap_or(0),
        pending: units("pending"),
        confirmed: units("confirmed"),
        releasing: units("releasing"),
        released: units("released"),
        slices,
        campaign,
    })
}
