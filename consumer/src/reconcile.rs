//! Reconciliation of one SKU against invariant 4:
//! `stock = Σ slices + Σ in-flight stream entries (not yet in the ledger) + Σ active ledger
//! units`. The terms are read at slightly different moments, so a claim moving between them
//! can show as a transient difference: a non-zero drift is measured again (up to
//! `ATTEMPTS` times) and only the last measurement is reported. Stale holds are resolved
//! first, against the ledger and the streams.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use shard_router::keys::ShardKeys;
use shard_router::{Claim, ClaimRecord, SettleOutcome, Settlement, StockClient};
use sqlx::MySqlPool;

use crate::campaign;
use crate::db::bounded;
use crate::error::ConsumerError;
use crate::ledger;
use crate::metrics as m;
use crate::stream::{self, ShardStream};

const ATTEMPTS: usize = 3;
/// Entries per XRANGE page when reading in-flight work.
const PAGE: usize = 1000;

/// One reconciliation result (also stored in `reconcile_runs`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub sku: u64,
    pub stock: i64,
    pub slices: i64,
    pub in_flight: i64,
    pub active_ledger: i64,
    pub drift: i64,
    pub stale_holds: usize,
    pub missing_slices: Vec<u16>,
}

/// Reconciles `sku`: resolves stale holds, measures, stores, exports and logs the result.
pub async fn run(
    pool: &MySqlPool,
    client: &StockClient,
    group: &str,
    sku: u64,
    now_ms: i64,
    t: Duration,
) -> Result<Report, ConsumerError> {
    let c = campaign::get(pool, sku, t).await?;
    let shards = client.placement().shards_of(sku, c.width);
    let streams: Vec<ShardStream> = shards
        .iter()
        .map(|&s| ShardStream::new(client, s, group))
        .collect();

    let stale_holds = resolve_stale_holds(pool, client, &streams, sku, &shards, now_ms, t).await?;

    let mut report = measure(pool, client, &streams, &c, t).await?;
    for _ in 1..ATTEMPTS {
        if report.drift == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        report = measure(pool, client, &streams, &c, t).await?;
    }
    report.stale_holds = stale_holds;

    let detail = serde_json::to_string(&report).unwrap_or_default();
    let id = bounded(
        "store reconcile run",
        t,
        sqlx::query(
            "INSERT INTO reconcile_runs (sku, stock, slices, in_flight, active_ledger, drift, stale_holds, detail) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(sku)
        .bind(report.stock)
        .bind(report.slices)
        .bind(report.in_flight)
        .bind(report.active_ledger)
        .bind(report.drift)
        .bind(report.stale_holds as i32)
        .bind(&detail)
        .execute(pool),
    )
    .await?
    .last_insert_id();
    metrics::gauge!(m::RECONCILE_DRIFT, "sku" => sku.to_string()).set(report.drift as f64);
    if report.drift != 0 {
        tracing::error!(sku, drift = report.drift, %detail, "reconciliation found drift");
        ledger::anomaly(pool, "drift", &format!("{sku}:{id}"), Some(sku), &detail, t).await?;
    } else {
        tracing::info!(sku, %detail, "reconciliation closed");
    }
    Ok(report)
}

/// Every in-flight record of `sku` across its shards (entries still in the streams).
async fn in_flight_records(
    client: &StockClient,
    streams: &[ShardStream],
    sku: u64,
) -> Result<Vec<ClaimRecord>, ConsumerError> {
    let mut out = Vec::new();
    for s in streams {
        for entry in s.all_entries(client, PAGE).await? {
            if let Ok(d) = stream::decode(s.shard, &entry) {
                if d.record.sku == sku {
                    out.push(d.record);
                }
            }
        }
    }
    Ok(out)
}

async fn measure(
    pool: &MySqlPool,
    client: &StockClient,
    streams: &[ShardStream],
    c: &campaign::Campaign,
    t: Duration,
) -> Result<Report, ConsumerError> {
    let sku = c.sku;
    // Streams first, then the ledger: an entry committed in between is then found in the
    // ledger and not counted twice.
    let records = in_flight_records(client, streams, sku).await?;
    let mut in_ledger = HashSet::new();
    for chunk in records.chunks(ledger::IDS_PER_QUERY) {
        let mut q = ledger::claim_ids_query(chunk);
        let ids: Vec<String> =
            bounded("in-flight ids", t, q.build_query_scalar().fetch_all(pool)).await?;
        in_ledger.extend(ids);
    }
    let in_flight: i64 = records
        .iter()
        .filter(|r| !in_ledger.contains(&r.claim_id))
        .map(|r| i64::from(r.qty))
        .sum();

    let active: Option<i64> = bounded(
        "active units",
        t,
        sqlx::query_scalar(
            "SELECT CAST(SUM(qty) AS SIGNED) FROM claims WHERE sku = ? AND status IN ('pending', 'confirmed')",
        )
        .bind(sku)
        .fetch_one(pool),
    )
    .await?;
    // A `releasing` claim is still active until its units are back in the slice.
    let releasing: Vec<(String, u32, u16)> = bounded(
        "releasing claims",
        t,
        sqlx::query_as(
            "SELECT claim_id, qty, shard FROM claims WHERE sku = ? AND status = 'releasing'",
        )
        .bind(sku)
        .fetch_all(pool),
    )
    .await?;
    let mut active = active.unwrap_or(0);
    for (claim_id, qty, shard) in releasing {
        let key = ShardKeys::new(client.placement(), shard, sku).released_stock();
        let mut conn = client.conn();
        let back: bool = client
            .bounded(
                "sismember",
                redis::cmd("SISMEMBER")
                    .arg(key)
                    .arg(&claim_id)
                    .query_async(&mut conn),
            )
            .await?;
        if !back {
            active += i64::from(qty);
        }
    }

    let mut slices = 0;
    let mut missing = Vec::new();
    for (shard, v) in client.slices(sku, c.width).await? {
        match v {
            Some(v) => slices += v,
            None => missing.push(shard),
        }
    }
    let stock = c.stock as i64;
    Ok(Report {
        sku,
        stock,
        slices,
        in_flight,
        active_ledger: active,
        drift: slices + in_flight + active - stock,
        stale_holds: 0,
        missing_slices: missing,
    })
}

/// Holds past their expiry were left by a gateway that died between hold and settle. The
/// claim `(sku, user, user_seq)` in the ledger or in a stream means units were taken: keep
/// the count; otherwise nothing was taken: undo it.
async fn resolve_stale_holds(
    pool: &MySqlPool,
    client: &StockClient,
    streams: &[ShardStream],
    sku: u64,
    shards: &[u16],
    now_ms: i64,
    t: Duration,
) -> Result<usize, ConsumerError> {
    let mut stale = Vec::new();
    for &home in shards {
        for h in client.holds(sku, home).await? {
            if h.expires_ms < now_ms {
                stale.push((home, h.user, h.user_seq, h.request_id));
            }
        }
    }
    if stale.is_empty() {
        return Ok(0);
    }
    let pending: HashMap<(String, u64), ClaimRecord> = in_flight_records(client, streams, sku)
        .await?
        .into_iter()
        .map(|r| ((r.user.clone(), r.user_seq), r))
        .collect();
    let mut resolved = 0;
    for (home, user, seq, rid) in stale {
        let found: Option<(String, u16, u32)> = bounded(
            "find held claim",
            t,
            sqlx::query_as("SELECT claim_id, shard, qty FROM claims WHERE sku = ? AND user_id = ? AND user_seq = ?")
                .bind(sku)
                .bind(&user)
                .bind(seq)
                .fetch_optional(pool),
        )
        .await?;
        let found = found.or_else(|| {
            pending
                .get(&(user.clone(), seq))
                .map(|r| (r.claim_id.clone(), r.shard, r.qty))
        });
        let how = match found {
            Some((claim_id, shard, qty)) => Settlement::Keep(Claim {
                claim_id,
                sku,
                shard,
                qty,
            }),
            None => Settlement::Undo,
        };
        let out = client
            .settle(sku, home, &user, seq, rid.as_deref(), &how)
            .await?;
        if matches!(out, SettleOutcome::Settled { .. }) {
            resolved += 1;
            metrics::counter!(m::STALE_HOLDS).increment(1);
            tracing::warn!(sku, user = %user, seq, keep = matches!(how, Settlement::Keep(_)), "stale hold resolved");
        }
    }
    Ok(resolved)
}
