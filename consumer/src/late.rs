//! Late claims: acknowledged before a rebuild from the ledger, committed only after it.
//!
//! A consumer that read entries just before Redis lost its data holds them in memory only;
//! when its batch commits after a rebuild read the ledger (a consumer that did not answer
//! the rebuild's flush request in time, `rebuild/handshake.rs`: dead, partitioned,
//! stalled), the rebuilt shards count those units nowhere. Three rules make that decidable and
//! repaired (docs/DESIGN.md, "Rebuild from the ledger"):
//! 1. The rebuild holds the campaign row (`FOR UPDATE`) while it reads the streams and the
//!    ledger, inserts every in-flight claim it found into the ledger and bumps
//!    `campaigns.rebuild_gen`, all in one transaction; batches take the same row shared
//!    first (`ledger/src/claims.rs`). So "counted by the rebuild" is "in the ledger when it committed".
//! 2. Each claim record carries the generation of its shard meta (`lua/claim.lua`,
//!    `lua/take.lua`). A row a batch inserts with an older generation than the campaign's
//!    was not counted by that rebuild: it is listed in `late_claims` in the same
//!    transaction, with the generation it was judged against.
//! 3. After the commit the writer counts it in Redis (`lua/rebuild_late.lua`: units off its
//!    slice, what the slice lacks onto the shard's debt, which releases and waves pay
//!    before the slice grows; the user's count, sequence and answer on its home), only on
//!    shards written by that very rebuild; a newer rebuild counted it from the ledger and
//!    marks it applied under the lock. With replicas, an apply is marked done only once a
//!    replica holds it ([`apply_with`]). A crash between commit and apply, or an apply no
//!    replica confirmed, is repaired by [`sweep`], which the writer runs at start and every
//!    [`SWEEP_EVERY`], and which each rebuild runs right after its own write.

use std::time::Duration;

use ledger::claims::Late;
use shard_router::rebuild::LateOutcome;
use shard_router::{ClaimRecord, StockClient};
use sqlx::MySqlPool;

use crate::error::ConsumerError;
use crate::replica::{self, ReplicaWait};

/// How often the writer looks for late claims not counted in Redis yet.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// Late claims handled per sweep query.
const SWEEP_PAGE: i64 = 500;

/// [`apply_with`] under the default replica policy.
pub async fn apply(
    pool: &MySqlPool,
    client: &StockClient,
    late: &[Late<ClaimRecord>],
    t: Duration,
) -> Result<usize, ConsumerError> {
    apply_with(pool, client, late, t, ReplicaWait::default()).await
}

