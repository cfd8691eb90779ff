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

use shard_router::{ShardId, StockClient, StockError};
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::OpsError;

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
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
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
) -> Result<Vec<u64>, OpsError> {
    let t = opts.db_timeout;
    let now = shard_router::now_ms();
    let unvouched = unvouched(client).await;
    metrics::gauge!(crate::metrics::UNVOUCHED_SHARDS).set(unvouched.len() as f64);
    let suspect: Vec<ShardId> = unvouched
        .iter()
        .filter(|u| u.foreign)
        .map(|u| u.shard)
        .collect();
    let mut rebuilt = Vec::new();
    // None when the set is unreadable (its master is down): nothing to restore yet.
    let live = client.skus().await.ok();
    // Shards not to vouch for this round: a SKU on them still needs its rebuild.
    let mut pending: Vec<ShardId> = Vec::new();
    // Campaigns not closed whose window is open, or that still have claims a release must
    // finish after the end (a release needs the slice).
    for sku in ledger::rebuild::candidates(pool, now, t).await? {
        // One SKU's trouble (a master down) holds back only its own shards.
        match check_sku(pool, client, opts, sku, &suspect, live.as_deref()).await {
            Ok(Checked::Fine) => {}
            Ok(Checked::Rebuilt) => rebuilt.push(sku),
            Ok(Checked::Pending(shards)) => pending.extend(shards),
            Err((shards, e)) => {
                // Unread campaign: its shards are unknown, so no shard is vouched.
                if shards.is_empty() {
                    pending.extend(0..client.placement().shard_count());
                }
                pending.extend(shards);
                tracing::warn!(sku, error = %e, "rebuild check of the SKU failed; retrying on the next check");
            }
        }
    }
    for u in unvouched.iter().filter(|u| !pending.contains(&u.shard)) {
        match client.vouch(u.shard, &u.run_id).await {
            Ok(true) => {
                tracing::info!(shard = u.shard, run_id = %u.run_id, "vouched for the shard's Redis process")
            }
            Ok(false) => {
                tracing::warn!(shard = u.shard, run_id = %u.run_id, "the shard's Redis process changed during the check; vouching next round")
            }
            Err(e) => {
                tracing::warn!(shard = u.shard, error = %e, "vouch failed; retrying on the next check")
            }
        }
    }
    Ok(rebuilt)
}

/// What one SKU's check did.
enum Checked {
    Fine,
    Rebuilt,
    /// Its shards must wait: fenced by another rebuild, or its rebuild failed.
    Pending(Vec<ShardId>),
}

async fn check_sku(
    pool: &MySqlPool,
    client: &StockClient,
    opts: &super::Options,
    sku: u64,
    suspect: &[ShardId],
    live: Option<&[u64]>,
) -> Result<Checked, (Vec<ShardId>, OpsError)> {
    let t = opts.db_timeout;
    let c = ledger::campaigns::get(pool, sku, t)
        .await
        .map_err(|e| (Vec::new(), e.into()))?;
    let shards = client.placement().shards_of(sku, c.width);
    let fail = |e: OpsError| (shards.clone(), e);
    let slices = client
        .slices(sku, c.width)
        .await
        .map_err(|e| fail(e.into()))?;
    // Preheated (a slice stands): its metadata must stand too. A campaign with no
    // slice at all is not preheated yet, or lost with them (the rebuild writes both).
    if slices.iter().any(|(_, v)| v.is_some()) {
        restore_sku_meta(pool, client, &c, live, t).await;
    }
    let mut missing: Vec<u16> = slices
        .into_iter()
        .filter(|(_, v)| v.is_none())
        .map(|(s, _)| s)
        .collect();
    let behind = behind_the_ledger(pool, client, sku, c.width, t)
        .await
        .map_err(fail)?;
    let restarted: Vec<ShardId> = shards
        .iter()
        .copied()
        .filter(|s| suspect.contains(s))
        .collect();
    let (lost, rolled_back) = (missing.len(), behind.len());
    missing.extend(behind);
    for &s in &restarted {
        if !missing.contains(&s) {
            missing.push(s);
        }
    }
    if missing.is_empty() || !super::ledger_has_claims(pool, sku, t).await.map_err(fail)? {
        return Ok(Checked::Fine);
    }
    let fenced = fence_standing(client, sku, &missing)
        .await
        .map_err(|e| fail(e.into()))?;
    if fenced {
        return Ok(Checked::Pending(shards));
    }
    tracing::warn!(
        sku,
        ?missing,
        lost,
        rolled_back,
        restarted = restarted.len(),
        "slice missing, a rebuild rolled back, or a Redis process not vouched for, for a live campaign; rebuilding from the ledger"
    );
    match super::rebuild(pool, client, sku, opts).await {
        Ok(_) => Ok(Checked::Rebuilt),
        // Written, but no replica confirmed it (a promoted replica whose own replica is
        // gone: `auto` wants one wherever a backlog exists). Vouching is still right: a
        // failover that loses this write brings another process, which is unvouched
        // again; waiting for a replica here kept the shard from selling until an operator
        // attached one.
        Err(OpsError::Unconfirmed(why)) => {
            tracing::warn!(sku, %why, "rebuild written but not confirmed by a replica; its shards sell again");
            Ok(Checked::Rebuilt)
        }
        Err(e) => Err(fail(e)),
    }
}

