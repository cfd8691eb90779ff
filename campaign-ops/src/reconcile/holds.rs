//! Stale holds: resolved against the ledger and the streams before each measurement.

use std::collections::HashMap;
use std::time::Duration;

use shard_router::{
    Claim, ClaimRecord, ReplicationInfo, SettleOutcome, Settlement, ShardId, StockClient,
};
use sqlx::MySqlPool;

use crate::metrics as m;
use crate::rebuild::in_flight;
use crate::OpsError;
use consumer::replica::{self, ReplicaWait};
use shard_router::stream::ShardStream;

/// What one resolution round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resolution {
    /// Holds settled and confirmed by a replica (or no replica is required).
    pub resolved: usize,
    /// Holds settled on a master no replica confirmed yet, or left standing because the
    /// take they would be kept for is not on a replica yet. Either way the next round
    /// decides again (a rolled-back settle brings the hold back).
    pub unconfirmed: usize,
}

/// Holds past their expiry were left by a gateway that died between hold and settle. The
/// claim `(sku, user, user_seq)` in the ledger or in a stream means units were taken: keep
/// the count; otherwise nothing was taken: undo it. The hold of a late claim
/// not applied yet is the apply's to settle (`consumer/src/late.rs`).
///
/// With replicas (`replicas`, see `replica::write_needs_replica`) a decision counts only
/// once it cannot be rolled back: keeping a hold stores a final replay answer, so a take
/// found only in another shard's stream must be on a replica of that shard first (a
/// failover of that shard alone would drop the record while the home shard answers 201 for
/// it); until then the hold stands. The settles themselves are confirmed by one fence per
/// home shard afterwards, against the replication id read before its holds; unconfirmed
/// ones are reported, not counted, and close-out waits for them (`closeout.rs`).
#[allow(clippy::too_many_arguments)]
pub async fn resolve_stale_holds(
    pool: &MySqlPool,
    client: &StockClient,
    streams: &[ShardStream],
    sku: u64,
    shards: &[u16],
    now_ms: i64,
    t: Duration,
    replicas: ReplicaWait,
) -> Result<Resolution, OpsError> {
    let stale = stale_holds(client, sku, shards, now_ms).await?;
    if stale.is_empty() {
        return Ok(Resolution::default());
    }
    // Each master's replication id before its streams are read and its holds settled (a
    // hold read from a master that failed over since is settled, or found gone, on the new
    // one: the script decides on what that master has).
    let before = replication_before(client, streams, shards, replicas).await?;
    let pending: HashMap<(String, u64), ClaimRecord> = in_flight(client, streams, sku)
        .await?
        .into_iter()
        .map(|r| ((r.user.clone(), r.user_seq), r))
        .collect();
    let mut out = Resolution::default();
    // Per shard: did a replica confirm what was read from (or written to) it.
    let mut confirmed: HashMap<ShardId, bool> = HashMap::new();
    let mut settled: HashMap<ShardId, usize> = HashMap::new();
    for (home, user, seq, gen, rid) in stale {
        let in_ledger = ledger::books::held_claim(pool, sku, &user, seq, t).await?;
        let found = match in_ledger {
            // A late claim not applied yet: its apply settles its own hold as kept and
            // counts the user only when no such hold stands (`lua/rebuild_late.lua`).
            // Keeping it here first would make the apply count the user a second time.
            Some((.., 1)) => {
                tracing::info!(sku, user = %user, seq, "stale hold left to its late claim's apply");
                continue;
            }
            Some((claim_id, shard, qty, _)) => Some((claim_id, shard, qty)),
            None => match pending.get(&(user.clone(), seq)) {
                // A take on the home shard shares the settle's fate (one master, in order),
                // and the fence below covers both.
                Some(r) if r.shard != home => {
                    let ok =
                        take_on_replica(client, &mut confirmed, &before, r.shard, replicas).await;
                    if !ok {
                        tracing::warn!(sku, user = %user, seq, shard = r.shard, "stale hold left: its take is not on a replica yet");
                        out.unconfirmed += 1;
                        continue;
                    }
                    Some((r.claim_id.clone(), r.shard, r.qty))
                }
                Some(r) => Some((r.claim_id.clone(), r.shard, r.qty)),
                None => None,
            },
        };
        // The settle names the hold read above by its generation: by now it may be gone
        // and, after a loss and its rebuild, another request's hold may have its
        // `user|seq`, which this decision is not about.
        let how = settlement(found, sku, gen);
        let res = client
            .settle(sku, home, &user, seq, rid.as_deref(), &how)
            .await?
            .outcome;
        if matches!(res, SettleOutcome::Settled { .. }) {
            *settled.entry(home).or_default() += 1;
            tracing::warn!(sku, user = %user, seq, keep = matches!(how, Settlement::KeepOwn { .. }), "stale hold resolved");
        }
    }
    fence_settled(client, sku, &before, replicas, settled, &mut out).await;
    Ok(out)
}

