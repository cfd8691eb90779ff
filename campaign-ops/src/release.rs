//! Confirm, cancel and release of claims. A release runs in three idempotent steps, so a
//! crash anywhere is finished by the next attempt and units never come back twice:
//! 1. ledger `pending|confirmed → releasing` (from then on it can no longer be confirmed)
//!    and the units back to `sku_stock`, in one transaction: before step 2 can sell them
//!    again (`ledger::releases::mark_releasing`);
//! 2. Redis: slice and user count back, once per claim id (`restock` published);
//! 3. ledger `releasing → released`.
//!
//! Step 3 waits until a replica holds step 2 (`replica::write_confirmed`, under
//! `--replica-wait`; the replication ids of both shards read before step 2). A failover
//! that rolls step 2 back after step 3 would leave the claim `released` in the ledger with
//! its unit out of the slice and the user counted, for good (nothing releases a `released`
//! claim again): units stuck, never a double release, since the claim id in the release
//! sets rolls back with them. Unconfirmed, the claim stays `releasing` and the sweep runs
//! step 2 again: on the same master the scripts answer "already released" (confirmed by
//! the next fence), after a rollback they return the units once.

use std::collections::HashSet;
use std::time::Duration;

use serde::Serialize;
use shard_router::{ReleaseRequest, ReleaseStep, ShardId, StockClient, StockError};
use sqlx::MySqlPool;

use crate::metrics as m;
use crate::OpsError;
use consumer::replica::{self, ReplicaWait};

/// Fences after the Redis step before a release is left `releasing` for the sweep (each
/// one bounded by the replica wait, a wait apart).
const CONFIRM_ATTEMPTS: u32 = 3;

/// Due claims read per query of a sweep.
const SWEEP_PAGE: usize = 500;

/// What a sweep learned about shards no replica confirmed a release on: their claims wait
/// for the next sweep. Each of them would spend the whole confirmation bound and fail the
/// same way (their master's replicas are the ones holding back), and stopping the sweep
/// there would hold back every other shard, SKU and master with it.
#[derive(Debug, Default)]
struct Stuck {
    shards: HashSet<ShardId>,
    /// Replication ids of their masters: another shard on one of them is left at its first
    /// `INFO`, before its Redis step.
    masters: HashSet<String>,
}

impl Stuck {
    fn holds(&self, shard: ShardId, home: ShardId) -> bool {
        self.shards.contains(&shard) || self.shards.contains(&home)
    }
}

pub use ledger::releases::Reason;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Confirmed,
    AlreadyConfirmed,
    Released,
    AlreadyReleased,
}

/// Marks a pending claim paid. A released claim cannot be confirmed any more.
pub async fn confirm(pool: &MySqlPool, claim_id: &str, t: Duration) -> Result<Outcome, OpsError> {
    if ledger::releases::mark_confirmed(pool, claim_id, t).await? {
        return Ok(Outcome::Confirmed);
    }
    match ledger::releases::row(pool, claim_id, t).await?.5.as_str() {
        "confirmed" => Ok(Outcome::AlreadyConfirmed),
        s => Err(OpsError::Invalid(format!(
            "claim {claim_id} is {s}; it cannot be confirmed"
        ))),
    }
}

/// [`release_with`] under the default replica policy.
pub async fn release(
    pool: &MySqlPool,
    client: &StockClient,
    claim_id: &str,
    reason: Reason,
    t: Duration,
) -> Result<Outcome, OpsError> {
    release_with(pool, client, claim_id, reason, ReplicaWait::default(), t).await
}

