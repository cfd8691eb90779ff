//! `reconcile_runs`: each reconciliation's result, its figures in columns and the whole
//! report as JSON, the last few runs kept per SKU. What a run measures and why it is exact:
//! `campaign-ops/src/reconcile/mod.rs`; the ledger reads it compares with: [`crate::books`].

use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::LedgerError;
use crate::pool::bounded;

/// One run's row.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub sku: u64,
    pub stock: i64,
    pub slices: i64,
    pub in_flight: i64,
    pub active_ledger: i64,
    pub drift: i64,
    pub stale_holds: i32,
    /// How many slices were missing.
    pub missing_slices: i32,
    pub excess_removed: i64,
    /// The whole report, as JSON.
    pub detail: &'a str,
}

/// Stores a run; returns its id.
pub async fn store(pool: &MySqlPool, run: &Run<'_>, t: Duration) -> Result<u64, LedgerError> {
    Ok(bounded(
        "store reconcile run",
        t,
        sqlx::query(
            "INSERT INTO reconcile_runs (sku, stock, slices, in_flight, active_ledger, drift, stale_holds, \
             missing_slices, excess_removed, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(run.sku)
        .bind(run.stock)
        .bind(run.slices)
        .bind(run.in_flight)
        .bind(run.active_ledger)
        .bind(run.drift)
        .bind(run.stale_holds)
        .bind(run.missing_slices)
        .bind(run.excess_removed)
        .bind(run.detail)
        .execute(pool),
    )
    .await?
    .last_insert_id())
}

/// Keeps the SKU's last `keep` runs. The ids are read without locks and deleted by primary
/// key: a ranged `DELETE … WHERE sku = ? AND id < ?` next-key-locks the SKU's index range,
/// and a second reconciler's insert into that range deadlocked with it (MySQL 1213).
pub async fn trim(pool: &MySqlPool, sku: u64, keep: u32, t: Duration) -> Result<(), LedgerError> {
    let old: Vec<u64> = bounded(
        "list old reconcile runs",
        t,
        sqlx::query_scalar(
            "SELECT id FROM reconcile_runs WHERE sku = ? ORDER BY id DESC LIMIT 1000 OFFSET ?",
        )
        .bind(sku)
        .bind(keep.max(1))
        .fetch_all(pool),
    )
    .await?;
    if old.is_empty() {
        return Ok(());
    }
    let marks = vec!["?"; old.len()].join(",");
    let sql = format!("DELETE FROM reconcile_runs WHERE id IN ({marks})");
    let q = old.iter().fold(sqlx::query(&sql), |q, id| q.bind(id));
    bounded("trim reconcile runs", t, q.execute(pool)).await?;
    Ok(())
}
