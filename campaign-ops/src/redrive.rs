//! `consumer redrive`: replays the dead-letter streams into the ledger. Entries land in the
//! dead letters after too many deliveries (or when they do not decode); once the cause is
//! fixed, redrive writes every decodable one through the same idempotent batch write as
//! the consumer (`ledger/src/claims.rs`: claim id primary key, `INSERT IGNORE`), so running it twice,
//! or on an entry the ledger already holds, adds nothing. Once its batch is committed, the
//! replay answers of rerouted claims are made final (`final_answers.rs`), and each
//! redriven letter is deleted (XDEL of those ids only: an entry that arrives meanwhile is
//! never touched), so the stream keeps exactly what is not in the ledger; the audit trail
//! is the `dead_letter` anomaly row written when the entry was moved. Undecodable letters
//! are counted and left for a person. Their number per shard is the gauge
//! `flashgate_consumer_dead_letters`, exported by [`export_lengths`].
//!
//! A letter goes to the ledger only once a replica holds it, under `--replica-wait` as the
//! reader's entries do (`replica.rs`): a dead letter is an entry the reader never
//! committed, so no replica check covered it, and its claim may be a write a failover takes
//! back (the promoted replica would sell that unit again while the ledger holds the claim).
//! Each page is read between the master's replication id and a fence that must show the
//! same id with every connected replica's acknowledgement (`replica::write_confirmed`: a
//! master replicates in order, so the fence covers the page). Unconfirmed after a few
//! attempts, the shard's letters stay where they are (counted `unconfirmed`) and redrive
//! goes on with the next shard; running it again later finishes them.

use serde::Serialize;
use shard_router::{ClaimRecord, ShardId, StockClient};
use sqlx::MySqlPool;
use std::time::Duration;

use redis::Value;

use consumer::commit;
use consumer::config::MAX_BATCH_ROWS;
use consumer::replica::{self, ReplicaWait};
use consumer::stream::ShardStream;
use consumer::ConsumerError;

/// Dead letters read per XRANGE page (and written per ledger batch).
const PAGE: usize = 500;
const _: () = assert!(PAGE <= MAX_BATCH_ROWS);

/// Reads of a page before its shard is given up as unconfirmed (each one bounded by the
/// replica wait, with a pause of the same length between them).
const CONFIRM_ATTEMPTS: u32 = 5;

/// What one redrive did, summed over the shards.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct RedriveReport {
    /// Dead letters looked at.
    pub entries: u64,
    /// Rows this run added to the ledger.
    pub inserted: u64,
    /// Already in the ledger under the same claim id.
    pub already: u64,
    /// Rejected by `(sku, user, user_seq)` under another claim id (see `ledger/src/claims.rs`).
    pub duplicates: u64,
    /// Entries that are not claim records; left in place.
    pub undecodable: u64,
    /// Letters removed from the stream because the ledger holds their claim now.
    pub removed: u64,
    /// Letters of a page no replica confirmed (at least; later pages of that shard are not
    /// read); left in place for the next redrive.
    pub unconfirmed: u64,
}

/// Replays the dead letters of `shards` (every shard when empty).
pub async fn run(
    pool: &MySqlPool,
    client: &StockClient,
    shards: &[ShardId],
    replicas: ReplicaWait,
    timeout: Duration,
) -> Result<RedriveReport, ConsumerError> {
    let all: Vec<ShardId> = (0..client.placement().shard_count()).collect();
    let shards = if shards.is_empty() { &all[..] } else { shards };
    let mut report = RedriveReport::default();
    for &shard in shards {
        let stream = ShardStream::new(client, shard, "");
        let mut after: Option<String> = None;
        loop {
            let Some(page) = confirmed_page(client, &stream, after.as_deref(), replicas).await?
            else {
                let left = stream.dead_page(client, after.as_deref(), PAGE).await?;
                report.unconfirmed += left.len() as u64;
                tracing::warn!(
                    shard,
                    letters = left.len(),
                    "dead letters no replica confirmed; left for the next redrive"
                );
                break;
            };
            let n = page.len();
            after = page.last().map(|e| e.id.clone());
            let mut records = Vec::with_capacity(n);
            let mut committed = Vec::with_capacity(n);
            for entry in &page {
                report.entries += 1;
                match decode_dead(shard, &entry.map) {
                    Some(r) => {
                        records.push(r);
                        committed.push(entry.id.clone());
                    }
                    None => {
                        report.undecodable += 1;
                        tracing::warn!(shard, dead = %entry.id, "dead letter is not a claim record; left in place");
                    }
                }
            }
            if !records.is_empty() {
                let out = commit::write_batch(pool, &records, timeout).await?;
                report.inserted += out.inserted as u64;
                report.already += out.redelivered as u64;
                // A collision is an acknowledged claim too: kept as its own row with a
                // critical anomaly (`ledger/src/claims.rs`), never given back.
                report.duplicates += out.collisions.len() as u64;
                // Before the letters go: a tentative answer is confirmed by the record.
                consumer::final_answers::finalize_records(client, records.iter()).await;
                // Every record of the batch is a ledger row now (inserted, already there,
                // or a collision kept as its own row): its letter has no reason to stay.
                report.removed += stream.delete_dead(client, &committed).await?;
            }
            if n < PAGE {
                break;
            }
        }
    }
    tracing::info!(?report, "redrive done");
    Ok(report)
}

/// A page of `stream`'s dead letters after `after` that a replica holds (or that needs
/// none under `replicas`); `None` when no attempt was confirmed.
async fn confirmed_page(
    client: &StockClient,
    stream: &ShardStream,
    after: Option<&str>,
    replicas: ReplicaWait,
) -> Result<Option<Vec<redis::streams::StreamId>>, ConsumerError> {
    let Some(wait) = replicas.bound() else {
        return Ok(Some(stream.dead_page(client, after, PAGE).await?));
    };
    for attempt in 0..CONFIRM_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(wait).await;
        }
        // Read again on every attempt: after a failover the page may differ.
        let before = client.replication(stream.shard).await?;
        let page = stream.dead_page(client, after, PAGE).await?;
        if page.is_empty()
            || replica::write_confirmed(client, stream.shard, replicas, &before).await
        {
            return Ok(Some(page));
        }
    }
    Ok(None)
}

/// Exports each shard's dead-letter count (XLEN) as `flashgate_consumer_dead_letters`.
pub async fn export_lengths(client: &StockClient) -> Result<(), ConsumerError> {
    for shard in 0..client.placement().shard_count() {
        let len = ShardStream::new(client, shard, "").dead_len(client).await?;
        metrics::gauge!(consumer::metrics::DEAD_LETTERS, "shard" => shard.to_string())
            .set(len as f64);
    }
    Ok(())
}

/// The claim record of a dead letter: its original fields under its original entry id
/// (`dead_entry`), which the claim id is made of.
fn decode_dead(
    shard: ShardId,
    map: &std::collections::HashMap<String, Value>,
) -> Option<ClaimRecord> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    };
    let entry_id = String::from_utf8(text(map.get("dead_entry")?)?).ok()?;
    let fields: Vec<(&str, Vec<u8>)> = map
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), text(v)?)))
        .collect();
    let record =
        ClaimRecord::decode(&entry_id, fields.iter().map(|(k, v)| (*k, v.as_slice()))).ok()?;
    (record.shard == shard).then_some(record)
}
