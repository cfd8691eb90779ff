//! Claim records into the ledger: the consumer's side of `ledger::claims`, which stores
//! rows borrowed from these records (`rows.rs`) and names what it did by their index; here
//! the same outcome ([`Stored`]) names them by their record.

use std::collections::HashMap;
use std::time::Duration;

use ledger::claims::Written;
use ledger::places::Advance;
use ledger::poison::Poison;
use ledger::{ClaimRow, Stored};
use shard_router::ClaimRecord;
use sqlx::{MySql, MySqlPool, Transaction};

use crate::error::ConsumerError;
use crate::rows::row;

/// Shards that handed out what only a Redis older than the ledger would: a claim id the
/// ledger holds for another claim (the shard whose stream gave it), or a user's sequence
/// used twice (the user's home shard, which allocates it).
pub(crate) fn gone_back(outcome: &Stored<ClaimRecord>) -> std::collections::BTreeSet<u16> {
    let reused = outcome.id_reused.iter().map(|r| r.shard);
    let collided = outcome.collisions.iter().map(|r| r.home);
    reused.chain(collided).collect()
}

/// Fences every shard `outcome` shows handing out what only a Redis older than the ledger
/// would ([`gone_back`]): it answers `restoring` until the watch rebuilt it
/// from the ledger and vouched again (`lua/guard.lua`). A failure is logged; the anomaly is
/// recorded either way.
pub(crate) async fn fence_gone_back(
    client: &shard_router::StockClient,
    outcome: &Stored<ClaimRecord>,
) {
    for shard in gone_back(outcome) {
        match client.distrust(shard).await {
            Ok(()) => tracing::error!(shard, "the shard handed out a claim id or a user's sequence the ledger holds: fenced until rebuilt from the ledger"),
            Err(e) => tracing::error!(shard, error = %e, "the shard handed out a claim id or a user's sequence the ledger holds, and fencing it failed"),
        }
    }
}

/// The ledger's outcome with its rows named by their record.
fn outcome(records: &[&ClaimRecord], s: Stored) -> Stored<ClaimRecord> {
    s.map(|i| records[i].clone())
}

/// Writes `records` (at most [`ledger::claims::MAX_BATCH_ROWS`]) in one transaction.
pub async fn write_batch(
    pool: &MySqlPool,
    records: &[ClaimRecord],
    timeout: Duration,
) -> Result<Stored<ClaimRecord>, ConsumerError> {
    let refs: Vec<&ClaimRecord> = records.iter().collect();
    write_refs(pool, &refs, timeout).await
}

/// [`write_batch`] over borrowed records (the writer's batches own theirs elsewhere).
pub(crate) async fn write_refs(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    timeout: Duration,
) -> Result<Stored<ClaimRecord>, ConsumerError> {
    let rows: Vec<ClaimRow<'_>> = records.iter().map(|r| row(r)).collect();
    let stored = ledger::claims::write(pool, &rows, timeout).await?;
    Ok(outcome(records, stored))
}

/// [`write_refs`] with the streams' places moved and the entries passed without a row kept,
/// in the same transaction (`ledger::claims::write_at`): the outcome is empty when a place
/// was refused (nothing committed).
pub(crate) async fn write_at(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    moves: &[Advance],
    poison: &[Poison],
    timeout: Duration,
) -> Result<(Written, Stored<ClaimRecord>), ConsumerError> {
    let rows: Vec<ClaimRow<'_>> = records.iter().map(|r| row(r)).collect();
    let written = ledger::claims::write_at(pool, &rows, moves, poison, timeout).await?;
    let o = match &written {
        Written::Committed(s) => outcome(records, s.clone()),
        Written::Fenced(_) => Stored::default(),
    };
    Ok((written, o))
}

/// What a batch committed by an earlier attempt did, as far as the ledger still shows it
/// (that attempt's answer was lost: a COMMIT that went through while its connection
/// dropped or its bound ran out): the records stored as collisions and those whose claim id
/// holds another claim, so the shards that went back in time are fenced all the same. Its
/// late claims are in `late_claims`, for the sweep.
pub(crate) async fn committed_before(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    timeout: Duration,
) -> Result<Stored<ClaimRecord>, ConsumerError> {
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
    let mut out = Stored::default();
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
) -> Result<Stored<ClaimRecord>, ConsumerError> {
    let rows: Vec<ClaimRow<'_>> = records.iter().map(|r| row(r)).collect();
    let stored = ledger::claims::store(tx, &rows, gens, timeout).await?;
    Ok(outcome(records, stored))
}
