//! The service's own trigger for a rebuild: every few seconds, each campaign not closed
//! whose window is open (or whose unpaid claims still need releasing) and whose ledger
//! holds claims (or that was rebuilt before) is checked for a missing slice (Redis lost
//! it: a restart without persistence, a FLUSHALL, a failover to an empty node). One is
//! enough to rebuild the SKU from the ledger. So is a shard whose rebuild generation is
//! behind the ledger's (`campaigns.rebuild_gen`): a failover rolled back a rebuild's write
//! there (the rebuild then failed unconfirmed), leaving the shard as it was before it.
//! That state is consistent on its own, but claims taken there carry the old generation,
//! and the ledger would hold them as late claims for a rebuild that never reaches the
//! shard. A campaign with no claim in the ledger is left alone: a missing slice there may
//! simply mean "not preheated yet", an operator's call. A shard fenced by another rebuild
//! (lease still running) is left to it.
//!
//! And a shard whose Redis process the ledger has not vouched for (`lua/guard.lua`): a
//! restart (from an older snapshot, or an AOF missing its last second), or a replica that
//! took over, may bring back slices, counts and answers older than the ledger, with
//! nothing in the data to tell (the stream and the generation roll back with them). Such
//! a shard sells nothing (503 `restoring`) until every live SKU on it with claims in the
//! ledger is rebuilt from the ledger; then the round vouches for that process
//! (`lua/vouch.lua`, checked against its run_id in the same step).

use std::time::Duration;

use shard_router::{ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::watch;

use consumer::ConsumerError;

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
            _ = consumer::signal::stopped(&mut shutdown) => break,
        }
        if let Err(e) = check(&pool, &client, &opts).await {
            tracing::warn!(error = %e, "rebuild check failed");
        }
    }
}

/// One round: the SKUs rebuilt.
pub async fn check(
    pool: &MySqlPool,
    client: &StockClient,
    opts: &super::Options,
) -> Result<Vec<u64>, ConsumerError> {
    let t = opts.db_timeout;
    let now = shard_router::now_ms();
    let unvouched = unvouched(client).await;
    metrics::gauge!(consumer::metrics::UNVOUCHED_SHARDS).set(unvouched.len() as f64);
    let mut rebuilt = Vec::new();
    // Shards not to vouch for this round: a SKU on them still needs its rebuild.
    let mut pending: Vec<ShardId> = Vec::new();
    // Campaigns not closed whose window is open, or that still have claims a release must
    // finish after the end (a release needs the slice).
    for sku in ledger::rebuild::candidates(pool, now, t).await? {
        let c = ledger::campaigns::get(pool, sku, t).await?;
        let shards = client.placement().shards_of(sku, c.width);
        let mut missing: Vec<u16> = client
            .slices(sku, c.width)
            .await?
            .into_iter()
            .filter(|(_, v)| v.is_none())
            .map(|(s, _)| s)
            .collect();
        let behind = behind_the_ledger(pool, client, sku, c.width, t).await?;
        let suspect: Vec<ShardId> = shards
            .iter()
            .copied()
            .filter(|s| unvouched.iter().any(|(u, _)| u == s))
            .collect();
        let (lost, rolled_back, restarted) = (missing.len(), behind.len(), suspect.len());
        missing.extend(behind);
        for &s in &suspect {
            if !missing.contains(&s) {
                missing.push(s);
            }
        }
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
            pending.extend(&shards);
            continue;
        }
        tracing::warn!(
            sku,
            ?missing,
            lost,
            rolled_back,
            restarted,
            "slice missing, a rebuild rolled back, or a Redis process not vouched for, for a live campaign; rebuilding from the ledger"
        );
        match super::rebuild(pool, client, sku, opts).await {
            Ok(_) => rebuilt.push(sku),
            Err(e) => {
                pending.extend(&shards);
                tracing::warn!(sku, error = %e, "rebuild did not finish; retrying on the next check")
            }
        }
    }
    for (shard, run_id) in unvouched.iter().filter(|(s, _)| !pending.contains(s)) {
        match client.vouch(*shard, run_id).await {
            Ok(true) => tracing::info!(shard, run_id, "vouched for the shard's Redis process"),
            Ok(false) => tracing::warn!(
                shard,
                run_id,
                "the shard's Redis process changed during the check; vouching next round"
            ),
            Err(e) => tracing::warn!(shard, error = %e, "vouch failed; retrying on the next check"),
        }
    }
    Ok(rebuilt)
}

/// The shards whose master the ledger has not vouched for, with that master's run_id. A
/// shard whose master does not answer is left for the next round (its claims fail anyway).
async fn unvouched(client: &StockClient) -> Vec<(ShardId, String)> {
    let mut out = Vec::new();
    for shard in 0..client.placement().shard_count() {
        match client.server_identity(shard).await {
            Ok(id) if id.vouched_here() => {}
            Ok(id) => out.push((shard, id.run_id)),
            Err(e) => tracing::debug!(shard, error = %e, "server identity unread"),
        }
    }
    out
}

/// Shards of `sku` that carry a slice but an older rebuild generation than the ledger's.
/// (A shard being rebuilt has no slice; a missing one is found above.)
async fn behind_the_ledger(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    width: u16,
    t: Duration,
) -> Result<Vec<u16>, ConsumerError> {
    let ledger = ledger::rebuild::rebuild_gen(pool, sku, t).await?;
    if ledger == 0 {
        return Ok(Vec::new());
    }
    let mut behind = Vec::new();
    for shard in client.placement().shards_of(sku, width) {
        if matches!(client.rebuild_gen(sku, shard).await?, Some(g) if g < ledger) {
            behind.push(shard);
        }
    }
    Ok(behind)
}
