//! Stock waves: units released after the sale started (for example 200 coupons a round).
//!
//! A wave is a ledger row first (`campaign_waves`), so reconciliation can tell a wave being
//! applied from units that appeared from nowhere. Applying it, each step idempotent:
//! 1. under the campaign row's lock, the wave gets its place in the release order
//!    (`start_unit` = units released before it); one wave per SKU is applied at a time, so
//!    shard shares always follow the even split of the running total;
//! 2. each shard gets `split(start + units) − split(start)` by `lua/wave.lua`, which adds to
//!    the slice (after paying the shard's debt, units sold beyond it) and records the wave
//!    id in the shard's wave hash in one step (a retry after a crash finds the id and adds
//!    nothing) and publishes `restock`;
//! 3. the row is marked applied and the campaign's stock and `sku_stock` grow by `units`, in
//!    one transaction guarded by `applied_ms IS NULL` (a retry adds nothing) and by the
//!    campaign's rebuild generation read in step 1: a rebuild between steps 2 and 3 writes
//!    the shards from a stock without this wave and drops its id, so the wave stays pending
//!    and its next round runs step 2 again.
//!
//! Step 3 waits until a replica holds step 2 (`replica::write_confirmed`, under
//! `--replica-wait`; each shard's replication id read before step 2), as a release does
//! (`release.rs`): a failover that rolls step 2 back after step 3 would leave the wave
//! applied in the ledger with its units on no slice, for good (nothing pushes an applied
//! wave again). Unconfirmed, the wave stays pending and its next round runs step 2 again:
//! on the same master `lua/wave.lua` finds its id and adds nothing, after a rollback it adds
//! the units once.

use std::time::Duration;

use serde::Serialize;
use shard_router::StockClient;
use sqlx::MySqlPool;

use crate::reconcile::split;
use crate::OpsError;
use consumer::replica::{self, ReplicaWait};
use ledger::waves::Placed;

/// Fences after step 2 before a wave is left pending for its next round (each one bounded
/// by the replica wait, a wait apart).
const CONFIRM_ATTEMPTS: u32 = 3;

pub use ledger::waves::{Wave, WaveRow, MAX_ID};

/// What applying a wave did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    Applied,
    AlreadyApplied,
}

mod schedule;
pub use schedule::{cancel_dropped, schedule, schedule_for_campaign, Dropped};

/// [`apply_with`] under the default replica policy.
pub async fn apply(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    id: &str,
    now_ms: i64,
    t: Duration,
) -> Result<Applied, OpsError> {
    apply_with(pool, client, sku, id, now_ms, ReplicaWait::default(), t).await
}

/// Applies a stored wave now (see the module doc): [`push_with`], then [`finish`].
/// `OpsError::Unconfirmed` when no replica confirmed step 2: the wave stays pending.
pub async fn apply_with(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    id: &str,
    now_ms: i64,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<Applied, OpsError> {
    match push_with(pool, client, sku, id, replicas, t).await? {
        Pushed::Already => Ok(Applied::AlreadyApplied),
        Pushed::Shards { units, gen } => finish(pool, sku, id, units, gen, now_ms, t).await,
    }
}

/// What steps 1 and 2 left for step 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The ledger has the wave applied already.
    Already,
    /// Every shard has its share; `gen` is the campaign's rebuild generation at step 1.
    Shards { units: u64, gen: u64 },
}

/// [`push_with`] under the default replica policy.
pub async fn push(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    id: &str,
    t: Duration,
) -> Result<Pushed, OpsError> {
    push_with(pool, client, sku, id, ReplicaWait::default(), t).await
}

/// Steps 1 and 2 of a wave: its place in the release order, then each shard's share,
/// confirmed on a replica under `replicas` before it reports the shards done.
pub async fn push_with(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    id: &str,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<Pushed, OpsError> {
    let (units, start, width, gen) = match ledger::waves::place(pool, sku, id, t).await? {
        Placed::Already => return Ok(Pushed::Already),
        Placed::At {
            units,
            start,
            width,
            gen,
        } => (units, start, width, gen),
    };

    let (before, after) = (split(start, width), split(start + units as i64, width));
    let shards = client.placement().shards_of(sku, width);
    // Read before step 2, so the fence after it can tell a failover in between.
    let mut masters = Vec::new();
    if replicas != ReplicaWait::Off {
        for &shard in &shards {
            masters.push((shard, client.replication(shard).await?));
        }
    }
    for (i, &shard) in shards.iter().enumerate() {
        let share = after[i] - before[i];
        if !client.add_wave(shard, sku, id, share).await? {
            return Err(OpsError::Invalid(format!(
                "sku {sku} is not preheated on shard {shard}; wave {id} stays pending"
            )));
        }
    }
    for (shard, b) in &masters {
        if !replica::write_confirmed_within(client, *shard, replicas, b, CONFIRM_ATTEMPTS).await {
            return Err(OpsError::Unconfirmed(format!(
                "wave {id} of sku {sku}: no replica of shard {shard} holds it yet; it stays \
                 pending and its next round finishes it"
            )));
        }
    }

    Ok(Pushed::Shards { units, gen })
}

/// Step 3 of a wave: marked applied, and the campaign's stock grows, unless a rebuild ran
/// since step 1.
pub async fn finish(
    pool: &MySqlPool,
    sku: u64,
    id: &str,
    units: u64,
    gen: u64,
    now_ms: i64,
    t: Duration,
) -> Result<Applied, OpsError> {
    let moved = ledger::waves::mark_applied(pool, sku, id, units, gen, now_ms, t).await?;
    tracing::info!(sku, wave = id, units, "stock wave released");
    Ok(if moved {
        Applied::Applied
    } else {
        Applied::AlreadyApplied
    })
}

/// [`apply_due_with`] under the default replica policy.
pub async fn apply_due(
    pool: &MySqlPool,
    client: &StockClient,
    now_ms: i64,
    t: Duration,
) -> Result<usize, OpsError> {
    apply_due_with(pool, client, now_ms, ReplicaWait::default(), t).await
}

/// Applies every wave due by `now_ms` (a wave being applied first); returns how many. A
/// wave no replica confirmed stays pending without holding back the waves of other SKUs.
pub async fn apply_due_with(
    pool: &MySqlPool,
    client: &StockClient,
    now_ms: i64,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<usize, OpsError> {
    let due = ledger::waves::due(pool, now_ms, t).await?;
    let mut n = 0;
    for (sku, id) in due {
        match apply_with(pool, client, sku, &id, now_ms, replicas, t).await {
            Ok(Applied::Applied) => n += 1,
            Ok(Applied::AlreadyApplied) => {}
            Err(e @ OpsError::Unconfirmed(_)) => {
                tracing::warn!(sku, wave = %id, error = %e, "wave not confirmed; next round")
            }
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => tracing::warn!(sku, wave = %id, error = %e, "wave postponed"),
        }
    }
    Ok(n)
}

/// Waves of a campaign, for `consumer status`.
pub async fn list(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Vec<WaveRow>, OpsError> {
    Ok(ledger::waves::list(pool, sku, t).await?)
}
