//! Storing waves: `consumer wave` and the admin API schedule one; the `--wave` flags of
//! `consumer campaign` declare the campaign's waves, and a rerun cancels what they no longer
//! list (while it adds nothing yet).

use std::time::Duration;

use serde::Serialize;
use sqlx::MySqlPool;

use super::{Wave, MAX_ID};
use consumer::db::bounded;
use consumer::ConsumerError;

/// Stores a wave (idempotent for the same id, units and due time; refused otherwise).
pub async fn schedule(pool: &MySqlPool, w: &Wave, t: Duration) -> Result<(), ConsumerError> {
    store(pool, w, "command", t).await
}

/// [`schedule`] for a `--wave` flag of `consumer campaign`: such a wave is part of the
/// campaign's declaration, so a rerun without the flag cancels it ([`cancel_dropped`]).
pub async fn schedule_for_campaign(
    pool: &MySqlPool,
    w: &Wave,
    t: Duration,
) -> Result<(), ConsumerError> {
    store(pool, w, "campaign", t).await
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
/// Under the campaign row's lock, the lock [`super::apply`] places a wave under: a wave either got
/// its place first (it is applied in full and kept) or is removed before it has one.
pub async fn cancel_dropped(
    pool: &MySqlPool,
    sku: u64,
    listed: &[String],
    t: Duration,
) -> Result<Dropped, ConsumerError> {
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

async fn store(
    pool: &MySqlPool,
    w: &Wave,
    scheduled_by: &str,
    t: Duration,
) -> Result<(), ConsumerError> {
    if w.units == 0 || w.units > i64::MAX as u64 / 4 {
        return Err(ConsumerError::Invalid(format!(
            "wave units {} must be in 1..",
            w.units
        )));
    }
    if w.id.is_empty() || w.id.len() > MAX_ID {
        return Err(ConsumerError::Invalid(format!(
            "wave id must be 1..={MAX_ID} bytes"
        )));
    }
    ledger::campaigns::get(pool, w.sku, t).await?;
    ledger::campaigns::refuse_if_closed(pool, w.sku, "a wave", t).await?;
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
        return Err(ConsumerError::Invalid(format!(
            "wave {} of sku {} exists with {units} units (due at {due} ms); use another id",
            w.id, w.sku
        )));
    }
    Ok(())
}