/// Whether a rebuild fence still stands on any of `shards` (a rebuild under way there).
async fn fence_standing(
    client: &StockClient,
    sku: u64,
    shards: &[ShardId],
) -> Result<bool, StockError> {
    let mut fenced = false;
    for &s in shards {
        if let Some((_, expires)) = client.rebuild_fence(sku, s).await? {
            fenced |= expires > shard_router::now_ms();
        }
    }
    Ok(fenced)
}

/// Writes a live SKU's metadata (`fg:sku:<sku>`, `fg:skus`) back from the ledger when
/// it is gone. Those keys carry no shard tag: on a cluster they live on one master, which
/// may lose its data while the SKU's own shards (elsewhere) keep theirs, so no missing
/// slice would ever trigger a rebuild that writes them, and every gateway would answer
/// the SKU 404 `unknown_sku` until an operator preheated again.
async fn restore_sku_meta(
    pool: &MySqlPool,
    client: &StockClient,
    c: &ledger::campaigns::Campaign,
    live: Option<&[u64]>,
    t: Duration,
) {
    let Some(live) = live else { return };
    let present = live.contains(&c.sku) && matches!(client.sku_meta(c.sku).await, Ok(Some(_)));
    if present {
        return;
    }
    let written = async {
        let meta = crate::sku::meta_of(pool, c, t).await?;
        client.write_sku_meta(&meta).await?;
        Ok::<_, OpsError>(())
    };
    match written.await {
        Ok(()) => tracing::warn!(
            sku = c.sku,
            "SKU metadata was missing; written back from the ledger"
        ),
        Err(e) => {
            tracing::warn!(sku = c.sku, error = %e, "SKU metadata missing and not written back; retrying on the next check")
        }
    }
}

/// A shard whose master the ledger has not vouched for.
struct Unvouched {
    shard: ShardId,
    run_id: String,
    /// The vouch names another process (a copy that came back with the data): the
    /// shard's live SKUs are rebuilt before it is vouched. Without one (a first preheat
    /// not vouched yet, or a Redis that lost everything and with it its slices, which the
    /// missing-slice rule rebuilds), it is vouched as it is.
    foreign: bool,
}

/// The shards whose master the ledger has not vouched for. A foreign vouch is revoked at
/// once (`lua/vouch.lua` "revoke"): an old master that resyncs from this one and is
/// promoted back keeps its run_id and would find its own vouch in the copy. A shard
/// whose master does not answer is left for the next round (its claims fail anyway).
async fn unvouched(client: &StockClient) -> Vec<Unvouched> {
    let mut out = Vec::new();
    for shard in 0..client.placement().shard_count() {
        match client.server_identity(shard).await {
            Ok(id) if id.vouched_here() => {}
            Ok(id) => {
                let foreign = id.vouched.is_some();
                if foreign {
                    if let Err(e) = client.revoke_vouch(shard).await {
                        tracing::debug!(shard, error = %e, "revoke failed");
                    }
                }
                out.push(Unvouched {
                    shard,
                    run_id: id.run_id,
                    foreign,
                });
            }
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
) -> Result<Vec<u16>, OpsError> {
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
