//! Step 5 of the draw (`super::run`): the ranks turned into claims in order, each counted
//! only once a replica holds it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ledger::campaigns::Campaign;
use ledger::draws::{self, Ranked};
use shard_router::protocol::{self, Acked, ClaimOptions, LocalEmptyShards};
use shard_router::{
    keys, Claim, ClaimOutcome, ClaimRecord, ClaimRequest, ReplicationInfo, ShardId, SkuMeta,
    StockClient, StockError, GRANT_REQUEST,
};
use sqlx::MySqlPool;

use super::run::{anomaly, PAGE};
use crate::OpsError;
use consumer::replica::{self, ReplicaWait};

/// Step 5: claims for the ranks not granted yet, in order, while the stock covers them
/// and a replica confirms each (see [`granted_on_a_replica`]).
pub(super) async fn grant(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    now_ms: i64,
    replica_wait: ReplicaWait,
    t: Duration,
) -> Result<(), OpsError> {
    let Some(d) = draws::get(pool, c.sku, t).await? else {
        return Ok(());
    };
    let meta = crate::sku::meta(c);
    let empties = LocalEmptyShards::default();
    let ranks = draws::ranks(pool, c.sku, d.granted_rank, PAGE, t).await?;
    // Each shard's master as it is before any claim of this pass: a grant is confirmed by
    // a fence under the same replication id only (a failover between the claim and the
    // fence leaves a master without the claim, whose fence would confirm nothing of it).
    let before = masters_before(client, c, !ranks.is_empty(), replica_wait).await?;
    let mut by_shard: BTreeMap<u16, u32> = BTreeMap::new();
    for r in ranks {
        let claimed = claim_rank(client, &meta, &empties, &r, now_ms).await;
        let Acked {
            outcome,
            confirmation,
        } = match claimed {
            Ok(o) => o,
            // A Redis the ledger has not vouched for yet (restarted, or a promoted
            // replica): the watch rebuilds and vouches for it; the next pass grants.
            Err(e @ StockError::Restoring { .. }) => {
                tracing::info!(sku = c.sku, rank = r.rank, error = %e, "draw: grant waits for the shard's restore");
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let (claim, replayed) = match outcome {
            ClaimOutcome::Claimed { claim, .. } => (claim, false),
            ClaimOutcome::Replay(claim) => (claim, true),
            ClaimOutcome::LimitReached { held } => {
                pass_over(pool, c.sku, &r, held, t).await?;
                continue;
            }
            // Sold out: the waitlist waits for units to come back. The rest: later.
            _ => break,
        };
        if !confirmation.acknowledgeable()
            || !granted_on_a_replica(
                pool,
                client,
                c,
                &r.user,
                &claim,
                replayed,
                &before,
                replica_wait,
                t,
            )
            .await?
        {
            // Taken, not on a replica yet: nothing recorded, the next pass replays it (a
            // promoted replica that lost it claims afresh under the same request id).
            tracing::info!(sku = c.sku, rank = r.rank, claim = %claim.claim_id, "draw: grant not on a replica yet; the next pass replays it");
            break;
        }
        // The win in the ledger before Redis and before the rank counts as granted: the
        // claims table has it only once the consumer commits the stream record, and a
        // shard that loses its `W|` before that is marked from here.
        record_grant(pool, client, c, &r, &claim, t).await?;
        *by_shard.entry(claim.shard).or_default() += 1;
    }
    let granted: u32 = by_shard.values().sum();
    if granted > 0 {
        metrics::counter!("flashgate_draw_grants_total").increment(u64::from(granted));
        tracing::info!(sku = c.sku, granted, "draw: units granted");
    }
    Ok(())
}

/// The one-unit claim of rank `r`'s user under the grant's request id.
async fn claim_rank(
    client: &StockClient,
    meta: &SkuMeta,
    empties: &LocalEmptyShards,
    r: &Ranked,
    now_ms: i64,
) -> Result<Acked<ClaimOutcome>, StockError> {
    let req = ClaimRequest {
        sku: meta.sku,
        user: r.user.clone(),
        qty: 1,
        request_id: Some(GRANT_REQUEST.to_owned()),
    };
    protocol::claim(client, meta, &req, ClaimOptions::new(empties, now_ms)).await
}

/// Each shard's master as it is before any claim of the pass, when there are ranks to
/// grant and grants wait for replicas (else none).
async fn masters_before(
    client: &StockClient,
    c: &Campaign,
    any_ranks: bool,
    replica_wait: ReplicaWait,
) -> Result<HashMap<ShardId, ReplicationInfo>, OpsError> {
    let mut before: HashMap<ShardId, ReplicationInfo> = HashMap::new();
    if any_ranks && replica_wait != ReplicaWait::Off {
        for shard in client.placement().shards_of(c.sku, c.width) {
            before.insert(shard, client.replication(shard).await?);
        }
    }
    Ok(before)
}

/// A rank whose user already holds the limit, passed over with an anomaly.
async fn pass_over(
    pool: &MySqlPool,
    sku: u64,
    r: &Ranked,
    held: u32,
    t: Duration,
) -> Result<(), OpsError> {
    // Only grants claim in a draw, one per user: a user already holding the
    // limit got their unit some other way. Passed over, for an operator.
    anomaly(
        pool,
        sku,
        "draw_grant_limit",
        &format!("rank {} ({}) already holds {held}", r.rank, r.user),
        t,
    )
    .await?;
    draws::set_granted(pool, sku, r.rank, t).await?;
    Ok(())
}

/// A confirmed grant: the win in the ledger, then on the user's home shard, then the rank
/// counted as granted.
async fn record_grant(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    r: &Ranked,
    claim: &Claim,
    t: Duration,
) -> Result<(), OpsError> {
    draws::record_win(pool, c.sku, r.rank, &claim.claim_id, claim.shard, t).await?;
    client
        .draw_won(c.sku, c.width, &r.user, &claim.claim_id, claim.shard)
        .await?;
    draws::set_granted(pool, c.sku, r.rank, t).await?;
    Ok(())
}

/// Whether a replica holds the grant `claim` of `user`, so that a failover cannot take it
/// back: a fence on the shard that took the unit, after the claim, under the master
/// `before` described (read before this pass claimed anything), confirms everything that
/// master wrote (`consumer::replica::write_confirmed`, under `replica_wait`).
///
/// A replayed grant whose unit came from another shard than the user's home (a reroute of
/// an earlier pass) may have lost its record in a failover of that shard while the home
/// kept the answer: it counts only when its record is in that shard's stream (read before
/// the fence) or already in the ledger. A replay on the home shard needs no such check:
/// the answer and the record were written by one script.
#[allow(clippy::too_many_arguments)]
async fn granted_on_a_replica(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    user: &str,
    claim: &Claim,
    replayed: bool,
    before: &HashMap<ShardId, ReplicationInfo>,
    replica_wait: ReplicaWait,
    t: Duration,
) -> Result<bool, OpsError> {
    if replica_wait == ReplicaWait::Off {
        return Ok(true);
    }
    let Some(info) = before.get(&claim.shard) else {
        // Not a shard of the SKU: nothing to confirm it under.
        return Ok(false);
    };
    if !replica::write_needs_replica(replica_wait, info) {
        return Ok(true);
    }
    let home = client.placement().home_shard(c.sku, c.width, user);
    if replayed && claim.shard != home && !committed(pool, c, claim, t).await? {
        match record_fenced(client, c, user, claim, info, replica_wait).await? {
            // Read and fenced in one pipeline on the master `before` described.
            Some(fence) if fence.confirms(info) => return Ok(true),
            Some(_) => {}
            None => {
                tracing::warn!(sku = c.sku, user, claim = %claim.claim_id, "draw: a replayed grant's record is neither in its shard's stream nor in the ledger");
                return Ok(false);
            }
        }
    }
    Ok(replica::write_confirmed(client, claim.shard, replica_wait, info).await)
}

/// Whether the claims table holds `claim` (committed, its entry maybe trimmed since).
async fn committed(
    pool: &MySqlPool,
    c: &Campaign,
    claim: &Claim,
    t: Duration,
) -> Result<bool, OpsError> {
    let grants = draws::grants(pool, c.sku, GRANT_REQUEST, t).await?;
    Ok(grants.iter().any(|(_, id, _)| *id == claim.claim_id))
}

/// `claim`'s record (this user's, under the grant's request id) read from its shard's
/// stream with a fence behind it in one pipeline; `None` when the stream has no such
/// record.
async fn record_fenced(
    client: &StockClient,
    c: &Campaign,
    user: &str,
    claim: &Claim,
    before: &ReplicationInfo,
    replica_wait: ReplicaWait,
) -> Result<Option<shard_router::Fence>, OpsError> {
    let prefix = format!("{}-", claim.shard);
    let Some(entry) = claim.claim_id.strip_prefix(&prefix) else {
        return Ok(None);
    };
    let mut xrange = redis::cmd("XRANGE");
    xrange
        .arg(keys::claims_stream(client.placement(), claim.shard))
        .arg(entry)
        .arg(entry);
    let wait = replica_wait.bound().unwrap_or_default();
    type Entries = Vec<(String, Vec<(String, Vec<u8>)>)>;
    let (entries, fence) = client
        .read_fenced::<Entries>(claim.shard, xrange, before.replicas_to_wait(), wait)
        .await?;
    let held = entries.iter().any(|(id, fields)| {
        let pairs = fields.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
        ClaimRecord::decode(id, pairs).is_ok_and(|rec| {
            rec.sku == c.sku && rec.user == user && rec.request_id.as_deref() == Some(GRANT_REQUEST)
        })
    });
    Ok(held.then_some(fence))
}
