//! `campaign_waves`: stock waves as the ledger holds them (scheduled, placed in the release
//! order, applied), and the campaign's stock and `sku_stock` growing when one is applied.
//! The steps between (each shard's share in Redis, the replica fence) are the campaign
//! operations' (`campaign-ops/src/wave.rs`, whose doc holds the ordering argument).

use std::time::Duration;

use serde::Serialize;
use sqlx::MySqlPool;

use crate::campaigns;
use crate::error::LedgerError;
use crate::pool::bounded;

/// Longest wave id (the ledger column is 64 bytes).
pub const MAX_ID: usize = 64;

/// A wave as asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wave {
    pub sku: u64,
    pub id: String,
    pub units: u64,
    pub due_ms: i64,
}

/// Stores a wave scheduled by `scheduled_by` (`command` or `campaign`): idempotent for the
/// same id and units, refused otherwise, and refused for an unknown or closed campaign.
pub async fn store(
    pool: &MySqlPool,
    w: &Wave,
    scheduled_by: &str,
    t: Duration,
) -> Result<(), LedgerError> {
    if w.units == 0 || w.units > i64::MAX as u64 / 4 {
        return Err(LedgerError::Invalid(format!(
            "wave units {} must be in 1..",
            w.units
        )));
    }
    if w.id.is_empty() || w.id.len() > MAX_ID {
        return Err(LedgerError::Invalid(format!(
            "wave id must be 1..={MAX_ID} bytes"
        )));
    }
    campaigns::get(pool, w.sku, t).await?;
    campaigns::refuse_if_closed(pool, w.sku, "a wave", t).await?;
    bounded(
        "insert wave",
        t,
        sqlx::query(
            "INSERT IGNORE INTO campaign_waves (sku, wave_id, units, due_ms, scheduled_by) \
             VALUES (?, ?, ?, ?, ?)",
        )
        .bind(w.sku)
        .bind(&w.id)
        .bind(w.units)
        .bind(w.due_ms)
        .bind(scheduled_by)
        .execute(pool),
    )
    .await?;
    let (units, due): (u64, i64) = bounded(
        "read wave",
        t,
        sqlx::query_as("SELECT units, due_ms FROM campaign_waves WHERE sku = ? AND wave_id = ?")
            .bind(w.sku)
            .bind(&w.id)
            .fetch_one(pool),
    )
    .await?;
    // A retry keeps the first due time (a relative time resolves anew on every run).
    if units != w.units {
        return Err(LedgerError::Invalid(format!(
            "wave {} of sku {} exists with {units} units (due at {due} ms); use another id",
            w.id, w.sku
        )));
    }
    Ok(())
}

/// What a rerun of `consumer campaign` did to the waves its flags no longer list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// Not applied yet: removed, they will add nothing.
    pub cancelled: Vec<String>,
    /// Already applied, or being applied: their units are in the stock and stay.
    pub kept: Vec<String>,
}

/// Cancels the waves `consumer campaign` scheduled for `sku` that are not in `listed`.
/// Under the campaign row's lock, the lock [`place`] places a wave under: a wave either got
/// its place first (it is applied in full and kept) or is removed before it has one.
pub async fn cancel_dropped(
    pool: &MySqlPool,
    sku: u64,
    listed: &[String],
    t: Duration,
) -> Result<Dropped, LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    bounded(
        "lock campaign",
        t,
        sqlx::query("SELECT sku FROM campaigns WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .execute(&mut *tx),
    )
    .await?;
    let rows: Vec<(String, Option<i64>)> = bounded(
        "campaign waves",
        t,
        sqlx::query_as(
            "SELECT wave_id, start_unit FROM campaign_waves WHERE sku = ? AND scheduled_by = 'campaign'",
        )
        .bind(sku)
        .fetch_all(&mut *tx),
    )
    .await?;
    let mut out = Dropped::default();
    for (id, start) in rows.into_iter().filter(|(id, _)| !listed.contains(id)) {
        if start.is_some() {
            out.kept.push(id);
            continue;
        }
        bounded(
            "cancel wave",
            t,
            sqlx::query(
                "DELETE FROM campaign_waves WHERE sku = ? AND wave_id = ? AND start_unit IS NULL",
            )
            .bind(sku)
            .bind(&id)
            .execute(&mut *tx),
        )
        .await?;
        out.cancelled.push(id);
    }
    bounded("commit", t, tx.commit()).await?;
    if !out.cancelled.is_empty() {
        tracing::info!(sku, cancelled = ?out.cancelled, "waves no longer listed were cancelled");
    }
    Ok(out)
}

