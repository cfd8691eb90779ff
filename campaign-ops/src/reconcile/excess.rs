//! Excess removal: when a shard's slice holds more than the ledger allows (Redis lost
//! writes: a restart without persistence, a failover rollback), the excess is taken out of
//! the slice at once and recorded as an anomaly, so an oversell after a rollback is bounded
//! by one reconciliation period; what the slice no longer has was sold again and becomes
//! the shard's debt (paid by the next releases and waves, never offered again). Missing
//! units (negative drift) are never refilled.
//!
//! Why it never removes units legitimately in flight: the excess is measured exactly as of
//! the shard's snapshot (see `mod.rs`), and every legitimate operation after it moves units
//! between the slice and the other terms (claim: slice → stream; commit: stream → ledger;
//! release: ledger → slice or debt; wave: adds to both sides), so the excess is still the
//! same when the removal runs (a late claim's commit and apply too: the measure counts an
//! apply still to come, `late_pending`, see `mod.rs`, so a removal that runs before the apply
//! never takes the units the apply will take). The operations that change it bump the shard's
//! fix epoch: another removal, a rebuild, and, defensively, a late claim's apply;
//! `lua/reconcile_fix.lua` refuses to run when the epoch
//! moved since the snapshot: two consumers reconciling at once remove it once, and a retry
//! after a crash measures again.

use std::time::Duration;

use shard_router::audit::Fixed;
use shard_router::StockClient;
use sqlx::MySqlPool;

use super::account::ShardFigures;
use crate::OpsError;

/// Takes each shard's positive drift out of its slice; returns the units removed.
pub async fn remove(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    shards: &[ShardFigures],
    t: Duration,
) -> Result<i64, OpsError> {
    let mut total = 0;
    for f in shards.iter().filter(|f| f.drift > 0) {
        // Recorded before the removal, under the epoch the removal is conditioned on: at
        // most one removal can run per (shard, epoch), so the row and the removal match one
        // to one, and a removal never happens without its row (a failed insert stops here).
        let reference = format!("{sku}:{}:{}", f.shard, f.epoch);
        let detail = format!(
            "shard {}: slice {} + in flight {} + ledger {} − debt {} against {} released: Redis held {} unit(s) more than the ledger allows; removing them from the slice",
            f.shard, f.slice, f.in_flight, f.active_ledger, f.debt, f.expected, f.drift
        );
        ledger::anomalies::anomaly(pool, "excess_removed", &reference, Some(sku), &detail, t)
            .await?;
        match client.remove_excess(f.shard, sku, f.epoch, f.drift).await? {
            Fixed::Removed {
                removed,
                left,
                owed,
            } => {
                total += removed;
                if owed > 0 {
                    // Sold beyond the slice: the debt now, paid by the next releases and
                    // waves (`lua/reconcile_fix.lua`).
                    tracing::error!(
                        sku,
                        shard = f.shard,
                        excess = f.drift,
                        removed,
                        owed,
                        "slice had less than the excess: the rest was sold again (oversold), now the shard's debt"
                    );
                    ledger::anomalies::anomaly(
                        pool,
                        "oversold",
                        &format!("{reference}:debt"),
                        Some(sku),
                        &format!("{detail}; the slice had {removed}: {owed} unit(s) sold beyond it, now the shard's debt"),
                        t,
                    )
                    .await?;
                }
                tracing::error!(
                    sku,
                    shard = f.shard,
                    excess = f.drift,
                    removed,
                    slice = left,
                    "excess removed from a slice"
                );
            }
            Fixed::Stale => tracing::info!(
                sku,
                shard = f.shard,
                "excess already removed by another run"
            ),
            Fixed::NotPreheated => tracing::warn!(
                sku,
                shard = f.shard,
                "slice vanished before the excess removal"
            ),
        }
    }
    Ok(total)
}
