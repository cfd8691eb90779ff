//! Claim records into the ledger: the consumer's side of `ledger::claims`, which stores
//! rows borrowed from these records (`rows.rs`) and names what it did by their index.

use std::collections::HashMap;
use std::time::Duration;

use ledger::claims::Written;
use ledger::offsets::Advance;
use ledger::poison::Poison;
use ledger::{ClaimRow, Stored};
use shard_router::ClaimRecord;
use sqlx::{MySql, MySqlPool, Transaction};

use crate::error::ConsumerError;
use crate::late::LateClaim;
use crate::rows::row;

/// What a committed batch did.
#[derive(Debug, Default, Clone)]
pub struct BatchOutcome {
    /// Rows this batch inserted.
    pub inserted: usize,
    /// Entries already in the ledger under the same claim id (a redelivery).
    pub redelivered: usize,
    /// Records inserted although another claim id already holds their
    /// `(sku, user, user_seq)`: both were acknowledged, so both rows are kept (and counted
    /// in `inserted`); each is a critical `collision` anomaly for an operator.
    pub collisions: Vec<ClaimRecord>,
    /// Records whose claim id the ledger holds for another claim: not inserted, each a
    /// critical `id_reuse` anomaly (`ledger/src/id_reuse.rs`).
    pub id_reused: Vec<ClaimRecord>,
    /// Units of the rows inserted (collisions included).
    pub inserted_units: u64,
    /// Inserted records the last rebuild of their SKU did not count (older generation):
    /// listed in `late_claims`, to be counted in Redis after the commit.
    pub late: Vec<LateClaim>,
}

impl BatchOutcome {
    /// Shards that handed out what only a Redis older than the ledger would: a claim id the
    /// ledger holds for another claim (the shard whose stream gave it), or a user's sequence
    /// used twice (the user's home shard, which allocates it).
    pub fn gone_back(&self) -> std::collections::BTreeSet<u16> {
        let reused = self.id_reused.iter().map(|r| r.shard);
        let collided = self.collisions.iter().map(|r| r.home);
        reused.chain(collided).collect()
    }
}

/// Fences every shard `outcome` shows handing out what only a Redis older than the ledger
/// would ([`BatchOutcome::gone_back`]): it answers `restoring` until the watch rebuilt it
/// from the ledger and vouched again (`lua/guard.lua`). A failure is logged; the anomaly is
/// recorded either way.
pub async fn fence_gone_back(client: &shard_router::StockClient, outcome: &BatchOutcome) {
    for shard in outcome.gone_back() {
        match client.distrust(shard).await {
            Ok(()) => tracing::error!(shard, "the shard handed out a claim id or a user's sequence the ledger holds: fenced until rebuilt from the ledger"),
            Err(e) => tracing::error!(shard, error = %e, "the shard handed out a claim id or a user's sequence the ledger holds, and fencing it failed"),
        }
    }
}

fn outcome(records: &[&ClaimRecord], s: Stored) -> BatchOutcome {
    BatchOutcome {
        inserted: s.inserted,
        redelivered: s.redelivered,
        collisions: s.collisions.iter().map(|&i| records[i].clone()).collect(),
        id_reused: s.id_reused.iter().map(|&i| records[i].clone()).collect(),
        inserted_units: s.inserted_units,
        late: s
            .late
            .iter()
            .map(|&(i, gen)| LateClaim {
                record: records[i].clone(),
                gen,
            })
            .collect(),
    }
}

/// Writes `records` (at most [`ledger::claims::MAX_BATCH_ROWS`]) in one transaction.
pub async fn write_batch(
    pool: &MySqlPool,
    records: &[ClaimRecord],
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    let refs: Vec<&ClaimRecord> = records.iter().collect();
    write_refs(pool, &refs, timeout).await
}

/// [`write_batch`] over borrowed records (the writer's batches own theirs elsewhere).
pub async fn write_refs(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    let rows: Vec<ClaimRow<'_>> = records.iter().map(|r| row(r)).collect();
    let stored = ledger::claims::write(pool, &rows, timeout).await?;
    Ok(outcome(records, stored))
}

/// [`write_refs`] with the streams' places moved and the entries passed without a row kept,
/// in the same transaction (`ledger::claims::write_at`): the outcome is empty when a place
/// was refused (nothing committed).
pub async fn write_at(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    moves: &[Advance],
    poison: &[Poison],
    timeout: Duration,
) -> Result<(Written, BatchOutcome), ConsumerError> {
    let rows: Vec<ClaimRow<'_>> = records.iter().map(|r| row(r)).collect();
    let written = ledger::claims::write_at(pool, &rows, moves, poison, timeout).await?;
    let o = match &written {
        Written::Committed(s) => outcome(records, s.clone()),
        Written::Fenced(_) => BatchOutcome::default(),
    };
    Ok((written, o))
}

/// What a batch committed by an earlier attempt did, as far as the ledger still shows it
/// (that attempt's answer was lost: a COMMIT that went through while its connection
/// dropped or its bound ran out): the records stored as collisions and those whose claim id
/// holds another claim, so the shards that went back in time are fenced all the same. Its
/// late claims are in `late_claims`, for the sweep.
pub async fn committed_before(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    let mut stored: HashMap<String, (u64, String, u64, String)> = HashMap::new();
    for chunk in records.chunks(ledger::claims::IDS_PER_QUERY) {
        let mut q = sqlx::QueryBuilder::<MySql>::new(
            "SELECT claim_id, sku, CAST(user_id AS CHAR), user_seq, CAST(collides AS CHAR) FROM claims \
             WHERE claim_id IN (",
        );
        let mut list = q.separated(", ");
        for r in chunk {
            list.push_bind(r.claim_id.as_str());
        }
        q.push(")");
        let rows: Vec<(String, u64, String, u64, String)> = ledger::pool::bounded(
            "read a committed batch back",
            timeout,
            q.build_query_as().fetch_all(pool),
        )
        .await?;
        stored.extend(
            rows.into_iter()
                .map(|(id, sku, u, seq, c)| (id, (sku, u, seq, c))),
        );
    }
    let mut out = BatchOutcome::default();
    for r in records {
        let Some((sku, user, seq, collides)) = stored.get(&r.claim_id) else {
            continue;
        };
        if (*sku, user.as_str(), *seq) != (r.sku, r.user.as_str(), r.user_seq) {
            out.id_reused.push((*r).clone());
        } else if collides == &r.claim_id {
            out.collisions.push((*r).clone());
        }
    }
    out.redelivered = stored.len() - out.id_reused.len();
    Ok(out)
}

/// `ledger::claims::store` over records, inside `tx` (a rebuild's in-flight claims).
pub async fn store(
    tx: &mut Transaction<'_, MySql>,
    records: &[&ClaimRecord],
    gens: Option<&HashMap<u64, u64>>,
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    let rows: Vec<ClaimRow<'_>> = records.iter().map(|r| row(r)).collect();
    let stored = ledger::claims::store(tx, &rows, gens, timeout).await?;
    Ok(outcome(records, stored))
}