/// Where step 1 of a wave left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// The ledger has the wave applied already.
    Already,
    /// Its place in the release order: `start` units were released before it.
    At {
        units: u64,
        start: i64,
        width: u16,
        /// The campaign's rebuild generation, read under the same lock.
        gen: u64,
    },
}

/// Units of the SKU's wave that has its place and is not applied yet: in the slices (or
/// about to be) before they are in the campaign's stock.
pub async fn in_flight(pool: &MySqlPool, sku: u64, t: Duration) -> Result<u64, LedgerError> {
    let units: Option<u64> = bounded(
        "wave in flight",
        t,
        sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(units), 0) AS UNSIGNED) FROM campaign_waves \
             WHERE sku = ? AND start_unit IS NOT NULL AND applied_ms IS NULL",
        )
        .bind(sku)
        .fetch_one(pool),
    )
    .await?;
    Ok(units.unwrap_or(0))
}

/// Step 1 of a wave, in one transaction under the campaign row's lock: its place in the
/// release order (`start_unit` = units released before it), kept from an earlier attempt or
/// given now; refused for a closed campaign or while another wave of the SKU is placed and
/// not applied.
pub async fn place(
    pool: &MySqlPool,
    sku: u64,
    id: &str,
    t: Duration,
) -> Result<Placed, LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let (stock, width, closing, gen): (u64, u16, Option<i64>, u64) = bounded(
        "lock campaign",
        t,
        sqlx::query_as(
            "SELECT stock, width, closing_ms, rebuild_gen FROM campaigns WHERE sku = ? FOR UPDATE",
        )
        .bind(sku)
        .fetch_optional(&mut *tx),
    )
    .await?
    .ok_or_else(|| LedgerError::NotFound(format!("campaign for sku {sku}")))?;
    let (units, start, applied): (u64, Option<i64>, Option<i64>) = bounded(
        "read wave",
        t,
        sqlx::query_as("SELECT units, start_unit, applied_ms FROM campaign_waves WHERE sku = ? AND wave_id = ?")
            .bind(sku)
            .bind(id)
            .fetch_optional(&mut *tx),
    )
    .await?
    .ok_or_else(|| LedgerError::NotFound(format!("wave {id} of sku {sku}")))?;
    if applied.is_some() {
        return Ok(Placed::Already);
    }
    if closing.is_some() {
        return Err(LedgerError::Invalid(format!(
            "sku {sku} is closed; wave {id} refused"
        )));
    }
    let start = match start {
        Some(s) => s,
        None => {
            let other: Option<String> = bounded(
                "waves in progress",
                t,
                sqlx::query_scalar(
                    "SELECT wave_id FROM campaign_waves WHERE sku = ? AND start_unit IS NOT NULL AND applied_ms IS NULL LIMIT 1",
                )
                .bind(sku)
                .fetch_optional(&mut *tx),
            )
            .await?;
            if let Some(other) = other {
                return Err(LedgerError::Invalid(format!(
                    "wave {other} of sku {sku} is being applied; wave {id} waits for it"
                )));
            }
            bounded(
                "place wave",
                t,
                sqlx::query(
                    "UPDATE campaign_waves SET start_unit = ? WHERE sku = ? AND wave_id = ?",
                )
                .bind(stock as i64)
                .bind(sku)
                .bind(id)
                .execute(&mut *tx),
            )
            .await?;
            stock as i64
        }
    };
    bounded("commit", t, tx.commit()).await?;
    Ok(Placed::At {
        units,
        start,
        width,
        gen,
    })
}

