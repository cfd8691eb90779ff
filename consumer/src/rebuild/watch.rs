//! The service's own trigger for a rebuild: every few seconds, each campaign not closed
//! whose window is open (or whose unpaid claims still need releasing) and whose ledger
//! holds claims (or that was rebuilt before) is checked for a missing slice (Redis lost
//! it: a restart without persistence, a FLUSHALL, a failover to an empty node). One is
//! enough to rebuild the SKU from the ledger. A campaign with no claim in the ledger is
//! left alone: a missing slice there may simply mean "not preheated yet", an operator's
//! call. A shard fenced by another rebuild (lease still running) is left to it.

use std::time::Duration;

use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::campaign;
use crate::error::ConsumerError;

/// How often live campaigns are checked for a missing slice.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Checks until `shutdown`; rebuilds what is missing.
pub async fn run(
    pool: MySqlPool,
    client: StockClient,
    opts: super::Options,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::signal::stopped(&mut shutdown) => break,
        }
        if let Err(e) = check(&pool, &client, &opts).await {
            tracing::warn!(error = %e, "rebuild check failed");
        }
    }
}

/// Campaigns not closed whose window is open, or that still have claims a release must
/// finish after the end (a release needs the slice): filtered in SQL, so the cost does not
/// grow with history.
async fn candidates(pool: &MySqlPool, now: i64, t: Duration) -> Result<Vec<u64>, ConsumerError> {
    crate::db::bounded(
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

/// One round: the SKUs rebuilt.
pub async fn check(
    pool: &MySqlPool,
    client: &StockClient,
    opts: &super::Options,
) -> Result<Vec<u64>, ConsumerError> {
    let t = opts.db_timeout;
    let now = shard_router::now_ms();
    let mut rebuilt = Vec::new();
    for sku in candidates(pool, now, t).await? {
        let c = campaign::get(pool, sku, t).await?;
        let missing: Vec<u16> = client
            .slices(sku, c.width)
            .await?
            .into_iter()
            .filter(|(_, v)| v.is_none())
            .map(|(s, _)| s)
            .collect();
        if missing.is_empty() || !super::ledger_has_claims(pool, sku, t).await? {
            continue;
        }
        let mut fenced = false;
        for &s in &missing {
            if let Some((_, expires)) = client.rebuild_fence(sku, s).await? {
                fenced |= expires > shard_router::now_ms();
            }
        }
        if fenced {
            continue;
        }
        tracing::warn!(
            sku,
            ?missing,
            "slice missing for a live campaign; rebuilding from the ledger"
        );
        match super::rebuild(pool, client, sku, opts).await {
            Ok(_) => rebuilt.push(sku),
            Err(e) => {
                tracing::warn!(sku, error = %e, "rebuild did not finish; retrying on the next check")
            }
        }
    }
    Ok(rebuilt)
}