/// Keep the hold of generation `gen` for the take `found` (claim id, shard, units), or
/// undo it when there is none.
fn settlement(found: Option<(String, ShardId, u32)>, sku: u64, gen: u64) -> Settlement {
    match found {
        Some((claim_id, shard, qty)) => Settlement::KeepOwn {
            claim: Claim {
                claim_id,
                sku,
                shard,
                qty,
            },
            gen,
        },
        None => Settlement::UndoOwn { gen },
    }
}

/// A stale hold as read from its home shard: `(home, user, user_seq, gen, request_id)`.
type StaleHold = (ShardId, String, u64, u64, Option<String>);

/// Holds of `sku` on `shards` past their expiry at `now_ms`.
async fn stale_holds(
    client: &StockClient,
    sku: u64,
    shards: &[u16],
    now_ms: i64,
) -> Result<Vec<StaleHold>, OpsError> {
    let mut stale = Vec::new();
    for &home in shards {
        for h in client.holds(sku, home).await? {
            if h.expires_ms < now_ms {
                stale.push((home, h.user, h.user_seq, h.gen, h.request_id));
            }
        }
    }
    Ok(stale)
}

/// The replication id of every home and stream shard (none when no replica is required).
async fn replication_before(
    client: &StockClient,
    streams: &[ShardStream],
    shards: &[u16],
    replicas: ReplicaWait,
) -> Result<HashMap<ShardId, ReplicationInfo>, OpsError> {
    let mut before: HashMap<ShardId, ReplicationInfo> = HashMap::new();
    if replicas != ReplicaWait::Off {
        for s in shards
            .iter()
            .copied()
            .chain(streams.iter().map(|s| s.shard))
        {
            if let std::collections::hash_map::Entry::Vacant(e) = before.entry(s) {
                e.insert(client.replication(s).await?);
            }
        }
    }
    Ok(before)
}

/// Whether a replica confirmed what was read from `shard`, asked once per round and
/// remembered in `confirmed`.
async fn take_on_replica(
    client: &StockClient,
    confirmed: &mut HashMap<ShardId, bool>,
    before: &HashMap<ShardId, ReplicationInfo>,
    shard: ShardId,
    replicas: ReplicaWait,
) -> bool {
    match confirmed.get(&shard) {
        Some(&ok) => ok,
        None => {
            let ok = match before.get(&shard) {
                Some(b) => replica::write_confirmed(client, shard, replicas, b).await,
                None => true,
            };
            confirmed.insert(shard, ok);
            ok
        }
    }
}

/// One fence per home shard over the holds settled on it: confirmed ones count as
/// resolved, the rest as unconfirmed.
async fn fence_settled(
    client: &StockClient,
    sku: u64,
    before: &HashMap<ShardId, ReplicationInfo>,
    replicas: ReplicaWait,
    settled: HashMap<ShardId, usize>,
    out: &mut Resolution,
) {
    for (home, n) in settled {
        let ok = match before.get(&home) {
            Some(b) => replica::write_confirmed(client, home, replicas, b).await,
            None => true,
        };
        if ok {
            out.resolved += n;
            metrics::counter!(m::STALE_HOLDS).increment(n as u64);
        } else {
            tracing::warn!(
                sku,
                shard = home,
                holds = n,
                "stale holds settled, not on a replica yet"
            );
            out.unconfirmed += n;
        }
    }
}

/// Whether a replica holds everything the masters of `shards` wrote so far (resolutions of
/// earlier rounds included, which a round that finds no stale hold does not fence).
pub async fn on_replicas(
    client: &StockClient,
    shards: &[u16],
    replicas: ReplicaWait,
) -> Result<bool, OpsError> {
    if replicas == ReplicaWait::Off {
        return Ok(true);
    }
    for &s in shards {
        let before = client.replication(s).await?;
        if !replica::write_confirmed(client, s, replicas, &before).await {
            return Ok(false);
        }
    }
    Ok(true)
}