/// Releases a claim (cancel: pending or confirmed; timeout: pending only). Idempotent.
/// `OpsError::Unconfirmed` when no replica confirmed the Redis step: the claim stays
/// `releasing` and the sweep finishes it.
pub async fn release_with(
    pool: &MySqlPool,
    client: &StockClient,
    claim_id: &str,
    reason: Reason,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<Outcome, OpsError> {
    release_once(
        pool,
        client,
        claim_id,
        reason,
        replicas,
        t,
        &mut Stuck::default(),
    )
    .await
}

/// [`release_with`], recording in `stuck` a shard no replica confirmed (and skipping, before
/// its Redis step, a shard whose master is one recorded there).
async fn release_once(
    pool: &MySqlPool,
    client: &StockClient,
    claim_id: &str,
    reason: Reason,
    replicas: ReplicaWait,
    t: Duration,
    stuck: &mut Stuck,
) -> Result<Outcome, OpsError> {
    ledger::releases::mark_releasing(pool, claim_id, reason, t).await?;
    let (sku, user, qty, shard, home, status) = ledger::releases::row(pool, claim_id, t).await?;
    match status.as_str() {
        "released" => return Ok(Outcome::AlreadyReleased),
        "releasing" => {}
        s => {
            return Err(OpsError::Invalid(format!(
                "claim {claim_id} is {s}; it cannot be released now"
            )))
        }
    }
    // A closed campaign has no Redis stock left: the release is the ledger's alone.
    if ledger::campaigns::lifecycle(pool, sku, t)
        .await?
        .closed_ms
        .is_some()
    {
        return finish(pool, claim_id, sku, qty, reason, t).await;
    }
    let mut shards = vec![shard];
    if home != shard {
        shards.push(home);
    }
    // Read before the Redis step, so the fence after it can tell a failover in between.
    let mut before = Vec::new();
    if replicas != ReplicaWait::Off {
        for &s in &shards {
            let b = client.replication(s).await?;
            if stuck.masters.contains(&b.replid) {
                stuck.shards.insert(s);
                return Err(OpsError::Unconfirmed(format!(
                    "release of {claim_id}: shard {s} is on a master whose replicas did not \
                     confirm a release in this sweep; left for the next one"
                )));
            }
            before.push((s, b));
        }
    }
    let out = client
        .release(&ReleaseRequest {
            sku,
            claim_id: claim_id.to_owned(),
            user,
            qty,
            shard,
            home,
        })
        .await?;
    // A missing slice, or a home shard a rebuild holds: finish later (the user half is
    // then retried; the stock half answers "already released").
    if out.stock == ReleaseStep::NotPreheated || out.user == ReleaseStep::NotPreheated {
        // Leave it `releasing`: the sweep finishes it once the SKU is preheated again.
        return Err(OpsError::Redis(StockError::InvalidArgument(format!(
            "sku {sku} is not preheated on shard {shard}; release of {claim_id} postponed"
        ))));
    }
    for (s, b) in &before {
        if !replica::write_confirmed_within(client, *s, replicas, b, CONFIRM_ATTEMPTS).await {
            stuck.shards.insert(*s);
            stuck.masters.insert(b.replid.clone());
            return Err(OpsError::Unconfirmed(format!(
                "release of {claim_id}: no replica of shard {s} holds it yet; left releasing, \
                 the sweep finishes it"
            )));
        }
    }
    finish(pool, claim_id, sku, qty, reason, t).await
}

/// Step 3: `releasing → released`, once.
async fn finish(
    pool: &MySqlPool,
    claim_id: &str,
    sku: u64,
    qty: u32,
    reason: Reason,
    t: Duration,
) -> Result<Outcome, OpsError> {
    let moved = ledger::releases::mark_released(pool, claim_id, t).await?;
    if moved {
        metrics::counter!(m::RELEASED, "reason" => reason.as_str()).increment(1);
        tracing::info!(
            claim = claim_id,
            sku,
            qty,
            reason = reason.as_str(),
            "claim released"
        );
        Ok(Outcome::Released)
    } else {
        Ok(Outcome::AlreadyReleased)
    }
}

/// [`sweep_with`] under the default replica policy.
pub async fn sweep(
    pool: &MySqlPool,
    client: &StockClient,
    now_ms: i64,
    t: Duration,
) -> Result<usize, OpsError> {
    sweep_with(pool, client, now_ms, ReplicaWait::default(), t).await
}

/// One sweep: releases pending claims past their campaign's payment timeout and finishes
/// releases a crash (or a replica not confirming) left half done. Returns how many claims
/// were released.
///
/// A shard whose release no replica confirmed is left for the next sweep ([`Stuck`]); the
/// claims of the other shards go on, and a page the stuck shards' claims filled is read
/// again without them. So each sweep spends at most one confirmation bound per stuck
/// master and reads at most one page more per stuck shard.
pub async fn sweep_with(
    pool: &MySqlPool,
    client: &StockClient,
    now_ms: i64,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<usize, OpsError> {
    let mut stuck = Stuck::default();
    let mut released = 0;
    loop {
        let due = due(pool, now_ms, &stuck.shards, t).await?;
        let known = stuck.shards.len();
        let full = due.len() >= SWEEP_PAGE;
        for (claim_id, shard, home) in due {
            if stuck.holds(shard, home) {
                continue;
            }
            match release_once(
                pool,
                client,
                &claim_id,
                Reason::PaymentTimeout,
                replicas,
                t,
                &mut stuck,
            )
            .await
            {
                Ok(Outcome::Released) => released += 1,
                Ok(_) => {}
                Err(e @ OpsError::Unconfirmed(_)) => {
                    tracing::warn!(claim = %claim_id, error = %e, "release not confirmed; its shard waits for the next sweep")
                }
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) => tracing::warn!(claim = %claim_id, error = %e, "release postponed"),
            }
        }
        if !full || stuck.shards.len() == known {
            return Ok(released);
        }
    }
}

/// Due claims (pending past the payment timeout, or left `releasing`) with their stock and
/// home shards, none on a shard in `skip`.
async fn due(
    pool: &MySqlPool,
    now_ms: i64,
    skip: &HashSet<ShardId>,
    t: Duration,
) -> Result<Vec<(String, ShardId, ShardId)>, OpsError> {
    Ok(ledger::releases::due(pool, now_ms, skip, SWEEP_PAGE as i64, t).await?)
}