/// Counts `late` in Redis and marks each one done (applied, or counted by a newer
/// rebuild). Returns how many are still waiting: for their shards to be rebuilt, or for a
/// replica to confirm the apply.
///
/// With replicas (`replica`), each shard's apply counts only once a replica holds it
/// (`replica::write_confirmed`): a failover to a replica that missed it takes the units back
/// onto the slice and the user's count down, and a ledger row already marked applied would
/// never be applied again (an oversell, and the limit lost). Unconfirmed, the row stays
/// unapplied and the sweep runs the script again: on the same master it finds its `late:`
/// mark (`Already`, confirmed by the next fence); after a rollback the mark went with the
/// rest of the apply, so applying again is the repair. Only a confirmed shard's shortfall
/// goes into the `oversold` anomaly: a rolled-back apply's slice is not what the sale saw.
pub async fn apply_with(
    pool: &MySqlPool,
    client: &StockClient,
    late: &[Late<ClaimRecord>],
    t: Duration,
    replicas: ReplicaWait,
) -> Result<usize, ConsumerError> {
    let mut waiting = 0;
    for l in late {
        let r = &l.claim;
        let mut shards = vec![r.shard];
        if r.home != r.shard {
            shards.push(r.home);
        }
        let mut done = true;
        let mut short = 0;
        for shard in shards {
            // The master's replication id before the write, so the fence after it can tell
            // a failover in between (see `replica::write_confirmed`).
            let before = match replicas {
                ReplicaWait::Off => None,
                _ => Some(client.replication(shard).await?),
            };
            let outcome = client.apply_late(r, l.gen, shard).await?;
            if outcome == LateOutcome::Wait {
                done = false;
                continue;
            }
            if let Some(before) = &before {
                if !replica::write_confirmed(client, shard, replicas, before).await {
                    tracing::warn!(claim = %r.claim_id, shard, "late claim applied, not on a replica yet; the sweep retries");
                    done = false;
                    continue;
                }
            }
            match outcome {
                // Already: a retry (a crash before the anomaly below, a second
                // consumer); the row is written once (`INSERT IGNORE` on its reference).
                LateOutcome::Applied { short: s } | LateOutcome::Already { short: s } => short += s,
                LateOutcome::Stale | LateOutcome::Wait => {}
            }
        }
        if short > 0 {
            let detail = format!(
                "late claim {} (sku {}, user {}) found {short} of its {} unit(s) sold again after \
                 the rebuild of generation {}",
                r.claim_id, r.sku, r.user, r.qty, l.gen
            );
            tracing::error!(claim = %r.claim_id, sku = r.sku, short, "late claim: units sold twice");
            ledger::anomalies::anomaly(
                pool,
                "oversold",
                &format!("late:{}", r.claim_id),
                Some(r.sku),
                &detail,
                t,
            )
            .await?;
        }
        if !done {
            waiting += 1;
            continue;
        }
        ledger::late::applied(pool, &r.claim_id, shard_router::now_ms(), t).await?;
        tracing::info!(claim = %r.claim_id, sku = r.sku, "late claim counted in Redis");
    }
    Ok(waiting)
}

/// Late claims not counted in Redis yet (of `sku`, or of every SKU), applied now. Returns
/// how many still wait (their shards are not rebuilt at their generation yet). Every
/// waiting row is visited, a page at a time by claim id: rows that wait for good (a shard
/// rolled back by a failover never carries their generation) must not hide the ones
/// behind them. A closed campaign has no Redis state left to count them in.
pub async fn sweep(
    pool: &MySqlPool,
    client: &StockClient,
    sku: Option<u64>,
    t: Duration,
) -> Result<usize, ConsumerError> {
    sweep_with(pool, client, sku, t, ReplicaWait::default()).await
}

/// [`sweep`] under the replica policy `replicas` (see [`apply_with`]).
pub async fn sweep_with(
    pool: &MySqlPool,
    client: &StockClient,
    sku: Option<u64>,
    t: Duration,
    replicas: ReplicaWait,
) -> Result<usize, ConsumerError> {
    let mut waiting = 0;
    let mut after = String::new();
    loop {
        let late = page(pool, sku, &after, t).await?;
        let Some(last) = late.last() else {
            return Ok(waiting);
        };
        after = last.claim.claim_id.clone();
        waiting += apply_with(pool, client, &late, t, replicas).await?;
        if late.len() < SWEEP_PAGE as usize {
            return Ok(waiting);
        }
    }
}

/// One page of [`sweep`]: waiting late claims with a claim id above `after`.
async fn page(
    pool: &MySqlPool,
    sku: Option<u64>,
    after: &str,
    t: Duration,
) -> Result<Vec<Late<ClaimRecord>>, ConsumerError> {
    let rows = ledger::late::page(pool, sku, after, SWEEP_PAGE, t).await?;
    Ok(rows
        .into_iter()
        .map(|(claim, gen)| Late {
            claim: crate::rows::record(claim),
            gen,
        })
        .collect())
}

/// The writer's repair loop: [`sweep`] at start and every [`SWEEP_EVERY`] until `stop`.
pub(crate) async fn sweep_loop(
    pool: MySqlPool,
    client: StockClient,
    t: Duration,
    replicas: ReplicaWait,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = sweep_with(&pool, &client, None, t, replicas).await {
            tracing::warn!(error = %e, "late claims sweep failed; retrying");
        }
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}
