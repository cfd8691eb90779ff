//! `campaigns` and `sku_stock`: a campaign as the source of truth holds it (stock, width,
//! limit, window, payment timeout), where it is in its lifecycle, and the ledger's count of
//! units still available.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{MySqlPool, Row};

use crate::error::LedgerError;
use crate::pool::bounded;

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
    /// Refuses a campaign no sale could run (nothing is written).
    pub fn validate(&self, shards: u16) -> Result<(), LedgerError> {
        let bad = |m: String| Err(LedgerError::Invalid(m));
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
}

/// Creates or updates a campaign. A stock change moves the ledger's available count by the
/// same delta (refused when that would go negative: more already sold than the new stock).
/// Width cannot change once created: claims already name their shards.
pub async fn put(
    pool: &MySqlPool,
    c: &Campaign,
    shards: u16,
    t: Duration,
) -> Result<(), LedgerError> {
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
            return Err(LedgerError::Invalid(format!(
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
        return Err(LedgerError::Invalid(format!(
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

/// The campaign of `sku`.
pub async fn get(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Campaign, LedgerError> {
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
    .ok_or_else(|| LedgerError::NotFound(format!("campaign for sku {sku}")))?;
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

/// Every campaign's SKU.
pub async fn list(pool: &MySqlPool, t: Duration) -> Result<Vec<u64>, LedgerError> {
    bounded(
        "list campaigns",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns ORDER BY sku").fetch_all(pool),
    )
    .await
}

/// Where a campaign is in its lifecycle.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Lifecycle {
    pub closing_ms: Option<i64>,
    pub closed_ms: Option<i64>,
    pub closing_report: Option<serde_json::Value>,
}

pub async fn lifecycle(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Lifecycle, LedgerError> {
    let row: Option<(Option<i64>, Option<i64>, Option<String>)> = bounded(
        "read lifecycle",
        t,
        sqlx::query_as("SELECT closing_ms, closed_ms, closing_report FROM campaigns WHERE sku = ?")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await?;
    let (closing_ms, closed_ms, report) =
        row.ok_or_else(|| LedgerError::NotFound(format!("campaign for sku {sku}")))?;
    Ok(Lifecycle {
        closing_ms,
        closed_ms,
        closing_report: report.and_then(|r| serde_json::from_str(&r).ok()),
    })
}

/// True once close-out started: the campaign is no longer live.
pub async fn is_closing(pool: &MySqlPool, sku: u64, t: Duration) -> Result<bool, LedgerError> {
    Ok(lifecycle(pool, sku, t).await?.closing_ms.is_some())
}

/// Refuses an operation that would bring a closed campaign back to Redis.
pub async fn refuse_if_closed(
    pool: &MySqlPool,
    sku: u64,
    what: &str,
    t: Duration,
) -> Result<(), LedgerError> {
    if is_closing(pool, sku, t).await? {
        return Err(LedgerError::Invalid(format!(
            "sku {sku} is closed; {what} refused"
        )));
    }
    Ok(())
}

/// Campaigns the periodic loops still work on (close-out not started).
pub async fn open_campaigns(pool: &MySqlPool, t: Duration) -> Result<Vec<u64>, LedgerError> {
    bounded(
        "list open campaigns",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns WHERE closing_ms IS NULL ORDER BY sku")
            .fetch_all(pool),
    )
    .await
}

/// Campaigns whose close-out started (their series stay out of `/metrics` in every process).
pub async fn closing_campaigns(pool: &MySqlPool, t: Duration) -> Result<Vec<u64>, LedgerError> {
    bounded(
        "list closed campaigns",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns WHERE closing_ms IS NOT NULL")
            .fetch_all(pool),
    )
    .await
}

/// Campaigns whose window and payment timeout ended before `now_ms` and are not closed.
pub async fn due(pool: &MySqlPool, now_ms: i64, t: Duration) -> Result<Vec<u64>, LedgerError> {
    bounded(
        "due close-outs",
        t,
        sqlx::query_scalar(
            "SELECT sku FROM campaigns WHERE closed_ms IS NULL \
             AND end_ms + payment_timeout_s * 1000 <= ? ORDER BY sku",
        )
        .bind(now_ms)
        .fetch_all(pool),
    )
    .await
}

/// The ledger's count of units of `sku` still available (`sku_stock`; `None` without a row).
pub async fn available(
    pool: &MySqlPool,
    sku: u64,
    t: Duration,
) -> Result<Option<i64>, LedgerError> {
    bounded(
        "read stock",
        t,
        sqlx::query_scalar("SELECT available FROM sku_stock WHERE sku = ?")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await
}

/// Units of `sku`'s claims per status (`pending`, `confirmed`, ...; a status without claims
/// is not listed).
pub async fn units_by_status(
    pool: &MySqlPool,
    sku: u64,
    t: Duration,
) -> Result<Vec<(String, i64)>, LedgerError> {
    bounded(
        "count claims",
        t,
        sqlx::query_as("SELECT CAST(status AS CHAR), CAST(SUM(qty) AS SIGNED) FROM claims WHERE sku = ? GROUP BY status")
            .bind(sku)
            .fetch_all(pool),
    )
    .await
}