/// Step 3 of a wave: marked applied, and the campaign's stock and `sku_stock` grow by
/// `units`, in one transaction, unless the campaign's rebuild generation is no longer `gen`
/// (`Invalid`: the wave stays pending). True when this call marked it; false when it was
/// applied already.
pub async fn mark_applied(
    pool: &MySqlPool,
    sku: u64,
    id: &str,
    units: u64,
    gen: u64,
    now_ms: i64,
    t: Duration,
) -> Result<bool, LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    // The campaign row first (the lock order everywhere). A rebuild that committed since
    // step 1 may have fenced the shards after step 2 and read the stock without this wave:
    // its write then drops the wave's units and id from every shard, so marking the wave
    // applied now would leave its units nowhere. It stays pending; the next round pushes it
    // again (the rebuilt wave hash lacks its id) and marks it under an unchanged generation.
    let now_gen: Option<u64> = bounded(
        "lock campaign",
        t,
        sqlx::query_scalar("SELECT rebuild_gen FROM campaigns WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    if now_gen != Some(gen) {
        return Err(LedgerError::Invalid(format!(
            "sku {sku} was rebuilt from the ledger while wave {id} was pushed to Redis; \
             the wave stays pending and is pushed again"
        )));
    }
    let moved = bounded(
        "mark wave applied",
        t,
        sqlx::query("UPDATE campaign_waves SET applied_ms = ? WHERE sku = ? AND wave_id = ? AND applied_ms IS NULL")
            .bind(now_ms)
            .bind(sku)
            .bind(id)
            .execute(&mut *tx),
    )
    .await?
    .rows_affected();
    if moved == 1 {
        for sql in [
            "UPDATE campaigns SET stock = stock + ? WHERE sku = ?",
            "UPDATE sku_stock SET available = available + ? WHERE sku = ?",
        ] {
            bounded(
                "wave stock",
                t,
                sqlx::query(sql).bind(units).bind(sku).execute(&mut *tx),
            )
            .await?;
        }
    }
    bounded("commit", t, tx.commit()).await?;
    Ok(moved == 1)
}

/// Up to 100 waves due by `now_ms` of campaigns not closing, as `(sku, wave id)`: a wave
/// being applied (placed) first, then by due time.
pub async fn due(
    pool: &MySqlPool,
    now_ms: i64,
    t: Duration,
) -> Result<Vec<(u64, String)>, LedgerError> {
    bounded(
        "due waves",
        t,
        sqlx::query_as(
            "SELECT w.sku, w.wave_id FROM campaign_waves w JOIN campaigns c ON c.sku = w.sku \
             WHERE w.applied_ms IS NULL AND w.due_ms <= ? AND c.closing_ms IS NULL \
             ORDER BY w.start_unit IS NULL, w.due_ms, w.wave_id LIMIT 100",
        )
        .bind(now_ms)
        .fetch_all(pool),
    )
    .await
}

/// Waves of a campaign, for `consumer status`.
#[derive(Debug, Clone, Serialize)]
pub struct WaveRow {
    pub id: String,
    pub units: u64,
    pub due_ms: i64,
    pub applied_ms: Option<i64>,
}

pub async fn list(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Vec<WaveRow>, LedgerError> {
    let rows: Vec<(String, u64, i64, Option<i64>)> = bounded(
        "list waves",
        t,
        sqlx::query_as("SELECT wave_id, units, due_ms, applied_ms FROM campaign_waves WHERE sku = ? ORDER BY due_ms, wave_id")
            .bind(sku)
            .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, units, due_ms, applied_ms)| WaveRow {
            id,
            units,
            due_ms,
            applied_ms,
        })
        .collect())
}
